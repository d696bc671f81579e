/*
 * Unit tests: the end-of-job report (runtime/coordinator/report.c, goodput.c) and the streaming
 * JSON writer it is written with (base/jsonw.c). Issue 22: at 131,072 ranks, writing the report
 * grew the coordinator to 13.2 GiB (a json-c tree of every rank's timeline, then its text) and
 * the OOM killer took it.
 *
 * - streamed_equals_json_c: random documents (nested objects and arrays, empty ones, ints,
 *   doubles, strings with escapes, booleans, nulls) written through the writer equal, byte for
 *   byte, what json-c prints for the same tree (JSON_C_TO_STRING_PRETTY and a newline, as the
 *   report was written before);
 * - report_memory_linear: the report of a world of 4,097 ranks with 64 intervals each is
 *   written while a counting allocator (this program's malloc, calloc, realloc and free,
 *   forwarding to glibc's) watches: its peak above the start stays under 256 bytes a rank plus
 *   1 MiB (the json-c tree it replaced fails this: docs/benchmarks.md "The end-of-job
 *   report's memory"); the report parses and holds every rank's intervals. The count is
 *   skipped (the report still checked) under ASan/TSan, which own malloc;
 * - report_write_errors: a report that cannot be written (its directory missing; the file-size
 *   limit reached part way, EFBIG) is an error returned and logged, an older report at its
 *   path removed (not taken for this job's) and no temp file left behind; with no report
 *   configured, nothing is written and it is no error;
 * - written_in_place: a path that is not a regular file (a FIFO here; /dev/null in use) is
 *   written in place, never renamed over (as root, a rename over /dev/null put a regular file
 *   there for the whole machine), and not removed after a failed write;
 * - status_streamed: the status file of the same world (runtime/coordinator/status.c, written
 *   64 KiB at a time) holds every rank in order; one that cannot be written is an error.
 *
 * `test_report --write PATH` writes the fixed world's report to PATH and its status file to
 * PATH.status, and exits (to compare the files of two builds byte for byte).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <json-c/json.h>
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#ifndef FTRT_REPORT_WORLD_ONLY /* (defined: the world and the report's tests only, to build
                                  against a tree before base/jsonw.h) */
#include "base/fs.h"
#include "base/jsonw.h"
#endif
#include "base/log.h"
#include "runtime/coordinator/coord.h"
#include "tests/unit/helpers.h"

/* ---- a counting allocator (not under ASan/TSan: they replace malloc themselves) ---------- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNTING 0
#else
#define COUNTING 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static long long mem_cur, mem_peak; /* bytes held (usable sizes) since mem_reset */

static void *counted(void *p)
{
    if (p) {
        mem_cur += (long long)malloc_usable_size(p);
        if (mem_cur > mem_peak) mem_peak = mem_cur;
    }
    return p;
}

void *malloc(size_t n) { return counted(__libc_malloc(n)); }

void *calloc(size_t k, size_t n) { return counted(__libc_calloc(k, n)); }

void free(void *p)
{
    if (p) mem_cur -= (long long)malloc_usable_size(p);
    __libc_free(p);
}

void *realloc(void *p, size_t n)
{
    size_t old = p ? malloc_usable_size(p) : 0;
    void *q = __libc_realloc(p, n);
    if (q || n == 0) mem_cur -= (long long)old;
    return counted(q);
}

static void mem_reset(void) { mem_cur = mem_peak = 0; }
#endif

/* ---- a world for the report --------------------------------------------------------------- */

enum { W_TRAINERS = 4088, W_SPARES = 8, W_IV = 64 };

typedef struct world {
    ftrt_config cfg;
    ftrt__coord_args a;
    ftrt__coord c;
} world;

/* Rank w's timeline: n intervals of compute and exposed communication laid end to end from
 * j0 (a spare's: spare_idle), in an order that rebuild_slot must sort. */
static void world_timeline(ftrt__crank *r, int w, int n, double j0)
{
    r->tl = calloc((size_t)n, sizeof *r->tl);
    assert_non_null(r->tl);
    r->tl_n = r->tl_cap = (size_t)n;
    for (int i = 0; i < n; i++) {
        int k = (i * 7 + w) % n; /* a permutation of 0..n-1 (n a power of two, 7 odd) */
        r->tl[k].t0 = j0 + 0.25 + 0.125 * i + 1e-4 * (w % 10);
        r->tl[k].t1 = j0 + 0.25 + 0.125 * (i + 1) + 1e-4 * (w % 10);
        r->tl[k].kind = r->role == FTRT__ROLE_SPARE ? FTRT__IV_SPARE_IDLE
                        : i % 2                     ? FTRT__IV_COMM
                                                    : FTRT__IV_COMPUTE;
    }
    r->tl_seen = r->tl_final = 1;
}

