/*
 * location.h - where a region's bytes live, as one interface (internal to libftrt; kernels/
 * layer, below checkpoint/, comm/ and runtime/). A region has a kind (REPLICATED, SHARDED) and
 * a location (host, device: checkpoint/region.h); every path that moves or checks the bytes of
 * a device region goes through a backend of this interface, never through a host dereference
 * of the device pointer.
 *
 * Backends:
 *  - ftrt__loc_host (location.c): host memory; memcpy fused with the CRC32C of base/crc32c.h.
 *  - the CUDA one (checkpoint/ckpt_device.c, libftrt_gpu only): the fused copy + CRC32C
 *    kernels of kernels/device_snapshot.h on a side stream; installed when the library loads.
 *  - the simulated device (loc_sim.c, a TEST ARRANGEMENT): "device" memory in an arena that is
 *    PROT_NONE outside the backend's own calls; installed at ftrt_init() when the test knob
 *    FTRT_TEST_SIM_DEVICE=1 is set (base/knobs.h), in place of the CUDA one if there is one.
 * The active device backend (ftrt__loc_device()) is the one device regions use; NULL when
 * there is none, and device regions are then refused (FTRT_ENOTSUP).
 *
 * Conventions for every operation: sizes are in bytes; "dev" pointers are device memory of the
 * backend (for the host backend, host memory), "host" pointers ordinary host memory; the caller
 * owns all buffers (a backend never keeps a pointer after it returns); source and destination
 * do not overlap; bytes == 0 copies nothing (*crc = 0; from_host checks expect_crc == 0).
 * CRC32C values are those of base/crc32c.h started from 0 (ftrt__crc32c(0, p, bytes)). Each
 * returns 0 or a negative code: FTRT_ECORRUPT (from_host: the CRC32C differs), FTRT_EINVAL (a
 * pointer the backend does not own), FTRT_ENODEV / FTRT_ECUDA (CUDA), -errno. Operations are thread-safe: several
 * threads may call them at once (a backend may serialize them).
 */
#ifndef FTRT_KERNELS_LOCATION_H
#define FTRT_KERNELS_LOCATION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftrt__loc_ops {
    const char *name; /* "host", "cuda", "sim": for messages */
    /* Copies `bytes` of device memory at src_dev into host memory dst_host and returns once
     * they are there, with their CRC32C in *crc (not NULL). */
    int (*to_host)(void *dst_host, const void *src_dev, size_t bytes, uint32_t *crc);
    /* Copies `bytes` of host memory at src_host into device memory dst_dev and checks their
     * CRC32C against expect_crc: FTRT_ECORRUPT when it differs. On FTRT_ECORRUPT (or any
     * error) dst_dev may hold some or all of the bytes: the caller must not use them. */
    int (*from_host)(void *dst_dev, const void *src_host, size_t bytes, uint32_t expect_crc);
    /* CRC32C of `bytes` of device memory at src_dev into *crc, with no copy to the host. */
    int (*crc)(const void *src_dev, size_t bytes, uint32_t *crc);
    /* Copies `bytes` of device memory from src_dev to dst_dev (same device). */
    int (*d2d)(void *dst_dev, const void *src_dev, size_t bytes);
    /* Optional (may be NULL): page-locks host memory p[0..bytes) so that to_host / from_host
     * run at DMA speed, and undoes it. pin's failure is not an error for the caller (the
     * copies work on unpinned memory, slower). */
    int (*pin)(void *p, size_t bytes);
    void (*unpin)(void *p);
} ftrt__loc_ops;

/* The host backend: memcpy fused with CRC32C (ftrt__copy_crc32c), crc = ftrt__crc32c, d2d =
 * memcpy; no pin. Never fails on valid arguments. */
extern const ftrt__loc_ops ftrt__loc_host;

/* The active device backend, or NULL when there is none (the CPU-only libftrt without the
 * FTRT_TEST_SIM_DEVICE knob). Thread-safe (an atomic load). */
const ftrt__loc_ops *ftrt__loc_device(void);

/* Makes ops (NULL: none) the active device backend. ops must stay valid while in use (the
 * backends are static). Call before any device region is registered: at library load (CUDA)
 * or in ftrt_init() before any thread starts (the simulated device); unit tests call it. */
void ftrt__loc_set_device(const ftrt__loc_ops *ops);

/* ---- the simulated device (loc_sim.c): a TEST ARRANGEMENT ------------------------------- */

/* The simulated device backend (name "sim"). Its to_host / from_host / crc / d2d accept only
 * pointers inside an allocation of ftrt__sim_alloc (FTRT_EINVAL otherwise, logged) and run one
 * at a time, under the backend's mutex, with the allocations they touch readable and writable
 * for the duration of the call only. No pin / unpin. */
const ftrt__loc_ops *ftrt__loc_sim(void);

/* Allocates `bytes` (> 0) of simulated device memory, zeroed, in its own PROT_NONE mapping
 * (whole pages): any host access outside the backend's calls raises SIGSEGV. Returns NULL on
 * failure (bytes 0, out of memory, or more than 4096 live allocations). Thread-safe. */
void *ftrt__sim_alloc(size_t bytes);
/* Frees an allocation of ftrt__sim_alloc (NULL: no-op; any other pointer: logged, ignored). */
void ftrt__sim_free(void *p);
/* For tests (and, through ftrt_sim.h's ftrt_sim_write / ftrt_sim_read, for programs): copy
 * host -> simulated device memory at dst_dev, and simulated device -> host from src_dev,
 * through the backend, each checked with CRC32C on arrival. Return 0, FTRT_EINVAL (not inside
 * one allocation) or FTRT_ECORRUPT. The public ftrt_sim_* functions of include/ftrt_sim.h
 * wrap these four. */
int ftrt__sim_write(void *dst_dev, const void *src_host, size_t bytes);
int ftrt__sim_read(void *dst_host, const void *src_dev, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
