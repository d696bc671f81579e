/*
 * ckpt_device.h - the CUDA backend of the location interface (ckpt_device.c, part of
 * libftrt_gpu only): installs it as the active device backend (kernels/location.h), through
 * which the checkpoint engine snapshots and restores device regions.
 */
#ifndef FTRT_CKPT_DEVICE_H
#define FTRT_CKPT_DEVICE_H

/* Installs the hook. A constructor in ckpt_device.c does it when the library loads; unit tests
 * call it, since a static archive's constructor is not linked unless something refers to its
 * object. */
void ftrt__ckpt_device_install(void);

/* Test hook: fn (NULL: none) is called inside every call of the backend, on the calling
 * thread, with the CUDA device made current for its work (the device of the region's memory,
 * see ckpt_device.c). Set it before the calls it should see, with none in flight. */
void ftrt__ckpt_device_observe(void (*fn)(int device, void *arg), void *arg);

#endif