/* Two incidents: a trainer lost and recovered from a hot spare (MTTR in phases), and a silent
 * data corruption with no majority. */
static void world_incidents(ftrt__coord *c, double j0)
{
    c->inc = calloc(2, sizeof *c->inc);
    assert_non_null(c->inc);
    c->ninc = 2;
    ftrt__incident *x = &c->inc[0];
    *x = (ftrt__incident){.world_rank = 5, .logical_rank = 4, .pid = 1005,
                          .kind = FK_CONNECTION_LOST, .epoch = 1, .spare_world_rank = W_TRAINERS + 1, .t_detect = 3.0,
                          .t_detect_wall = j0 + 3.0, .t_last_heard = 2.9, .t_resumed = 3.4,
                          .t_fail_wall = j0 + 2.95, .t_plan_wall = j0 + 3.2, .t_ready = 3.1,
                          .t_plan = 3.2, .phase_w = 7, .resume_step = 20, .rework_steps = 1,
                          .state_from = FTRT__FROM_REPLICA, .recovered = 1, .sdc_agreed_step = -1,
                          .sdc_ckpt = -1};
    x->phase.rebuild_s = 0.05;
    x->phase.transfer_s = 0.07;
    x->phase.span_s = 0.15;
    c->r[5].role = FTRT__ROLE_FAILED;
    c->r[5].t_fail_wall = j0 + 2.95;
    x = &c->inc[1];
    *x = (ftrt__incident){.world_rank = -1, .logical_rank = -1, .kind = FK_SDC, .epoch = 2,
                          .spare_world_rank = -1, .t_detect = 6.0, .t_detect_wall = j0 + 6.0,
                          .t_last_heard = 5.0, .t_resumed = 6.5, .resume_step = 30,
                          .rework_steps = 4, .state_from = FTRT__FROM_CHECKPOINT, .recovered = 1,
                          .sdc_step = 32, .sdc_agreed_step = 28, .sdc_ckpt = 30,
                          .sdc_uncommitted = 1};
}

/* A finished job of W_TRAINERS trainers and W_SPARES hot spares, 10 s long, W_IV intervals a
 * rank, a few stragglers, the report written to path (NULL: none). */
static void world_open(world *wd, const char *path)
{
    memset(wd, 0, sizeof *wd);
    ftrt_config_init(&wd->cfg, sizeof wd->cfg);
    snprintf(wd->cfg.report_file, sizeof wd->cfg.report_file, "%s", path ? path : "");
    wd->cfg.sdc_every = 10;
    ftrt__coord *c = &wd->c;
    c->a = &wd->a;
    wd->a.cfg = &wd->cfg;
    wd->a.addr = "127.0.0.1";
    wd->a.port = 29500;
    c->N = c->N0 = W_TRAINERS;
    c->W = 1 + W_TRAINERS + W_SPARES;
    c->Wused = c->Wworld = c->W;
    double j0 = 1790000000.0;
    c->t_start = 100.0;
    c->t_end = 110.0;
    c->t_start_wall = j0;
    c->result = FTRT_DONE;
    c->epoch = 2;
    c->ncommitted = 3;
    c->last_committed = 30;
    c->first_commit_wall = j0 + 2;
    c->last_commit_wall = j0 + 8;
    c->sdc_agreed_step = 28;
    c->sdc_checks = 4;
    c->r = calloc((size_t)c->W, sizeof *c->r);
    assert_non_null(c->r);
    for (int w = 0; w < c->W; w++) {
        ftrt__crank *r = &c->r[w];
        snprintf(r->host, sizeof r->host, "node%04d/x\"y", w / 8);
        r->pid = 1000 + w;
        r->fd = r->link = -1; /* not connected (status.c reads them) */
        r->role = w == 0 ? FTRT__ROLE_COORD : w <= W_TRAINERS ? FTRT__ROLE_TRAINER
                                                               : FTRT__ROLE_SPARE;
        r->logical = w >= 1 && w <= W_TRAINERS ? w - 1 : -1;
        r->steps_done = w ? 40 : 0;
        r->kept_s = w <= W_TRAINERS ? 8.0 : 0;
        r->kept_steps = 40;
        if (w % 1000 == 3) {
            r->straggler_max = 1.5 + w / 10000.0;
            r->straggler_step = 17;
        }
        if (w) world_timeline(r, w, W_IV, j0);
    }
    world_incidents(c, j0);
}

