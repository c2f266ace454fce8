/* sigset_t for programs `vino build` makes, found before wasi-libc's own (a one-byte
 * placeholder, too small for SIGTERM): 64 bits, bit (sig - 1) for sig, as the kernel's signal
 * sets are. wasi-libc only passes it by pointer (ppoll, pselect), so its size is free. */
#ifndef __wasilibc___typedef_sigset_t_h
#define __wasilibc___typedef_sigset_t_h

typedef unsigned long long sigset_t;

#endif
