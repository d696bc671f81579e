/*
 * ckpt_device.c - the checkpoint engine's device hook (ckpt_device.h; its interface,
 * ftrt__ckpt_device_ops, is engine.h's), implemented with the device snapshot path
 * (kernels/device_snapshot.h). Part of libftrt_gpu only: a constructor installs it when the
 * library loads, so FTRT_REGION_DEVICE regions are accepted there and refused (FTRT_ENOTSUP)
 * by the CPU-only libftrt.
 *
 * snapshot: cudaMemcpyAsync into the (pinned) staging on a side stream of the calling thread
 *   (non-blocking, created at the thread's first snapshot), with the CRC32C computed on the
 *   device on the same stream; returns once both are done. The engine calls it from its
 *   snapshot threads, several pieces of one region at a time. The application must have
 *   finished the device work that writes a region (e.g. cudaStreamSynchronize of its compute
 *   stream) before ftrt_checkpoint_start(), and must not queue work that modifies it until the
 *   snapshot is taken (ftrt_checkpoint_wait_snapshot()), as for host regions.
 * restore: a synchronous host-to-device copy on the same side stream.
 * pin / unpin: cudaHostRegister / cudaHostUnregister of staging buffers (DMA at full speed).
 * Without a usable device every call returns FTRT_ENODEV; CUDA errors are mapped by
 * kernels/cuda_check.h (FTRT_ECUDA, logged; -ENOMEM for an allocation failure).
 */
#include <stdint.h>

#include "checkpoint/ckpt_device.h"
#include "checkpoint/engine.h"
#include "ftrt.h"
#include "kernels/cuda_check.h"
#include "kernels/device_snapshot.h"
#include "kernels/kernels_gpu.h"

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

static int dev_snapshot(void *dst, const void *src, size_t bytes, uint32_t *crc)
{
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

static int dev_restore(void *dst, const void *src, size_t bytes)
{
    cudaStream_t s;
    int rc = side_stream(&s);
    if (rc) return rc;
    rc = ftrt__cuda_err(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s),
                        "cudaMemcpyAsync (device restore)");
    if (!rc) rc = ftrt__cuda_err(cudaStreamSynchronize(s), "cudaStreamSynchronize (device restore)");
    return rc;
}

static int dev_pin(void *p, size_t bytes)
{
    return ftrt__cuda_err(cudaHostRegister(p, bytes, cudaHostRegisterPortable), "cudaHostRegister");
}

static void dev_unpin(void *p)
{
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

static const ftrt__ckpt_device_ops device_ops = {dev_snapshot, dev_restore, dev_pin, dev_unpin};

void ftrt__ckpt_device_install(void) { ftrt__ckpt_device = &device_ops; }

__attribute__((constructor)) static void install_device_hook(void) { ftrt__ckpt_device_install(); }
