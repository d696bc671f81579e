/*
 * region.h - ftrt__region, a registered region of application memory: the unit that a
 * checkpoint stores and restores (internal to libftrt). The runtime's registry (runtime/
 * regions.c) holds them; the shard writers (shard.h), the restore (restore.h) and the engine
 * (engine.h) take arrays of them. A type only: there is no region.c.
 *
 * A region has a kind (how its bytes relate across trainers) and a location (where they live),
 * kept in two fields set once at registration from the public flags (ftrt.h): code asks one
 * question or the other, never compares the whole flags word.
 */
#ifndef FTRT_CKPT_REGION_H
#define FTRT_CKPT_REGION_H

#include <stddef.h>

#include "checkpoint/format.h" /* FTRT__NAME_MAX */

/* The kind. The values are those of FTRT_REGION_REPLICATED / FTRT_REGION_SHARDED (ftrt.h) and
 * of the shard format's u32 kind field (format.h): a shard stores the kind alone. */
typedef enum ftrt__region_kind {
    FTRT__KIND_REPLICATED = 0, /* identical on every trainer */
    FTRT__KIND_SHARDED = 1     /* different on each trainer */
} ftrt__region_kind;

/* The location: host memory, or device (CUDA) memory the host must not dereference. */
typedef enum ftrt__region_loc { FTRT__LOC_HOST = 0, FTRT__LOC_DEVICE = 1 } ftrt__region_loc;

/* A registered region (memory owned by the application). */
typedef struct ftrt__region {
    char name[FTRT__NAME_MAX];
    void *ptr;
    size_t bytes;
    ftrt__region_kind kind;
    ftrt__region_loc loc; /* FTRT__LOC_DEVICE: never dereferenced on the host; every path
                             reaches it through the device backend (kernels/location.h) and
                             refuses it (FTRT_ENOTSUP) when there is none */
    int optional;         /* FTRT_REGION_OPTIONAL: a checkpoint without it still restores */
} ftrt__region;

/* "REPLICATED" / "SHARDED", for messages. */
static inline const char *ftrt__kind_name(ftrt__region_kind k)
{
    return k == FTRT__KIND_SHARDED ? "SHARDED" : "REPLICATED";
}

/* "host" / "device", for messages. */
static inline const char *ftrt__loc_name(ftrt__region_loc l)
{
    return l == FTRT__LOC_DEVICE ? "device" : "host";
}

#endif
