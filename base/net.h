/*
 * net.h - TCP helpers of the control plane (internal to libftrt; base layer).
 */
#ifndef FTRT_BASE_NET_H
#define FTRT_BASE_NET_H

#include <stddef.h>

/* Opens a listening TCP socket on addr (empty: first non-loopback IPv4, else 127.0.0.1), port
 * chosen by the kernel. Writes the address actually used to addr_out[cap] and the port. Returns
 * the fd or -errno. */
int ftrt__listen(const char *addr, char *addr_out, size_t cap, int *port);
/* Connects to addr:port with a timeout in ms. Returns the fd or -errno (-ETIMEDOUT). */
int ftrt__connect(const char *addr, int port, int timeout_ms);

#endif
