/*
 * fence.h - fencing a process with SIGKILL (internal to libftrt; base layer).
 *
 * A rank the coordinator declared failed while it may still be alive (frozen, stuck in a
 * collective, silent, malformed, a silent data corruption) must never train, write a shard or
 * hold its GPU again: it is killed. Two places do it, with the code here: the coordinator for
 * the ranks of its own host (runtime/coordinator/job.c, by pid), and a host agent for the ranks
 * it serves (runtime/hostagent.c), which holds a pidfd of each, taken when the rank connected,
 * so that a pid reused by another process is never hit. docs/detection-and-recovery.md
 * ("Fencing") says who fences which rank, and when. Also here: which program started this
 * process (a rank's parent is its mpirun, or an Open MPI daemon on another node than mpirun's).
 */
#ifndef FTRT_BASE_FENCE_H
#define FTRT_BASE_FENCE_H

#include <sys/types.h>

/* The process at the other end of the connected Unix socket fd: *pid from SO_PEERCRED (the
 * process that called connect()) and *pidfd, a pidfd for it from pidfd_open(2) (Linux >= 5.3;
 * close-on-exec; the caller owns it and closes it), or -1 where the kernel has no pidfd_open
 * (ENOSYS: then logged once per process, and ftrt__fence falls back to kill() by pid; another
 * error of pidfd_open is logged, with the same fallback). A peer gone already (ESRCH) gets
 * *pid 0 too: its pid is never signalled. The pid is read when the socket is accepted, within
 * microseconds of the peer's connect(); a peer that died in that window and whose pid was
 * reused at once would be the one exposed. Returns 0, or -errno when SO_PEERCRED fails (*pid
 * 0, *pidfd -1).
 * Thread-safe. */
int ftrt__peer_process(int fd, pid_t *pid, int *pidfd);

/* SIGKILL to world rank w's process: with pidfd_send_signal(2) when pidfd >= 0 (the process
 * the pidfd was opened for, never another that reused its pid), else kill(pid). Logged at warn
 * ("<by>: fencing world rank W (pid P) with SIGKILL ..."; by names the caller, e.g. "host
 * agent"). The calling process itself is never fenced (pid == getpid(): the caller would die
 * with it): refused with -EDEADLK and logged. Returns 0 (sent), -ESRCH (the process is gone
 * already), -EDEADLK, -EINVAL (pid <= 0 and no pidfd: the process is unknown) or another
 * -errno of the system call. Does not wait for the process to die. Thread-safe. */
int ftrt__fence(int w, pid_t pid, int pidfd, const char *by);

/* 1 when the command name of this process's parent (/proc/<getppid()>/comm, at most 15
 * characters) is `name`, 0 when it is another or cannot be read. Open MPI 4 starts the ranks of
 * its mpirun's own node as mpirun's children, and those of the other nodes as children of a
 * daemon, "orted" (docs/join.md "Limits": joins need the former). Thread-safe. */
int ftrt__parent_is(const char *name);

#endif
