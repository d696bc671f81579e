/* Unit tests: the recovery plan's resume step and state source, and the survivors' PLAN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "ftrt.h"
#include "runtime/coordinator/plan.h"
#include "runtime/internal.h"

static void most_advanced_survivor(void **state)
{
    (void)state;
    /* rank 2 failed; rank 3 is ahead by one step (it finished the step in flight) */
    int64_t steps[4] = {151, 151, 152, 152};
    int surv[4] = {1, 1, 0, 1};
    int64_t resume = -1, ckpt = -2;
    int src = -1;
    assert_int_equal(ftrt__plan_compute(steps, surv, 4, 0, 100, &resume, &src, &ckpt), 0);
    assert_int_equal(resume, 152);
    assert_int_equal(src, 3);
    assert_int_equal(ckpt, -1); /* replicated state: no checkpoint reload */
}

static void ties_pick_lowest_rank(void **state)
{
    (void)state;
    int64_t steps[3] = {40, 40, 40};
    int surv[3] = {0, 1, 1};
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, 3, 0, -1, &resume, &src, &ckpt), 0);
    assert_int_equal(src, 1);
    assert_int_equal(resume, 40);
}

static void sharded_uses_checkpoint(void **state)
{
    (void)state;
    int64_t steps[2] = {77, 77};
    int surv[2] = {1, 0};
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, 2, 1, 75, &resume, &src, &ckpt), 0);
    assert_int_equal(resume, 75);
    assert_int_equal(ckpt, 75);
    assert_int_equal(ftrt__plan_compute(steps, surv, 2, 1, -1, &resume, &src, &ckpt),
                     FTRT_ENOCKPT);
}

static void no_survivor(void **state)
{
    (void)state;
    int64_t steps[2] = {5, 5};
    int surv[2] = {0, 0};
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, 2, 0, -1, &resume, &src, &ckpt),
                     FTRT_EABORT);
}

/* The progress detector's timeout: configured, or adaptive with a 5 s floor, or unarmed. */
/* Partner replicas: memory when every survivor holds its own image of one step and a survivor
 * holds each lost rank's sharded image of it; the checkpoint otherwise. */
static void replica_plan(void **state)
{
    (void)state;
    /* 4 ranks, partner = rank + 1: rank r holds the image of rank r - 1. */
    int surv[4] = {1, 0, 1, 1};
    int64_t own[4] = {20, -1, 20, 20}, held[4] = {20, 20, 20, 20}, mem = 0;
    int32_t of[4] = {3, 0, 1, 2}, src[4];
    assert_int_equal(ftrt__plan_replica(surv, own, held, of, 4, 10, &mem, src), 1);
    assert_int_equal(mem, 20);
    assert_int_equal(src[1], 2); /* rank 2 holds rank 1's shard */
    assert_int_equal(src[0], -1);
    assert_int_equal(src[2], -1);
    assert_int_equal(src[3], -1);
    /* the partner is lost too: the checkpoint */
    int surv2[4] = {1, 0, 0, 1};
    assert_int_equal(ftrt__plan_replica(surv2, own, held, of, 4, 10, &mem, src), 0);
    assert_int_equal(mem, -1);
    for (int l = 0; l < 4; l++) assert_int_equal(src[l], -1);
    /* the holder has an older image (a refresh was cut short) */
    held[2] = 10;
    assert_int_equal(ftrt__plan_replica(surv, own, held, of, 4, 10, &mem, src), 0);
    held[2] = 20;
    /* survivors disagree on their own step (one refresh incomplete) */
    own[3] = -1;
    assert_int_equal(ftrt__plan_replica(surv, own, held, of, 4, 10, &mem, src), 0);
    own[3] = 20;
    /* the committed checkpoint is newer than the replicas */
    assert_int_equal(ftrt__plan_replica(surv, own, held, of, 4, 30, &mem, src), 0);
    /* no failure (an epoch without replacement): every survivor's own image */
    int all[4] = {1, 1, 1, 1};
    int64_t own4[4] = {20, 20, 20, 20};
    assert_int_equal(ftrt__plan_replica(all, own4, held, of, 4, -1, &mem, src), 1);
    assert_int_equal(mem, 20);
    assert_int_equal(ftrt__plan_replica(NULL, own, held, of, 4, 10, &mem, src), FTRT_EINVAL);
    /* why not (the report's replica_miss) */
    assert_int_equal(ftrt__plan_replica_miss(surv, own, held, of, 4, 10), FTRT__RMISS_NONE);
    assert_int_equal(ftrt__plan_replica_miss(surv2, own, held, of, 4, 10), FTRT__RMISS_LOST_NOT_HELD);
    assert_int_equal(ftrt__plan_replica_miss(surv, own, held, of, 4, 30), FTRT__RMISS_OLDER_THAN_CKPT);
    held[2] = 15;
    assert_int_equal(ftrt__plan_replica_miss(surv, own, held, of, 4, 10), FTRT__RMISS_LOST_NOT_HELD);
    held[2] = 20;
    own[3] = 25;
    assert_int_equal(ftrt__plan_replica_miss(surv, own, held, of, 4, 10), FTRT__RMISS_NO_COMMON_IMAGE);
    own[0] = -1;
    assert_int_equal(ftrt__plan_replica_miss(surv, own, held, of, 4, 10), FTRT__RMISS_NO_COMMON_IMAGE);
    assert_string_equal(ftrt__replica_miss_name(FTRT__RMISS_LOST_NOT_HELD), "lost_image_not_held");
    assert_null(ftrt__replica_miss_name(FTRT__RMISS_NONE));
}

