/*
 * transfer.h - the recovery's state transfer of replicated regions over the data plane
 * (internal to libftrt; comm/ and the runtime above it).
 *
 * Only the members that lack the resume step's state receive it (a promoted spare, a
 * survivor behind the others), and they receive it from every up-to-date member at once: each
 * region is cut in chunks, chunk g comes from source g mod (number of sources) (striping), all
 * chunks are in flight together (pipelined), and each chunk's CRC32C, computed at its source,
 * is checked at the receiver. A chunk whose CRC does not match is never used as it is: every
 * member learns of it (an allreduce), and it is sent again by the next source in turn, up to
 * once from each source; after that the transfer fails with FTRT_ECORRUPT and the recovery
 * ends the job cleanly. Fault-free, a source sends (region bytes x receivers / sources), a
 * receiver takes each byte once, and nobody else moves anything.
 *
 * When every source can write into every receiver's memory (one host: cross-memory attach,
 * comm/cma.h), the sources write their chunks of host regions into the receivers themselves,
 * each chunk's CRC32C computed as it is written and sent after it: the copies then run on the
 * sources' cores in parallel instead of on the receiver's alone (with MPI's single-copy shared
 * memory, the receiver copies every byte), and the receiver only checks. Otherwise, and for
 * device regions, chunks travel as MPI messages. The test knob FTRT_TEST_XFER_NO_CMA=1 forces
 * messages.
 */
#ifndef FTRT_COMM_TRANSFER_H
#define FTRT_COMM_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "comm/plane.h"
#include "kernels/location.h"

/* One replicated region: the same bytes on every up-to-date member. */
typedef struct ftrt__xfer_region {
    const char *name; /* for messages */
    void *ptr;        /* bytes long: read at sources, written at receivers */
    size_t bytes;
    const ftrt__loc_ops *loc; /* NULL: ptr is host memory; else device memory of this backend,
                                 reached only through it, staged through host buffers of at
                                 most 8 chunks (transfer.c) */
} ftrt__xfer_region;

typedef struct ftrt__xfer_stat {
    uint64_t bytes_sent;     /* by this member, first attempt and retries */
    uint64_t bytes_received; /* by this member, first attempt and retries */
    int chunks_retried;      /* chunks sent again after a CRC mismatch (every member agrees) */
    int sources, receivers;  /* of the plan */
    int single_copy;         /* 1: the sources wrote host regions' chunks into the receivers
                                themselves (comm/cma.h, one host), 0: MPI messages */
    int mapped;              /* of those, the (receiver, region) pairs the sources wrote through a
                                mapping of the receiver's memory file of huge pages (ftrt_alloc;
                                summed over the sources, the same on every member), 0: none */
    double seconds;          /* this member's whole transfer */
} ftrt__xfer_stat;

/* Transfers regs[0..n) (the same table on every member, in the same order) over plane p to
 * the members whose role[logical rank] is FTRT__PLAN_NEEDS_STATE (base/proto.h) from those that
 * are FTRT__PLAN_UP_TO_DATE; FTRT__PLAN_BYSTANDER members move no data (their ptr may be NULL)
 * but take part in the agreement. Collective over p's communicator; role has p->size entries.
 * (One sharded image from the one member that holds it to its rank's new owner is the case of
 * one source, one receiver and bystanders: runtime/replica.c.)
 *   chunk:         bytes per chunk (> 0; a multiple of 4096 is best).
 *   corrupt_chunk, corrupt_attempts: test knob: when corrupt_chunk >= 0, a receiver flips one
 *                  bit of that global chunk index on each of the first corrupt_attempts
 *                  attempts, after it arrived and before its CRC is checked.
 *   st:            may be NULL; receives this member's figures.
 * Returns 0; FTRT_ECORRUPT (a chunk failed its CRC from every source; logged with the region);
 * FTRT_EINVAL (no source, bad arguments); FTRT_ERECOVER or a fatal code (the watch: a failure
 * during the transfer); FTRT_EMPI; -ENOMEM; a device backend's code (FTRT_ECUDA, ...). On an
 * error a receiver's regions may hold some of the bytes. Application thread. */
int ftrt__xfer_replicated(ftrt__plane *p, const ftrt__xfer_region *regs, int n,
                          const int32_t *role, size_t chunk, int corrupt_chunk,
                          int corrupt_attempts, ftrt__xfer_stat *st);

#endif
