/*
 * location.c - the host backend of the location interface (location.h) and the slot that
 * holds the active device backend. Part of libftrt (and of libftrt_gpu, which installs its
 * CUDA backend here when it loads).
 */
#include <stdatomic.h>
#include <string.h>

#include "base/crc32c.h"
#include "ftrt.h"
#include "kernels/location.h"

static int host_to_host(void *dst, const void *src, size_t bytes, uint32_t *crc)
{
    *crc = bytes ? ftrt__copy_crc32c(dst, src, bytes, 0) : 0;
    return 0;
}

static int host_from_host(void *dst, const void *src, size_t bytes, uint32_t expect)
{
    uint32_t crc = bytes ? ftrt__copy_crc32c(dst, src, bytes, 0) : 0;
    return crc == expect ? 0 : FTRT_ECORRUPT;
}

static int host_crc(const void *src, size_t bytes, uint32_t *crc)
{
    *crc = bytes ? ftrt__crc32c(0, src, bytes) : 0;
    return 0;
}

static int host_d2d(void *dst, const void *src, size_t bytes)
{
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}

const ftrt__loc_ops ftrt__loc_host = {.name = "host",
                                      .to_host = host_to_host,
                                      .from_host = host_from_host,
                                      .crc = host_crc,
                                      .d2d = host_d2d};

static const ftrt__loc_ops *_Atomic active;

const ftrt__loc_ops *ftrt__loc_device(void) { return atomic_load(&active); }

void ftrt__loc_set_device(const ftrt__loc_ops *ops) { atomic_store(&active, ops); }
