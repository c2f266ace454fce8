/* <sys/socket.h> for programs `vino build` makes: wasi-libc's (accept, recv, send, shutdown,
 * getsockopt), plus what WASI preview 1 leaves out and VINO provides (sdk/lib/vino_socket.c):
 * socket, bind, listen, connect, getsockname, getpeername, sendto, recvfrom, setsockopt. */
#include_next <sys/socket.h>

#ifndef VINO_COMPAT_SYS_SOCKET_H
#define VINO_COMPAT_SYS_SOCKET_H
#ifdef __cplusplus
extern "C" {
#endif
/* Options setsockopt accepts (and keeps to itself: the stack's behaviour is its own). */
#ifndef SO_REUSEADDR
#define SO_REUSEADDR 2
#endif
#ifndef SO_KEEPALIVE
#define SO_KEEPALIVE 9
#endif
int socket(int, int, int);
int bind(int, const struct sockaddr *, socklen_t);
int listen(int, int);
int connect(int, const struct sockaddr *, socklen_t);
int getsockname(int, struct sockaddr *__restrict, socklen_t *__restrict);
int getpeername(int, struct sockaddr *__restrict, socklen_t *__restrict);
ssize_t sendto(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
ssize_t recvfrom(int, void *__restrict, size_t, int, struct sockaddr *__restrict, socklen_t *__restrict);
int setsockopt(int, int, int, const void *, socklen_t);
#ifdef __cplusplus
}
#endif
#endif
