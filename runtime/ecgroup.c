/*
 * ecgroup.c - erasure-coded redundancy groups of sharded state in memory
 * (FTRT_SHARD_REDUNDANCY=erasure; docs/detection-and-recovery.md "Erasure groups").
 *
 * A partner replica (replica.c) survives one loss per pair: a trainer lost with its partner
 * sends every rank back to the checkpoint. Here the trainers form groups (kernels/erasure.h
 * ftrt__ec_group_*: logical rank l in group l mod G) and each group keeps FTRT__EC_PARITY = 2
 * Reed-Solomon parity chunks per stripe over its members' sharded images, so that any two lost
 * members of a group are rebuilt from the survivors' memory: SCR's RS redundancy descriptor
 * (scr_reddesc.c) applied to processes, with ISA-L's codec (kernels/erasure.c).
 *
 * Refresh (with the images, replica.c ftrt__replica_refresh): every member has just copied its
 * regions into its own image (sharded ones first, S_i bytes). The sizes and CRC32Cs of the
 * sharded parts are agreed over the plane; in each group every image is cut into k - 2 chunks
 * of C bytes (C from the group's largest, zero-padded); each member computes its data chunks'
 * contributions to their stripes' parity (ISA-L's ec_encode_data on one column) and sends them
 * to the stripe's two parity holders, which XOR the k - 2 contributions they receive: the
 * point-to-point form of an MPI_BXOR reduction, pipelined in pieces of 4 MiB so that the extra
 * memory of a refresh stays O(pieces), not O(images). No member ever holds another's data.
 * Each member keeps its 2 parity chunks (2 / (k - 2) of its shard: 1x for k = 4, as a partner
 * replica) with their CRC32C, verified before it offers them to a recovery (REPORT).
 *
 * One generation: the parity is invalid while it is being refreshed (and the own images are
 * being replaced), so a failure during a refresh falls back to the checkpoint.
 *
 * Rebuild (ftrt__ec_restore, in a memory plan whose PLAN names FTRT__SHARD_SRC_ERASURE for a
 * replaced rank): for each of its data chunks, the replaced rank receives k - 2 surviving
 * fragments of that chunk's stripe (the first usable positions: survivors' data chunks from
 * their own images, survivors' parity of the plan's step) and decodes its chunk (ISA-L's
 * inverted submatrix, one row: ftrt__ec_rebuild_one); the rebuilt sharded image is checked against the
 * CRC32C agreed at the refresh before any byte of it reaches the regions. A rebuild moves
 * (k - 2) images' worth of bytes per lost member.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/knobs.h"
#include "base/log.h"
#include "comm/transfer.h"
#include "kernels/erasure.h"
#include "runtime/internal.h"

enum { TAG_CONTRIB = 7300, TAG_FRAG = 7400 };
#define PIECE ((size_t)4 << 20) /* bytes per pipelined round of the parity's reduction */
#define M FTRT__EC_PARITY
_Static_assert(sizeof ((ftrt__ecgroup *)0)->bytes / sizeof(int64_t) >= FTRT__EC_MAX_K &&
                   sizeof ((ftrt__ecgroup *)0)->crc / sizeof(uint32_t) >= FTRT__EC_MAX_K,
               "ftrt__ecgroup (internal.h) holds a group of FTRT__EC_MAX_K members");

/* This rank's place in its group for n trainers: ec->g, ec->kg, ec->idx, and a codec for kg
 * (kept while kg does not change). Returns 0, 1 (no group can be formed: n < 3), -ENOMEM. */