static void progress_timeout(void **state)
{
    (void)state;
    assert_true(ftrt__progress_timeout(2000, 0.0) == 2.0);      /* configured wins */
    assert_true(ftrt__progress_timeout(2000, 10.0) == 2.0);
    assert_true(ftrt__progress_timeout(0, 0.0) == 0.0);         /* no step time yet: unarmed */
    assert_true(ftrt__progress_timeout(0, 0.010) == 5.0);       /* floor */
    assert_true(ftrt__progress_timeout(0, 2.0) == 20.0);        /* 10 x the median step */
}

/* The survivors' PLAN of a peers plan with every other survivor a step behind the resume step
 * (a failure mid-step), at n trainers, 2 of them replaced by spares. Returns its size (bytes)
 * and checks that the roles every member ends with once the set of survivors behind is learned
 * (each member's own bit from its REPORT, their union as the data plane's SUM allreduce gives
 * it, base/proto.h) are the coordinator's: the replaced ranks and exactly the survivors behind
 * need state. */
static size_t behind_plan(int n)
{
    int *surv = malloc((size_t)n * sizeof *surv), *members = malloc((size_t)n * sizeof *members);
    int64_t *steps = malloc((size_t)n * sizeof *steps);
    int32_t *ss = malloc((size_t)n * sizeof *ss), *prev = malloc((size_t)n * sizeof *prev);
    assert_true(surv && members && steps && ss && prev);
    ftrt__plan_initial_members(prev, n);
    for (int l = 0; l < n; l++) {
        surv[l] = l != n / 3 && l != n / 2;
        steps[l] = surv[l] ? 500 - l % 2 : 0; /* odd survivors did not finish step 499 */
        members[l] = surv[l] ? prev[l] : n + 1 + (l == n / 2); /* the spares' world ranks */
        ss[l] = -1;
    }
    int64_t resume, ckpt;
    int src;
    assert_int_equal(ftrt__plan_compute(steps, surv, n, 0, -1, &resume, &src, &ckpt), 0);
    assert_int_equal(resume, 500);
    ftrt__plan_msg head = {.resume_step = resume, .ckpt_step = ckpt, .mem_step = -1,
                           .rework_until = resume, .epoch = 1, .ntrainers = n, .source = src};
    ftrt__plan_msg *m = NULL;
    size_t len = 0;
    assert_int_equal(ftrt__plan_msg_build(&head, surv, steps, members, ss, &m, &len), 0);
    /* the fixed part and the 2 replaced ranks, whatever n and however many are behind */
    assert_int_equal(len, sizeof(ftrt__plan_msg) + 2 * 3 * sizeof(int32_t));
    int behind = 0;
    for (int l = 0; l < n; l++) behind += surv[l] && steps[l] != resume;
    assert_int_equal(m->nbehind, behind);
    assert_int_equal(m->nrepl, 2);
    /* a survivor's view: the delta applied to the membership it knew */
    ftrt__plan *p = NULL;
    size_t plen = 0;
    assert_int_equal(ftrt__plan_expand(m, len, prev, n, 0, &p, &plen), 0);
    int64_t *bits = calloc(ftrt__plan_behind_words(n), sizeof *bits);
    assert_non_null(bits);
    for (int l = 0; l < n; l++) { /* each member's own bit (as recovery.c sets it) */
        p->logical_rank = l;
        if (ftrt__plan_behind_mine(p, steps[l], 0)) bits[l / 64] += (int64_t)((uint64_t)1 << (l % 64));
    }
    p->logical_rank = 0;
    assert_int_equal(ftrt__plan_behind_apply(p, plen, bits, ftrt__plan_behind_words(n)), 0);
    for (int l = 0; l < n; l++) {
        assert_int_equal(p->members[l], members[l]);
        assert_int_equal(ftrt__plan_roles(p)[l], !surv[l] || steps[l] != resume);
    }
    free(bits), free(p), free(m), free(surv), free(members), free(steps), free(ss), free(prev);
    return len;
}

/* Issue 22: with many survivors a step behind, the PLAN listed them all to every member (524 KB
 * a member, 68.7 GB a recovery at 131,072 simulated ranks). Now a survivor's PLAN is the fixed
 * part and the 2 replaced ranks, the same bytes at 1,024 and at 16,384 trainers. */
