/* Unit tests: the silent data corruption check: the verdict on the replicas' fingerprints
 * (ftrt__sdc_judge), the fingerprint of the replicated regions, the FINGERPRINT message's
 * checks, the failure kind's name, and the un-commit of checkpoints that cannot be trusted. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checkpoint/commit.h"
#include "checkpoint/shard.h"
#include "checkpoint/steps.h"
#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"
#include "runtime/coordinator/coord.h"
#include "runtime/internal.h"

static void judge_all_agree(void **state)
{
    (void)state;
    uint64_t fp[4] = {7, 7, 7, 7};
    unsigned char bad[4] = {9, 9, 9, 9};
    assert_int_equal(ftrt__sdc_judge(fp, 4, bad), FTRT__SDC_AGREE);
    for (int i = 0; i < 4; i++) assert_int_equal(bad[i], 0);
    assert_int_equal(ftrt__sdc_judge(fp, 1, bad), FTRT__SDC_AGREE); /* one replica: nothing */
    assert_int_equal(ftrt__sdc_judge(NULL, 0, NULL), FTRT__SDC_AGREE);
    assert_int_equal(ftrt__sdc_judge(NULL, 2, bad), FTRT_EINVAL);
    assert_int_equal(ftrt__sdc_judge(fp, -1, bad), FTRT_EINVAL);
}

static void judge_one_bad_of_four(void **state)
{
    (void)state;
    for (int b = 0; b < 4; b++) { /* wherever the bad one is, the first one included */
        uint64_t fp[4] = {42, 42, 42, 42};
        unsigned char bad[4];
        fp[b] = 43;
        assert_int_equal(ftrt__sdc_judge(fp, 4, bad), FTRT__SDC_MAJORITY);
        for (int i = 0; i < 4; i++) assert_int_equal(bad[i], i == b);
    }
}

static void judge_two_bad_of_five(void **state)
{
    (void)state;
    uint64_t fp[5] = {5, 1, 5, 2, 5}; /* two bad ones, with different values */
    unsigned char bad[5];
    assert_int_equal(ftrt__sdc_judge(fp, 5, bad), FTRT__SDC_MAJORITY);
    unsigned char want[5] = {0, 1, 0, 1, 0};
    assert_memory_equal(bad, want, 5);
    uint64_t same[5] = {9, 3, 3, 9, 9}; /* two bad ones that agree with each other */
    assert_int_equal(ftrt__sdc_judge(same, 5, bad), FTRT__SDC_MAJORITY);
    unsigned char want2[5] = {0, 1, 1, 0};
    assert_memory_equal(bad, want2, 5);
}

static void judge_no_majority(void **state)
{
    (void)state;
    unsigned char bad[4];
    uint64_t two[2] = {1, 2}; /* two replicas that differ: nobody can be blamed */
    assert_int_equal(ftrt__sdc_judge(two, 2, bad), FTRT__SDC_SPLIT);
    assert_int_equal(bad[0] | bad[1], 0);
    uint64_t split[4] = {1, 2, 2, 1}; /* 2-2 */
    assert_int_equal(ftrt__sdc_judge(split, 4, bad), FTRT__SDC_SPLIT);
    for (int i = 0; i < 4; i++) assert_int_equal(bad[i], 0);
    uint64_t three[4] = {1, 2, 3, 1}; /* a plurality is not a majority */
    assert_int_equal(ftrt__sdc_judge(three, 4, bad), FTRT__SDC_SPLIT);
    uint64_t three3[3] = {1, 2, 3};
    assert_int_equal(ftrt__sdc_judge(three3, 3, bad), FTRT__SDC_SPLIT);
}

/* The fingerprint of regs, which must be computable (a REPLICATED device region needs a device
 * backend). */
static uint64_t fpv(const ftrt__region *regs, int n, int *covered)
{
    uint64_t fp = 0;
    assert_int_equal(ftrt__sdc_fingerprint(regs, n, &fp, covered), 0);
    return fp;
}

