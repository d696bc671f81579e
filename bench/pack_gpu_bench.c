/*
 * pack_gpu_bench.c - the NCCL plane's bucket copies against the device's own copy: GB/s of the
 * pack kernel and of the unpack (+ scale) kernel that comm/nccl_plane.c runs around every
 * copied bucket's allreduce, and of a cudaMemcpyAsync device-to-device of the same bytes, in the
 * same run (issue 21: pack / unpack at >= 0.8x of that copy).
 *
 * A bucket is made of many tensors as a transformer's parameters come (per layer of width
 * --d-model D: two LayerNorms of D, the attention's 3D x D and D x D weights with their biases,
 * the MLP's 4D x D and D x 4D with theirs), taken in order until the next one would pass
 * --bucket-mib, or of equal tensors of --tensor-mib MiB (overlap_gpu_bench's arrangement).
 * --skew-elems K puts a tensor of K elements first, which moves every later tensor's place in
 * the bucket off 16-byte alignment for odd K. The tensors lie in one device allocation, each
 * at a 256-byte boundary (as CUDA's and PyTorch's allocators place them).
 *
 * Each rep times, with CUDA events on one stream and each op after a write of twice the L2
 * cache (so none starts with its data in L2; --no-flush leaves that out):
 *   memcpy          cudaMemcpyAsync D2D of the bucket's bytes (one contiguous run)
 *   pack            ftrt__kgpu_pack, the descriptors in mapped pinned host memory (the plane's)
 *   unpack-scale    ftrt__kgpu_unpack_scale, scale 0.5 (two trainers' mean), the plane's guard
 *   unpack-copy     the same with scale 1.0 (one trainer: the kernel's copy branch)
 *   inplace-scale   ftrt__kgpu_unpack_scale on the bucket as one tensor in place, scale 0.5 and
 *                   2.0 by turns: the in-place path's only kernel (ftrt_bucket_config.in_place)
 *   pack-ddesc, unpack-scale-ddesc   pack and unpack-scale with the descriptors copied to
 *                   device memory: the plane's kernels unchanged, only where they read their
 *                   descriptors from (docs/collectives.md, "Pack and unpack speed")
 * and prints per op the median over --reps of the time, GB/s (bucket bytes / time; each op reads
 * and writes every byte once, so HBM moves twice that) and the ratio to memcpy's, then one line
 * per configuration that scripts/gpu-run.sh collects into summary.json:
 *   RESULT pack_gpu dtype=f32 bucket_mib=25.0 tensors=N ... memcpy_gbs=... pack_ratio=...
 * Before timing, every kernel's output is checked against the CPU reference (kernels_ref.c);
 * a difference fails the run (exit 1). Exit 77 without a usable CUDA device.
 *   build-gpu/bench/pack_gpu_bench [--bucket-mib 25,100] [--dtype f32,bf16] [--d-model 256]
 *     [--tensor-mib M] [--skew-elems 0,1] [--reps 50] [--warmup 5] [--no-flush]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_gpu.h"

#define MAXLIST 8
#define ALIGN 256

typedef struct opts {
    double bucket_mib[MAXLIST], tensor_mib;
    int nbucket, dtypes[MAXLIST], ndtype, d_model, reps, warmup, flush;
    long skew[MAXLIST];
    int nskew;
} opts;

enum { OP_MEMCPY, OP_PACK, OP_UNPACK, OP_UNPACK1, OP_INPLACE, OP_PACK_D, OP_UNPACK_D, NOPS };
static const char *const op_name[NOPS] = {"memcpy", "pack", "unpack-scale", "unpack-copy",
                                          "inplace-scale", "pack-ddesc", "unpack-scale-ddesc"};
static const char *const op_key[NOPS] = {"memcpy", "pack", "unpack", "unpack_copy", "inplace",
                                         "pack_ddesc", "unpack_ddesc"};

/* One configuration's buffers: tensors `in` (packed from) and `out` (unpacked into), both in
 * one device arena at the same offsets, the bucket, a bucket for the in-place op, host images. */
typedef struct cfg {
    int dtype, n;
    size_t total, arena, maxb, *aoff, *bytes;
    char *din, *dout, *bucket, *bucket2, *hin;
    ftrt__kdesc *desc_in, *desc_out, *desc_whole;   /* mapped pinned host (the plane's) */
    ftrt__kdesc *ddesc_in, *ddesc_out;              /* device copies */
} cfg;

