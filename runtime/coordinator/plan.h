/*
 * plan.h - the coordinator's pure decisions (plan.c): where a recovery resumes and where each
 * member's state comes from, whether the partner replicas in memory can serve it, the
 * survivors' PLAN message (base/proto.h ftrt__plan_msg), the verdict
 * on the replicas' fingerprints, and the progress detector's timeout. No state, no I/O: the
 * coordinator's files (epoch.c, sdc_vote.c, progress.c) call them with arrays they filled, and
 * tests/unit/test_plan.c and test_sdc.c check them directly.
 */
#ifndef FTRT_COORD_PLAN_H
#define FTRT_COORD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/proto.h"
#include "ftrt.h"

/* Chooses where a recovery resumes. steps_done[l] is what logical rank l reported,
 * survivor[l] is 0 for a rank being replaced. Replicated state only: resume at the most
 * advanced survivor's step, with that survivor (lowest logical rank on ties) as the broadcast
 * source, so no completed step is redone. With sharded state: resume at last_committed and
 * reload it (*ckpt). Returns 0, FTRT_EABORT (no survivor) or FTRT_ENOCKPT (sharded state and
 * nothing committed). */
int ftrt__plan_compute(const int64_t *steps_done, const int *survivor, int n, int has_sharded,
                       int64_t last_committed, int64_t *resume, int *source, int64_t *ckpt);

/* Builds the survivors' PLAN (base/proto.h ftrt__plan_msg, FTRT__PROTO_PLAN) for n =
 * head->ntrainers logical ranks: the fixed part from head (resume, checkpoint and memory steps,
 * rework_until, epoch, ntrainers, source; its counts, logical_rank (-1) and pad are set here),
 * then {l, members[l], shard_src[l]} for each replaced logical rank l (survivor[l] == 0), in
 * logical order (shard_src[l] may be -1). The survivors behind are counted, not listed: in a
 * peers plan (ckpt_step < 0, mem_step < 0) each survivor l with steps[l] != resume_step
 * (steps: what its REPORT gave). *out (malloc'd, the caller frees it) receives the message and
 * *len its size, ftrt__plan_msg_size(replaced, 0): independent of n and of how many survivors
 * are behind. Returns 0, FTRT_EINVAL (NULL arrays, n < 1) or -ENOMEM. Pure, O(n). */
int ftrt__plan_msg_build(const ftrt__plan_msg *head, const int *survivor, const int64_t *steps,
                         const int *members, const int32_t *shard_src, ftrt__plan_msg **out,
                         size_t *len);

/* Whether a recovery with sharded state can resume from the trainers' in-memory partner
 * replicas (runtime/replica.c keeps them). For logical ranks l in [0, n): survivor[l]
 * (0 for a rank being replaced), own_step[l] (the step of the image of its own regions it
 * holds, -1: none), held_step[l] and held_of[l] (the step of the image of logical rank
 * held_of[l]'s sharded regions it holds, -1: none), each as its REPORT gave it, CRC-verified.
 * Memory works when every survivor holds its own image of one step T >= last_committed, and for
 * every replaced rank some survivor holds that rank's sharded image of step T (the survivor
 * with the lowest logical rank is chosen). Then *mem_step = T, shard_src[l] = that survivor for
 * each replaced l and -1 for the others, and 1 is returned; else 0 (shard_src all -1,
 * *mem_step = -1): the recovery reloads the committed checkpoint. shard_src has n entries.
 * Returns FTRT_EINVAL for n < 1 or NULL arrays. Pure, O(n^2) at worst. */
int ftrt__plan_replica(const int *survivor, const int64_t *own_step, const int64_t *held_step,
                       const int32_t *held_of, int n, int64_t last_committed, int64_t *mem_step,
                       int32_t *shard_src);

/* Why ftrt__plan_replica found no memory plan (same arguments; the report's "replica_miss"):
 * FTRT__RMISS_NONE (it did, or n < 1 / NULL arrays), _NO_COMMON_IMAGE (a survivor holds no
 * image of its own, or survivors hold images of different steps: a refresh was in flight, or a
 * spare that has not refreshed yet), _OLDER_THAN_CKPT (the committed checkpoint is newer), or
 * _LOST_NOT_HELD (no survivor holds some replaced rank's sharded image of that step: its
 * partner is lost too, or the partner's copy is older, missing or failed its CRC32C). Pure. */
