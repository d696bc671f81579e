/*
 * stage.c - the checkpoint engine's staging buffers and snapshots (engine_internal.h).
 *
 * Staging is bounded by FTRT_CKPT_STAGING_MB: two slots (one persisting while the next snapshot
 * is taken) when they fit, one otherwise; each is a 4 KiB-aligned, huge-page backed buffer,
 * faulted in at allocation, that holds a shard's exact file image (format.h), and is pinned
 * for DMA when a device hook is installed. When not even one shard fits, the engine writes
 * every checkpoint synchronously (persist.c, said once at warn level). Slots are reallocated
 * only once every slot is idle.
 *
 * A snapshot cuts the regions into pieces of at most 8 MiB. The engine's snapshot thread
 * copies pieces into the slot with the fused copy + CRC32C (or the device hook's copy) while
 * the application computes; whoever calls ftrt_checkpoint_wait_snapshot() helps with the
 * remaining pieces, so a blocking checkpoint runs on two threads. Pieces are claimed and
 * completed with atomics; the thread that completes the last piece joins the piece CRCs
 * (ftrt__crc32c_combine), writes header and table into the slot and queues the job for the
 * persist thread. Registered memory is only read, and only until the snapshot completes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "checkpoint/engine_internal.h"
#include "checkpoint/shard.h"
#include "kernels/location.h"

#define PIECE_BYTES (8u << 20) /* snapshot work unit */

/* ---- staging memory ---------------------------------------------------------------------- */

static void slot_unmap(ftrt__ckpt_slot *s)
{
    if (s->mem) {
        const ftrt__loc_ops *dev = ftrt__loc_device();
        if (dev && dev->unpin) dev->unpin(s->mem);
        ftrt__unmap_huge(s->mem, s->cap);
    }
    s->mem = NULL;
    s->cap = 0;
    s->busy = 0;
}

/* Maps cap bytes of staging backed by huge pages where possible and faults them in now, so
 * that snapshots never pay page faults. Returns NULL on failure. */
static unsigned char *staging_map(size_t cap)
{
    void *p = ftrt__map_huge(cap);
    if (!p) return NULL;
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, cap, MADV_POPULATE_WRITE) == 0) return p;
#endif
    for (size_t off = 0; off < cap; off += 4096) ((volatile unsigned char *)p)[off] = 0;
    return p;
}

/* How many slots of `need` bytes the staging budget allows (0: stream synchronously). */
static int slots_for(const struct ftrt__ckpt_engine *e, size_t need)
{
    uint64_t budget;
    if (e->o.staging_mb > 0) {
        budget = (uint64_t)e->o.staging_mb << 20;
    } else {
        /* Automatic: double buffering, within half of physical memory. */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        uint64_t half = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : UINT64_MAX;
        uint64_t both = (uint64_t)need * FTRT__CKPT_MAX_SLOTS;
        budget = both <= half ? both : half;
    }
    uint64_t n = need ? budget / need : FTRT__CKPT_MAX_SLOTS;
    return n > FTRT__CKPT_MAX_SLOTS ? FTRT__CKPT_MAX_SLOTS : (int)n;
}

/* Maps `want` fresh slots of cap bytes into fresh[] (pinned where the device hook can).
 * Returns how many it got. */
static int staging_alloc(ftrt__ckpt_slot *fresh, int want, size_t cap)
{
    int got = 0;
    for (; got < want; got++) {
        fresh[got].mem = staging_map(cap);
        if (!fresh[got].mem) break;
        fresh[got].cap = cap;
        const ftrt__loc_ops *dev = ftrt__loc_device();
        if (dev && dev->pin) dev->pin(fresh[got].mem, cap); /* faster device copies; optional */
    }
    return got;
}