typedef struct env {
    cudaStream_t s;
    cudaEvent_t a, b;
    void *flush;
    size_t flush_bytes;
    volatile uint32_t *guard; /* mapped pinned, 0: every unpack runs (gen 0) */
} env;

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "pack_gpu_bench: %s: %s (line %d)\n", #x, cudaGetErrorString(e_),    \
                    __LINE__);                                                                    \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A comma-separated list of numbers into v (at most MAXLIST); returns how many, 0 on junk. */
static int parse_list(const char *s, double *v)
{
    int n = 0;
    char *end;
    while (n < MAXLIST) {
        v[n++] = strtod(s, &end);
        if (end == s) return 0;
        if (*end == 0) return n;
        if (*end != ',') return 0;
        s = end + 1;
    }
    return 0;
}

static int parse_dtypes(const char *s, int *v)
{
    int n = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t && n < MAXLIST; t = strtok(NULL, ",")) {
        if (!strcmp(t, "f32")) v[n++] = FTRT__K_F32;
        else if (!strcmp(t, "bf16")) v[n++] = FTRT__K_BF16;
        else return 0;
    }
    return n;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.bucket_mib = {25, 100}, .nbucket = 2, .dtypes = {FTRT__K_F32, FTRT__K_BF16},
                .ndtype = 2, .d_model = 256, .reps = 50, .warmup = 5, .flush = 1, .nskew = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double l[MAXLIST];
        if (!strcmp(a, "--no-flush")) {
            o->flush = 0;
            continue;
        }
        if (!v) return 1;
        i++;
        if (!strcmp(a, "--bucket-mib")) o->nbucket = parse_list(v, o->bucket_mib);
        else if (!strcmp(a, "--dtype")) o->ndtype = parse_dtypes(v, o->dtypes);
        else if (!strcmp(a, "--d-model")) o->d_model = atoi(v);
        else if (!strcmp(a, "--tensor-mib")) o->tensor_mib = atof(v);
        else if (!strcmp(a, "--reps")) o->reps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--skew-elems")) {
            o->nskew = parse_list(v, l);
            for (int k = 0; k < o->nskew; k++) o->skew[k] = (long)l[k];
        } else return 1;
    }
    for (int k = 0; k < o->nbucket; k++)
        if (!(o->bucket_mib[k] > 0)) return 1;
    for (int k = 0; k < o->nskew; k++)
        if (o->skew[k] < 0) return 1;
    return !(o->nbucket && o->ndtype && o->nskew && o->d_model >= 8 && o->reps > 0 &&
             o->warmup >= 0 && o->tensor_mib >= 0);
}

/* Element counts of the bucket's tensors into counts (room for cap); returns how many. */
static int bucket_shapes(const opts *o, size_t limit, size_t es, long skew, size_t *counts,
                         int cap)
{
    size_t D = (size_t)o->d_model, total = 0;
    size_t layer[12] = {D, D, 3 * D * D, 3 * D, D * D, D, D, D, 4 * D * D, 4 * D, 4 * D * D, D};
    size_t uni = (size_t)(o->tensor_mib * 1048576.0) / es;
    int n = 0;
    if (skew > 0) {
        counts[n++] = (size_t)skew;
        total = (size_t)skew * es;
    }
    for (int j = 0; n < cap; j++) {
        size_t c = uni ? uni : layer[j % 12];
        if (total + c * es > limit) break;
        counts[n++] = c;
        total += c * es;
    }
    return n;
}

/* Deterministic finite values: float32 in +-[0.5, 4), or such a float's bfloat16 (top half). */
static void fill_values(char *h, size_t bytes, int dtype, unsigned seed)
{
    for (size_t i = 0; i < bytes / 4; i++) {
        seed = seed * 1103515245u + 12345u;
        float f = 0.5f + (float)(seed >> 9) / 8388608.0f * 3.5f;
        if (seed & 1) f = -f;
        memcpy(h + 4 * i, &f, 4);
    }
    if (dtype == FTRT__K_BF16) /* little-endian: a float's high half at +2 is its bfloat16 */
        for (size_t i = 0; i < bytes / 4; i++) memcpy(h + 4 * i, h + 4 * i + 2, 2);
}