static int place(ftrt_ctx *ctx, int n)
{
    ftrt__ecgroup *ec = &ctx->ec;
    int k = ctx->cfg.ec_group;
    if (ftrt__ec_ngroups(n, k) < 1) return 1;
    ec->g = ftrt__ec_group_of(n, k, ctx->rank, &ec->idx);
    ec->kg = ftrt__ec_group_size(n, k, ec->g);
    if (ec->codec && ftrt__ec_k(ec->codec) == ec->kg) return 0;
    ftrt__ec_destroy(ec->codec);
    ec->codec = NULL;
    int rc = ftrt__ec_create(ec->kg, M, &ec->codec);
    return rc == -ENOMEM ? -ENOMEM : rc ? FTRT_ENOTSUP : 0;
}

/* The logical rank of member i of this rank's group. */
static int member(const ftrt_ctx *ctx, int i)
{
    return ftrt__ec_group_member(ctx->size, ctx->cfg.ec_group, ctx->ec.g, i);
}

/* Agrees, over the plane, on every trainer's sharded image: bytes (-1: this refresh has none)
 * and CRC32C, into ec->bytes / ec->crc for this rank's group members (by member index), and on
 * the group's chunk size into ec->chunk (0: some member has no image: no parity this time).
 * Returns 0 or the allreduce's code. */
static int agree_images(ftrt_ctx *ctx, int have, uint32_t crc)
{
    ftrt__ecgroup *ec = &ctx->ec;
    int n = ctx->size;
    int64_t *v = calloc(2 * (size_t)n, sizeof *v);
    if (!v) return -ENOMEM;
    v[ctx->rank] = have ? (int64_t)ctx->rep.own_shard + 1 : 0;
    v[n + ctx->rank] = crc;
    int rc = ftrt__plane_allreduce(&ctx->plane, v, 2 * (size_t)n, FTRT_INT64, FTRT_SUM);
    size_t most = 0;
    int all = 1;
    for (int i = 0; !rc && i < ec->kg; i++) {
        int l = member(ctx, i);
        ec->bytes[i] = v[l] - 1;
        ec->crc[i] = (uint32_t)v[n + l];
        all &= v[l] > 0;
        if (v[l] > 0 && (size_t)(v[l] - 1) > most) most = (size_t)(v[l] - 1);
    }
    ec->chunk = all ? ftrt__ec_chunk_bytes(ec->kg, M, most) : 0;
    free(v);
    return rc;
}

/* Makes ec->parity hold M chunks of ec->chunk bytes. Returns 0 or -ENOMEM. */
static int grow_parity(ftrt__ecgroup *ec)
{
    size_t want = (size_t)M * ec->chunk;
    if (ec->parity_cap >= want) return 0;
    unsigned char *p = realloc(ec->parity, want);
    if (!p) return -ENOMEM;
    ec->parity = p;
    ec->parity_cap = want;
    return 0;
}

/* The bytes of this rank's data chunk j at offset off, len of them, zero-padded past its image
 * into pad (len bytes) when they run out: a pointer to them. */
static const unsigned char *data_piece(const ftrt_ctx *ctx, int j, size_t off, size_t len,
                                       unsigned char *pad)
{
    size_t at = (size_t)j * ctx->ec.chunk + off, have = ctx->rep.own_shard;
    if (at + len <= have) return ctx->rep.own + at;
    size_t n = at < have ? have - at : 0;
    if (n) memcpy(pad, ctx->rep.own + at, n);
    memset(pad + n, 0, len - n);
    return pad;
}

static void xor_into(unsigned char *dst, const unsigned char *src, size_t len)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t a, b;
        memcpy(&a, dst + i, 8);
        memcpy(&b, src + i, 8);
        a ^= b;
        memcpy(dst + i, &a, 8);
    }
    for (; i < len; i++) dst[i] ^= src[i];
}

/* Buffers of one refresh round: d * M contributions, M * (d - 1) receives (the first of each
 * parity row lands in the parity itself), a zero-padded data piece. */
typedef struct round_bufs {
    unsigned char *contrib, *recv, *pad;
    MPI_Request *req;
} round_bufs;

/* One pipelined round at offset off (len bytes of every chunk): contributions out, the
 * stripes' contributions in and XORed into this rank's parity. Returns 0, FTRT_EMPI, the
 * codec's or the plane's wait's code. */