static void world_close(world *wd)
{
    for (int w = 0; w < wd->c.W; w++) free(wd->c.r[w].tl);
    free(wd->c.r);
    free(wd->c.inc);
}

/* ---- the tests ---------------------------------------------------------------------------- */

static char tmpdir[512];

static int setup(void **state)
{
    (void)state;
    return t_tmpdir(tmpdir, sizeof tmpdir, "report") ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    t_rmtree(tmpdir);
    return 0;
}

#ifndef FTRT_REPORT_WORLD_ONLY
/* The whole file at path (NUL-terminated, caller frees), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) s[n] = '\0';
    if (len) *len = (size_t)n;
    return s;
}

/* A random json-c value, depth at most d. */
static json_object *random_value(unsigned *seed, int d)
{
    static const double dv[] = {0.0, 3.0, -1.5, 1e300, 1e-7, 12.345678, 0.1, -0.0, 1e21, 7e-5};
    static const char chars[] = "ab/\"\\\n\t\x01 \xc3\xa9z";
    int k = rand_r(seed) % (d > 0 ? 8 : 6);
    switch (k) {
    case 0: {
        int64_t v = (int64_t)rand_r(seed) << (rand_r(seed) % 30);
        return json_object_new_int64(rand_r(seed) % 2 ? -v : v);
    }
    case 1: return json_object_new_double(rand_r(seed) % 2 ? dv[rand_r(seed) % 10]
                                                           : round(rand_r(seed) * 1e-3) / 1e6);
    case 2: {
        char s[16];
        int n = rand_r(seed) % 12;
        for (int i = 0; i < n; i++) s[i] = chars[rand_r(seed) % (sizeof chars - 1)];
        s[n] = '\0';
        return json_object_new_string(s);
    }
    case 3: return json_object_new_boolean(rand_r(seed) % 2);
    case 4:
    case 5: return NULL;
    case 6: {
        json_object *o = json_object_new_object();
        for (int i = 0, n = rand_r(seed) % 5; i < n; i++) {
            char key[8];
            snprintf(key, sizeof key, "k%d_%d", i, rand_r(seed) % 100);
            json_object_object_add(o, key, random_value(seed, d - 1));
        }
        return o;
    }
    default: {
        json_object *a = json_object_new_array();
        for (int i = 0, n = rand_r(seed) % 5; i < n; i++)
            json_object_array_add(a, random_value(seed, d - 1));
        return a;
    }
    }
}

/* Writes v through the writer as key (NULL in an array): containers member by member, scalars
 * with the typed calls. */
static void stream(ftrt__jw *w, const char *key, json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null: ftrt__jw_null(w, key); break;
    case json_type_boolean: ftrt__jw_bool(w, key, json_object_get_boolean(v)); break;
    case json_type_int: ftrt__jw_int(w, key, json_object_get_int64(v)); break;
    case json_type_double: ftrt__jw_double(w, key, json_object_get_double(v)); break;
    case json_type_string: ftrt__jw_string(w, key, json_object_get_string(v)); break;
    case json_type_object: {
        ftrt__jw_object(w, key);
        json_object_object_foreach(v, k, x) stream(w, k, x);
        ftrt__jw_end(w);
        break;
    }
    case json_type_array:
        ftrt__jw_array(w, key);
        for (size_t i = 0; i < json_object_array_length(v); i++)
            stream(w, NULL, json_object_array_get_idx(v, i));
        ftrt__jw_end(w);
        break;
    }
}

