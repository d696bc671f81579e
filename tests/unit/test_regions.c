/*
 * test_regions.c - the runtime's entry points above the engines (runtime/regions.c,
 * runtime/data.c): the region registry's checks, the argument, role and state checks of the
 * checkpoint and data-plane calls. A trainer context is assembled by hand here on purpose:
 * this is the runtime's own test; the engines below are tested through their ports
 * (test_ckpt_engine, test_bucket, test_async).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"
#include "runtime/internal.h"

typedef struct fixture {
    struct ftrt_ctx *ctx;
    char dir[4096];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    struct ftrt_ctx *ctx = calloc(1, sizeof *ctx);
    assert_int_equal(t_tmpdir(f->dir, sizeof f->dir, "regions"), 0);
    ftrt_config_init(&ctx->cfg, sizeof ctx->cfg);
    memcpy(ctx->cfg.ckpt_dir, f->dir, strlen(f->dir) + 1);
    ctx->role = FTRT__ROLE_TRAINER;
    ctx->size = 1;
    t_watch_init(&ctx->watch);
    ftrt__plane_init(&ctx->plane, &ctx->watch, (ftrt__host){0}, 0, 50);
    ftrt__ckpt_opts o;
    ftrt__ckpt_opts_from(&ctx->cfg, &o);
    assert_int_equal(ftrt__ckpt_engine_new(&o, &ctx->watch, (ftrt__host){0}, &ctx->ckpt), 0);
    pthread_mutex_init(&ctx->ledger_lock, NULL);
    assert_int_equal(ftrt__ledger_init(&ctx->ledger, FTRT__IV_COMPUTE, 0, 100), 0);
    f->ctx = ctx;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ftrt__ckpt_engine_free(f->ctx->ckpt);
    ftrt__ledger_free(&f->ctx->ledger);
    pthread_mutex_destroy(&f->ctx->ledger_lock);
    free(f->ctx->regs);
    free(f->ctx);
    t_rmtree(f->dir);
    free(f);
    return 0;
}

/* The registry refuses bad names, flags and duplicates; device regions need CUDA. */
static void registry(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    char m[3][64];
    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_int_equal(ftrt_register(ctx, "a", m[0], 64, FTRT_REGION_REPLICATED), 0);
    assert_int_equal(ftrt_register(ctx, "b", m[1], 64, FTRT_REGION_SHARDED), 1);
    assert_int_equal(ftrt_register(ctx, "a", m[2], 64, FTRT_REGION_SHARDED), FTRT_EINVAL);
    assert_int_equal(ftrt_register(ctx, "x", m[2], 64, 8u), FTRT_EINVAL);
    assert_int_equal(ftrt_register(ctx, "", m[2], 64, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_register(ctx, longname, m[2], 64, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_register(ctx, "n", NULL, 64, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_register(NULL, "n", m[2], 64, 0), FTRT_EINVAL);
    if (!ftrt__loc_device()) /* a CPU-only libftrt */
        assert_int_equal(ftrt_register(ctx, "gpu", m[2], 64,
                                       FTRT_REGION_REPLICATED | FTRT_REGION_DEVICE),
                         FTRT_ENOTSUP);
    assert_int_equal(ctx->nregs, 2);
    assert_int_equal(ftrt_unregister(ctx, "b"), 0);
    assert_int_equal(ftrt_unregister(ctx, "b"), FTRT_EINVAL);
    assert_int_equal(ftrt_unregister(ctx, NULL), FTRT_EINVAL);
    assert_int_equal(ctx->nregs, 1);
}

/* Unknown flag bits are FTRT_EINVAL with a message naming the region. */
static void unknown_flags(void **state)
{
    fixture *f = *state;
    char m[64];
    assert_int_equal(ftrt_register(f->ctx, "odd", m, sizeof m, 8u), FTRT_EINVAL);
    assert_non_null(strstr(ftrt_last_error(), "\"odd\""));
    assert_non_null(strstr(ftrt_last_error(), "unknown flag bits"));
    assert_int_equal(ftrt_register(f->ctx, "odd", m, sizeof m, 0x80000000u), FTRT_EINVAL);
    assert_int_equal(f->ctx->nregs, 0);
    /* The flags split into kind and location. */
    assert_int_equal(ftrt_register(f->ctx, "r", m, 8, FTRT_REGION_REPLICATED), 0);
    assert_int_equal(ftrt_register(f->ctx, "s", m + 8, 8, FTRT_REGION_SHARDED), 1);
    assert_int_equal(f->ctx->regs[0].kind, FTRT__KIND_REPLICATED);
    assert_int_equal(f->ctx->regs[0].loc, FTRT__LOC_HOST);
    assert_int_equal(f->ctx->regs[1].kind, FTRT__KIND_SHARDED);
    assert_int_equal(f->ctx->regs[1].loc, FTRT__LOC_HOST);
    assert_int_equal(ftrt_register(f->ctx, "o", m + 16, 8,
                                   FTRT_REGION_SHARDED | FTRT_REGION_OPTIONAL), 2);
    assert_int_equal(f->ctx->regs[2].kind, FTRT__KIND_SHARDED);
    assert_true(f->ctx->regs[2].optional && !f->ctx->regs[1].optional);
}

/* A stand-in for libftrt_gpu's device hook: ftrt_register() accepts device regions with it.
 * Nothing here reads device memory (the pointers below are never dereferenced). */
static int fake_to_host(void *dst, const void *src, size_t bytes, uint32_t *crc)
{
    (void)dst, (void)src, (void)bytes, (void)crc;
    return FTRT_ENOTSUP;
}
static const ftrt__loc_ops fake_device = {.name = "fake", .to_host = fake_to_host};

/* Expects ftrt_register() to refuse with FTRT_ENOTSUP and a message naming `who` and `why`. */
static void refused(struct ftrt_ctx *ctx, const char *name, unsigned flags, const char *who,
                    const char *why)
{
    char quoted[80];
    int n0 = ctx->nregs;
    assert_int_equal(ftrt_register(ctx, name, (void *)(uintptr_t)0x1000, 4096, flags),
                     FTRT_ENOTSUP);
    snprintf(quoted, sizeof quoted, "\"%s\"", who);
    if (!strstr(ftrt_last_error(), quoted) || !strstr(ftrt_last_error(), why))
        fail_msg("message \"%s\" lacks %s or %s", ftrt_last_error(), quoted, why);
    assert_int_equal(ctx->nregs, n0);
}

/* Device regions are refused at registration only where there is no device backend; the
 * paths refuse them too then, instead of leaving them out. With a backend every feature takes
 * them: the silent-data-corruption fingerprints, hot spares (the state transfer), partner
 * replicas (their images). */
static void device_refusals(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    void *dptr = (void *)(uintptr_t)0x1000; /* "device" memory: never read on the host */
    const unsigned RD = FTRT_REGION_REPLICATED | FTRT_REGION_DEVICE;
    const unsigned SD = FTRT_REGION_SHARDED | FTRT_REGION_DEVICE;
    const ftrt__loc_ops *saved = ftrt__loc_device();
    ftrt__loc_set_device(NULL); /* no backend: every device region refused */
    refused(ctx, "gpu.params", RD, "gpu.params", "FTRT_TEST_SIM_DEVICE");
    refused(ctx, "gpu.shard", SD, "gpu.shard", "no device backend");
    ftrt__loc_set_device(&fake_device);
    ctx->size = 2;
    ctx->cfg.sdc_every = 10;
    ctx->cfg.shard_replica_every = 0;
    ctx->nspares = 1;
    assert_int_equal(ftrt_register(ctx, "gpu.params", dptr, 4096, RD), 0);
    assert_int_equal(ctx->regs[0].kind, FTRT__KIND_REPLICATED);
    assert_int_equal(ctx->regs[0].loc, FTRT__LOC_DEVICE);
    char host[64];
    assert_int_equal(ftrt_register(ctx, "rng", host, 8, FTRT_REGION_SHARDED), 1);
    assert_int_equal(ftrt_register(ctx, "gpu.shard", dptr, 4096, SD), 2);
    assert_int_equal(ctx->regs[2].kind, FTRT__KIND_SHARDED);
    assert_int_equal(ctx->regs[2].loc, FTRT__LOC_DEVICE);
    /* The backstops, had a table got past the registration (here: the backend went away). */
    ftrt__loc_set_device(NULL);
    assert_int_equal(ftrt__sdc_step(ctx, 10), FTRT_ENOTSUP);
    assert_non_null(strstr(ftrt_last_error(), "\"gpu.params\""));
    assert_int_equal(ftrt__replica_refresh(ctx, 10), FTRT_ENOTSUP);
    assert_non_null(strstr(ftrt_last_error(), "\"gpu.params\""));
    ctx->cfg.shard_replica_every = -1;
    assert_int_equal(ftrt__replica_refresh(ctx, 10), 0); /* replicas off: nothing to refuse */
    ftrt__loc_set_device(saved);
}

/* Argument, role and state checks of the checkpoint and data-plane entry points. */
static void entry_checks(void **state)
{
    fixture *f = *state;
    struct ftrt_ctx *ctx = f->ctx;
    ftrt_ckpt_stats s;
    assert_int_equal(ftrt_checkpoint(NULL, 1), FTRT_EINVAL);
    assert_int_equal(ftrt_checkpoint(ctx, -1), FTRT_EINVAL);
    assert_int_equal(ftrt_checkpoint_wait_snapshot(NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_checkpoint_stats(NULL, &s, sizeof s), FTRT_EINVAL);
    assert_int_equal(ftrt_checkpoint_stats(ctx, &s, 2), FTRT_EINVAL);
    assert_int_equal(ftrt_checkpoint_stats(ctx, &s, sizeof s), 0);
    assert_int_equal(s.last_committed_step, -1);
    assert_int_equal(ftrt_checkpoint_wait_commit(ctx, 5, 10), FTRT_EINVAL); /* never taken */
    ctx->watch.needs_recover = 1; /* an operation returned FTRT_ERECOVER */
    assert_int_equal(ftrt_checkpoint(ctx, 1), FTRT_ESTATE);
    ctx->watch.needs_recover = 0;
    t_watch_announce(&ctx->watch, 1); /* a failure announced: checkpoints are refused */
    assert_int_equal(ftrt_checkpoint(ctx, 1), FTRT_ERECOVER);
    t_watch_announce(&ctx->watch, 0);
    /* No communicator yet: the data plane refuses, it does not hang. */
    double x = 1;
    ftrt_request *r = (ftrt_request *)1;
    assert_int_equal(ftrt_allreduce(ctx, &x, 1, FTRT_FLOAT64, FTRT_SUM), FTRT_ESTATE);
    assert_int_equal(ftrt_allreduce(NULL, &x, 1, FTRT_FLOAT64, FTRT_SUM), FTRT_EINVAL);
    assert_int_equal(ftrt_allreduce_start(ctx, &x, 1, FTRT_FLOAT64, FTRT_SUM, &r), FTRT_ESTATE);
    assert_null(r);
    /* Only trainers train. */
    size_t counts[1] = {1};
    ftrt_bucketer *b = (ftrt_bucketer *)1;
    ctx->role = FTRT__ROLE_SPARE;
    assert_int_equal(ftrt_bucketer_create(ctx, counts, 1, FTRT_FLOAT32, NULL, &b), FTRT_ESTATE);
    assert_null(b);
    assert_int_equal(ftrt_allreduce(ctx, &x, 1, FTRT_FLOAT64, FTRT_SUM), FTRT_ESTATE);
    assert_int_equal(ftrt_checkpoint(ctx, 1), FTRT_ESTATE);
    assert_int_equal(ftrt_register(ctx, "s", &x, sizeof x, 0), FTRT_ESTATE);
    ctx->role = FTRT__ROLE_TRAINER;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(registry, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(device_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(entry_checks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