static void fingerprint(void **state)
{
    (void)state;
    enum { N = 100003 };
    unsigned char *a = malloc(N), *b = malloc(N), *s = malloc(64);
    float *d = malloc(256 * sizeof *d);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(s);
    assert_non_null(d);
    t_fill(a, N, 1);
    memcpy(b, a, N);
    t_fill(s, 64, 2);
    t_fill(d, 256 * sizeof *d, 3);
    ftrt__region ra[3] = {{"params", a, N, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0},
                          {"shard", s, 64, FTRT__KIND_SHARDED, FTRT__LOC_HOST, 0},
                          {"dshard", d, 256 * sizeof *d, FTRT__KIND_SHARDED, FTRT__LOC_DEVICE, 0}};
    ftrt__region rb[3] = {{"params", b, N, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0},
                          {"shard", d, 64, FTRT__KIND_SHARDED, FTRT__LOC_HOST, 0}, /* sharded: */
                          {"dshard", s, 64, FTRT__KIND_SHARDED, FTRT__LOC_DEVICE, 0}}; /* differ */
    int covered = -1;
    uint64_t fa = fpv(ra, 3, &covered);
    assert_int_equal(covered, 1);
    assert_true(fa == fpv(rb, 3, NULL)); /* equal replicas, equal values */
    for (int bit = 0; bit < 8; bit++) { /* one bit anywhere changes it, then restored */
        size_t off = (size_t)(bit * 12497) % N;
        b[off] ^= (unsigned char)(1u << bit);
        assert_true(fa != fpv(rb, 3, NULL));
        b[off] ^= (unsigned char)(1u << bit);
        assert_true(fa == fpv(rb, 3, NULL));
    }
    rb[0].bytes = N - 1; /* the size counts */
    assert_true(fa != fpv(rb, 3, NULL));
    rb[0].bytes = N;
    snprintf(rb[0].name, sizeof rb[0].name, "paramz"); /* so does the name */
    assert_true(fa != fpv(rb, 3, NULL));
    /* Two replicated regions: swapping their contents changes it (order counts). */
    ftrt__region two[2] = {{"x", a, 64, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0},
                           {"y", s, 64, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0}};
    ftrt__region swapped[2] = {{"x", s, 64, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0},
                               {"y", a, 64, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0}};
    assert_true(fpv(two, 2, &covered) != fpv(swapped, 2, NULL));
    assert_int_equal(covered, 2);
    fpv(NULL, 0, &covered);
    assert_int_equal(covered, 0);
    free(a);
    free(b);
    free(s);
    free(d);
}

/* A REPLICATED device region is fingerprinted through the device backend's crc (here the
 * simulated device, whose memory is PROT_NONE outside its calls: a host read would kill the
 * test): the same value as a host region with the same name and bytes, and one flipped bit in
 * device memory changes it. With no device backend it is refused (FTRT_ENOTSUP, the message
 * naming it), not left out; its memory is never read (the pointer then is not even mapped). */
static void fingerprint_device(void **state)
{
    (void)state;
    enum { N = 50001 };
    unsigned char *a = malloc(N), *b = malloc(N);
    unsigned char *d = ftrt__sim_alloc(N);
    assert_true(a && b && d);
    t_fill(a, N, 4);
    assert_int_equal(ftrt__sim_write(d, a, N), 0);
    ftrt__region host[2] = {{"params", a, N, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0},
                            {"shard", b, 64, FTRT__KIND_SHARDED, FTRT__LOC_HOST, 0}};
    ftrt__region dev[2] = {{"params", d, N, FTRT__KIND_REPLICATED, FTRT__LOC_DEVICE, 0},
                           {"shard", b, 64, FTRT__KIND_SHARDED, FTRT__LOC_HOST, 0}};
    ftrt__loc_set_device(ftrt__loc_sim());
    int covered = -1;
    uint64_t fh = fpv(host, 2, NULL), fd = fpv(dev, 2, &covered);
    assert_int_equal(covered, 1);
    assert_true(fh == fd); /* a device replica compares equal to a host one */
    memcpy(b, a, N);
    b[N / 3] ^= 0x08; /* one bit flipped in device memory */
    assert_int_equal(ftrt__sim_write(d, b, N), 0);
    assert_true(fpv(dev, 2, NULL) != fh);
    ftrt__loc_set_device(NULL);
    ftrt__region r[2] = {{"params", a, N, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0},
                         {"gpu.params", (void *)(uintptr_t)0x10, 4096, FTRT__KIND_REPLICATED,
                          FTRT__LOC_DEVICE, 0}};
    uint64_t fp = 7;
    covered = -1;
    assert_int_equal(ftrt__sdc_fingerprint(r, 2, &fp, &covered), FTRT_ENOTSUP);
    assert_true(fp == 7);
    assert_int_equal(covered, -1);
    assert_non_null(strstr(ftrt_last_error(), "\"gpu.params\""));
    assert_non_null(strstr(ftrt_last_error(), "device"));
    ftrt__sim_free(d);
    free(a);
    free(b);
}

static void message(void **state)
{
    (void)state;
    ftrt__msghdr h = {FTRT__MAGIC, FTRT__MSG_FINGERPRINT, sizeof(ftrt__fingerprint_msg), 0};
    assert_int_equal(ftrt__msg_check(&h), 0);
    h.len = sizeof(ftrt__fingerprint_msg) - 1;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.len = sizeof(ftrt__fingerprint_msg) + 8;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    h.len = 0;
    assert_int_equal(ftrt__msg_check(&h), FTRT_EPROTO);
    assert_int_equal(FTRT__MSG_FINGERPRINT, 16); /* appended to the types: wire-stable */
    assert_true(FTRT__MSG_HOST_HELLO > FTRT__MSG_FINGERPRINT); /* (host agents' types after it) */
    assert_string_equal(ftrt__failure_kind_name(FK_SDC), "silent_data_corruption");
}

/* A trainer's fingerprint sent again (after losing its host agent, agent.c re-sends the newest
 * one on its own connection) counts once: the repeat neither counts as a second fingerprint
 * received nor takes a slot of the ones kept, so an older step still waiting for the other
 * member's fingerprint is compared when it arrives (the repeat used to push it out). */
