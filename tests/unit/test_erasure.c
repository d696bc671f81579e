/*
 * Unit tests: the erasure code of redundancy groups (kernels/erasure.c on ISA-L). The rotated
 * layout (every member holds one position of every stripe; chunk j of member i where the layout
 * says); whole groups encoded from each member's contribution alone and rebuilt after every
 * single and every pair of lost members (k = 3..8, m = 2; k = 5, m = 1 and 3), byte for byte,
 * data and parity; one loss too many refused (FTRT_ECORRUPT); a corrupted fragment rebuilding
 * other bytes (what the caller's CRC32C is for); bad arguments. Without ISA-L in the build it
 * fails under CI / FTRT_STRICT_DEPS=1 (scripts/ensure-deps.sh installs libisal-dev) and skips
 * (77) otherwise.
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
#include "kernels/erasure.h"

static void fill(unsigned char *c, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        c[i] = (unsigned char)(seed >> 16);
    }
}

static void layout_is_a_rotation(void **state)
{
    (void)state;
    for (int k = 2; k <= FTRT__EC_MAX_K; k++)
        for (int m = 1; m <= FTRT__EC_MAX_M && m < k; m++) {
            int held[FTRT__EC_MAX_K][FTRT__EC_MAX_K] = {{0}};
            for (int s = 0; s < k; s++)
                for (int p = 0; p < k; p++) {
                    int i = ftrt__ec_member_at(k, s, p);
                    assert_true(i >= 0 && i < k);
                    assert_int_equal(ftrt__ec_position_of(k, s, i), p);
                    held[i][s]++;
                }
            for (int i = 0; i < k; i++) {
                for (int s = 0; s < k; s++) assert_int_equal(held[i][s], 1);
                for (int j = 0; j < k - m; j++) {
                    int s = ftrt__ec_stripe_of_chunk(k, m, i, j);
                    assert_int_equal(ftrt__ec_member_at(k, s, j), i); /* data position j */
                }
                assert_int_equal(ftrt__ec_stripe_of_chunk(k, m, i, k - m), -1);
            }
        }
    assert_int_equal(ftrt__ec_member_at(4, 4, 0), -1);
    assert_int_equal(ftrt__ec_position_of(4, 0, -1), -1);
    assert_int_equal(ftrt__ec_chunk_bytes(4, 2, 0), 0);
    assert_int_equal(ftrt__ec_chunk_bytes(4, 2, 1), 64);
    assert_int_equal(ftrt__ec_chunk_bytes(4, 2, 129), 128);
    assert_int_equal(ftrt__ec_chunk_bytes(6, 2, 4 * 64), 64);
}

/* A group: k members' images of S bytes, and each member's m parity chunks (one per stripe
 * where it holds a parity position), every chunk C bytes. */
typedef struct {
    int k, m, d;
    size_t S, C;
    unsigned char *img[FTRT__EC_MAX_K];             /* d * C bytes each (zero-padded) */
    unsigned char *par[FTRT__EC_MAX_K][FTRT__EC_MAX_K]; /* [stripe][parity row] */
} group;

static unsigned char *chunk(group *g, int s, int p)
{
    int i = ftrt__ec_member_at(g->k, s, p);
    return p < g->d ? g->img[i] + (size_t)p * g->C : g->par[s][p - g->d];
}

static void group_make(group *g, const ftrt__ec *ec, int k, int m, size_t S, unsigned seed)
{
    *g = (group){.k = k, .m = m, .d = k - m, .S = S, .C = ftrt__ec_chunk_bytes(k, m, S)};
    for (int i = 0; i < k; i++) {
        g->img[i] = calloc((size_t)g->d, g->C);
        assert_non_null(g->img[i]);
        fill(g->img[i], S, seed + (unsigned)i);
    }
    /* each stripe's parity: the XOR of its d data positions' contributions. Even positions:
     * computed alone (ftrt__ec_contribute, as a member does before the MPI_BXOR reduction)
     * into buffers holding garbage, which it must overwrite, then XORed in here; odd ones
     * XORed in by ftrt__ec_contribute_add */
    unsigned char *part[FTRT__EC_MAX_M];
    for (int r = 0; r < m; r++) assert_non_null(part[r] = malloc(g->C));
    for (int s = 0; s < k; s++) {
        for (int r = 0; r < m; r++) assert_non_null(g->par[s][r] = calloc(1, g->C));
        for (int p = 0; p < g->d; p++) {
            if (p % 2) {
                assert_int_equal(ftrt__ec_contribute_add(ec, p, chunk(g, s, p), g->C,
                                                         (void *const *)g->par[s]), 0);
                continue;
            }
            for (int r = 0; r < m; r++) memset(part[r], 0xa5 + r, g->C);
            assert_int_equal(ftrt__ec_contribute(ec, p, chunk(g, s, p), g->C,
                                                 (void *const *)part), 0);
            for (int r = 0; r < m; r++)
                for (size_t b = 0; b < g->C; b++) g->par[s][r][b] ^= part[r][b];
        }
    }
    for (int r = 0; r < m; r++) free(part[r]);
}

