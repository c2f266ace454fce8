/* Sockets on the kernel's own calls: socket, bind, listen, connect, getsockname, getpeername,
 * sendto, recvfrom and setsockopt, which WASI preview 1 lacks (wasi-libc's accept, recv, send,
 * shutdown and getsockopt go through WASI's own socket calls). Part of the compatibility layer
 * (compiled as one unit after vino_compat.c, whose vino_result it uses).
 *
 * Built with VINO_COMPAT_PORTABLE, nothing here imports the kernel: the calls fail with
 * ENOSYS. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>

#include "vino_process.h"

#ifdef VINO_COMPAT_PORTABLE
#define VINO_SOCKET_CALL(call, ...) (-ENOSYS)
#else
#define VINO_SOCKET_CALL(call, ...) vino_##call(__VA_ARGS__)
#endif

/* A call that returns a count or a descriptor: it, or -1 with errno set. */
static long vino_value(long r) {
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

int socket(int domain, int type, int protocol) {
    (void)protocol; /* TCP for a stream, UDP for datagrams: the only protocols there are */
    return (int)vino_value(VINO_SOCKET_CALL(socket, domain, type));
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    return vino_result(VINO_SOCKET_CALL(bind, fd, addr, len));
}

int listen(int fd, int backlog) {
    return vino_result(VINO_SOCKET_CALL(listen, fd, backlog));
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    return vino_result(VINO_SOCKET_CALL(connect, fd, addr, len));
}

int getsockname(int fd, struct sockaddr *restrict addr, socklen_t *restrict len) {
    return vino_result(VINO_SOCKET_CALL(getsockname, fd, addr, (uint32_t *)len));
}

int getpeername(int fd, struct sockaddr *restrict addr, socklen_t *restrict len) {
    return vino_result(VINO_SOCKET_CALL(getpeername, fd, addr, (uint32_t *)len));
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr, socklen_t addr_len) {
    return vino_value(VINO_SOCKET_CALL(sendto, fd, buf, len, flags, addr, addr_len));
}

ssize_t recvfrom(int fd, void *restrict buf, size_t len, int flags, struct sockaddr *restrict addr,
                 socklen_t *restrict addr_len) {
    return vino_value(VINO_SOCKET_CALL(recvfrom, fd, buf, len, flags, addr, (uint32_t *)addr_len));
}

/* TCP_NODELAY reaches the stack (Nagle's rule off for the socket, and for a listener's
 * connections). Options a portable server sets as a matter of course are accepted and change
 * nothing: SO_REUSEADDR (a closed connection never holds its port against a new listener here)
 * and SO_KEEPALIVE. Others: ENOPROTOOPT. */
int setsockopt(int fd, int level, int name, const void *value, socklen_t len) {
    if (level == IPPROTO_TCP && name == TCP_NODELAY) {
        if (value == NULL || len < sizeof(int)) {
            errno = EINVAL;
            return -1;
        }
        return vino_result(VINO_SOCKET_CALL(socket_nodelay, fd, *(const int *)value != 0));
    }
    (void)fd, (void)value, (void)len;
    if (level == SOL_SOCKET && (name == SO_REUSEADDR || name == SO_KEEPALIVE)) {
        return 0;
    }
    errno = ENOPROTOOPT;
    return -1;
}