static int refresh_round(ftrt_ctx *ctx, round_bufs *b, size_t off, size_t len)
{
    ftrt__ecgroup *ec = &ctx->ec;
    int kg = ec->kg, d = kg - M, i = ec->idx, q = 0, rc = 0;
    MPI_Comm comm = ctx->plane.comm;
    for (int j = 0; j < d && !rc; j++) { /* my chunk j is position j of stripe (i - j) mod kg */
        int s = ftrt__ec_stripe_of_chunk(kg, M, i, j);
        void *rows[M];
        for (int r = 0; r < M; r++) rows[r] = b->contrib + ((size_t)j * M + r) * PIECE;
        rc = ftrt__ec_contribute(ec->codec, j, data_piece(ctx, j, off, len, b->pad), len, rows);
        for (int r = 0; r < M && !rc; r++)
            if (MPI_Isend(rows[r], (int)len, MPI_BYTE, member(ctx, ftrt__ec_member_at(kg, s, d + r)),
                          TAG_CONTRIB + s * M + r, comm, &b->req[q++]) != MPI_SUCCESS)
                rc = FTRT_EMPI;
    }
    for (int r = 0; r < M && !rc; r++) { /* I hold parity row r of stripe (i - d - r) mod kg */
        int s = ((i - d - r) % kg + kg) % kg;
        for (int p = 0; p < d && !rc; p++) {
            unsigned char *to = p == 0 ? ec->parity + (size_t)r * ec->chunk + off
                                       : b->recv + ((size_t)r * (d - 1) + p - 1) * PIECE;
            if (MPI_Irecv(to, (int)len, MPI_BYTE, member(ctx, ftrt__ec_member_at(kg, s, p)),
                          TAG_CONTRIB + s * M + r, comm, &b->req[q++]) != MPI_SUCCESS)
                rc = FTRT_EMPI;
        }
    }
    if (rc) return rc; /* (requests posted so far complete or are abandoned with the epoch) */
    rc = ftrt__plane_waitall(&ctx->plane, q, b->req);
    for (int r = 0; r < M && !rc; r++)
        for (int p = 1; p < d; p++)
            xor_into(ec->parity + (size_t)r * ec->chunk + off,
                     b->recv + ((size_t)r * (d - 1) + p - 1) * PIECE, len);
    return rc;
}

/* Test knob: the trainer FTRT_TEST_EC_DIE_RANK - 1 SIGKILLs itself in the middle of the refresh
 * of step FTRT_TEST_EC_DIE_STEP: its image taken and the images' sizes agreed, no contribution
 * sent (the others' parity cannot complete). */
static void die_if_asked(const ftrt_ctx *ctx, int64_t step)
{
    if (ftrt__knobs.ec_die_rank > 0 && ctx->rank == ftrt__knobs.ec_die_rank - 1 &&
        step == ftrt__knobs.ec_die_step && ctx->watch.epoch == 0) { /* (once: not the spare) */
        ftrt_log_warn("test knob FTRT_TEST_EC_DIE_RANK: dying in the refresh of step %lld",
                      (long long)step);
        raise(SIGKILL);
    }
}

static void free_bufs(round_bufs *b)
{
    free(b->contrib);
    free(b->recv);
    free(b->pad);
    free(b->req);
    memset(b, 0, sizeof *b);
}

/* The refresh's memory (a round's buffers into *b, the parity grown; none when this rank's
 * group makes no parity: ec->chunk 0), then whether every trainer has it (one MIN allreduce
 * over all of them, whatever their group: a member that lacks it must not leave the others
 * waiting for its contributions). Returns 0 (*b allocated where needed), 1 (some trainer lacks
 * memory: nothing allocated, no parity this time; logged where it lacked), or the allreduce's
 * code. */