static void group_free(group *g)
{
    for (int i = 0; i < g->k; i++) free(g->img[i]);
    for (int s = 0; s < g->k; s++)
        for (int r = 0; r < g->m; r++) free(g->par[s][r]);
}

/* Loses the members of `lost` (a bit set), rebuilds every stripe, compares every rebuilt chunk
 * with the original; returns the FTRT code of the first stripe that failed, else 0, and sets
 * *diff when a rebuilt chunk differs. */
static int lose_and_rebuild(const ftrt__ec *ec, group *g, unsigned lost, int *diff)
{
    unsigned char *out[FTRT__EC_MAX_K] = {0};
    for (int q = 0; q < g->k; q++) assert_non_null(out[q] = malloc(g->C));
    int rc = 0;
    *diff = 0;
    for (int s = 0; s < g->k && rc == 0; s++) {
        const void *frag[FTRT__EC_MAX_K];
        for (int p = 0; p < g->k; p++)
            frag[p] = lost >> ftrt__ec_member_at(g->k, s, p) & 1u ? NULL : chunk(g, s, p);
        rc = ftrt__ec_rebuild(ec, frag, g->C, (void *const *)out);
        for (int p = 0; p < g->k && rc == 0; p++)
            if (!frag[p] && memcmp(out[p], chunk(g, s, p), g->C) != 0) *diff = 1;
        /* each lost position alone (ftrt__ec_rebuild_one): the same bytes, the same verdict */
        for (int p = 0; p < g->k; p++) {
            if (frag[p]) continue;
            memset(out[p], 0xa5, g->C);
            int one = ftrt__ec_rebuild_one(ec, frag, g->C, p, out[p]);
            if (one != rc) fail_msg("rebuild_one %d, rebuild %d (stripe %d, position %d)", one,
                                    rc, s, p);
            if (one == 0 && memcmp(out[p], chunk(g, s, p), g->C) != 0) *diff = 1;
        }
    }
    for (int q = 0; q < g->k; q++) free(out[q]);
    return rc;
}

static void every_pair_rebuilds(int k, int m, size_t S)
{
    ftrt__ec *ec = NULL;
    assert_int_equal(ftrt__ec_create(k, m, &ec), 0);
    assert_int_equal(ftrt__ec_k(ec), k);
    assert_int_equal(ftrt__ec_m(ec), m);
    group g;
    group_make(&g, ec, k, m, S, (unsigned)(k * 131 + S));
    int diff;
    for (unsigned lost = 0; lost < 1u << k; lost++) {
        int n = __builtin_popcount(lost);
        int rc = lose_and_rebuild(ec, &g, lost, &diff);
        if (n <= m) {
            if (rc != 0 || diff) fail_msg("k %d m %d S %zu lost %#x: rc %d diff %d", k, m, S,
                                          lost, rc, diff);
        } else {
            assert_int_equal(rc, FTRT_ECORRUPT);
        }
    }
    group_free(&g);
    ftrt__ec_destroy(ec);
}

static void two_losses_rebuild(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 13, 64, 1000, 4096 + 7, 65536 + 3};
    for (int k = 3; k <= 8; k++)
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) every_pair_rebuilds(k, 2, sizes[z]);
    every_pair_rebuilds(5, 1, 777);
    every_pair_rebuilds(5, 3, 777);
    every_pair_rebuilds(FTRT__EC_MAX_M + 1, FTRT__EC_MAX_M, 300);
}

/* A flipped byte in a surviving fragment decodes into other bytes without an error: the
 * caller's CRC32C of the rebuilt image is what catches it. */
static void corrupt_fragment_rebuilds_other_bytes(void **state)
{
    (void)state;
    ftrt__ec *ec = NULL;
    assert_int_equal(ftrt__ec_create(6, 2, &ec), 0);
    group g;
    group_make(&g, ec, 6, 2, 5000, 7);
    int diff;
    assert_int_equal(lose_and_rebuild(ec, &g, 0x5u, &diff), 0);
    assert_false(diff);
    g.img[3][17] ^= 0x40; /* member 3 survives, its chunk 0 corrupted */
    /* the originals now hold the corruption: compare against a fresh copy instead */
    group ref;
    group_make(&ref, ec, 6, 2, 5000, 7);
    unsigned char *out[FTRT__EC_MAX_K] = {0};
    for (int q = 0; q < 6; q++) assert_non_null(out[q] = malloc(g.C));
    int s = ftrt__ec_stripe_of_chunk(6, 2, 3, 0), wrong = 0;
    const void *frag[FTRT__EC_MAX_K];
    for (int p = 0; p < 6; p++) {
        int i = ftrt__ec_member_at(6, s, p);
        frag[p] = i == 0 || i == 2 ? NULL : chunk(&g, s, p);
    }
    assert_int_equal(ftrt__ec_rebuild(ec, frag, g.C, (void *const *)out), 0);
    for (int p = 0; p < 6; p++)
        if (!frag[p] && memcmp(out[p], chunk(&ref, s, p), g.C) != 0) wrong++;
    assert_true(wrong > 0);
    for (int q = 0; q < 6; q++) free(out[q]);
    group_free(&ref);
    group_free(&g);
    ftrt__ec_destroy(ec);
}

