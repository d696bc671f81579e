/*
 * net.h - TCP helpers of the control plane (internal to libftrt; base layer).
 */
#ifndef FTRT_BASE_NET_H
#define FTRT_BASE_NET_H

#include <stddef.h>
#include <stdint.h>

/* Most addresses a list of ftrt__host_addrs / ftrt__connect_any holds, and room for them. */
#define FTRT__ADDRS_N 16
#define FTRT__ADDRS_MAX (FTRT__ADDRS_N * 16)

/* Opens a listening TCP socket, port chosen by the kernel. addr empty (FTRT_COORD_ADDR unset):
 * on every interface (0.0.0.0), and addr_out[cap] receives this host's IPv4 addresses
 * (ftrt__host_addrs) for the ranks to try; else on addr only, which addr_out receives. Returns
 * the fd (and *port), or -errno (-EINVAL: addr is not an IPv4 address). */
int ftrt__listen(const char *addr, char *addr_out, size_t cap, int *port);
/* This host's up IPv4 addresses, space-separated into out[cap]: the non-loopback ones in
 * interface order, then the loopback ones (127.0.0.1 alone when there is none). Returns how
 * many. Thread-safe. */
int ftrt__host_addrs(char *out, size_t cap);
/* Connects to port at the first of the addresses (space- or comma-separated IPv4, at most
 * FTRT__ADDRS_N) that answers: every round tries them all at once (nonblocking, 250 ms), and
 * rounds repeat until timeout_ms (ms) passes, so that an address that does not route from
 * here (another host's private interface, a cut link) costs nothing. used[cap] (may be NULL)
 * receives the address that answered. Returns the fd (blocking, TCP_NODELAY) or -errno
 * (-EINVAL: no address parsed, -ETIMEDOUT). Thread-safe. */
int ftrt__connect_any(const char *addrs, int port, int timeout_ms, char *used, size_t cap);

/* The job's local socket: an abstract Unix stream socket named after the job's local tag
 * ("\0ftrt.<tag in hex>"), 64 random bits of its own, never the hello secret: every user of a
 * host can list abstract names (/proc/net/unix), and a name must not hand out the secret that
 * every hello on the control plane is checked against. Abstract names belong to a network
 * namespace, so every process of one host (one namespace) finds the same one, and it vanishes
 * with the last descriptor.
 * ftrt__local_listen binds and listens on it: the fd, or -EADDRINUSE when a process of this
 * host holds it already, or -errno. ftrt__local_connect connects to it, retrying while it is
 * bound but not listening yet, for at most timeout_ms: the fd (blocking), or -errno
 * (-ECONNREFUSED / -ENOENT: nobody holds it). Thread-safe. */
int ftrt__local_listen(uint64_t tag);
int ftrt__local_connect(uint64_t tag, int timeout_ms);
/* The coordinator's mark on its host: another abstract name of the job ("...c"), bound and
 * listened on (never accepted) by the coordinator for the whole job, so that the ranks of its
 * host know to connect to it directly instead of through a host agent. ftrt__local_mark binds
 * it: the fd, or -errno (-EADDRINUSE: held already). ftrt__local_marked: 1 when a process of
 * this host holds it (a non-blocking connect is taken, or finds its queue full), else 0; it
 * never binds, so two probes at once cannot see each other. Thread-safe. */
int ftrt__local_mark(uint64_t tag);
int ftrt__local_marked(uint64_t tag);

#endif