static int agree_memory(ftrt_ctx *ctx, round_bufs *b)
{
    ftrt__ecgroup *ec = &ctx->ec;
    int d = ec->kg - M;
    int64_t ok = 1;
    if (ec->chunk > 0) {
        *b = (round_bufs){malloc((size_t)d * M * PIECE),
                          malloc((size_t)M * (d > 1 ? d - 1 : 1) * PIECE), malloc(PIECE),
                          malloc((size_t)(2 * d * M) * sizeof(MPI_Request))};
        ok = b->contrib && b->recv && b->pad && b->req && grow_parity(ec) == 0;
    }
    if (!ok)
        ftrt_log_warn("erasure group %d: no memory for %zu bytes of parity and the refresh's "
                      "buffers", ec->g, (size_t)M * ec->chunk);
    int rc = ftrt__plane_allreduce(&ctx->plane, &ok, 1, FTRT_INT64, FTRT_MIN);
    if (rc || !ok) free_bufs(b);
    return rc ? rc : ok ? 0 : 1;
}

/* The pipelined reduction of this group's parity with the buffers of agree_memory (freed
 * here). On an error every buffer that MPI may still write into is buried (the parity too).
 * Returns 0 or what refresh_round returns. */
static int reduce_parity(ftrt_ctx *ctx, round_bufs *b, int64_t step)
{
    ftrt__ecgroup *ec = &ctx->ec;
    int rc = 0;
    die_if_asked(ctx, step);
    for (size_t off = 0; !rc && off < ec->chunk; off += PIECE)
        rc = refresh_round(ctx, b, off, ec->chunk - off < PIECE ? ec->chunk - off : PIECE);
    if (rc) { /* requests may still complete into these */
        ftrt__plane_bury(&ctx->plane, b->contrib);
        ftrt__plane_bury(&ctx->plane, b->recv);
        ftrt__plane_bury(&ctx->plane, ec->parity);
        b->contrib = b->recv = NULL;
        ec->parity = NULL;
        ec->parity_cap = 0;
    }
    free_bufs(b);
    return rc;
}

int ftrt__ec_refresh(ftrt_ctx *ctx, int64_t step, int have, uint32_t crc_shard)
{
    ftrt__ecgroup *ec = &ctx->ec;
    ec->step = -1; /* one generation: invalid until this refresh completes */
    int rc = place(ctx, ctx->size);
    if (rc == 1) {
        if (!ec->warned++)
            ftrt_log_warn("erasure groups need 3 trainers or more (%d here): sharded state is "
                          "protected by the checkpoint only", ctx->size);
        return 0;
    }
    if (!rc) rc = agree_images(ctx, have, crc_shard);
    round_bufs b = {0};
    if (!rc) rc = agree_memory(ctx, &b); /* (every trainer, whatever its group's chunk) */
    if (rc == 1) return 0; /* a trainer is out of memory: no parity this time */
    if (!rc && ec->chunk == 0) return 0; /* a member of the group kept no image this time */
    if (!rc) rc = reduce_parity(ctx, &b, step);
    if (rc == FTRT_ERECOVER) ctx->watch.needs_recover = 1;
    if (rc) {
        ftrt_log_warn("erasure group %d: no parity of step %lld (%s)", ec->g, (long long)step,
                      ftrt_strerror(rc));
        return rc == FTRT_ENOTSUP ? 0 : rc;
    }
    ec->crc_parity = ftrt__crc32c(0, ec->parity, (size_t)M * ec->chunk);
    if (ftrt__knobs.ec_corrupt > 0 && ctx->rank == ftrt__knobs.ec_corrupt - 1)
        ec->parity[ec->chunk / 2] ^= 0x10; /* test knob: memory corrupted while held */
    ec->n = ctx->size;
    ec->step = step;
    return 0;
}

