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
 * Without a usable device every call returns FTRT_ENODEV.
 */
#include <stdint.h>

#include "checkpoint/ckpt_device.h"
#include "checkpoint/engine.h"
#include "ftrt.h"
#include "kernels/device_snapshot.h"
#include "kernels/kernels_gpu.h"
#include "base/log.h"

static _Thread_local cudaStream_t side;

static int side_stream(cudaStream_t *out)
{
    if (!side) {
        cudaError_t e = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            side = NULL;
            if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return FTRT_ENODEV;
            ftrt_log_error("cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
            return FTRT_ECUDA;
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
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    ftrt_log_error("device restore of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return FTRT_ECUDA;
}

static int dev_pin(void *p, size_t bytes)
{
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? FTRT_ENODEV : FTRT_ECUDA;
}

static void dev_unpin(void *p)
{
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

static const ftrt__ckpt_device_ops device_ops = {dev_snapshot, dev_restore, dev_pin, dev_unpin};

void ftrt__ckpt_device_install(void) { ftrt__ckpt_device = &device_ops; }

__attribute__((constructor)) static void install_device_hook(void) { ftrt__ckpt_device_install(); }
