/*
 * ftrt_sim.h - the simulated device, A TEST ARRANGEMENT: "device" memory that the host cannot
 * touch, so that a program's FTRT_REGION_DEVICE regions and every path of ftrt that moves or
 * checks them (checkpoint, restore, the recovery's state transfer, partner replicas, the
 * silent-data-corruption fingerprints) run without a GPU. It is not a device and computes
 * nothing: each allocation is an anonymous mapping that is PROT_NONE except inside ftrt's own
 * calls, so a host access to it outside them dies of SIGSEGV (a path that dereferences a
 * device pointer on the host is caught). Part of libftrt (kernels/loc_sim.c); the tests and
 * examples/mlp_state.c (train_mlp --device sim) use it.
 *
 * A job uses it as its device when every rank runs with the test knob FTRT_TEST_SIM_DEVICE=1:
 * ftrt_init() then installs it as the device backend, and ftrt_register() accepts
 * FTRT_REGION_DEVICE regions allocated here (in place of CUDA memory in libftrt_gpu).
 * The allocator and the copies below work with or without the knob.
 *
 * Thread-safety: every function may be called from any thread; calls run one at a time (one
 * lock). Speed is not a goal: each call pays two mprotect system calls.
 */
#ifndef FTRT_SIM_H
#define FTRT_SIM_H

#include <stddef.h>

#include "ftrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Allocates `bytes` (> 0) of simulated device memory, zeroed, into *dev (its own mapping of
 * whole pages; at most 4096 live allocations per process). The memory is reachable only
 * through ftrt_sim_write() / ftrt_sim_read() and ftrt's own paths. Free it with
 * ftrt_sim_free(). Returns 0, FTRT_EINVAL (dev NULL or bytes 0) or -ENOMEM (no memory, or 4096
 * allocations live).
 */
FTRT_API int ftrt_sim_alloc(size_t bytes, void **dev);

/* Frees an allocation of ftrt_sim_alloc (NULL: nothing). Returns 0 or FTRT_EINVAL (not the
 * start of a live allocation; logged). The caller unregisters the region first. */
FTRT_API int ftrt_sim_free(void *dev);

/*
 * Copies `bytes` of host memory at src_host into simulated device memory at dst_dev (within
 * one allocation), and the other way round. The copy is checked with CRC32C on arrival.
 * Returns 0, FTRT_EINVAL (a NULL pointer, or a device range that is not inside one
 * allocation; logged), or FTRT_ECORRUPT (the bytes changed on the way: not expected).
 */
FTRT_API int ftrt_sim_write(void *dst_dev, const void *src_host, size_t bytes);
FTRT_API int ftrt_sim_read(void *dst_host, const void *src_dev, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
