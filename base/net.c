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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/net.h"

/* First non-loopback, up IPv4 address of this host, or 127.0.0.1. */
static void default_addr(char *out, size_t cap)
{
    struct ifaddrs *ifs = NULL;
    snprintf(out, cap, "127.0.0.1");
    if (getifaddrs(&ifs) != 0) return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, out,
                  (socklen_t)cap);
        break;
    }
    freeifaddrs(ifs);
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int ftrt__listen(const char *addr, char *addr_out, size_t cap, int *port)
{
    char a[256];
    if (addr && *addr)
        snprintf(a, sizeof a, "%s", addr);
    else
        default_addr(a, sizeof a);
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
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 512) ||
        getsockname(fd, (struct sockaddr *)&sa, &sl)) {
        int e = -errno;
        ftrt_log_error("cannot listen on %s: %s", a, strerror(-e));
        close(fd);
        return e;
    }
    *port = ntohs(sa.sin_port);
    snprintf(addr_out, cap, "%s", a);
    return fd;
}

int ftrt__connect(const char *addr, int port, int timeout_ms)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) return -EINVAL;
    double deadline = ftrt__now() + timeout_ms / 1000.0;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            tune(fd);
            return fd;
        }
        int e = errno;
        close(fd);
        if ((e != ECONNREFUSED && e != EINTR && e != EAGAIN) || ftrt__now() > deadline)
            return -e;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
