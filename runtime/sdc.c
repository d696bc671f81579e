/*
 * sdc.c - the trainer's side of the silent data corruption check (docs/detection-and-recovery.md
 * "Silent data corruption").
 *
 * REPLICATED regions are meant to be bitwise identical on every data-parallel rank. Every
 * cfg.sdc_every steps, ftrt_step_done() fingerprints them here (CRC32C of each region, mixed
 * with its name and size into one 64-bit value) and sends the fingerprint to the coordinator,
 * which compares the replicas (runtime/coordinator/plan.c ftrt__sdc_judge). Only host regions
 * are fingerprinted: a REPLICATED device region would need a CRC32C on the device first (README
 * "Not yet"), so it is refused (FTRT_ENOTSUP naming it: at ftrt_register() while the check is
 * on, and here), never left out.
 */
#include <string.h>

#include "base/crc32c.h"
#include "base/log.h"
#include "runtime/internal.h"

/* splitmix64's finalizer: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int ftrt__sdc_fingerprint(const ftrt__region *regs, int nregs, uint64_t *fp, int *covered)
{
    for (int i = 0; i < nregs; i++)
        if (regs[i].kind == FTRT__KIND_REPLICATED && regs[i].loc != FTRT__LOC_HOST) {
            ftrt_log_error("silent data corruption check: region \"%s\" is REPLICATED device "
                           "memory, which is not fingerprinted yet (FTRT_SDC_EVERY=0 turns the "
                           "check off)",
                           regs[i].name);
            return FTRT_ENOTSUP;
        }
    uint64_t h = 0x5344435f66703031ull; /* "SDC_fp01" */
    int n = 0;
    for (int i = 0; i < nregs; i++) {
        const ftrt__region *r = &regs[i];
        if (r->kind != FTRT__KIND_REPLICATED) continue; /* sharded: differs by design */
        uint32_t name = ftrt__crc32c(0, r->name, strlen(r->name));
        uint32_t data = r->bytes ? ftrt__crc32c(0, r->ptr, r->bytes) : 0;
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
