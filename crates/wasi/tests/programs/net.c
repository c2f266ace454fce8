/* Sockets from C, as an ordinary server and client are written (socket, bind, listen, accept,
 * connect, poll, read, write, send, recv, shutdown, sendto, recvfrom), on VINO's loopback:
 *   net server PORT N     accept N connections, serving them at once with poll(): each line
 *                         read comes back upper-cased; exit 0 when all N have closed
 *   net client PORT TEXT  connect (retrying while refused), send TEXT, shut the sending side,
 *                         print what comes back
 *   net preopened         echo one connection accepted on the listening socket the runner gave
 *   net udp               two UDP sockets exchange datagrams
 *   net errors            what each misuse returns, and the user's socket limit
 *   net block PORT        listen and block in accept (to be killed)
 *   net sealed PORT       connect, say LAYERS in the clear, push the stream graft read from
 *                         stdin (ChaCha20-Poly1305), give it its key, send a sealed line and
 *                         print the sealed reply */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "vino_process.h"

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int listener(int port, int backlog) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* Before the bind: kept, then the listener's connections inherit it. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) {
        close(fd);
        return -1;
    }
    struct sockaddr_in a = loopback(port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, backlog) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

#define MAX_CONN 16

static int server(int port, int n) {
    int l = listener(port, n);
    check(l >= 0, "listen");
    struct pollfd fds[1 + MAX_CONN];
    int open = 0, accepted = 0;
    fds[0].fd = l;
    fds[0].events = POLLIN;
    for (int i = 1; i <= MAX_CONN; i++) fds[i].fd = -1;
    while (accepted < n || open > 0) {
        int r = poll(fds, 1 + MAX_CONN, 10000);
        if (r <= 0) {
            printf("FAIL poll (%d, errno %d)\n", r, errno);
            return 1;
        }
        if (fds[0].revents & POLLIN && accepted < n) {
            int c = accept(l, NULL, NULL);
            check(c >= 0, "accept");
            for (int i = 1; i <= MAX_CONN; i++) {
                if (fds[i].fd < 0) {
                    fds[i].fd = c;
                    fds[i].events = POLLIN;
                    break;
                }
            }
            accepted++, open++;
        }
        for (int i = 1; i <= MAX_CONN; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
            char buf[4096];
            ssize_t got = read(fds[i].fd, buf, sizeof buf);
            if (got <= 0) {
                check(got == 0, "read to the end");
                close(fds[i].fd);
                fds[i].fd = -1;
                open--;
                continue;
            }
            for (ssize_t k = 0; k < got; k++) buf[k] = (char)toupper((unsigned char)buf[k]);
            check(write(fds[i].fd, buf, (size_t)got) == got, "write back");
        }
    }
    close(l);
    printf("served %d\n", n);
    return 0;
}

/* A connection to the loopback's PORT, retried while refused (the server may be starting). */
static int connect_to(int port) {
    struct sockaddr_in a = loopback(port);
    for (int tries = 0;; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        check(fd >= 0, "socket");
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        check(errno == ECONNREFUSED && tries < 500, "connect (refused while the server starts)");
        close(fd);
        sleep_ms(10);
    }
}

static int client(int port, const char *text) {
    int fd = connect_to(port);
    struct sockaddr_in me, peer;
    socklen_t len = sizeof me;
    check(getsockname(fd, (struct sockaddr *)&me, &len) == 0 && ntohs(me.sin_port) >= 49152, "getsockname");
    len = sizeof peer;
    check(getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && ntohs(peer.sin_port) == port, "getpeername");
    size_t n = strlen(text);
    check(send(fd, text, n, 0) == (ssize_t)n, "send");
    check(shutdown(fd, SHUT_WR) == 0, "shutdown");
    static char buf[1 << 16];
    size_t have = 0;
    for (;;) {
        ssize_t got = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        check(got >= 0, "recv");
        if (got == 0) break;
        have += (size_t)got;
    }
    buf[have] = 0;
    close(fd);
    printf("reply %s\n", buf);
    return 0;
}

/* The first descriptor that is a stream socket: the runner's. */
static int preopened(void) {
    int l = -1;
    for (int fd = 3; fd < 32 && l < 0; fd++) {
        int type;
        socklen_t len = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM) l = fd;
    }
    check(l >= 0, "a listening socket was given");
    int c = accept(l, NULL, NULL);
    check(c >= 0, "accept");
    char buf[256];
    ssize_t got;
    while ((got = read(c, buf, sizeof buf)) > 0) check(write(c, buf, (size_t)got) == got, "echo");
    check(got == 0, "read to the end");
    close(c);
    return 0;
}