/* Erasure groups (k = 4, one group of 4 trainers, 2 parity): memory while a group lost at most
 * 2 members and every stripe of a lost data chunk keeps 2 usable positions; the checkpoint, with
 * the reason, otherwise. Then 8 trainers in 2 strided groups: 2 losses in each are fine. */
static void erasure_plan(void **state)
{
    (void)state;
    int surv[4] = {1, 0, 0, 1};
    int64_t own[4] = {20, -1, -1, 20}, ec[4] = {20, 20, 20, 20}, mem = 0;
    int32_t en[4] = {4, 4, 4, 4}, ek[4] = {4, 4, 4, 4}, src[4];
    int miss = -1;
    ftrt__ec_plan_in in = {.n = 4, .survivor = surv, .own_step = own, .ec_step = ec, .ec_n = en,
                           .ec_k = ek};
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 1);
    assert_int_equal(mem, 20);
    assert_int_equal(miss, FTRT__RMISS_NONE);
    assert_int_equal(src[0], -1);
    assert_int_equal(src[1], FTRT__SHARD_SRC_ERASURE);
    assert_int_equal(src[2], FTRT__SHARD_SRC_ERASURE);
    assert_int_equal(src[3], -1);
    /* rank 1's chunk 0 lies in stripe 1 (positions: 1, 2 data, 3, 0 parity): rank 3's parity
     * failing its CRC32C leaves one usable position of 2 needed */
    ec[3] = -1;
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_EC_FRAGMENTS);
    assert_int_equal(mem, -1);
    for (int l = 0; l < 4; l++) assert_int_equal(src[l], -1);
    /* with one loss the other parity position is enough */
    int one[4] = {1, 0, 1, 1};
    int64_t own1[4] = {20, -1, 20, 20};
    in.survivor = one, in.own_step = own1;
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 1);
    /* parity made for another membership (5 trainers) is not usable */
    ec[3] = 20, en[0] = en[3] = 5;
    in.survivor = surv, in.own_step = own;
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_EC_FRAGMENTS);
    en[0] = en[3] = 4;
    /* three losses: more than the parity */
    int three[4] = {1, 0, 0, 0};
    int64_t own3[4] = {20, -1, -1, -1};
    in.survivor = three, in.own_step = own3;
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_EC_TOO_MANY);
    assert_string_equal(ftrt__replica_miss_name(miss), "erasure_group_lost_more_than_parity");
    /* a survivor without its own image of the step (a refresh cut short), a newer checkpoint */
    in.survivor = surv, in.own_step = own;
    own[3] = 15;
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_NO_COMMON_IMAGE);
    own[3] = 20;
    assert_int_equal(ftrt__plan_erasure(&in, 30, &mem, src, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_OLDER_THAN_CKPT);
    /* nobody holds parity of the step (every survivor's refresh was cut short) */
    for (int l = 0; l < 4; l++) ec[l] = 15;
    assert_int_equal(ftrt__plan_erasure(&in, 10, &mem, src, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_EC_FRAGMENTS);
    assert_int_equal(ftrt__plan_erasure(NULL, 10, &mem, src, &miss), FTRT_EINVAL);
    /* 8 trainers, k = 4: groups {0,2,4,6} and {1,3,5,7}; ranks 0, 2 (group 0) and 1, 7
     * (group 1) lost: two per group, memory; a third in group 0 (4): not */
    int s8[8] = {0, 0, 0, 1, 1, 1, 1, 0};
    int64_t o8[8], e8[8];
    int32_t n8[8], k8[8], src8[8];
    for (int l = 0; l < 8; l++) o8[l] = s8[l] ? 40 : -1, e8[l] = 40, n8[l] = 8, k8[l] = 4;
    ftrt__ec_plan_in in8 = {.n = 8, .survivor = s8, .own_step = o8, .ec_step = e8, .ec_n = n8,
                            .ec_k = k8};
    assert_int_equal(ftrt__plan_erasure(&in8, 0, &mem, src8, &miss), 1);
    for (int l = 0; l < 8; l++)
        assert_int_equal(src8[l], s8[l] ? -1 : FTRT__SHARD_SRC_ERASURE);
    s8[4] = 0;
    assert_int_equal(ftrt__plan_erasure(&in8, 0, &mem, src8, &miss), 0);
    assert_int_equal(miss, FTRT__RMISS_EC_TOO_MANY);
}

static void behind_plan_does_not_grow(void **state)
{
    (void)state;
    size_t small = behind_plan(1024), large = behind_plan(16384);
    assert_int_equal(small, large);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(most_advanced_survivor), cmocka_unit_test(ties_pick_lowest_rank),
        cmocka_unit_test(sharded_uses_checkpoint), cmocka_unit_test(no_survivor),
        cmocka_unit_test(progress_timeout), cmocka_unit_test(replica_plan),
        cmocka_unit_test(behind_plan_does_not_grow), cmocka_unit_test(erasure_plan)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