int ftrt__ckpt_staging_fit(struct ftrt__ckpt_engine *e, size_t need)
{
    int want = slots_for(e, need);
    pthread_mutex_lock(&e->lock);
    int ok = want == 0 ? e->streaming : (!e->streaming && e->nslots == want && e->slot_cap >= need);
    if (ok) {
        pthread_mutex_unlock(&e->lock);
        return 0;
    }
    /* Wait for every slot to go idle: nothing may be writing from the old ones. */
    while (e->snap || e->qhead || e->persisting) ftrt__ckpt_wait(e, 10);
    e->resizing = 1;
    ftrt__ckpt_slot old[FTRT__CKPT_MAX_SLOTS];
    memcpy(old, e->slots, sizeof old);
    memset(e->slots, 0, sizeof e->slots);
    e->nslots = 0;
    e->slot_cap = 0;
    pthread_mutex_unlock(&e->lock);

    for (int i = 0; i < FTRT__CKPT_MAX_SLOTS; i++) slot_unmap(&old[i]);
    size_t cap = (need + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    ftrt__ckpt_slot fresh[FTRT__CKPT_MAX_SLOTS] = {0};
    if (want == 0) {
        static int warned;
        if (!warned++)
            ftrt_log_warn("checkpoint: staging budget FTRT_CKPT_STAGING_MB=%d is smaller than "
                          "this rank's shard (%.1f MiB): checkpoints are written synchronously "
                          "(training waits for the write)",
                          e->o.staging_mb, (double)need / 1048576.0);
    }
    int got = staging_alloc(fresh, want, cap);
    int rc = want > 0 && got == 0 ? -ENOMEM : 0;
    if (got > 0 && got < want)
        ftrt_log_warn("checkpoint: could map only %d of %d staging buffers of %.1f MiB", got,
                      want, (double)cap / 1048576.0);
    pthread_mutex_lock(&e->lock);
    memcpy(e->slots, fresh, sizeof fresh);
    e->nslots = got;
    e->slot_cap = got ? cap : 0;
    e->streaming = want == 0;
    e->gen++;
    e->resizing = 0;
    e->st.staging_bytes = (uint64_t)got * cap;
    e->st.staging_slots = got;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (got > 0)
        ftrt_log_info("checkpoint: %d staging buffer(s) of %.1f MiB", got,
                      (double)cap / 1048576.0);
    return rc;
}

void ftrt__ckpt_staging_free(struct ftrt__ckpt_engine *e)
{
    for (int i = 0; i < FTRT__CKPT_MAX_SLOTS; i++) slot_unmap(&e->slots[i]);
}

/* ---- snapshot ---------------------------------------------------------------------------- */

int ftrt__ckpt_job_build(const ftrt__region *regs, int n, ftrt__ckpt_job *j)
{
    ftrt__region *kr = calloc(n > 0 ? (size_t)n : 1, sizeof *kr);
    j->ents = calloc(n > 0 ? (size_t)n : 1, sizeof *j->ents);
    j->src = calloc(n > 0 ? (size_t)n : 1, sizeof *j->src);
    j->dev = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!kr || !j->ents || !j->src || !j->dev) {
        free(kr);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        kr[i] = regs[i];
        kr[i].loc = FTRT__LOC_HOST; /* the layout's host view: the pieces copy device memory */
        j->src[i] = regs[i].ptr;
        j->dev[i] = regs[i].loc == FTRT__LOC_DEVICE;
    }
    int rc = ftrt__regions_check(kr, n);
    j->tb = FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * (uint32_t)n;
    if (rc == 0) {
        j->bytes = ftrt__shard_layout(kr, n, j->rank, j->nranks, j->ents, j->tb);
        if (j->bytes == 0) rc = -EFBIG;
    }
    free(kr);
    if (rc) return rc;
    j->nregs = n;
    size_t np = 0;
    for (int i = 0; i < n; i++) np += (size_t)((j->ents[i].slice_bytes + PIECE_BYTES - 1) / PIECE_BYTES);
    j->pieces = calloc(np ? np : 1, sizeof *j->pieces);
    if (!j->pieces) return -ENOMEM;
    for (int i = 0; i < n; i++)
        for (uint64_t off = 0; off < j->ents[i].slice_bytes; off += PIECE_BYTES) {
            uint64_t len = j->ents[i].slice_bytes - off;
            j->pieces[j->npieces++] = (ftrt__ckpt_piece){.reg = i, .off = off,
                                              .len = len < PIECE_BYTES ? len : PIECE_BYTES};
        }
    return 0;
}

