/*
 * sigterm.h - FTRT_SIGTERM=drain: the process's SIGTERM handler (internal to libftrt; base
 * layer, so that the coordinator and the ranks' agent threads both read it).
 *
 * A signal handler may do next to nothing: this one counts. The first SIGTERM is a request
 * that the agent thread of a trainer or spare turns into DRAIN_ME (a drain of this rank:
 * runtime/agent.c, runtime/coordinator/drain.c) and that the coordinator turns into the end of
 * the job; a second one puts the disposition found at install back and raises SIGTERM again
 * (by default: the process dies), so that a scheduler's or launcher's repeated SIGTERM still
 * ends a process whose drain did not come in time.
 */
#ifndef FTRT_BASE_SIGTERM_H
#define FTRT_BASE_SIGTERM_H

/* Installs the handler (once per process; later calls do nothing). Returns 0 or -errno
 * (sigaction failed). Any thread, before the process may receive SIGTERM for a drain. */
int ftrt__sigterm_install(void);
/* Puts the disposition found at install back (nothing if not installed). */
void ftrt__sigterm_restore(void);
/* SIGTERMs received since install (0: none). Any thread; async-signal-safe. */
int ftrt__sigterm_count(void);

#endif
