/*
 * erasure.h - the erasure code of ftrt's redundancy groups (internal): Reed-Solomon over
 * GF(2^8) through Intel's ISA-L, laid out so that any m members of a group of k can be lost and
 * every member's sharded image rebuilt from the survivors' memory (issue 37; the recovery plan
 * does not use it yet).
 *
 * The layout is RAID-6's rotated parity applied to processes (SCR's RS redundancy descriptor,
 * scr_reddesc.c, does the same with files). A group has k members; each member's image of S
 * bytes is cut into d = k - m chunks of C = ftrt__ec_chunk_bytes(S) bytes (the last one padded
 * with zeros). There are k stripes; stripe s has k positions, position p held by member
 * (s + p) mod k: positions 0..d-1 are data (member (s + p) mod k's chunk p), positions d..k-1
 * the m parity chunks of the stripe, kept by the members there. So chunk j of member i lives in
 * stripe (i - j) mod k, every member holds exactly one chunk of each stripe (a data chunk in d
 * stripes, a parity chunk in m), any m lost members erase at most m positions of any stripe,
 * and each member keeps m parity chunks: m / (k - m) of its image in extra memory (k = 4,
 * m = 2: 1x, as a partner replica; k = 6: 0.5x; k = 8: 0.33x).
 *
 * The coefficients are ISA-L's Cauchy matrix (gf_gen_cauchy1_matrix: every d x d submatrix is
 * invertible, so any d surviving positions decode). A parity chunk is the GF(2^8) sum (XOR) of
 * the d data positions' contributions, and each member computes its own contribution
 * (ftrt__ec_contribute, one ec_encode_data pass per chunk): the contributions of a
 * stripe are then XOR-reduced onto its parity holders (MPI_Reduce with MPI_BXOR), so no member
 * ever holds another's data. Rebuilding inverts the d x d submatrix of the first d surviving
 * positions (gf_invert_matrix) and decodes every lost position, data or parity, in one
 * ec_encode_data pass (ftrt__ec_rebuild). The model: ISA-L's erasure_code/ec_simple_example.c.
 *
 * Without ISA-L in the build (FTRT_HAVE_ISAL undefined) ftrt__ec_create returns FTRT_ENOTSUP
 * and the layout functions still answer (they need no codec). A codec is immutable after
 * ftrt__ec_create: every function may be called from any thread at once.
 */