enum { FTRT__RMISS_NONE = 0, FTRT__RMISS_NO_COMMON_IMAGE = 1, FTRT__RMISS_OLDER_THAN_CKPT = 2,
       FTRT__RMISS_LOST_NOT_HELD = 3, FTRT__RMISS_SDC_ROLLBACK = 4, FTRT__RMISS_EC_TOO_MANY = 5,
       FTRT__RMISS_EC_FRAGMENTS = 6 };
int ftrt__plan_replica_miss(const int *survivor, const int64_t *own_step, const int64_t *held_step,
                            const int32_t *held_of, int n, int64_t last_committed);
/* "no_common_image", "older_than_checkpoint", "lost_image_not_held", "sdc_rollback",
 * "erasure_group_lost_more_than_parity", "erasure_fragments_missing"; NULL for FTRT__RMISS_NONE
 * or an unknown value. */
const char *ftrt__replica_miss_name(int miss);

/* What ftrt__plan_erasure reads: for logical ranks l in [0, n), each as its REPORT gave it
 * (CRC-verified): survivor[l] (0 for a rank being replaced), own_step[l] (its own image's step,
 * -1: none), ec_step[l] (the step of the parity fragments it holds, -1: none), ec_n[l] and
 * ec_k[l] (the trainers and the group size setting that parity was made for). t is set by the
 * call (the survivors' common image step, -1: none). */
typedef struct ftrt__ec_plan_in {
    int n;
    const int *survivor;
    const int64_t *own_step, *ec_step;
    const int32_t *ec_n, *ec_k;
    int64_t t;
} ftrt__ec_plan_in;

/* Whether a recovery with sharded state can resume from the erasure groups in memory
 * (runtime/ecgroup.c; the layout: kernels/erasure.h): every survivor holds its own image of
 * one step T >= last_committed, and in every group (ftrt__ec_group_*, of the k a survivor's
 * parity of T for n trainers names) at most FTRT__EC_PARITY members are replaced and every
 * stripe holding a replaced member's data chunk keeps k_g - FTRT__EC_PARITY usable positions (a
 * survivor's data chunk, or a survivor's parity of T for this layout). Then *mem_step = T,
 * shard_src[l] = FTRT__SHARD_SRC_ERASURE for each replaced l (-1 for the others), *miss =
 * FTRT__RMISS_NONE, and 1 is returned; else 0, *mem_step = -1, shard_src all -1 and *miss says
 * why (FTRT__RMISS_NO_COMMON_IMAGE, _OLDER_THAN_CKPT, _EC_TOO_MANY: a group lost more members
 * than it has parity, _EC_FRAGMENTS: a stripe lacks fragments: parity of another step or
 * layout, none, or one that failed its CRC32C). Returns FTRT_EINVAL for NULL arrays or n < 1.
 * Pure, O(n * k^2) at worst. */
int ftrt__plan_erasure(ftrt__ec_plan_in *in, int64_t last_committed, int64_t *mem_step,
                       int32_t *shard_src, int *miss);

/* The verdict of ftrt__sdc_judge. */
enum { FTRT__SDC_AGREE = 0, FTRT__SDC_MAJORITY = 1, FTRT__SDC_SPLIT = 2 };

/* Compares the fingerprints fp[0..n) of one step, one per replica. Returns
 * FTRT__SDC_AGREE when all are equal (or n < 2); FTRT__SDC_MAJORITY when one value is held by
 * more than half of the replicas, with bad[i] = 1 for every replica that differs from it;
 * FTRT__SDC_SPLIT when they disagree and no value has a strict majority (two replicas that
 * differ, a 2-2 split of four), bad[] all 0: no replica can be blamed. bad (n bytes) is always
 * written. Returns FTRT_EINVAL for n < 0 or NULL arrays with n > 0. Pure, O(n). */
int ftrt__sdc_judge(const uint64_t *fp, int n, unsigned char *bad);

/* The progress timeout in seconds: the configured one (configured_ms > 0), or adaptive
 * max(5 s, 10 x median step time); 0 when adaptive and no step time is known yet (the detector
 * is not armed). Pure. */
double ftrt__progress_timeout(int configured_ms, double median_step_s);

#endif