void ftrt__ec_offer(ftrt_ctx *ctx, int64_t *ec_step, int32_t *ec_n, int32_t *ec_k)
{
    ftrt__ecgroup *ec = &ctx->ec;
    *ec_step = -1;
    *ec_n = ec->n;
    *ec_k = ctx->cfg.shard_redundancy == FTRT_SHARD_ERASURE && ec->kg > 0 /* (a refresh placed
                                                                               it in a group) */
                ? ctx->cfg.ec_group : 0;
    if (ec->step < 0 || !*ec_k) return;
    if (ftrt__crc32c(0, ec->parity, (size_t)M * ec->chunk) != ec->crc_parity) {
        ftrt_log_error("erasure group %d: this rank's parity of step %lld fails its CRC32C "
                       "(memory corrupted since it was made); not offered", ec->g,
                       (long long)ec->step);
        return;
    }
    *ec_step = ec->step;
}

/* What every member agrees on before a rebuild, 4n int64 by logical rank l: [l] 1 when l's
 * parity is usable (of step `step`, for this layout, verified at the REPORT), [n + l] the chunk
 * size of l's group, [2n + l] l's sharded bytes + 1, [3n + l] their CRC32C, as the group's
 * usable holders recorded them at the refresh (MAX over them: the same values). *out malloc'd.
 * Returns 0, -ENOMEM or the allreduce's code. */
static int agree_rebuild(ftrt_ctx *ctx, int64_t step, int64_t **out)
{
    ftrt__ecgroup *ec = &ctx->ec;
    int n = ctx->size;
    int64_t *v = calloc(4 * (size_t)n, sizeof *v);
    if (!v) return -ENOMEM;
    int64_t s32;
    int32_t en, ek;
    ftrt__ec_offer(ctx, &s32, &en, &ek); /* (checks the parity's CRC32C once more) */
    if (s32 == step && en == n && ek > 0 && ec->kg > 0) {
        v[ctx->rank] = 1;
        for (int i = 0; i < ec->kg; i++) {
            int l = member(ctx, i);
            v[n + l] = (int64_t)ec->chunk;
            v[2 * n + l] = ec->bytes[i] + 1;
            v[3 * n + l] = ec->crc[i];
        }
    }
    int rc = ftrt__plane_allreduce(&ctx->plane, v, 4 * (size_t)n, FTRT_INT64, FTRT_MAX);
    if (rc) free(v);
    else *out = v;
    return rc;
}

/* The fragments of stripe s of group g (size kg) that rebuild a lost chunk: the first k - 2
 * usable positions (a surviving member's data chunk, a surviving member's usable parity) into
 * pos[], their logical ranks into who[]. Returns how many (k - 2 unless the plan was wrong). */
static int choose(const ftrt_ctx *ctx, const int64_t *v, int g, int kg, int s, int *pos, int *who)
{
    const int32_t *ss = ftrt__plan_shard_src_c(ctx->plan);
    int n = ctx->size, k = ctx->cfg.ec_group, c = 0;
    for (int q = 0; q < kg && c < kg - M; q++) {
        int l = ftrt__ec_group_member(n, k, g, ftrt__ec_member_at(kg, s, q));
        if (ss[l] == FTRT__SHARD_SRC_ERASURE || (q >= kg - M && !v[l])) continue;
        pos[c] = q;
        who[c++] = l;
    }
    return c;
}

/* A rebuild's buffers at the receiver: d + 1 chunks (the fragments, an output); the requests
 * of a round (a fragment in messages of at most 1 GiB). */
typedef struct rebuild_bufs {
    unsigned char *buf;
    size_t cap;
    MPI_Request *req;
    int nreq;
} rebuild_bufs;

#define MSG ((size_t)1 << 30) /* bytes per MPI message of a fragment (int counts) */

/* Posts a fragment of C bytes at p to (send) or from peer, one message per MSG bytes of C
 * (into b->req[*q...]), so that both sides post as many; a sender holds only `have` bytes of
 * it (a data chunk past its image's end: the receiver's zeros stand for the rest) and sends
 * what it holds of each piece. Returns 0 or FTRT_EMPI. */
