/* plan.c - the recovery plan's resume step and state source, the survivors' PLAN message, the
 * verdict on replicas' fingerprints and the progress timeout (pure; the contracts are in
 * plan.h). */
#include "runtime/coordinator/plan.h"

#include <errno.h>
#include <stdlib.h>

#include "kernels/erasure.h"

int ftrt__plan_compute(const int64_t *steps_done, const int *survivor, int n, int has_sharded,
                       int64_t last_committed, int64_t *resume, int *source, int64_t *ckpt)
{
    int64_t most = -1;
    int src = -1;
    for (int l = 0; l < n; l++)
        if (survivor[l] && steps_done[l] > most) {
            most = steps_done[l];
            src = l;
        }
    if (src < 0) return FTRT_EABORT;
    *source = src;
    if (has_sharded) {
        if (last_committed < 0) return FTRT_ENOCKPT;
        *resume = *ckpt = last_committed;
    } else {
        *resume = most;
        *ckpt = -1;
    }
    return 0;
}

int ftrt__plan_msg_build(const ftrt__plan_msg *head, const int *survivor, const int64_t *steps,
                         const int *members, const int32_t *shard_src, ftrt__plan_msg **out,
                         size_t *len)
{
    if (!head || !survivor || !steps || !members || !shard_src || !out || !len ||
        head->ntrainers < 1)
        return FTRT_EINVAL;
    int n = head->ntrainers, nrepl = 0, nbehind = 0;
    int peers = head->ckpt_step < 0 && head->mem_step < 0;
    for (int l = 0; l < n; l++) {
        nrepl += !survivor[l];
        nbehind += survivor[l] && peers && steps[l] != head->resume_step;
    }
    *len = ftrt__plan_msg_size(nrepl, 0);
    ftrt__plan_msg *m = calloc(1, *len);
    if (!m) return -ENOMEM;
    *m = *head;
    m->logical_rank = -1;
    m->nrepl = nrepl;
    m->nbehind = nbehind; /* (each knows whether it is one: base/proto.h) */
    m->nmembers = 0;
    m->ndata = 0;
    int32_t *repl = m->data;
    for (int l = 0; l < n; l++)
        if (!survivor[l]) {
            *repl++ = l;
            *repl++ = members[l];
            *repl++ = shard_src[l];
        }
    *out = m;
    return 0;
}

int ftrt__plan_replica(const int *survivor, const int64_t *own_step, const int64_t *held_step,
                       const int32_t *held_of, int n, int64_t last_committed, int64_t *mem_step,
                       int32_t *shard_src)
{
    if (n < 1 || !survivor || !own_step || !held_step || !held_of || !mem_step || !shard_src)
        return FTRT_EINVAL;
    *mem_step = -1;
    for (int l = 0; l < n; l++) shard_src[l] = -1;
    int64_t t = -1;
    for (int l = 0; l < n; l++) {
        if (!survivor[l]) continue;
        if (own_step[l] < 0 || (t >= 0 && own_step[l] != t)) return 0; /* no common image */
        t = own_step[l];
    }
    if (t < 0 || t < last_committed) return 0; /* no survivor, or the disk holds newer state */
    for (int l = 0; l < n; l++) {
        if (survivor[l]) continue;
        for (int y = 0; y < n && shard_src[l] < 0; y++)
            if (survivor[y] && held_of[y] == l && held_step[y] == t) shard_src[l] = y;
        if (shard_src[l] < 0) { /* its partner is lost too, or holds another step */
            for (int k = 0; k < n; k++) shard_src[k] = -1;
            return 0;
        }
    }
    *mem_step = t;
    return 1;
}

int ftrt__plan_replica_miss(const int *survivor, const int64_t *own_step, const int64_t *held_step,
                            const int32_t *held_of, int n, int64_t last_committed)
{
    if (n < 1 || !survivor || !own_step || !held_step || !held_of) return FTRT__RMISS_NONE;
    int64_t t = -1;
    for (int l = 0; l < n; l++) {
        if (!survivor[l]) continue;
        if (own_step[l] < 0 || (t >= 0 && own_step[l] != t)) return FTRT__RMISS_NO_COMMON_IMAGE;
        t = own_step[l];
    }
    if (t < 0) return FTRT__RMISS_NO_COMMON_IMAGE;
    if (t < last_committed) return FTRT__RMISS_OLDER_THAN_CKPT;
    for (int l = 0; l < n; l++) {
        if (survivor[l]) continue;
        int held = 0;
        for (int y = 0; y < n && !held; y++)
            held = survivor[y] && held_of[y] == l && held_step[y] == t;
        if (!held) return FTRT__RMISS_LOST_NOT_HELD;
    }
    return FTRT__RMISS_NONE;
}

/* The survivors' common own-image step (every survivor holds one of the same step), else -1. */
static int64_t common_image(const int *survivor, const int64_t *own_step, int n)
{
    int64_t t = -1;
    for (int l = 0; l < n; l++) {
        if (!survivor[l]) continue;
        if (own_step[l] < 0 || (t >= 0 && own_step[l] != t)) return -1;
        t = own_step[l];
    }
    return t;
}