static void vote_takes_a_repeat_once(void **state)
{
    (void)state;
    ftrt__crank r[3];
    memset(r, 0, sizeof r);
    int members[2] = {1, 2};
    uint64_t u64[3];
    unsigned char b[3];
    ftrt__coord c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.W = 3;
    c.Wused = c.Wworld = 3;
    c.N = c.N0 = 2;
    c.members = members;
    c.epoch = 0;
    c.phase = PH_RUNNING;
    c.s.u64 = u64;
    c.s.b = b;
    c.sdc_judged_epoch = -1;
    c.sdc_agreed_step = -1;
    for (int w = 1; w <= 2; w++) {
        r[w].role = FTRT__ROLE_TRAINER;
        r[w].logical = w - 1;
    }
    /* world rank 1 runs FTRT__SDC_KEEP steps ahead; its newest fingerprint arrives twice */
    for (int64_t step = 1; step <= FTRT__SDC_KEEP; step++) {
        ftrt__fingerprint_msg m = {.step = step, .fp = 0xf00d + (uint64_t)step, .seconds = 0.5};
        ftrt__sdc_vote_take(&c, 1, &m);
    }
    ftrt__fingerprint_msg again = {.step = FTRT__SDC_KEEP, .fp = 0xf00d + FTRT__SDC_KEEP,
                                   .seconds = 0.5};
    ftrt__sdc_vote_take(&c, 1, &again);
    assert_int_equal(c.sdc_nfp, FTRT__SDC_KEEP);
    assert_true(c.sdc_fp_s > 0.5 * FTRT__SDC_KEEP - 1e-9 && c.sdc_fp_s < 0.5 * FTRT__SDC_KEEP + 1e-9);
    assert_int_equal(c.sdc_checks, 0);
    /* world rank 2's first: step 1 compared (world rank 1's still kept), agreeing */
    ftrt__fingerprint_msg m2 = {.step = 1, .fp = 0xf00d + 1, .seconds = 0.5};
    ftrt__sdc_vote_take(&c, 2, &m2);
    assert_int_equal(c.sdc_checks, 1);
    assert_int_equal(c.sdc_agreed_step, 1);
    /* and a repeat of world rank 2's is no second vote either */
    ftrt__sdc_vote_take(&c, 2, &m2);
    assert_int_equal(c.sdc_checks, 1);
    assert_int_equal(c.sdc_nfp, FTRT__SDC_KEEP + 1);
}

/* A committed checkpoint of `step` (one rank, one small region) in dir. */
static void commit_step(const char *dir, int64_t step)
{
    unsigned char buf[256];
    t_fill(buf, sizeof buf, (uint64_t)step);
    ftrt__region r = {"params", buf, sizeof buf, FTRT__KIND_REPLICATED, FTRT__LOC_HOST, 0};
    assert_int_equal(ftrt__shard_write(dir, step, 0, 1, &r, 1), 0);
    assert_int_equal(ftrt__ckpt_commit(dir, step, 1, 100), 0);
}

static void uncommit(void **state)
{
    (void)state;
    char dir[512];
    assert_int_equal(t_tmpdir(dir, sizeof dir, "sdc"), 0);
    int64_t latest = 99, steps[8];
    assert_int_equal(ftrt__ckpt_uncommit_from(dir, 0, &latest), 0); /* nothing committed */
    assert_int_equal(latest, -1);
    commit_step(dir, 10);
    commit_step(dir, 20);
    commit_step(dir, 30);
    assert_int_equal(ftrt__ckpt_uncommit_from(dir, 40, &latest), 0); /* all trusted */
    assert_int_equal(latest, 30);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 3);
    assert_int_equal(ftrt__ckpt_uncommit_from(dir, 20, &latest), 2); /* 20 and 30 go */
    assert_int_equal(latest, 10);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    assert_int_equal(steps[0], 10);
    assert_true(t_exists("%s/step-30/rank-0.ftrt", dir)); /* the files stay, uncommitted */
    assert_false(t_exists("%s/step-30/MANIFEST", dir));
    commit_step(dir, 20); /* the same step can be committed again */
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 2);
    assert_int_equal(steps[0], 20);
    assert_int_equal(ftrt__ckpt_uncommit_from(dir, 0, &latest), 2); /* none left */
    assert_int_equal(latest, -1);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 0);
    assert_false(t_exists("%s/LATEST", dir));
    assert_int_equal(ftrt__ckpt_uncommit_from(dir, -1, &latest), -EINVAL);
    assert_int_equal(ftrt__ckpt_uncommit_from(NULL, 0, &latest), -EINVAL);
    t_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(judge_all_agree),    cmocka_unit_test(judge_one_bad_of_four),
        cmocka_unit_test(judge_two_bad_of_five), cmocka_unit_test(judge_no_majority),
        cmocka_unit_test(fingerprint),        cmocka_unit_test(fingerprint_device),
        cmocka_unit_test(message),            cmocka_unit_test(vote_takes_a_repeat_once),
        cmocka_unit_test(uncommit)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
