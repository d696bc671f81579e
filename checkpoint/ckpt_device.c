/*
 * ckpt_device.c - the CUDA backend of the location interface (kernels/location.h; installed
 * by ckpt_device.h's ftrt__ckpt_device_install), implemented with the device snapshot path
 * (kernels/device_snapshot.h). Part of libftrt_gpu only: a constructor installs it when the
 * library loads, so FTRT_REGION_DEVICE regions are accepted there and refused (FTRT_ENOTSUP)
 * by the CPU-only libftrt (unless the simulated device, a test arrangement, is selected:
 * FTRT_TEST_SIM_DEVICE=1, which ftrt_init() installs in place of this one).
 *
 * to_host: cudaMemcpyAsync into the (pinned) staging on a side stream of the calling thread
 *   (non-blocking, created at the thread's first snapshot), with the CRC32C computed on the
 *   device on the same stream; returns once both are done. The engine calls it from its
 *   snapshot threads, several pieces of one region at a time. The application must have
 *   finished the device work that writes a region (e.g. cudaStreamSynchronize of its compute
 *   stream) before ftrt_checkpoint_start(), and must not queue work that modifies it until the
 *   snapshot is taken (ftrt_checkpoint_wait_snapshot()), as for host regions.
 * from_host: a synchronous host-to-device copy on the same side stream, then the CRC32C of the
 *   bytes that landed, computed on the device (crc), against the expected one.
 * crc: the per-chunk CRC32C kernel (no copy) into mapped pinned memory, merged on the host.
 * d2d: cudaMemcpyAsync device to device on the side stream, waited for.
 * pin / unpin: cudaHostRegister / cudaHostUnregister of staging buffers (DMA at full speed).
 * Without a usable device every call returns FTRT_ENODEV; CUDA errors are mapped by
 * kernels/cuda_check.h (FTRT_ECUDA, logged; -ENOMEM for an allocation failure).
 */
#include <stdint.h>

#include "checkpoint/ckpt_device.h"
#include "ftrt.h"
#include "kernels/cuda_check.h"
#include "kernels/device_snapshot.h"
#include "kernels/kernels.h"
#include "kernels/kernels_gpu.h"
#include "kernels/location.h"

static _Thread_local cudaStream_t side;

static int side_stream(cudaStream_t *out)
{
    if (!side) {
        int rc = ftrt__cuda_err(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking),
                                "cudaStreamCreateWithFlags");
        if (rc) {
            side = NULL;
            return rc;
        }
    }
    *out = side;
    return 0;
}

static int dev_to_host(void *dst, const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    if (!bytes) return 0;
    cudaStream_t s;
    int rc = side_stream(&s);
    if (rc) return rc;
    ftrt__dev_snap snap;
    rc = ftrt__dev_snapshot_start(&snap, dst, src, bytes, s, NULL, 1);
    if (rc) return rc;
    rc = ftrt__dev_snapshot_wait(&snap, crc);
    ftrt__dev_snapshot_release(&snap);
    return rc;
}

/* CRC32C of device memory on the device: per-chunk kernel into mapped pinned memory, merged on
 * the host (no copy of the bytes). */
static int dev_crc(const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    if (!bytes) return 0;
    cudaStream_t s;
    int rc = side_stream(&s);
    if (rc) return rc;
    size_t n = (bytes + FTRT__SNAP_CHUNK - 1) / FTRT__SNAP_CHUNK;
    void *crcs = NULL;
    rc = ftrt__dev_pinned_alloc(&crcs, n * sizeof(uint32_t));
    if (rc) return rc;
    rc = ftrt__cuda_err(ftrt__kgpu_copy_crc32c_chunks(NULL, src, bytes, FTRT__SNAP_CHUNK, crcs, s),
                        "ftrt__kgpu_copy_crc32c_chunks (device crc)");
    if (!rc) rc = ftrt__cuda_err(cudaStreamSynchronize(s), "cudaStreamSynchronize (device crc)");
    if (!rc) *crc = ftrt__k_crc32c_merge(0, crcs, bytes, FTRT__SNAP_CHUNK);
    ftrt__dev_pinned_free(crcs);
    return rc;
}

/* A copy on the side stream, waited for. */
static int copy_sync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    cudaStream_t s;
    int rc = side_stream(&s);
    if (!rc) rc = ftrt__cuda_err(cudaMemcpyAsync(dst, src, bytes, kind, s), "cudaMemcpyAsync");
    if (!rc) rc = ftrt__cuda_err(cudaStreamSynchronize(s), "cudaStreamSynchronize (copy)");
    return rc;
}

/* Host-to-device copy, then the CRC32C of what landed, computed on the device. */
static int dev_from_host(void *dst, const void *src, size_t bytes, uint32_t expect)
{
    if (!bytes) return expect == 0 ? 0 : FTRT_ECORRUPT;
    uint32_t crc = 0;
    int rc = copy_sync(dst, src, bytes, cudaMemcpyHostToDevice);
    if (!rc) rc = dev_crc(dst, bytes, &crc);
    return rc ? rc : crc == expect ? 0 : FTRT_ECORRUPT;
}

static int dev_d2d(void *dst, const void *src, size_t bytes)
{
    return bytes ? copy_sync(dst, src, bytes, cudaMemcpyDeviceToDevice) : 0;
}

static int dev_pin(void *p, size_t bytes)
{
    return ftrt__cuda_err(cudaHostRegister(p, bytes, cudaHostRegisterPortable), "cudaHostRegister");
}

static void dev_unpin(void *p)
{
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

static const ftrt__loc_ops cuda_ops = {.name = "cuda",
                                       .to_host = dev_to_host,
                                       .from_host = dev_from_host,
                                       .crc = dev_crc,
                                       .d2d = dev_d2d,
                                       .pin = dev_pin,
                                       .unpin = dev_unpin};

void ftrt__ckpt_device_install(void) { ftrt__loc_set_device(&cuda_ops); }

__attribute__((constructor)) static void install_device_hook(void) { ftrt__ckpt_device_install(); }
