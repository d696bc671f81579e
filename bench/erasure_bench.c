/*
 * erasure_bench.c - the local kernels of erasure-coded redundancy groups (kernels/erasure.c on
 * ISA-L) against memcpy of the same bytes, in one run (issue 37, "Measured": the local encode
 * kernel against memcpy, goal >= 0.5x).
 *
 * Run as `erasure_bench [--mib S] [--reps R] [--k K ...] [--m M]`. For each group size k (default
 * 4, 6, 8) with m parity positions (default 2), one member's image of S MiB (default 256) cut
 * into k - m chunks; each row is the median of R reps (default 5), the rows of one k
 * interleaved rep by rep, so that a noisy moment hits all of them:
 *
 *   memcpy       one memcpy of the member's S MiB into memory already faulted in (the
 *                reference: what a partner replica's local copy costs);
 *   encode       the member's contribution to its stripes' parity: for each of its k - m
 *                chunks, ftrt__ec_contribute (ISA-L's ec_encode_data, one source, m
 *                outputs) into m parity buffers of one chunk, reused from chunk to chunk (in a
 *                refresh each goes to the reduction onto the stripe's parity holders): S MiB
 *                read, m x S MiB written, where memcpy writes S MiB;
 *   encode 1MiB  the same in blocks of 1 MiB into m parity buffers of one block, reused (they
 *                stay in the cache): how a refresh streams contributions through its
 *                reduction block by block; S MiB read from memory, nothing large written;
 *   rebuild 2    two lost members' chunks of every stripe decoded from the survivors'
 *                fragments (ftrt__ec_rebuild, k stripes): 2 x S MiB rebuilt, the compute alone
 *                (in a recovery the fragments first travel to the rebuilding process).
 *
 * Prints, per row: ms, GB/s of image bytes (S for memcpy and encode, 2 x S for the rebuild) and
 * the ratio of memcpy's time to the row's (>= 1: faster than memcpy). The parity memory per
 * member (m/(k-m) x S) is printed beside. Not a test: figures only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "kernels/erasure.h"

#define MAX_REPS 64

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void *xalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "erasure_bench: out of memory (%zu B)\n", n);
        exit(1);
    }
    memset(p, 0x5a, n); /* faulted in */
    return p;
}

/* The buffers of one group of k as one member sees them (its image and parity) plus, for the
 * rebuild, every stripe's k fragments. */
typedef struct {
    int k, m, d;
    size_t S, C;
    unsigned char *img, *src, *dst; /* img: d*C; src: one image per other member, k*d*C; dst */
    unsigned char *par[FTRT__EC_MAX_M];
    unsigned char *blk[FTRT__EC_MAX_M];  /* BLOCK bytes each */
    unsigned char *stripe_par;      /* k*m*C: every stripe's parity */
} bufs;

static double t_memcpy(bufs *b)
{
    double t0 = ftrt__now();
    memcpy(b->dst, b->img, b->S);
    return ftrt__now() - t0;
}

static double t_encode(const ftrt__ec *ec, bufs *b)
{
    double t0 = ftrt__now();
    for (int j = 0; j < b->d; j++)
        if (ftrt__ec_contribute(ec, j, b->img + (size_t)j * b->C, b->C, (void *const *)b->par))
            exit(1);
    return ftrt__now() - t0;
}

/* As t_encode, in blocks of BLOCK bytes into m parity buffers of one block, reused from block
 * to block (they stay in the cache): how a refresh streams the contributions through the
 * reduction, block by block, without materializing m x S bytes. */
enum { BLOCK = 1 << 20 };
static double t_encode_blocked(const ftrt__ec *ec, bufs *b)
{
    double t0 = ftrt__now();
    for (int j = 0; j < b->d; j++)
        for (size_t off = 0; off < b->C; off += BLOCK) {
            size_t n = b->C - off < BLOCK ? b->C - off : BLOCK;
            if (ftrt__ec_contribute(ec, j, b->img + (size_t)j * b->C + off, n,
                                    (void *const *)b->blk))
                exit(1);
        }
    return ftrt__now() - t0;
}

