/*
 * erasure.c - Reed-Solomon erasure code of ftrt's redundancy groups on ISA-L: the rotated
 * layout of a group's stripes, each member's contribution to a stripe's parity, and the
 * rebuild of up to m lost positions (the layout and the contracts: kernels/erasure.h).
 *
 * ISA-L does the GF(2^8) arithmetic (gf_gen_cauchy1_matrix, ec_init_tables, ec_encode_data,
 * ec_encode_data_update, gf_invert_matrix, gf_mul); this file only picks the rows. Without
 * ISA-L (FTRT_HAVE_ISAL undefined) the codec cannot be made and says so.
 */
#include "kernels/erasure.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ftrt.h"

#ifdef FTRT_HAVE_ISAL
#include <isa-l/erasure_code.h>
#endif

struct ftrt__ec {
    int k, m, d;
    /* k x d encoding matrix (rows 0..d-1 the identity, d..k-1 the parity coefficients) */
    unsigned char a[FTRT__EC_MAX_K * FTRT__EC_MAX_K];
    /* ISA-L's expanded tables of the m parity rows: 32 * d * m bytes */
    unsigned char tbls[32 * FTRT__EC_MAX_K * FTRT__EC_MAX_M];
    /* per data position p, the tables of column p alone (32 * m bytes each): its contribution
     * written in one pass of ec_encode_data, without zeroing or reading the parity first */
    unsigned char col[FTRT__EC_MAX_K][32 * FTRT__EC_MAX_M];
};

int ftrt__ec_available(void)
{
#ifdef FTRT_HAVE_ISAL
    return 1;
#else
    return 0;
#endif
}

int ftrt__ec_k(const ftrt__ec *ec) { return ec ? ec->k : 0; }
int ftrt__ec_m(const ftrt__ec *ec) { return ec ? ec->m : 0; }

size_t ftrt__ec_chunk_bytes(int k, int m, size_t image_bytes)
{
    size_t d = (size_t)(k - m);
    if (image_bytes == 0 || k - m < 1) return 0;
    size_t c = (image_bytes + d - 1) / d;
    return (c + 63) & ~(size_t)63;
}

static int mod(int a, int k) { return ((a % k) + k) % k; }

int ftrt__ec_member_at(int k, int s, int p)
{
    if (k < 1 || s < 0 || s >= k || p < 0 || p >= k) return -1;
    return mod(s + p, k);
}

int ftrt__ec_position_of(int k, int s, int i)
{
    if (k < 1 || s < 0 || s >= k || i < 0 || i >= k) return -1;
    return mod(i - s, k);
}

int ftrt__ec_stripe_of_chunk(int k, int m, int i, int j)
{
    if (k < 1 || i < 0 || i >= k || j < 0 || j >= k - m) return -1;
    return mod(i - j, k);
}

int ftrt__ec_ngroups(int n, int k)
{
    if (n < FTRT__EC_PARITY + 1 || k < FTRT__EC_PARITY + 1) return 0;
    int g = n / k > 1 ? n / k : 1;
    int most = (n + FTRT__EC_MAX_K - 1) / FTRT__EC_MAX_K; /* no group above FTRT__EC_MAX_K */
    return g > most ? g : most;
}

int ftrt__ec_group_of(int n, int k, int l, int *idx)
{
    int g = ftrt__ec_ngroups(n, k);
    if (g < 1 || l < 0 || l >= n) return -1;
    if (idx) *idx = l / g;
    return l % g;
}

int ftrt__ec_group_size(int n, int k, int g)
{
    int ng = ftrt__ec_ngroups(n, k);
    if (ng < 1 || g < 0 || g >= ng) return -1;
    return (n - g + ng - 1) / ng;
}

int ftrt__ec_group_member(int n, int k, int g, int i)
{
    int size = ftrt__ec_group_size(n, k, g);
    if (size < 0 || i < 0 || i >= size) return -1;
    return g + i * ftrt__ec_ngroups(n, k);
}

int ftrt__ec_create(int k, int m, ftrt__ec **out)
{
    if (!out || m < 1 || m > FTRT__EC_MAX_M || k > FTRT__EC_MAX_K || k - m < 1)
        return FTRT_EINVAL;
    *out = NULL;
#ifdef FTRT_HAVE_ISAL
    ftrt__ec *ec = calloc(1, sizeof *ec);
    if (!ec) return -ENOMEM;
    ec->k = k, ec->m = m, ec->d = k - m;
    gf_gen_cauchy1_matrix(ec->a, k, ec->d);
    ec_init_tables(ec->d, m, &ec->a[ec->d * ec->d], ec->tbls);
    for (int p = 0; p < ec->d; p++) {
        unsigned char c[FTRT__EC_MAX_M];
        for (int r = 0; r < m; r++) c[r] = ec->a[(ec->d + r) * ec->d + p];
        ec_init_tables(1, m, c, ec->col[p]);
    }
    *out = ec;
    return 0;
#else
    return FTRT_ENOTSUP;
#endif
}

void ftrt__ec_destroy(ftrt__ec *ec) { free(ec); }

static int contribute_args(const ftrt__ec *ec, int p, const void *chunk, size_t len,
                           void *const *parity)
{
    if (!ec || !chunk || !parity || p < 0 || p >= ec->d || len == 0 || len > INT_MAX)
        return FTRT_EINVAL;
    for (int r = 0; r < ec->m; r++)
        if (!parity[r]) return FTRT_EINVAL;
    return 0;
}