/* Whether stripe s of group g (size kg) keeps k - m usable positions: a survivor's data chunk
 * (its own image of step t) or a survivor's parity of step t made for this layout. */
static int stripe_ok(const ftrt__ec_plan_in *in, int g, int kg, int s, int k)
{
    int usable = 0;
    for (int q = 0; q < kg; q++) {
        int l = ftrt__ec_group_member(in->n, k, g, ftrt__ec_member_at(kg, s, q));
        if (!in->survivor[l]) continue;
        usable += q < kg - FTRT__EC_PARITY ||
                  (in->ec_step[l] == in->t && in->ec_n[l] == in->n && in->ec_k[l] == k);
    }
    return usable >= kg - FTRT__EC_PARITY;
}

/* The miss of group g for the layout k: _EC_TOO_MANY, _EC_FRAGMENTS or _NONE. */
static int group_miss(const ftrt__ec_plan_in *in, int g, int k)
{
    int kg = ftrt__ec_group_size(in->n, k, g), lost = 0;
    for (int i = 0; i < kg; i++) lost += !in->survivor[ftrt__ec_group_member(in->n, k, g, i)];
    if (lost > FTRT__EC_PARITY) return FTRT__RMISS_EC_TOO_MANY;
    for (int i = 0; i < kg && lost; i++) {
        if (in->survivor[ftrt__ec_group_member(in->n, k, g, i)]) continue;
        for (int j = 0; j < kg - FTRT__EC_PARITY; j++)
            if (!stripe_ok(in, g, kg, ftrt__ec_stripe_of_chunk(kg, FTRT__EC_PARITY, i, j), k))
                return FTRT__RMISS_EC_FRAGMENTS;
    }
    return FTRT__RMISS_NONE;
}

int ftrt__plan_erasure(ftrt__ec_plan_in *in, int64_t last_committed, int64_t *mem_step,
                       int32_t *shard_src, int *miss)
{
    if (!in || in->n < 1 || !in->survivor || !in->own_step || !in->ec_step || !in->ec_n ||
        !in->ec_k || !mem_step || !shard_src || !miss)
        return FTRT_EINVAL;
    int n = in->n, k = 0;
    *mem_step = -1;
    for (int l = 0; l < n; l++) shard_src[l] = -1;
    in->t = common_image(in->survivor, in->own_step, n);
    *miss = in->t < 0 ? FTRT__RMISS_NO_COMMON_IMAGE
            : in->t < last_committed ? FTRT__RMISS_OLDER_THAN_CKPT : FTRT__RMISS_NONE;
    if (*miss) return 0;
    for (int l = 0; l < n && !k; l++) /* the layout of the parity of step t */
        if (in->survivor[l] && in->ec_step[l] == in->t && in->ec_n[l] == n) k = in->ec_k[l];
    int ng = ftrt__ec_ngroups(n, k);
    if (ng < 1) {
        *miss = FTRT__RMISS_EC_FRAGMENTS; /* no survivor holds parity of step t */
        return 0;
    }
    for (int g = 0; g < ng && !*miss; g++) *miss = group_miss(in, g, k);
    if (*miss) return 0;
    for (int l = 0; l < n; l++)
        if (!in->survivor[l]) shard_src[l] = FTRT__SHARD_SRC_ERASURE;
    *mem_step = in->t;
    return 1;
}

const char *ftrt__replica_miss_name(int miss)
{
    static const char *const names[] = {NULL, "no_common_image", "older_than_checkpoint",
                                        "lost_image_not_held", "sdc_rollback",
                                        "erasure_group_lost_more_than_parity",
                                        "erasure_fragments_missing"};
    return miss > 0 && miss < (int)(sizeof names / sizeof *names) ? names[miss] : NULL;
}

int ftrt__sdc_judge(const uint64_t *fp, int n, unsigned char *bad)
{
    if (n < 0 || (n > 0 && (!fp || !bad))) return FTRT_EINVAL;
    if (n == 0) return FTRT__SDC_AGREE;
    /* Boyer-Moore majority vote: the only value that can hold a strict majority... */
    uint64_t cand = fp[0];
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (count == 0) cand = fp[i];
        count += fp[i] == cand ? 1 : -1;
    }
    /* ...checked by counting it. */
    int held = 0;
    for (int i = 0; i < n; i++) held += fp[i] == cand;
    int majority = 2 * held > n;
    for (int i = 0; i < n; i++) bad[i] = (unsigned char)(majority && fp[i] != cand);
    if (held == n) return FTRT__SDC_AGREE;
    return majority ? FTRT__SDC_MAJORITY : FTRT__SDC_SPLIT;
}

double ftrt__progress_timeout(int configured_ms, double median_step_s)
{
    if (configured_ms > 0) return configured_ms / 1000.0;
    if (!(median_step_s > 0)) return 0;
    double t = 10.0 * median_step_s;
    return t > 5.0 ? t : 5.0;
}