static void bad_arguments(void **state)
{
    (void)state;
    ftrt__ec *ec = NULL;
    assert_int_equal(ftrt__ec_create(4, 0, &ec), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_create(4, 4, &ec), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_create(FTRT__EC_MAX_K + 1, 2, &ec), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_create(8, FTRT__EC_MAX_M + 1, &ec), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_create(4, 2, NULL), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_create(4, 2, &ec), 0);
    unsigned char c[64] = {0}, p0[64], p1[64];
    void *par[2] = {p0, p1}, *par_null[2] = {p0, NULL};
    assert_int_equal(ftrt__ec_contribute(ec, 2, c, sizeof c, par), FTRT_EINVAL); /* parity pos */
    assert_int_equal(ftrt__ec_contribute(ec, -1, c, sizeof c, par), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_contribute(ec, 0, c, 0, par), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_contribute(ec, 0, NULL, sizeof c, par), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_contribute(ec, 0, c, sizeof c, par_null), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_contribute(NULL, 0, c, sizeof c, par), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_contribute_add(ec, 2, c, sizeof c, par), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_contribute_add(ec, 0, c, sizeof c, par_null), FTRT_EINVAL);
    const void *frag[4] = {c, NULL, c, c};
    void *out[4] = {NULL, NULL, NULL, NULL};
    assert_int_equal(ftrt__ec_rebuild(ec, frag, sizeof c, out), FTRT_EINVAL); /* no out[1] */
    assert_int_equal(ftrt__ec_rebuild(ec, frag, 0, out), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_rebuild(ec, NULL, sizeof c, out), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_rebuild_one(ec, frag, sizeof c, 0, c), FTRT_EINVAL); /* not lost */
    assert_int_equal(ftrt__ec_rebuild_one(ec, frag, sizeof c, -1, c), FTRT_EINVAL);
    assert_int_equal(ftrt__ec_rebuild_one(ec, frag, 0, 1, c), FTRT_EINVAL);
    ftrt__ec_destroy(ec);
    ftrt__ec_destroy(NULL);
}

static int strict(void)
{
    const char *s = getenv("FTRT_STRICT_DEPS"), *ci = getenv("CI");
    if (s && *s) return strcmp(s, "0") != 0;
    return ci && *ci && strcmp(ci, "false") != 0 && strcmp(ci, "0") != 0;
}

/* The groups of a job: every logical rank in exactly one group, at its member index; sizes
 * differ by at most one, none above FTRT__EC_MAX_K nor below 3; strided (ranks l and l + 1 in
 * different groups when there are several); no group below 3 trainers. */
static void groups_partition_the_ranks(void **state)
{
    (void)state;
    assert_int_equal(ftrt__ec_ngroups(2, 4), 0);
    assert_int_equal(ftrt__ec_ngroups(5, 2), 0);
    assert_int_equal(ftrt__ec_ngroups(4, 4), 1);
    assert_int_equal(ftrt__ec_ngroups(7, 4), 1);
    assert_int_equal(ftrt__ec_ngroups(8, 4), 2);
    assert_int_equal(ftrt__ec_ngroups(100, 32), 4); /* 3 groups would hold 34 */
    for (int n = 3; n <= 80; n++)
        for (int k = 3; k <= FTRT__EC_MAX_K; k++) {
            int ng = ftrt__ec_ngroups(n, k), seen[80] = {0}, lo = 1 << 30, hi = 0;
            assert_true(ng >= 1);
            for (int g = 0; g < ng; g++) {
                int size = ftrt__ec_group_size(n, k, g);
                lo = size < lo ? size : lo;
                hi = size > hi ? size : hi;
                for (int i = 0; i < size; i++) {
                    int l = ftrt__ec_group_member(n, k, g, i), idx = -1;
                    assert_true(l >= 0 && l < n);
                    seen[l]++;
                    assert_int_equal(ftrt__ec_group_of(n, k, l, &idx), g);
                    assert_int_equal(idx, i);
                }
                assert_int_equal(ftrt__ec_group_member(n, k, g, size), -1);
            }
            for (int l = 0; l < n; l++) assert_int_equal(seen[l], 1);
            assert_true(hi - lo <= 1 && lo >= 3 && hi <= FTRT__EC_MAX_K);
            if (ng > 1) assert_int_not_equal(ftrt__ec_group_of(n, k, 0, NULL),
                                             ftrt__ec_group_of(n, k, 1, NULL));
        }
    assert_int_equal(ftrt__ec_group_of(8, 4, 8, NULL), -1);
    assert_int_equal(ftrt__ec_group_size(8, 4, 2), -1);
}

int main(void)
{
    if (!ftrt__ec_available()) {
        fprintf(stderr, "test_erasure: libftrt was built without ISA-L (Debian: libisal-dev; "
                        "scripts/ensure-deps.sh installs it)%s\n",
                strict() ? "" : ": skipped");
        return strict() ? 1 : 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layout_is_a_rotation),
        cmocka_unit_test(two_losses_rebuild),
        cmocka_unit_test(corrupt_fragment_rebuilds_other_bytes),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(groups_partition_the_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