#ifndef FTRT_ERASURE_H
#define FTRT_ERASURE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of a group: 1 <= m <= FTRT__EC_MAX_M parity positions, d = k - m >= 1 data positions,
 * k <= FTRT__EC_MAX_K members (ISA-L's Cauchy matrix needs k <= 255; 32 keeps the tables small). */
#define FTRT__EC_MAX_K 32
#define FTRT__EC_MAX_M 4

typedef struct ftrt__ec ftrt__ec;

/* 1 when this build has ISA-L (erasure groups can be made), 0 otherwise. Thread-safe. */
int ftrt__ec_available(void);

/* A codec for groups of k members with m parity positions per stripe: *out owned by the caller
 * (ftrt__ec_destroy). Returns 0; FTRT_EINVAL (out NULL, or k, m outside the limits above, or
 * k - m < 1); FTRT_ENOTSUP (built without ISA-L); -ENOMEM. */
int ftrt__ec_create(int k, int m, ftrt__ec **out);
/* Frees a codec (NULL is a no-op). */
void ftrt__ec_destroy(ftrt__ec *ec);

/* Bytes of each chunk for images of image_bytes bytes in a group of k with m parity:
 * ceil(image_bytes / (k - m)) rounded up to 64 B (a cache line; ISA-L's vector paths need no
 * more). 0 for an empty image. k, m as in ftrt__ec_create (not checked here). */
size_t ftrt__ec_chunk_bytes(int k, int m, size_t image_bytes);

/* The member (0..k-1) at position p (0..k-1) of stripe s (0..k-1): (s + p) mod k. -1 when an
 * argument is out of range. Positions below k - m hold data, the others parity. */
int ftrt__ec_member_at(int k, int s, int p);
/* The position (0..k-1) of member i in stripe s: (i - s) mod k; -1 when out of range. */
int ftrt__ec_position_of(int k, int s, int i);
/* The stripe where member i's chunk j (0..k-m-1) lives: (i - j) mod k; -1 when out of range. */
int ftrt__ec_stripe_of_chunk(int k, int m, int i, int j);

/* Writes the contribution of data position p (0..k-m-1) of a stripe to its m parity chunks:
 * parity[r] = coefficient(r, p) * chunk in GF(2^8), for r = 0..m-1, each of len bytes (len > 0;
 * no alignment needed), overwriting them (nothing to zero first: one pass of ISA-L's
 * ec_encode_data over the chunk). The XOR of every data position's contribution is the
 * stripe's parity. chunk and parity[] must not overlap; the caller owns them. Returns 0,
 * FTRT_EINVAL (NULL, p out of range, len 0 or above INT_MAX), FTRT_ENOTSUP (no ISA-L).
 * Thread-safe. */
int ftrt__ec_contribute(const ftrt__ec *ec, int p, const void *chunk, size_t len,
                        void *const *parity);
/* As ftrt__ec_contribute, but XORs the contribution into parity[] (ISA-L's
 * ec_encode_data_update): parity[r] ^= coefficient(r, p) * chunk. For a process that
 * accumulates several positions' contributions itself. Same arguments and returns. */
int ftrt__ec_contribute_add(const ftrt__ec *ec, int p, const void *chunk, size_t len,
                            void *const *parity);

/* Rebuilds the lost positions of one stripe: frag[q] (q = 0..k-1, len bytes each) is position
 * q's surviving chunk, or NULL when lost; out[q] must be a len-byte buffer for every lost q
 * (ignored for the others; not overlapping any frag). At most m positions may be lost; a
 * stripe with none lost is left as it is (returns 0). The caller owns every buffer. Returns 0;
 * FTRT_EINVAL (NULL arrays or buffers, len 0 or above INT_MAX); FTRT_ECORRUPT (more than m
 * positions lost: the stripe cannot be rebuilt, the caller falls back to the checkpoint);
 * -ENOMEM. A rebuilt chunk is only as good as the fragments: the caller checks the image's
 * CRC32C afterwards (a corrupted fragment rebuilds wrong bytes without an error here).
 * Thread-safe. */
int ftrt__ec_rebuild(const ftrt__ec *ec, const void *const *frag, size_t len, void *const *out);

/* Rebuilds one lost position `want` of a stripe (frag[want] NULL) into out (len bytes, not
 * overlapping any fragment) from the first k - m surviving fragments frag[q] (len bytes each,
 * NULL where lost): the decode of ftrt__ec_rebuild restricted to one row, so a process that
 * needs only its own chunk computes only that (half the work of decoding both lost positions
 * with m = 2); any len (ISA-L is called in pieces of at most 1 GiB). Returns 0; FTRT_EINVAL
 * (NULL arrays or out, len 0, want out of range or not lost); FTRT_ECORRUPT (fewer than k - m
 * fragments); FTRT_ENOTSUP (no ISA-L). The caller checks the image's CRC32C afterwards, as
 * with ftrt__ec_rebuild. Thread-safe. */
int ftrt__ec_rebuild_one(const ftrt__ec *ec, const void *const *frag, size_t len, int want,
                         void *out);

/* Parity positions per stripe of ftrt's redundancy groups (FTRT_SHARD_REDUNDANCY=erasure):
 * any two losses in a group are rebuilt from memory. */
#define FTRT__EC_PARITY 2

/* Redundancy groups of a job of n trainers (logical ranks 0..n-1) for a target group size k
 * (FTRT_EC_GROUP, >= 3): G = max(1, n / k) groups, more when a group would exceed
 * FTRT__EC_MAX_K members (G = ceil(n / FTRT__EC_MAX_K)); logical rank l is member l / G of
 * group l mod G (strided: consecutive ranks, usually on one host, fall in different groups),
 * group g has ceil((n - g) / G) members. ftrt__ec_ngroups returns G, 0 when no group of at
 * least FTRT__EC_PARITY + 1 members can be formed (n < 3, k < 3). ftrt__ec_group_of returns l's
 * group (and its member index in *idx, may be NULL), ftrt__ec_group_size g's size,
 * ftrt__ec_group_member the logical rank of member i of group g; each -1 for an argument out of
 * range. Pure, thread-safe; the coordinator's plan and the trainers compute the same. */
int ftrt__ec_ngroups(int n, int k);
int ftrt__ec_group_of(int n, int k, int l, int *idx);
int ftrt__ec_group_size(int n, int k, int g);
int ftrt__ec_group_member(int n, int k, int g, int i);

/* The codec's k and m. */
int ftrt__ec_k(const ftrt__ec *ec);
int ftrt__ec_m(const ftrt__ec *ec);

#ifdef __cplusplus
}
#endif

#endif /* FTRT_ERASURE_H */
