/*
 * sdc.c - the trainer's side of the silent data corruption check (docs/detection-and-recovery.md
 * "Silent data corruption").
 *
 * REPLICATED regions are meant to be bitwise identical on every data-parallel rank. Every
 * cfg.sdc_every steps, ftrt_step_done() fingerprints them here (CRC32C of each region, mixed
 * with its name and size into one 64-bit value) and sends the fingerprint to the coordinator,
 * which compares the replicas (runtime/coordinator/plan.c ftrt__sdc_judge). A region in
 * device memory is fingerprinted through the device backend's crc (kernels/location.h: on the
 * device, no copy of its bytes to the host), and gives the same value as a host region with the
 * same name and bytes; with no device backend it is refused (FTRT_ENOTSUP naming it), never
 * left out.
 */
#include <string.h>

#include "base/crc32c.h"
#include "base/log.h"
#include "kernels/location.h"
#include "runtime/internal.h"

/* splitmix64's finalizer: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The CRC32C of region r's bytes: in host memory directly, in device memory through the device
 * backend's crc, on the device, with no copy to the host. Returns 0, FTRT_ENOTSUP (no device
 * backend; logged naming the region) or the backend's code. */
static int region_crc(const ftrt__region *r, uint32_t *crc)
{
    *crc = 0;
    if (r->bytes == 0) return 0;
    if (r->loc == FTRT__LOC_HOST) {
        *crc = ftrt__crc32c(0, r->ptr, r->bytes);
        return 0;
    }
    const ftrt__loc_ops *dev = ftrt__loc_device();
    int rc = dev ? dev->crc(r->ptr, r->bytes, crc) : FTRT_ENOTSUP;
    if (rc)
        ftrt_log_error("silent data corruption check: cannot fingerprint device region \"%s\": "
                       "%s", r->name, dev ? ftrt_strerror(rc) : "no device backend");
    return rc;
}

int ftrt__sdc_fingerprint(const ftrt__region *regs, int nregs, uint64_t *fp, int *covered)
{
    uint64_t h = 0x5344435f66703031ull; /* "SDC_fp01" */
    int n = 0;
    for (int i = 0; i < nregs; i++) {
        const ftrt__region *r = &regs[i];
        if (r->kind != FTRT__KIND_REPLICATED) continue; /* sharded: differs by design */
        uint32_t name = ftrt__crc32c(0, r->name, strlen(r->name)), data;
        int rc = region_crc(r, &data);
        if (rc) return rc;
        h = mix64(h ^ (((uint64_t)name << 32) | data));
        h = mix64(h ^ (uint64_t)r->bytes);
        n++;
    }
    if (covered) *covered = n;
    *fp = h;
    return 0;
}

int ftrt__sdc_step(ftrt_ctx *ctx, int64_t steps_done)
{
    int k = ctx->cfg.sdc_every;
    if (k <= 0 || steps_done <= 0 || steps_done % k != 0 || ctx->size < 2) return 0;
    double t0 = ftrt__now();
    int covered = 0;
    uint64_t fp = 0;
    int rc = ftrt__sdc_fingerprint(ctx->regs, ctx->nregs, &fp, &covered);
    if (rc) return rc;
    if (covered == 0) return 0; /* nothing replicated: nothing to compare */
    ftrt__fingerprint_msg m = {.step = steps_done, .fp = fp, .seconds = ftrt__now() - t0,
                               .epoch = ctx->watch.epoch, .nregions = covered};
    rc = ftrt__agent_send(ctx, FTRT__MSG_FINGERPRINT, &m, sizeof m);
    if (rc) /* the coordinator is gone (the agent says so); training learns it at its next wait */
        ftrt_log_debug("fingerprint of step %lld not sent: %s", (long long)steps_done,
                       ftrt_strerror(rc));
    return 1;
}