static void streamed_equals_json_c(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/doc.json", tmpdir);
    unsigned seed = 22;
    for (int trial = 0; trial < 400; trial++) {
        json_object *v = random_value(&seed, 5);
        if (trial % 2 == 0) { /* a report-like document: an object at the top */
            json_object *o = json_object_new_object();
            json_object_object_add(o, "top", v);
            json_object_object_add(o, "more", random_value(&seed, 4));
            v = o;
        }
        ftrt__jw w;
        assert_int_equal(ftrt__jw_open(&w, path), 0);
        stream(&w, NULL, v);
        assert_int_equal(ftrt__jw_close(&w), 0);
        const char *want = v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PRETTY) : "null";
        size_t n;
        char *got = slurp(path, &n);
        assert_non_null(got);
        assert_int_equal(n, strlen(want) + 1);
        assert_memory_equal(got, want, n - 1);
        assert_int_equal(got[n - 1], '\n');
        free(got);
        json_object_put(v);
    }
    ftrt__jw w; /* misuse is an error, not a crash */
    assert_int_equal(ftrt__jw_open(&w, path), 0);
    ftrt__jw_object(&w, NULL);
    assert_int_equal(ftrt__jw_close(&w), -EINVAL);
    assert_int_equal(t_exists("%s", path), 1); /* the previous document stands */
    assert_int_equal(t_glob_count("%s/doc.json.tmp.*", tmpdir), 0);
}
#endif

/* The report of the fixed world parses and holds every rank's intervals, as rebuilt. */
static void check_report(const char *path, const world *wd)
{
    json_object *o = json_object_from_file(path), *tl, *ranks, *x, *iv;
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "timeline", &tl));
    assert_true(json_object_object_get_ex(tl, "ranks", &ranks));
    assert_int_equal(json_object_array_length(ranks), wd->c.W - 1);
    x = json_object_array_get_idx(ranks, 1);
    assert_true(json_object_object_get_ex(x, "intervals", &iv));
    /* startup before the first, W_IV as sent, teardown after the last */
    assert_int_equal(json_object_array_length(iv), W_IV + 2);
    assert_true(json_object_object_get_ex(o, "failures", &x));
    assert_int_equal(json_object_array_length(x), 2);
    assert_true(json_object_object_get_ex(o, "stragglers", &x));
    assert_int_equal(json_object_array_length(x), 5); /* world ranks 3, 1003, ..., 4003 */
    json_object_put(o);
}

static void report_memory_linear(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/report.json", tmpdir);
    world wd;
    world_open(&wd, path);
#if COUNTING
    fflush(stdout);
    mem_reset();
#endif
    assert_int_equal(ftrt__report_write(&wd.c), 0);
#if COUNTING
    long long bound = 256LL * wd.c.W + (1LL << 20);
    printf("report of %d ranks x %d intervals: peak %lld bytes allocated above the start "
           "(bound %lld: 256 a rank + 1 MiB)\n", wd.c.W, W_IV, mem_peak, bound);
    assert_true(mem_peak < bound);
#else
    printf("(allocations not counted under a sanitizer: it owns malloc)\n");
#endif
    check_report(path, &wd);
    world_close(&wd);
}