static void copy_piece(ftrt__ckpt_job *j, size_t i)
{
    ftrt__ckpt_piece *p = &j->pieces[i];
    const ftrt__shard_ent *x = &j->ents[p->reg];
    unsigned char *dst = j->eng->slots[j->slot].mem + x->file_offset + p->off;
    if (atomic_load(&j->abandon)) return; /* the image will not be written */
    if (j->dev[p->reg]) {
        const ftrt__loc_ops *dev = ftrt__loc_device();
        int rc = dev ? dev->to_host(dst, j->src[p->reg] + x->slice_offset + p->off,
                                    (size_t)p->len, &p->crc)
                     : FTRT_ENOTSUP;
        if (rc) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->snap_err, &zero, rc);
        }
    } else {
        p->crc = ftrt__copy_crc32c(dst, j->src[p->reg] + x->slice_offset + p->off,
                                   (size_t)p->len, 0);
    }
    uint64_t end = p->off + p->len;
    if (end == x->slice_bytes) /* zero the padding up to the next 4 KiB boundary */
        memset(dst + p->len, 0, (size_t)(ftrt__align4k(end) - end));
}

/* Region CRCs from the pieces, header and table into the slot, then the job goes to the persist
 * queue. Run by the thread that finished the last piece. */
void ftrt__ckpt_snapshot_done(ftrt__ckpt_job *j)
{
    struct ftrt__ckpt_engine *e = j->eng;
    unsigned char *img = e->slots[j->slot].mem;
    size_t k = 0;
    for (int r = 0; r < j->nregs; r++) {
        uint32_t c = 0;
        for (; k < j->npieces && j->pieces[k].reg == r; k++)
            c = ftrt__crc32c_combine(c, j->pieces[k].crc, j->pieces[k].len);
        j->ents[r].data_crc = c;
    }
    ftrt__shard_hdr h = {.table_bytes = j->tb, .step = j->step, .rank = (uint32_t)j->rank,
                         .nranks = (uint32_t)j->nranks, .nregions = (uint32_t)j->nregs};
    ftrt__shard_encode(img, &h, j->ents);
    memset(img + j->tb, 0, (size_t)(ftrt__align4k(j->tb) - j->tb));
    pthread_mutex_lock(&e->lock);
    j->snapped = 1;
    j->t_snap = ftrt__now();
    e->st.last_snapshot_s = j->t_snap - j->t_start;
    if (e->snap == j) e->snap = NULL;
    j->qnext = NULL;
    if (e->qtail)
        e->qtail->qnext = j;
    else
        e->qhead = j;
    e->qtail = j;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

void ftrt__ckpt_snapshot_work(ftrt__ckpt_job *j)
{
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->npieces) return;
        copy_piece(j, i);
        if (atomic_fetch_add_explicit(&j->done, 1, memory_order_acq_rel) + 1 == j->npieces)
            ftrt__ckpt_snapshot_done(j);
    }
}

void *ftrt__ckpt_snap_main(void *arg)
{
    struct ftrt__ckpt_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stop && !(e->snap && atomic_load(&e->snap->next) < e->snap->npieces))
            pthread_cond_wait(&e->cond, &e->lock);
        if (e->stop) break;
        ftrt__ckpt_job *j = e->snap;
        j->refs++;
        pthread_mutex_unlock(&e->lock);
        ftrt__ckpt_snapshot_work(j);
        pthread_mutex_lock(&e->lock);
        ftrt__ckpt_job_put(j);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}