static void cfg_free(cfg *c)
{
    cudaFree(c->din);
    cudaFree(c->dout);
    cudaFree(c->bucket);
    cudaFree(c->bucket2);
    cudaFree(c->ddesc_in);
    cudaFree(c->ddesc_out);
    cudaFreeHost(c->desc_in);
    cudaFreeHost(c->desc_out);
    cudaFreeHost(c->desc_whole);
    free(c->hin);
    free(c->aoff);
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

/* Descriptors of the tensors at base + aoff[i], in mapped pinned memory and on the device. */
static int make_desc(cfg *c, char *base, ftrt__kdesc **mapped, ftrt__kdesc **dev)
{
    ftrt__seg *segs = malloc((size_t)c->n * sizeof *segs);
    if (!segs) return 1;
    for (int i = 0; i < c->n; i++) segs[i] = (ftrt__seg){base + c->aoff[i], c->bytes[i]};
    size_t sz = (size_t)c->n * sizeof(ftrt__kdesc);
    cudaError_t e = cudaHostAlloc((void **)mapped, sz, cudaHostAllocMapped);
    if (e == cudaSuccess) {
        c->total = ftrt__kdesc_fill(*mapped, segs, c->n, &c->maxb);
        e = cudaMalloc((void **)dev, sz);
    }
    if (e == cudaSuccess) e = cudaMemcpy(*dev, *mapped, sz, cudaMemcpyHostToDevice);
    free(segs);
    if (e != cudaSuccess)
        fprintf(stderr, "pack_gpu_bench: descriptors: %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
}

/* Lays out and allocates one configuration: tensors of the shapes bucket_shapes() gives. */
static int cfg_make(cfg *c, const opts *o, double mib, int dtype, long skew)
{
    memset(c, 0, sizeof *c);
    c->dtype = dtype;
    size_t es = ftrt__k_esize(dtype), limit = (size_t)(mib * 1048576.0), cap = 65535;
    size_t *counts = malloc(cap * sizeof *counts);
    c->aoff = malloc(cap * sizeof *c->aoff);
    c->bytes = malloc(cap * sizeof *c->bytes);
    if (!counts || !c->aoff || !c->bytes) return free(counts), 1;
    c->n = bucket_shapes(o, limit, es, skew, counts, (int)cap);
    for (int i = 0; i < c->n; i++) {
        c->aoff[i] = c->arena;
        c->bytes[i] = counts[i] * es;
        c->arena += (c->bytes[i] + ALIGN - 1) / ALIGN * ALIGN;
    }
    free(counts);
    if (c->n < 1) return fprintf(stderr, "pack_gpu_bench: no tensor fits %.1f MiB\n", mib), 1;
    CK(cudaMalloc((void **)&c->din, c->arena));
    CK(cudaMalloc((void **)&c->dout, c->arena));
    CK(cudaMalloc((void **)&c->bucket, c->arena));
    CK(cudaMalloc((void **)&c->bucket2, c->arena));
    if (!(c->hin = malloc(c->arena))) return 1;
    fill_values(c->hin, c->arena, dtype, 12345u + (unsigned)c->n);
    CK(cudaMemcpy(c->din, c->hin, c->arena, cudaMemcpyHostToDevice));
    CK(cudaMemset(c->dout, 0, c->arena));
    if (make_desc(c, c->din, &c->desc_in, &c->ddesc_in) ||
        make_desc(c, c->dout, &c->desc_out, &c->ddesc_out))
        return 1;
    CK(cudaHostAlloc((void **)&c->desc_whole, sizeof *c->desc_whole, cudaHostAllocMapped));
    ftrt__seg whole = {c->bucket2, c->total};
    ftrt__kdesc_fill(c->desc_whole, &whole, 1, NULL);
    return 0;
}

/* Launches op on the stream (the calls the plane makes; 0 or the launch's error). rep picks
 * the in-place op's scale (0.5 and 2.0 by turns: the bucket's values stay where they are). */
static cudaError_t launch(const cfg *c, const env *E, int op, int rep)
{
    int n = c->n;
    switch (op) {
    case OP_MEMCPY:
        return cudaMemcpyAsync(c->bucket, c->din, c->total, cudaMemcpyDeviceToDevice, E->s);
    case OP_PACK: return ftrt__kgpu_pack(c->bucket, c->desc_in, n, c->maxb, E->s);
    case OP_PACK_D: return ftrt__kgpu_pack(c->bucket, c->ddesc_in, n, c->maxb, E->s);
    case OP_UNPACK:
    case OP_UNPACK1:
    case OP_UNPACK_D:
        return ftrt__kgpu_unpack_scale(c->bucket, op == OP_UNPACK_D ? c->ddesc_out : c->desc_out,
                                       n, c->maxb, c->dtype, op == OP_UNPACK1 ? 1.0 : 0.5,
                                       E->guard, 0, E->s);
    default:
        return ftrt__kgpu_unpack_scale(c->bucket2, c->desc_whole, 1, c->total, c->dtype,
                                       rep % 2 ? 2.0 : 0.5, E->guard, 0, E->s);
    }
}

/* Device bytes at dev + aoff[i] (i < n) against the host's at ref + aoff[i]; 0 when equal. */
static int same_tensors(const cfg *c, const char *dev, const char *ref, char *tmp)
{
    if (cudaMemcpy(tmp, dev, c->arena, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    for (int i = 0; i < c->n; i++)
        if (memcmp(tmp + c->aoff[i], ref + c->aoff[i], c->bytes[i])) return 1;
    return 0;
}

/* Every op's output against the CPU reference (kernels_ref.c), once, before timing: pack, the
 * scaled and the plain unpack (into `out`), the in-place scale. 0 when all are bit-equal. */
static int check(cfg *c, const env *E)
{
    char *hb = malloc(c->arena), *hout = malloc(c->arena), *tmp = malloc(c->arena);
    ftrt__seg *hs = malloc((size_t)c->n * sizeof *hs);
    int bad = !hb || !hout || !tmp || !hs;
    for (int i = 0; !bad && i < c->n; i++) hs[i] = (ftrt__seg){hout + c->aoff[i], c->bytes[i]};
    if (!bad) { /* pack: the reference packs the host image's tensors */
        for (int i = 0; i < c->n; i++) hs[i].ptr = c->hin + c->aoff[i];
        ftrt__k_pack(hb, hs, c->n);
        for (int i = 0; i < c->n; i++) hs[i].ptr = hout + c->aoff[i];
        bad = launch(c, E, OP_PACK, 0) != cudaSuccess ||
              cudaStreamSynchronize(E->s) != cudaSuccess ||
              cudaMemcpy(tmp, c->bucket, c->total, cudaMemcpyDeviceToHost) != cudaSuccess ||
              memcmp(tmp, hb, c->total);
    }
    for (int k = 0; !bad && k < 2; k++) { /* unpack-scale (0.5), then unpack-copy (1.0) */
        memset(hout, 0, c->arena);
        ftrt__k_unpack_scale(hb, hs, c->n, c->dtype, k ? 1.0 : 0.5);
        bad = cudaMemset(c->dout, 0, c->arena) != cudaSuccess ||
              launch(c, E, k ? OP_UNPACK1 : OP_UNPACK, 0) != cudaSuccess ||
              cudaStreamSynchronize(E->s) != cudaSuccess || same_tensors(c, c->dout, hout, tmp);
    }
    if (!bad) { /* in place: the packed bucket scaled by 0.5 where it lies */
        bad = cudaMemcpy(c->bucket2, hb, c->total, cudaMemcpyHostToDevice) != cudaSuccess ||
              launch(c, E, OP_INPLACE, 0) != cudaSuccess ||
              cudaStreamSynchronize(E->s) != cudaSuccess ||
              cudaMemcpy(tmp, c->bucket2, c->total, cudaMemcpyDeviceToHost) != cudaSuccess;
        ftrt__k_scale(hb, c->total / ftrt__k_esize(c->dtype), c->dtype, 0.5);
        bad = bad || memcmp(tmp, hb, c->total);
    }
    free(hb);
    free(hout);
    free(tmp);
    free(hs);
    return bad;
}

/* Times op once (ms, CUDA events), after the L2 flush unless off. */
static int time_op(const cfg *c, const env *E, int op, int rep, float *ms)
{
    if (E->flush) CK(cudaMemsetAsync(E->flush, rep & 0xff, E->flush_bytes, E->s));
    CK(cudaEventRecord(E->a, E->s));
    CK(launch(c, E, op, rep));
    CK(cudaEventRecord(E->b, E->s));
    CK(cudaEventSynchronize(E->b));
    CK(cudaEventElapsedTime(ms, E->a, E->b));
    return 0;
}

/* Medians over o->reps (after o->warmup) of every op, in ms into med[]; the ops take turns
 * within a rep, starting from a different one each rep. */
static int time_all(const cfg *c, const env *E, const opts *o, double *med)
{
    float *t = malloc((size_t)NOPS * (size_t)o->reps * sizeof *t);
    if (!t) return 1;
    for (int r = -o->warmup; r < o->reps; r++)
        for (int k = 0; k < NOPS; k++) {
            int op = (k + (r < 0 ? 0 : r)) % NOPS;
            float ms = 0;
            if (time_op(c, E, op, r < 0 ? -r : r, &ms)) return free(t), 1;
            if (r >= 0) t[(size_t)op * (size_t)o->reps + (size_t)r] = ms;
        }
    for (int op = 0; op < NOPS; op++) {
        float *v = t + (size_t)op * (size_t)o->reps;
        qsort(v, (size_t)o->reps, sizeof *v, cmp_float);
        med[op] = o->reps % 2 ? v[o->reps / 2] : 0.5 * (v[o->reps / 2 - 1] + v[o->reps / 2]);
    }
    free(t);
    return 0;
}

static const char *dtype_name(int dtype) { return dtype == FTRT__K_BF16 ? "bf16" : "f32"; }

/* The table and the RESULT line of one configuration. */
static void report(const cfg *c, const opts *o, long skew, const double *med)
{
    double gb = (double)c->total / 1e9, mib = (double)c->total / 1048576.0;
    size_t minb = c->bytes[0];
    for (int i = 1; i < c->n; i++)
        if (c->bytes[i] < minb) minb = c->bytes[i];
    printf("\nbucket %.2f MiB of %s: %d tensors (largest %.1f KiB, smallest %zu B), skew %ld "
           "elements, medians of %d reps\n", mib, dtype_name(c->dtype), c->n, c->maxb / 1024.0,
           minb, skew, o->reps);
    for (int op = 0; op < NOPS; op++)
        printf("  %-19s %9.1f us %9.1f GB/s  %5.2f x memcpy\n", op_name[op], med[op] * 1e3,
               gb / (med[op] * 1e-3), med[OP_MEMCPY] / med[op]);
    printf("RESULT pack_gpu dtype=%s bucket_mib=%.2f tensors=%d max_tensor_kib=%.1f skew=%ld "
           "d_model=%d tensor_mib=%.2f reps=%d flush=%d", dtype_name(c->dtype), mib, c->n,
           c->maxb / 1024.0, skew, o->d_model, o->tensor_mib, o->reps, o->flush);
    for (int op = 0; op < NOPS; op++) printf(" %s_gbs=%.1f", op_key[op], gb / (med[op] * 1e-3));
    for (int op = 1; op < NOPS; op++)
        printf(" %s_ratio=%.3f", op_key[op], med[OP_MEMCPY] / med[op]);
    printf("\n");
    fflush(stdout);
}

/* One configuration: lay out, check against the CPU reference, time, report. 0 or 1. */
static int run_cfg(const opts *o, const env *E, double mib, int dtype, long skew)
{
    cfg c;
    double med[NOPS];
    int rc = cfg_make(&c, o, mib, dtype, skew);
    if (!rc && (rc = check(&c, E)) != 0)
        fprintf(stderr, "pack_gpu_bench: %s bucket of %.1f MiB (skew %ld): a kernel's output "
                        "differs from the CPU reference\n", dtype_name(dtype), mib, skew);
    if (!rc && (rc = time_all(&c, E, o, med)) == 0) report(&c, o, skew, med);
    cfg_free(&c);
    return rc;
}

/* The stream, events, guard word and L2 flush buffer (twice the device's L2). */
static int env_make(env *E, int flush)
{
    int l2 = 0;
    memset(E, 0, sizeof *E);
    CK(cudaStreamCreateWithFlags(&E->s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&E->a));
    CK(cudaEventCreate(&E->b));
    CK(cudaHostAlloc((void **)&E->guard, sizeof *E->guard, cudaHostAllocMapped));
    *E->guard = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    E->flush_bytes = flush ? 2 * (size_t)(l2 > 0 ? l2 : 64 << 20) : 0;
    if (flush) CK(cudaMalloc(&E->flush, E->flush_bytes));
    return 0;
}

static void env_free(env *E)
{
    cudaFree(E->flush);
    cudaFreeHost((void *)E->guard);
    cudaEventDestroy(E->a);
    cudaEventDestroy(E->b);
    cudaStreamDestroy(E->s);
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: pack_gpu_bench [--bucket-mib 25,100] [--dtype f32,bf16] "
                        "[--d-model 256] [--tensor-mib M] [--skew-elems 0,1] [--reps 50] "
                        "[--warmup 5] [--no-flush]\n");
        return 2;
    }
    if (ftrt__kgpu_device_count() == 0) {
        printf("pack_gpu_bench: no usable CUDA device: nothing to measure (exit 77)\n");
        return 77;
    }
    struct cudaDeviceProp p;
    env E;
    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&p, 0));
    if (env_make(&E, o.flush)) return 1;
    printf("pack_gpu_bench: %s, %d SMs, L2 %d KiB; the NCCL plane's pack / unpack kernels "
           "(kernels/kernels.cu) against cudaMemcpyAsync D2D of the same bytes\n", p.name,
           p.multiProcessorCount, p.l2CacheSize / 1024);
    int rc = 0;
    for (int k = 0; k < o.nskew; k++)
        for (int d = 0; d < o.ndtype; d++)
            for (int b = 0; b < o.nbucket; b++)
                rc |= run_cfg(&o, &E, o.bucket_mib[b], o.dtypes[d], o.skew[k]);
    env_free(&E);
    return rc ? 1 : 0;
}
