/* net.c - TCP helpers for the control plane: listen and connect with a timeout (base/net.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/net.h"

/* 1 when the space-separated list holds the token a. */
static int has_token(const char *list, const char *a)
{
    size_t al = strlen(a);
    for (const char *p = list; (p = strstr(p, a)) != NULL; p += al)
        if ((p == list || p[-1] == ' ') && (p[al] == ' ' || p[al] == 0)) return 1;
    return 0;
}

int ftrt__host_addrs(char *out, size_t cap)
{
    struct ifaddrs *ifs = NULL;
    size_t len = 0;
    int n = 0;
    out[0] = 0;
    if (getifaddrs(&ifs) == 0) {
        /* Two passes: the other hosts' way in first, loopback (same host) last. */
        for (int pass = 0; pass < 2; pass++)
            for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
                if (!(i->ifa_flags & IFF_UP)) continue;
                if (((i->ifa_flags & IFF_LOOPBACK) != 0) != (pass == 1)) continue;
                char a[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, a,
                          sizeof a);
                if (has_token(out, a)) continue; /* an address on two interfaces */
                size_t al = strlen(a);
                if (len + al + 2 > cap) break;
                len += (size_t)snprintf(out + len, cap - len, "%s%s", n ? " " : "", a);
                n++;
            }
        freeifaddrs(ifs);
    }
    if (n == 0 && cap > 10) {
        snprintf(out, cap, "127.0.0.1");
        n = 1;
    }
    return n;
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int ftrt__listen(const char *addr, char *addr_out, size_t cap, int *port)
{
    char a[256];
    int any = !(addr && *addr);
    snprintf(a, sizeof a, "%s", any ? "0.0.0.0" : addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    if (inet_pton(AF_INET, a, &sa.sin_addr) != 1) {
        ftrt_log_error("FTRT_COORD_ADDR=\"%s\" is not an IPv4 address", a);
        return -EINVAL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t sl = sizeof sa;
    /* The largest accept queue the kernel allows (net.core.somaxconn): thousands of host agents
     * connect at a job's start, and one whose handshake finds the queue full is dropped by the
     * kernel, unseen by the coordinator (docs/benchmarks.md "Coordinator at 131,072 simulated
     * ranks"). */
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, SOMAXCONN) ||
        getsockname(fd, (struct sockaddr *)&sa, &sl)) {
        int e = -errno;
        ftrt_log_error("cannot listen on %s: %s", a, strerror(-e));
        close(fd);
        return e;
    }
    *port = ntohs(sa.sin_port);
    if (any)
        ftrt__host_addrs(addr_out, cap);
    else
        snprintf(addr_out, cap, "%s", a);
    return fd;
}

/* One round: a nonblocking connect to every address at once; the first that completes wins.
 * Returns the fd (and *which), -EAGAIN when none answered within wait_ms, or -errno. */
static int connect_round(struct sockaddr_in *sa, int n, int wait_ms, int *which)
{
    int fds[FTRT__ADDRS_N];
    struct pollfd pf[FTRT__ADDRS_N];
    int live = 0, fd = -EAGAIN;
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        pf[i] = (struct pollfd){.fd = -1, .events = POLLOUT};
        if (fds[i] < 0) continue;
        if (connect(fds[i], (struct sockaddr *)&sa[i], sizeof sa[i]) == 0 || errno == EINPROGRESS) {
            pf[i].fd = fds[i];
            live++;
        } else {
            close(fds[i]);
            fds[i] = -1;
        }
    }
    double deadline = ftrt__now() + wait_ms / 1000.0;
    while (live > 0 && fd < 0) {
        int ms = (int)((deadline - ftrt__now()) * 1000.0);
        if (ms <= 0 || poll(pf, (nfds_t)n, ms) <= 0) break;
        for (int i = 0; i < n && fd < 0; i++) {
            if (pf[i].fd < 0 || !pf[i].revents) continue;
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &el);
            if (err == 0) {
                fd = fds[i];
                fds[i] = -1;
                *which = i;
            } else {
                close(fds[i]);
                fds[i] = -1;
                pf[i].fd = -1;
                live--;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        tune(fd);
    }
    return fd;
}

int ftrt__connect_any(const char *addrs, int port, int timeout_ms, char *used, size_t cap)
{
    struct sockaddr_in sa[FTRT__ADDRS_N];
    char names[FTRT__ADDRS_N][INET_ADDRSTRLEN];
    int n = 0;
    const char *p = addrs;
    while (p && *p && n < FTRT__ADDRS_N) {
        size_t l = strcspn(p, " ,");
        if (l > 0 && l < INET_ADDRSTRLEN) {
            memcpy(names[n], p, l);
            names[n][l] = 0;
            sa[n] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
            if (inet_pton(AF_INET, names[n], &sa[n].sin_addr) == 1) n++;
        }
        p += l;
        p += strspn(p, " ,");
    }
    if (n == 0) return -EINVAL;
    double deadline = ftrt__now() + timeout_ms / 1000.0;
    for (;;) {
        int which = -1;
        int fd = connect_round(sa, n, 250, &which);
        if (fd >= 0) {
            if (used) snprintf(used, cap, "%s", names[which]);
            return fd;
        }
        if (ftrt__now() > deadline) return -ETIMEDOUT;
        struct timespec ts = {0, 20 * 1000 * 1000}; /* the coordinator may not listen yet */
        nanosleep(&ts, NULL);
    }
}

/* The abstract address of the job's local socket (suffix "") or of the coordinator's mark
 * (suffix ".c"); *len receives its length. */
static struct sockaddr_un local_addr(uint64_t tag, const char *suffix, socklen_t *len)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ftrt.%016llx%s",
                     (unsigned long long)tag, suffix);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return a;
}

int ftrt__local_mark(uint64_t tag)
{
    socklen_t len;
    struct sockaddr_un a = local_addr(tag, ".c", &len);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    /* (listened on, never accepted: a backlog of 0 queues one probe; later probes find the
     * queue full, which says the same) */
    if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, 0)) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

int ftrt__local_marked(uint64_t tag)
{
    /* A connect, not a bind: two ranks of one host probing at once must not take each
     * other's probe for the mark (a bind held for a moment did: hosts.sparemove, 3 runs of 8
     * on a rank left on its own connection). */
    socklen_t len;
    struct sockaddr_un a = local_addr(tag, ".c", &len);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return 0;
    int rc = connect(fd, (struct sockaddr *)&a, len);
    int e = errno;
    close(fd);
    return rc == 0 || e == EAGAIN; /* (EAGAIN: the mark's queue is full: it is held) */
}

int ftrt__local_listen(uint64_t tag)
{
    socklen_t len;
    struct sockaddr_un a = local_addr(tag, "", &len);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, 1024)) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

int ftrt__local_connect(uint64_t tag, int timeout_ms)
{
    socklen_t len;
    struct sockaddr_un a = local_addr(tag, "", &len);
    double end = ftrt__now() + timeout_ms / 1000.0;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -errno;
        if (connect(fd, (struct sockaddr *)&a, len) == 0) return fd;
        int e = errno;
        close(fd);
        /* bound but not listening yet (the holder is between bind and listen), or its backlog
         * is full: try again; nobody there: give up */
        if ((e != EAGAIN && e != ECONNREFUSED) || ftrt__now() >= end) return -e;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}