static int post(rebuild_bufs *b, int *q, int send, unsigned char *p, size_t C, size_t have,
                int peer, int tag, MPI_Comm comm)
{
    for (size_t o = 0; o < C; o += MSG) {
        size_t piece = C - o < MSG ? C - o : MSG;
        size_t n = !send ? piece : have <= o ? 0 : have - o < piece ? have - o : piece;
        int rc = send ? MPI_Isend(p + (n ? o : 0), (int)n, MPI_BYTE, peer, tag, comm,
                                  &b->req[(*q)++])
                      : MPI_Irecv(p + o, (int)n, MPI_BYTE, peer, tag, comm, &b->req[(*q)++]);
        if (rc != MPI_SUCCESS) return FTRT_EMPI;
    }
    return 0;
}

/* Decodes chunk j (position j of its stripe) of the lost member at the receiver from the
 * fragments in b (at pos[0..d)), into its own image: in place where the chunk fits in the
 * image's buffer, else through b's last chunk. Returns 0 or the codec's code. */
static int decode_chunk(ftrt_ctx *ctx, rebuild_bufs *b, int kg, int j, const int *pos,
                        size_t C, size_t S)
{
    const void *frag[FTRT__EC_MAX_K] = {0};
    int d = kg - M;
    for (int c = 0; c < d; c++) frag[pos[c]] = b->buf + (size_t)c * C;
    size_t at = (size_t)j * C;
    int direct = at + C <= ctx->rep.own_cap;
    unsigned char *out = direct ? ctx->rep.own + at : b->buf + (size_t)d * C;
    int rc = ftrt__ec_rebuild_one(ctx->ec.codec, frag, C, j, out);
    if (!rc && !direct && at < S) memcpy(ctx->rep.own + at, out, S - at < C ? S - at : C);
    return rc;
}

/* One round of the rebuild: chunk j of lost logical rank l (member i of group g, size kg)
 * from its stripe's fragments, sent by their holders, decoded at l. Collective over the plane
 * in the sense that every member runs the rounds in the same order; only the holders and l
 * act. Returns 0, FTRT_ECORRUPT (too few fragments), FTRT_EMPI, -ENOMEM, the wait's code. */
static int rebuild_round(ftrt_ctx *ctx, const int64_t *v, rebuild_bufs *b, int l, int j)
{
    int n = ctx->size, k = ctx->cfg.ec_group, i, g = ftrt__ec_group_of(n, k, l, &i);
    int kg = ftrt__ec_group_size(n, k, g), d = kg - M, s = ftrt__ec_stripe_of_chunk(kg, M, i, j);
    int pos[FTRT__EC_MAX_K], who[FTRT__EC_MAX_K], q = 0, rc = 0, me = ctx->rank;
    size_t C = (size_t)v[n + l], S = (size_t)(v[2 * n + l] - 1);
    if (choose(ctx, v, g, kg, s, pos, who) < d || C == 0) return FTRT_ECORRUPT;
    MPI_Comm comm = ctx->plane.comm;
    int want = d * (int)((C + MSG - 1) / MSG);
    if (b->nreq < want) {
        free(b->req);
        b->nreq = 0;
        if (!(b->req = malloc((size_t)want * sizeof *b->req))) return -ENOMEM;
        b->nreq = want;
    }
    if (me == l && b->cap < (size_t)(d + 1) * C) { /* d fragments and an output chunk */
        free(b->buf);
        b->cap = 0;
        if (!(b->buf = malloc((size_t)(d + 1) * C))) return -ENOMEM;
        b->cap = (size_t)(d + 1) * C;
    }
    for (int c = 0; c < d && !rc; c++) {
        if (me == l) {
            memset(b->buf + (size_t)c * C, 0, C); /* (a data chunk past an image's end: zeros) */
            rc = post(b, &q, 0, b->buf + (size_t)c * C, C, C, who[c], TAG_FRAG + pos[c], comm);
        } else if (me == who[c]) { /* a data chunk (what the image holds of it) or a parity */
            size_t at = (size_t)pos[c] * C, img = ctx->rep.own_shard;
            size_t have = pos[c] >= d ? C : at < img ? img - at : 0;
            unsigned char *src = pos[c] < d ? ctx->rep.own + (have ? at : 0)
                                            : ctx->ec.parity + (size_t)(pos[c] - d) * C;
            rc = post(b, &q, 1, src, C, have, l, TAG_FRAG + pos[c], comm);
        }
    }
    if (!rc && q) rc = ftrt__plane_waitall(&ctx->plane, q, b->req);
    if (rc && me == l) { /* receives may still complete into it */
        ftrt__plane_bury(&ctx->plane, b->buf);
        b->buf = NULL;
        b->cap = 0;
    }
    if (!rc && me == l) rc = decode_chunk(ctx, b, kg, j, pos, C, S);
    return rc;
}