int ftrt__ec_contribute(const ftrt__ec *ec, int p, const void *chunk, size_t len,
                        void *const *parity)
{
    int rc = contribute_args(ec, p, chunk, len, parity);
    if (rc) return rc;
#ifdef FTRT_HAVE_ISAL
    /* one source, m outputs: parity[r] = a[d + r][p] * chunk (ISA-L's prototype takes
     * non-const pointers; it reads chunk and writes parity only) */
    unsigned char *src = (unsigned char *)chunk;
    ec_encode_data((int)len, 1, ec->m, (unsigned char *)ec->col[p], &src, (unsigned char **)parity);
    return 0;
#else
    return FTRT_ENOTSUP;
#endif
}

int ftrt__ec_contribute_add(const ftrt__ec *ec, int p, const void *chunk, size_t len,
                            void *const *parity)
{
    int rc = contribute_args(ec, p, chunk, len, parity);
    if (rc) return rc;
#ifdef FTRT_HAVE_ISAL
    ec_encode_data_update((int)len, ec->d, ec->m, p, (unsigned char *)ec->tbls,
                          (unsigned char *)chunk, (unsigned char **)parity);
    return 0;
#else
    return FTRT_ENOTSUP;
#endif
}

#ifdef FTRT_HAVE_ISAL
/* The decode rows of the lost positions from the d survivors src_pos[]: for a lost data position
 * q, row q of the inverse; for a lost parity position q, row q of a times the inverse. */
static int decode_rows(const ftrt__ec *ec, const int *src_pos, const int *lost, int nlost,
                       unsigned char *rows)
{
    int d = ec->d;
    unsigned char b[FTRT__EC_MAX_K * FTRT__EC_MAX_K], inv[FTRT__EC_MAX_K * FTRT__EC_MAX_K];
    for (int i = 0; i < d; i++) memcpy(&b[i * d], &ec->a[src_pos[i] * d], (size_t)d);
    if (gf_invert_matrix(b, inv, d) < 0) return FTRT_ECORRUPT; /* cannot happen (Cauchy) */
    for (int l = 0; l < nlost; l++) {
        int q = lost[l];
        for (int j = 0; j < d; j++) {
            unsigned char s = 0;
            for (int i = 0; i < d; i++) s ^= gf_mul(ec->a[q * d + i], inv[i * d + j]);
            rows[l * d + j] = s;
        }
    }
    return 0;
}
#endif

int ftrt__ec_rebuild(const ftrt__ec *ec, const void *const *frag, size_t len, void *const *out)
{
    if (!ec || !frag || !out || len == 0 || len > INT_MAX) return FTRT_EINVAL;
    int lost[FTRT__EC_MAX_K], src_pos[FTRT__EC_MAX_K], nlost = 0, nsrc = 0;
    for (int q = 0; q < ec->k; q++) {
        if (frag[q]) {
            if (nsrc < ec->d) src_pos[nsrc++] = q;
        } else {
            if (!out[q]) return FTRT_EINVAL;
            lost[nlost++] = q;
        }
    }
    if (nlost == 0) return 0;
    if (nlost > ec->m) return FTRT_ECORRUPT;
#ifdef FTRT_HAVE_ISAL
    unsigned char rows[FTRT__EC_MAX_M * FTRT__EC_MAX_K];
    unsigned char *tbls = malloc((size_t)32 * ec->d * nlost);
    if (!tbls) return -ENOMEM;
    int rc = decode_rows(ec, src_pos, lost, nlost, rows);
    if (rc == 0) {
        unsigned char *src[FTRT__EC_MAX_K], *dst[FTRT__EC_MAX_M];
        for (int i = 0; i < ec->d; i++) src[i] = (unsigned char *)frag[src_pos[i]];
        for (int l = 0; l < nlost; l++) dst[l] = out[lost[l]];
        ec_init_tables(ec->d, nlost, rows, tbls);
        ec_encode_data((int)len, ec->d, nlost, tbls, src, dst);
    }
    free(tbls);
    return rc;
#else
    return FTRT_ENOTSUP;
#endif
}

int ftrt__ec_rebuild_one(const ftrt__ec *ec, const void *const *frag, size_t len, int want,
                         void *out)
{
    if (!ec || !frag || !out || len == 0 || want < 0 || want >= ec->k || frag[want])
        return FTRT_EINVAL;
    int src_pos[FTRT__EC_MAX_K], nsrc = 0;
    for (int q = 0; q < ec->k && nsrc < ec->d; q++)
        if (frag[q]) src_pos[nsrc++] = q;
    if (nsrc < ec->d) return FTRT_ECORRUPT;
#ifdef FTRT_HAVE_ISAL
    unsigned char rows[FTRT__EC_MAX_K], tbls[32 * FTRT__EC_MAX_K];
    int rc = decode_rows(ec, src_pos, &want, 1, rows);
    if (rc) return rc;
    ec_init_tables(ec->d, 1, rows, tbls);
    const size_t piece = (size_t)1 << 30; /* ISA-L's lengths are int */
    for (size_t o = 0; o < len; o += piece) {
        unsigned char *src[FTRT__EC_MAX_K], *dst = (unsigned char *)out + o;
        for (int i = 0; i < ec->d; i++) src[i] = (unsigned char *)frag[src_pos[i]] + o;
        ec_encode_data((int)(len - o < piece ? len - o : piece), ec->d, 1, tbls, src, &dst);
    }
    return 0;
#else
    return FTRT_ENOTSUP;
#endif
}
