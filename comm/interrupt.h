/*
 * interrupt.h - a thread that runs an engine's reaction to an epoch change off the agent thread
 * (internal to libftrt; comm/).
 *
 * The agent thread calls the epoch watch's listeners (base/watch.c) once per change of the
 * watch, and it must return promptly: heartbeats wait for it, and a rank whose agent is silent
 * past FTRT_HEARTBEAT_TIMEOUT_MS is declared failed. What an engine does about a change may
 * block: the NCCL plane takes its mutex (which a collective being enqueued may hold while it
 * revokes the communicator) and aborts the communicator (ncclCommAbort joins NCCL's threads).
 * So the engine starts an interrupter: its listener only records the change and wakes the
 * interrupter's thread, which calls the engine's function. Changes that arrive while a call
 * runs are merged into one later call (the newest epoch, the fatal code).
 */
#ifndef FTRT_COMM_INTERRUPT_H
#define FTRT_COMM_INTERRUPT_H

#include "base/ports.h"

typedef struct ftrt__interrupter ftrt__interrupter;

/* Listens on w (which must have had ftrt__watch_init and outlive the interrupter) and starts a
 * thread that calls fn(arg, epoch, fatal) after each change of w that the agent thread fires
 * (arguments as ftrt__watch_fn's). *out receives the interrupter. Any thread but the agent's.
 * Returns 0, -ENOMEM, or -errno of pthread_create (*out NULL, nothing started). */
int ftrt__interrupter_start(ftrt__watch *w, ftrt__watch_fn fn, void *arg,
                            ftrt__interrupter **out);
/* Stops listening, lets a call in progress end (a change not yet taken is dropped), joins the
 * thread and frees it. NULL is ignored. Not from fn itself, not from the agent thread. */
void ftrt__interrupter_stop(ftrt__interrupter *it);
/* Waits at most ms milliseconds until fn has returned `calls` times in all; returns how many
 * times it has (for tests). Any thread. */
int ftrt__interrupter_wait(ftrt__interrupter *it, int calls, int ms);

#endif
