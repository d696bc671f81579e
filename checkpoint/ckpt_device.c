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
 *
 * Devices (multi-GPU hosts): the calls run on threads the application never set a device on
 * (the engine's snapshot and persist threads, the replica and transfer paths), whose current
 * device is 0, while each rank's regions live on its own GPU. So every call takes the device
 * from the device pointer it is handed (cudaPointerGetAttributes: the device a cudaMalloc'd
 * range belongs to), makes it current on the calling thread for the call (cudaSetDevice), uses
 * that thread's side stream of that device (one per thread and device, created at first use),
 * and gives the thread its previous current device back before it returns. A pointer CUDA does
 * not know as device memory (host memory registered as a device region) runs on the thread's
 * current device. The device is found per call rather than recorded at registration, so the
 * CPU-only libftrt stays free of CUDA and every path through this backend (the checkpoint
 * engine, restore, the recovery's transfer, partner replicas, fingerprints) is covered alike.
 */
#include <stdint.h>

#include "base/log.h"
#include "checkpoint/ckpt_device.h"
#include "ftrt.h"
#include "kernels/cuda_check.h"
#include "kernels/device_snapshot.h"
#include "kernels/kernels.h"
#include "kernels/kernels_gpu.h"
#include "kernels/location.h"

#define MAX_DEVICES 64 /* side streams per thread: one per device it touched */

static _Thread_local cudaStream_t side[MAX_DEVICES];

/* The test hook (ftrt__ckpt_device_observe): called inside every call with the device current
 * for its work. */
static void (*observer)(int device, void *arg);
static void *observer_arg;

void ftrt__ckpt_device_observe(void (*fn)(int device, void *arg), void *arg)
{
    observer_arg = arg;
    observer = fn;
}

/* A call's device: the one made current for it, and the one to give back. */
typedef struct on_dev {
    int device, prev;
} on_dev;

/* Makes the device of `ptr` current on this thread (see the file's header). */
static int enter(const void *ptr, on_dev *d)
{
    d->prev = d->device = -1;
    int rc = ftrt__cuda_err(cudaGetDevice(&d->prev), "cudaGetDevice");
    if (rc) return rc;
    d->device = d->prev;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
        (void)cudaGetLastError(); /* not a pointer CUDA knows: the current device */
    } else if ((a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) &&
               a.device >= 0) {
        d->device = a.device;
    }
    if (d->device >= MAX_DEVICES) {
        ftrt_log_error("CUDA device %d of a device region: at most %d supported", d->device,
                       MAX_DEVICES);
        return FTRT_ENODEV;
    }
    if (d->device != d->prev)
        rc = ftrt__cuda_err(cudaSetDevice(d->device), "cudaSetDevice (device region's GPU)");
    if (!rc && observer) observer(d->device, observer_arg);
    return rc;
}

/* Gives the thread its previous current device back; returns rc. */
static int leave(const on_dev *d, int rc)
{
    if (d->prev >= 0 && d->device != d->prev) {
        int r = ftrt__cuda_err(cudaSetDevice(d->prev), "cudaSetDevice (caller's device back)");
        if (!rc) rc = r;
    }
    return rc;
}

/* This thread's side stream of the current device d->device. */
static int side_stream(const on_dev *d, cudaStream_t *out)
{
    cudaStream_t *s = &side[d->device];
    if (!*s) {
        int rc = ftrt__cuda_err(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking),
                                "cudaStreamCreateWithFlags");
        if (rc) {
            *s = NULL;
            return rc;
        }
    }
    *out = *s;
    return 0;
}

static int to_host_on(const on_dev *d, void *dst, const void *src, size_t bytes, uint32_t *crc)
{
    cudaStream_t s;
    int rc = side_stream(d, &s);
    if (rc) return rc;
    ftrt__dev_snap snap;
    rc = ftrt__dev_snapshot_start(&snap, dst, src, bytes, s, NULL, 1);
    if (rc) return rc;
    rc = ftrt__dev_snapshot_wait(&snap, crc);
    ftrt__dev_snapshot_release(&snap);
    return rc;
}

static int dev_to_host(void *dst, const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    if (!bytes) return 0;
    on_dev d;
    int rc = enter(src, &d);
    if (!rc) rc = to_host_on(&d, dst, src, bytes, crc);
    return leave(&d, rc);
}

/* CRC32C of device memory on the device, on d's device: per-chunk kernel into mapped pinned
 * memory, merged on the host (no copy of the bytes). */
static int crc_on(const on_dev *d, const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    if (!bytes) return 0;
    cudaStream_t s;
    int rc = side_stream(d, &s);
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

static int dev_crc(const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    if (!bytes) return 0;
    on_dev d;
    int rc = enter(src, &d);
    if (!rc) rc = crc_on(&d, src, bytes, crc);
    return leave(&d, rc);
}

/* A copy on d's side stream, waited for. */
static int copy_sync(const on_dev *d, void *dst, const void *src, size_t bytes,
                     enum cudaMemcpyKind kind)
{
    cudaStream_t s;
    int rc = side_stream(d, &s);
    if (!rc) rc = ftrt__cuda_err(cudaMemcpyAsync(dst, src, bytes, kind, s), "cudaMemcpyAsync");
    if (!rc) rc = ftrt__cuda_err(cudaStreamSynchronize(s), "cudaStreamSynchronize (copy)");
    return rc;
}

/* Host-to-device copy, then the CRC32C of what landed, computed on the device. */
static int dev_from_host(void *dst, const void *src, size_t bytes, uint32_t expect)
{
    if (!bytes) return expect == 0 ? 0 : FTRT_ECORRUPT;
    uint32_t crc = 0;
    on_dev d;
    int rc = enter(dst, &d);
    if (!rc) rc = copy_sync(&d, dst, src, bytes, cudaMemcpyHostToDevice);
    if (!rc) rc = crc_on(&d, dst, bytes, &crc);
    rc = leave(&d, rc);
    return rc ? rc : crc == expect ? 0 : FTRT_ECORRUPT;
}

static int dev_d2d(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return 0;
    on_dev d;
    int rc = enter(dst, &d); /* same device (location.h) */
    if (!rc) rc = copy_sync(&d, dst, src, bytes, cudaMemcpyDeviceToDevice);
    return leave(&d, rc);
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