static int udp(void) {
    int a = socket(AF_INET, SOCK_DGRAM, 0), b = socket(AF_INET, SOCK_DGRAM, 0);
    check(a >= 0 && b >= 0, "two UDP sockets");
    int one = 1;
    check(setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 && errno == ENOPROTOOPT,
          "TCP_NODELAY is not a UDP socket's");
    struct sockaddr_in at = loopback(7001);
    check(bind(a, (struct sockaddr *)&at, sizeof at) == 0, "bind 7001");
    check(sendto(b, "ping", 4, 0, (struct sockaddr *)&at, sizeof at) == 4, "sendto");
    char buf[64];
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    ssize_t got = recvfrom(a, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
    check(got == 4 && memcmp(buf, "ping", 4) == 0, "recvfrom");
    struct sockaddr_in bname;
    socklen_t blen = sizeof bname;
    check(getsockname(b, (struct sockaddr *)&bname, &blen) == 0 && bname.sin_port == from.sin_port,
          "the sender's port is the sending socket's");
    check(sendto(a, "pong", 4, 0, (struct sockaddr *)&from, len) == 4, "reply");
    got = recv(b, buf, sizeof buf, 0);
    check(got == 4 && memcmp(buf, "pong", 4) == 0, "recv the reply");
    /* Non-blocking: nothing queued is EAGAIN. */
    check(fcntl(a, F_SETFL, O_NONBLOCK) == 0, "non-blocking");
    check(recv(a, buf, sizeof buf, 0) < 0 && errno == EAGAIN, "EAGAIN with nothing queued");
    close(a), close(b);
    return 0;
}

static int errors(void) {
    check(socket(AF_INET6, SOCK_STREAM, 0) < 0 && errno == EAFNOSUPPORT, "no IPv6: EAFNOSUPPORT");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in low = loopback(80);
    check(bind(fd, (struct sockaddr *)&low, sizeof low) < 0 && errno == EACCES, "port 80 needs root: EACCES");
    struct sockaddr_in far = loopback(7002);
    far.sin_addr.s_addr = htonl(0x0a000001);
    check(bind(fd, (struct sockaddr *)&far, sizeof far) < 0 && errno == EADDRNOTAVAIL, "not our address");
    close(fd);
    int l = listener(7003, 4);
    check(l >= 0, "listen on 7003");
    check(listener(7003, 4) < 0 && errno == EADDRINUSE, "7003 again: EADDRINUSE");
    fd = socket(AF_INET, SOCK_STREAM, 0);
    check(accept(fd, NULL, NULL) < 0 && errno == EINVAL, "accept on a socket not listening: EINVAL");
    char c;
    check(recv(fd, &c, 1, 0) < 0 && errno == ENOTCONN, "recv unconnected: ENOTCONN");
    struct sockaddr_in none = loopback(7004);
    check(connect(fd, (struct sockaddr *)&none, sizeof none) < 0 && errno == ECONNREFUSED,
          "nobody on 7004: ECONNREFUSED");
    close(fd);
    /* A non-blocking connect is under way, then done; poll says when. */
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in to = loopback(7003);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    check(r == 0 || errno == EINPROGRESS, "non-blocking connect: 0 or EINPROGRESS");
    struct pollfd p = {fd, POLLOUT, 0};
    check(poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT), "poll: connected");
    int a = accept(l, NULL, NULL);
    check(a >= 0, "accept it");
    /* Non-blocking with nothing to read: EAGAIN; then poll waits for the bytes. */
    check(recv(fd, &c, 1, 0) < 0 && errno == EAGAIN, "EAGAIN with nothing to read");
    check(write(a, "x", 1) == 1, "write");
    struct pollfd q = {fd, POLLIN, 0};
    check(poll(&q, 1, 5000) == 1 && (q.revents & POLLIN), "poll: readable");
    check(recv(fd, &c, 1, 0) == 1 && c == 'x', "the byte");
    close(a), close(fd), close(l);
    /* The user's socket memory runs out with a clear error, and comes back after closing. */
    int held[64], n = 0;
    for (; n < 64; n++) {
        held[n] = listener(7100 + n, 128);
        if (held[n] < 0) break;
    }
    check(n < 64 && errno == ENOBUFS, "listeners until ENOBUFS");
    for (int i = 0; i < n; i++) close(held[i]);
    l = listener(7100, 128);
    check(l >= 0, "listen again after closing");
    close(l);
    printf("errors ok after %d listeners\n", n);
    return 0;
}

static int block(int port) {
    int l = listener(port, 1);
    check(l >= 0, "listen");
    accept(l, NULL, NULL);
    return 1;
}

static int sealed(int port) {
    static unsigned char wasm[1 << 20];
    size_t len = 0;
    ssize_t got;
    while ((got = read(0, wasm + len, sizeof wasm - len)) > 0) len += (size_t)got;
    check(len > 0, "the stream graft on stdin");
    int fd = connect_to(port);
    check(send(fd, "LAYERS\n", 7, 0) == 7, "send in the clear");
    int depth = vino_socket_push(fd, wasm, len);
    check(depth == 0, "vino_socket_push");
    char point[64];
    snprintf(point, sizeof point, "net.stream/%d/%d", fd, depth);
    for (int64_t word = 0; word < 4; word++) {
        int64_t args[2] = {word, 0x0123456789abcdefLL ^ word}, result;
        check(vino_graft_call(point, strlen(point), "set_key", 7, args, 2, &result) == 0, "set_key");
    }
    const char *line = "sealed hello from C";
    check(send(fd, line, strlen(line), 0) == (ssize_t)strlen(line), "sealed send");
    char buf[256];
    size_t have = 0;
    while (have < 12) {
        got = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        check(got > 0, "sealed recv");
        have += (size_t)got;
    }
    buf[have] = 0;
    check(vino_socket_pop(fd) == 0 && vino_socket_pop(fd) == -EINVAL, "vino_socket_pop");
    close(fd);
    printf("sealed %s\n", buf);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "server") == 0) return server(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 4 && strcmp(argv[1], "client") == 0) return client(atoi(argv[2]), argv[3]);
    if (argc >= 2 && strcmp(argv[1], "preopened") == 0) return preopened();
    if (argc >= 2 && strcmp(argv[1], "udp") == 0) return udp();
    if (argc >= 2 && strcmp(argv[1], "errors") == 0) return errors();
    if (argc >= 3 && strcmp(argv[1], "block") == 0) return block(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "sealed") == 0) return sealed(atoi(argv[2]));
    fprintf(stderr, "usage: net server|client|preopened|udp|errors|block ...\n");
    return 2;
}
