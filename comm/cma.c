/*
 * cma.c - single-copy writes into another process of the same host for the state transfer
 * (cma.h has the contract): the identity that tells two processes share a kernel and a PID
 * namespace (and, with its start time, that a pid still names the same process), and the write
 * itself (process_vm_writev, resumed after a partial write).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/cma.h"

/* The first line of a small file, without its newline ("" when it cannot be read). */
static void first_line(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, cap - 1);
    close(fd);
    if (n < 0) n = 0;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Field 22 of /proc/<pid>/stat, the start time (0 when it cannot be read). The command name
 * (field 2) may hold spaces and parentheses: the fields are counted after its last ')'. */
static uint64_t start_time(int64_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    first_line(path, buf, sizeof buf);
    const char *p = strrchr(buf, ')');
    if (!p) return 0;
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ') field++;
    return field == 22 ? strtoull(p, NULL, 10) : 0;
}

void ftrt__cma_self(ftrt__cma_ident *id)
{
    char host[64] = "", boot[48];
    struct stat ns = {0};
    memset(id, 0, sizeof *id);
    gethostname(host, sizeof host - 1);
    first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    if (stat("/proc/self/ns/pid", &ns) != 0) memset(&ns, 0, sizeof ns);
    snprintf(id->where, sizeof id->where, "%s|%s|%llx:%llx", host, boot,
             (unsigned long long)ns.st_dev, (unsigned long long)ns.st_ino);
    id->pid = (int64_t)getpid();
    id->start = start_time(id->pid);
}

int ftrt__cma_alive(const ftrt__cma_ident *id)
{
    return id->pid > 0 && id->start != 0 && start_time(id->pid) == id->start;
}

int ftrt__cma_same_host(const ftrt__cma_ident *peer)
{
    ftrt__cma_ident me;
    ftrt__cma_self(&me);
    return memcmp(me.where, peer->where, sizeof me.where) == 0 && peer->pid > 0;
}

int ftrt__cma_write(int64_t pid, uint64_t dst, const void *src, size_t len)
{
    while (len > 0) {
        struct iovec l = {(void *)src, len}, r = {(void *)(uintptr_t)dst, len};
        ssize_t n = process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -EFAULT;
        src = (const char *)src + n;
        dst += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}