/* Members 0 and 1 lost: every stripe's lost positions rebuilt into dst. */
static double t_rebuild(const ftrt__ec *ec, bufs *b)
{
    double t0 = ftrt__now();
    for (int s = 0; s < b->k; s++) {
        const void *frag[FTRT__EC_MAX_K];
        void *out[FTRT__EC_MAX_K];
        for (int p = 0; p < b->k; p++) {
            int i = ftrt__ec_member_at(b->k, s, p);
            unsigned char *c = p < b->d ? b->src + ((size_t)i * b->d + (size_t)p) * b->C
                                        : b->stripe_par + ((size_t)s * b->m + (size_t)(p - b->d)) * b->C;
            frag[p] = i < 2 ? NULL : c;
            out[p] = b->dst + (size_t)(i & 1) * b->d * b->C +
                     (size_t)(p < b->d ? p : 0) * b->C; /* (parity rebuilt over chunk 0) */
        }
        int rc = ftrt__ec_rebuild(ec, frag, b->C, out);
        if (rc) {
            fprintf(stderr, "erasure_bench: rebuild: %d\n", rc);
            exit(1);
        }
    }
    return ftrt__now() - t0;
}

static void run_k(int k, int m, size_t S, int reps)
{
    ftrt__ec *ec = NULL;
    int rc = ftrt__ec_create(k, m, &ec);
    if (rc) {
        fprintf(stderr, "erasure_bench: k %d m %d: %s\n", k, m,
                rc == -ENOMEM ? "out of memory" : "no codec (built without ISA-L?)");
        exit(1);
    }
    bufs b = {.k = k, .m = m, .d = k - m, .S = S, .C = ftrt__ec_chunk_bytes(k, m, S)};
    b.img = xalloc((size_t)b.d * b.C);
    b.dst = xalloc(2 * (size_t)b.d * b.C);
    b.src = xalloc((size_t)k * b.d * b.C);
    b.stripe_par = xalloc((size_t)k * m * b.C);
    for (int r = 0; r < m; r++) b.par[r] = xalloc(b.C), b.blk[r] = xalloc(BLOCK);
    double tm[MAX_REPS], te[MAX_REPS], tb[MAX_REPS], tr[MAX_REPS];
    for (int i = 0; i < reps; i++) {
        tm[i] = t_memcpy(&b);
        te[i] = t_encode(ec, &b);
        tb[i] = t_encode_blocked(ec, &b);
        tr[i] = t_rebuild(ec, &b);
    }
    double m_ = median(tm, reps), e = median(te, reps), eb = median(tb, reps);
    double r = median(tr, reps);
    double mib = (double)S / (1 << 20);
    printf("k %d m %d: %.0f MiB per member, chunk %zu B, parity held %.2fx the image\n", k, m,
           mib, b.C, (double)m / b.d);
    printf("  memcpy      %9.2f ms  %6.2f GB/s  1.00x\n", m_ * 1e3, S / m_ / 1e9);
    printf("  encode      %9.2f ms  %6.2f GB/s  %.2fx memcpy\n", e * 1e3, S / e / 1e9, m_ / e);
    printf("  encode 1MiB %9.2f ms  %6.2f GB/s  %.2fx memcpy\n", eb * 1e3, S / eb / 1e9, m_ / eb);
    printf("  rebuild 2   %9.2f ms  %6.2f GB/s  %.2fx memcpy of 2 images\n", r * 1e3,
           2.0 * S / r / 1e9, 2 * m_ / r);
    fflush(stdout);
    for (int i = 0; i < m; i++) free(b.par[i]), free(b.blk[i]);
    free(b.img), free(b.dst), free(b.src), free(b.stripe_par);
    ftrt__ec_destroy(ec);
}

int main(int argc, char **argv)
{
    size_t mib = 256;
    int reps = 5, m = 2, ks[8], nk = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--m") && i + 1 < argc) m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--k") && i + 1 < argc && nk < 8) ks[nk++] = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: erasure_bench [--mib S] [--reps R] [--k K ...] [--m M]\n");
            return 2;
        }
    }
    if (nk == 0) ks[0] = 4, ks[1] = 6, ks[2] = 8, nk = 3;
    if (mib < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "erasure_bench: --mib >= 1, 1 <= --reps <= %d\n", MAX_REPS);
        return 2;
    }
    if (!ftrt__ec_available()) {
        fprintf(stderr, "erasure_bench: libftrt was built without ISA-L (libisal-dev)\n");
        return 1;
    }
    for (int i = 0; i < nk; i++) {
        if (ks[i] - m < 1 || ks[i] > FTRT__EC_MAX_K || m < 1 || m > FTRT__EC_MAX_M) {
            fprintf(stderr, "erasure_bench: k %d, m %d outside the codec's limits\n", ks[i], m);
            return 2;
        }
        run_k(ks[i], m, mib << 20, reps);
    }
    return 0;
}
