/*
 * fence.c - fencing a process with SIGKILL, by pidfd where the kernel has one (base/fence.h).
 *
 * pidfd_open(2) (Linux 5.3) and pidfd_send_signal(2) (Linux 5.1) are called through syscall():
 * glibc wraps them only from 2.36, and a kernel without them answers ENOSYS, which falls back
 * to kill() by pid with a log line that says so.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fence.h"
#include "base/log.h"
#include "ftrt.h"

static int sys_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0u);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

static int sys_pidfd_send_signal(int pidfd, int sig)
{
#ifdef SYS_pidfd_send_signal
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0u);
#else
    (void)pidfd;
    (void)sig;
    errno = ENOSYS;
    return -1;
#endif
}

int ftrt__peer_process(int fd, pid_t *pid, int *pidfd)
{
    static atomic_flag told = ATOMIC_FLAG_INIT;
    struct ucred cred;
    socklen_t len = sizeof cred;
    *pid = 0;
    *pidfd = -1;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return -errno;
    *pid = cred.pid;
    if (cred.pid <= 0) return 0;
    *pidfd = sys_pidfd_open(cred.pid);
    if (*pidfd >= 0) return 0;
    if (errno == ESRCH) {
        *pid = 0; /* gone already: its pid must never be signalled */
    } else if (errno != ENOSYS) {
        ftrt_log_warn("pidfd_open(%d): %s: that process will be fenced by pid", (int)cred.pid,
                      ftrt_strerror(-errno));
    } else if (!atomic_flag_test_and_set(&told)) {
        ftrt_log_warn("pidfd_open: not in this kernel (ENOSYS, Linux < 5.3): ranks are fenced "
                      "with kill() by pid, which could hit another process if the pid was "
                      "reused");
    }
    return 0;
}

int ftrt__fence(int w, pid_t pid, int pidfd, const char *by)
{
    if (pid == getpid()) {
        ftrt_log_warn("%s: world rank %d runs in this process (pid %d): not fenced from inside",
                      by, w, (int)pid);
        return -EDEADLK;
    }
    if (pidfd < 0 && pid <= 0) {
        ftrt_log_warn("%s: world rank %d cannot be fenced: its process is unknown", by, w);
        return -EINVAL;
    }
    ftrt_log_warn("%s: fencing world rank %d (pid %d) with SIGKILL %s", by, w, (int)pid,
                  pidfd >= 0 ? "through its pidfd" : "by pid (no pidfd)");
    int rc = pidfd >= 0 ? sys_pidfd_send_signal(pidfd, SIGKILL) : kill(pid, SIGKILL);
    if (rc == 0) return 0;
    rc = -errno;
    if (rc != -ESRCH)
        ftrt_log_warn("%s: SIGKILL to world rank %d (pid %d) failed: %s", by, w, (int)pid,
                      ftrt_strerror(rc));
    return rc;
}

int ftrt__parent_is(const char *name)
{
    char path[64], comm[32] = {0};
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)getppid());
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int got = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    return got && strcmp(comm, name) == 0;
}
