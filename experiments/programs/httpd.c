/* httpd.c -- the static HTTP/1.1 server `vino bench serve` runs as a VINO process, to set beside
 * the same server as a graft in the kernel (sdk/grafts/http_server.c): the same requests (GET,
 * keep-alive, pipelining, 404/403 from its permissions), written as an ordinary server is:
 * socket, bind, listen, poll, accept, read, then open, fstat, pread and write for each file.
 *     httpd PORT ROOT    serve ROOT on PORT until killed */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONN 256
#define REQ_MAX 4096
#define CHUNK 65536

struct conn {
    int fd;
    size_t used;
    char buf[REQ_MAX];
};

static struct conn conns[MAX_CONN];
static char chunk[CHUNK];
static const char *root;

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int plain(int fd, const char *status, const char *body) {
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s", status,
                     strlen(body), body);
    return send_all(fd, head, (size_t)n);
}

/* Answers the request whose head is c->buf[0..end); -1 if the connection must close. */
static int answer(int fd, const char *req, size_t end) {
    const char *sp1 = memchr(req, ' ', end);
    if (!sp1)
        return -1;
    const char *path = sp1 + 1;
    const char *sp2 = memchr(path, ' ', end - (size_t)(path - req));
    if (!sp2 || (size_t)(sp1 - req) != 3 || memcmp(req, "GET", 3) != 0 || path[0] != '/')
        return plain(fd, "400 Bad Request", "bad request\n") < 0 ? -1 : -1;
    bool keep = memmem(req, end, "Connection: close", 17) == NULL;
    char full[1024];
    int n = snprintf(full, sizeof full, "%s%.*s", root, (int)(sp2 - path), path);
    if (n <= 0 || (size_t)n >= sizeof full || strstr(full, ".."))
        return plain(fd, "403 Forbidden", "forbidden\n") < 0 || !keep ? -1 : 0;
    int f = open(full, O_RDONLY);
    struct stat st;
    if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
        int denied = f < 0 && errno == EACCES;
        if (f >= 0)
            close(f);
        int r = denied ? plain(fd, "403 Forbidden", "forbidden\n") : plain(fd, "404 Not Found", "not found\n");
        return r < 0 || !keep ? -1 : 0;
    }
    /* The head and the start of the file in one write: a head alone would be a small segment
     * held back (Nagle's rule) until the client's delayed acknowledgement of it. */
    int h = snprintf(chunk, 256,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %lld\r\n%s\r\n",
                     (long long)st.st_size, keep ? "" : "Connection: close\r\n");
    size_t have = (size_t)h;
    int r = 0;
    for (off_t at = 0; r == 0 && (at < st.st_size || have > 0);) {
        if (at < st.st_size) {
            ssize_t got = pread(f, chunk + have, CHUNK - have, at);
            if (got <= 0) {
                r = -1;
                break;
            }
            at += got;
            have += (size_t)got;
        }
        r = send_all(fd, chunk, have);
        have = 0;
    }
    close(f);
    return r < 0 || !keep ? -1 : 0;
}

static int head_end(const char *b, size_t n) {
    for (size_t i = 3; i < n; i++)
        if (b[i - 3] == '\r' && b[i - 2] == '\n' && b[i - 1] == '\r' && b[i] == '\n')
            return (int)i + 1;
    return -1;
}

/* New bytes on a connection: answer every whole request. -1: close it. */
static int serve(struct conn *c) {
    ssize_t got = read(c->fd, c->buf + c->used, REQ_MAX - c->used);
    if (got <= 0)
        return -1;
    c->used += (size_t)got;
    int end;
    while ((end = head_end(c->buf, c->used)) > 0) {
        if (answer(c->fd, c->buf, (size_t)end) < 0)
            return -1;
        memmove(c->buf, c->buf + end, c->used - (size_t)end);
        c->used -= (size_t)end;
    }
    return c->used == REQ_MAX ? -1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: httpd PORT ROOT\n");
        return 2;
    }
    root = argv[2];
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)atoi(argv[1]));
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 64) < 0) {
        perror("httpd: listen");
        return 1;
    }
    static struct pollfd fds[1 + MAX_CONN];
    fds[0].fd = l;
    fds[0].events = POLLIN;
    for (int i = 0; i < MAX_CONN; i++) {
        conns[i].fd = -1;
        fds[1 + i].fd = -1;
        fds[1 + i].events = POLLIN;
    }
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        if (poll(fds, 1 + MAX_CONN, -1) < 0)
            continue;
        if (fds[0].revents & POLLIN) {
            int c = accept(l, NULL, NULL);
            for (int i = 0; c >= 0 && i < MAX_CONN; i++)
                if (conns[i].fd < 0) {
                    conns[i].fd = fds[1 + i].fd = c;
                    conns[i].used = 0;
                    c = -1;
                }
            if (c >= 0)
                close(c);
        }
        for (int i = 0; i < MAX_CONN; i++) {
            if (conns[i].fd < 0 || !(fds[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (serve(&conns[i]) < 0) {
                close(conns[i].fd);
                conns[i].fd = fds[1 + i].fd = -1;
            }
        }
    }
}