static void report_write_errors(void **state)
{
    (void)state;
    char path[600];
    world wd;
    snprintf(path, sizeof path, "%s/missing/report.json", tmpdir);
    world_open(&wd, path);
    assert_int_equal(ftrt__report_write(&wd.c), -ENOENT);
    /* the file-size limit reached part way: EFBIG, an older report removed, no temp file */
    snprintf(path, sizeof path, "%s/report.json", tmpdir);
    snprintf(wd.cfg.report_file, sizeof wd.cfg.report_file, "%s", path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("old\n", f);
    fclose(f);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 65536;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = ftrt__report_write(&wd.c);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    assert_int_equal(rc, -EFBIG);
    assert_int_equal(t_exists("%s", path), 0); /* the older report is not taken for this one */
    assert_int_equal(t_glob_count("%s/report.json.tmp.*", tmpdir), 0);
    world_close(&wd);
}

/* A FIFO as the path: the text comes through it, and it is still a FIFO afterwards, also
 * after a write that failed; no temp file beside it. */
static void written_in_place(void **state)
{
    (void)state;
    char path[600], got[64] = "";
    snprintf(path, sizeof path, "%s/fifo", tmpdir);
    assert_int_equal(mkfifo(path, 0600), 0);
    int rd = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    assert_int_equal(ftrt__write_text_atomic(path, "hello\n", 6), 0);
    assert_int_equal(read(rd, got, sizeof got - 1), 6);
    assert_string_equal(got, "hello\n");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    char tmp[700];
    FILE *f = ftrt__atomic_open(path, tmp, sizeof tmp);
    assert_non_null(f);
    assert_string_equal(tmp, ""); /* (opened itself) */
    assert_int_equal(ftrt__atomic_finish(f, tmp, path, -EIO), -EIO);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(t_glob_count("%s/fifo.tmp.*", tmpdir), 0);
    close(rd);
    unlink(path);
}

/* No report file configured: the summary only, nothing written, no error. */
static void report_none(void **state)
{
    (void)state;
    world wd;
    world_open(&wd, NULL);
    int before = t_glob_count("%s/*", tmpdir);
    assert_int_equal(ftrt__report_write(&wd.c), 0);
    assert_int_equal(t_glob_count("%s/*", tmpdir), before);
    world_close(&wd);
}

/* The report of the world with flops_per_step and peak_flops given, stderr (where warnings
 * go) captured into msg (cap bytes); returns the length captured. */
static size_t report_logged(double flops_per_step, double peak, char *msg, size_t cap)
{
    char path[600];
    world wd;
    world_open(&wd, NULL);
    wd.cfg.peak_flops = peak;
    for (int w = 1; w <= W_TRAINERS; w++) wd.c.r[w].flops_per_step = flops_per_step;
    snprintf(path, sizeof path, "%s/stderr.log", tmpdir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    int level = ftrt__log_level;
    ftrt__log_level = FTRT__LOG_WARN;
    dup2(fd, 2);
    assert_int_equal(ftrt__report_write(&wd.c), 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ftrt__log_level = level;
    ssize_t got = pread(fd, msg, cap - 1, 0);
    close(fd);
    unlink(path);
    msg[got > 0 ? got : 0] = 0;
    world_close(&wd);
    return got > 0 ? (size_t)got : 0;
}

/* eMFU above 1 (40 steps of 1 GFLOP in 4 compute-seconds a trainer against a peak of 1
 * GFLOP/s: 10) is reported as it is, with a warning naming the peak and the FLOPs per step;
 * at a peak of 1 TFLOP/s (0.01) there is none. */
static void emfu_above_one_warns(void **state)
{
    (void)state;
    char msg[4096];
    report_logged(1e9, 1e9, msg, sizeof msg);
    assert_non_null(strstr(msg, "is above 1: the peak FLOP/s per rank (1e+09"));
    assert_non_null(strstr(msg, "FLOPs per step (1e+09)"));
    report_logged(1e9, 1e12, msg, sizeof msg);
    assert_null(strstr(msg, "above 1"));
}

/* The status file of the same world (about 1 MB, written 64 KiB at a time): every rank's line,
 * in order, the host name's escapes intact; a status file that cannot be written is an error. */
static void status_streamed(void **state)
{
    (void)state;
    char path[600];
    world wd;
    world_open(&wd, NULL);
    snprintf(path, sizeof path, "%s/status.json", tmpdir);
    wd.a.status_file = path;
    assert_int_equal(ftrt__status_write(&wd.c), 0);
    json_object *o = json_object_from_file(path), *ranks, *x, *v;
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "ranks", &ranks));
    assert_int_equal(json_object_array_length(ranks), wd.c.W);
    for (int w = 0; w < wd.c.W; w += 997) {
        x = json_object_array_get_idx(ranks, (size_t)w);
        assert_true(json_object_object_get_ex(x, "world_rank", &v));
        assert_int_equal(json_object_get_int(v), w);
        assert_true(json_object_object_get_ex(x, "host", &v));
        assert_string_equal(json_object_get_string(v), wd.c.r[w].host);
    }
    assert_true(json_object_object_get_ex(o, "final", &v));
    json_object_put(o);
    snprintf(path, sizeof path, "%s/missing/status.json", tmpdir);
    assert_int_equal(ftrt__status_write(&wd.c), -ENOENT);
    world_close(&wd);
}

#ifndef FTRT_REPORT_WORLD_ONLY
int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write")) { /* the fixed world's files, to compare */
        world wd;
        char status[1100];
        world_open(&wd, argv[2]);
        snprintf(status, sizeof status, "%s.status", argv[2]);
        wd.a.status_file = status;
        int rc = ftrt__report_write(&wd.c) || ftrt__status_write(&wd.c);
        world_close(&wd);
        return rc ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(streamed_equals_json_c),
        cmocka_unit_test(report_memory_linear),
        cmocka_unit_test(report_write_errors),
        cmocka_unit_test(written_in_place),
        cmocka_unit_test(report_none),
        cmocka_unit_test(emfu_above_one_warns),
        cmocka_unit_test(status_streamed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
#endif