/* After the rounds, at a rebuilt rank: its sharded image against the CRC32C agreed at the
 * refresh. Returns 0, FTRT_EMISMATCH (another size than its regions'), FTRT_ECORRUPT. */
static int check_rebuilt(const ftrt_ctx *ctx, const int64_t *v)
{
    int n = ctx->size, l = ctx->rank;
    size_t S = (size_t)(v[2 * n + l] - 1);
    if (S != ctx->rep.own_shard) {
        ftrt_log_error("recovery: the erasure group recorded %zu sharded bytes for logical rank "
                       "%d, its regions hold %zu", S, l, ctx->rep.own_shard);
        return FTRT_EMISMATCH;
    }
    uint32_t got = ftrt__crc32c(0, ctx->rep.own, S);
    if (got != (uint32_t)v[3 * n + l]) {
        ftrt_log_error("recovery: the sharded image of logical rank %d rebuilt from its erasure "
                       "group fails its CRC32C (%08x, recorded %08x): a fragment was corrupted",
                       l, got, (uint32_t)v[3 * n + l]);
        return FTRT_ECORRUPT;
    }
    return 0;
}

int ftrt__ec_restore(ftrt_ctx *ctx, int64_t step, ftrt__xfer_stat *st)
{
    const int32_t *ss = ftrt__plan_shard_src_c(ctx->plan);
    int n = ctx->size, k = ctx->cfg.ec_group, me = ctx->rank;
    int rc = place(ctx, n);
    if (rc) return rc == 1 ? FTRT_EMISMATCH : rc;
    int64_t *v = NULL;
    rc = agree_rebuild(ctx, step, &v);
    if (rc) return rc;
    rebuild_bufs b = {0};
    double t0 = ftrt__now();
    for (int l = 0; l < n && !rc; l++) {
        if (ss[l] != FTRT__SHARD_SRC_ERASURE) continue;
        int d = ftrt__ec_group_size(n, k, ftrt__ec_group_of(n, k, l, NULL)) - M;
        for (int j = 0; j < d && !rc; j++) rc = rebuild_round(ctx, v, &b, l, j);
        if (!rc && me == l) {
            rc = check_rebuilt(ctx, v);
            if (st) {
                st->bytes_received += (uint64_t)d * d * (uint64_t)v[n + l];
                st->receivers++;
            }
        }
    }
    if (st) st->seconds += ftrt__now() - t0;
    free(b.buf);
    free(b.req);
    free(v);
    return rc;
}

void ftrt__ec_drop(ftrt_ctx *ctx) { ctx->ec.step = -1; }

void ftrt__ec_free(ftrt_ctx *ctx)
{
    ftrt__ec_destroy(ctx->ec.codec);
    free(ctx->ec.parity);
    memset(&ctx->ec, 0, sizeof ctx->ec);
    ctx->ec.step = -1;
}
