/*
 * track.c - the coordinator's table of checkpoints in flight (the first phase of the
 * two-phase commit).
 *
 * With asynchronous persists a trainer can have several checkpoints in flight, and a skipped
 * checkpoint is reported at once while an older one is still being written, so SHARD_DONE
 * messages of different steps interleave. Each (epoch, step) gets an entry with one flag per
 * logical rank; once every rank has reported, the entry is decided: committed when every
 * result is 0, else failed (the first error) or skipped (FTRT_SKIPPED from any rank, when no
 * rank failed). An epoch change abandons the entries of older epochs: they are dropped and
 * counted the next time the table is touched. The table holds at most TRACK_MAX entries; the
 * oldest one is dropped (and counted as abandoned) to make room.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ftrt.h"
#include "runtime/coordinator/track.h"

#define TRACK_MAX 64

typedef struct entry {
    int64_t step;
    int epoch;
    int used;
    int reported;  /* ranks that reported */
    int result;    /* first error, else FTRT_SKIPPED if any rank skipped, else 0 */
    unsigned char *got; /* per logical rank */
    uint64_t seq;  /* creation order */
} entry;

struct ftrt__ckpt_track {
    entry e[TRACK_MAX];
    uint64_t seq;
};

static void drop(entry *x)
{
    free(x->got);
    memset(x, 0, sizeof *x);
}

void ftrt__track_free(struct ftrt__ckpt_track *t)
{
    if (!t) return;
    for (int i = 0; i < TRACK_MAX; i++) drop(&t->e[i]);
    free(t);
}

int ftrt__track_pending(const struct ftrt__ckpt_track *t)
{
    int n = 0;
    if (t)
        for (int i = 0; i < TRACK_MAX; i++) n += t->e[i].used;
    return n;
}

int ftrt__track_report(struct ftrt__ckpt_track **tp, int n, int epoch, int64_t step, int rank,
                       int result, int *decided, int *abandoned)
{
    *decided = 0;
    *abandoned = 0;
    if (n < 1 || rank < 0 || rank >= n) return FTRT_EINVAL;
    if (!*tp && !(*tp = calloc(1, sizeof **tp))) return -ENOMEM;
    struct ftrt__ckpt_track *t = *tp;
    entry *x = NULL, *freeslot = NULL, *oldest = NULL;
    for (int i = 0; i < TRACK_MAX; i++) {
        entry *y = &t->e[i];
        if (y->used && y->epoch < epoch) { /* abandoned by an epoch change */
            ftrt_log_info("checkpoint of step %lld (epoch %d) abandoned: the epoch changed",
                          (long long)y->step, y->epoch);
            drop(y);
            (*abandoned)++;
        }
        if (!y->used) {
            if (!freeslot) freeslot = y;
            continue;
        }
        if (y->epoch == epoch && y->step == step) x = y;
        if (!oldest || y->seq < oldest->seq) oldest = y;
    }
    if (!x) {
        if (!freeslot) {
            ftrt_log_warn("checkpoint of step %lld dropped: more than %d checkpoints in flight",
                          (long long)oldest->step, TRACK_MAX);
            drop(oldest);
            (*abandoned)++;
            freeslot = oldest;
        }
        x = freeslot;
        x->got = calloc((size_t)n, 1);
        if (!x->got) return -ENOMEM;
        x->used = 1;
        x->step = step;
        x->epoch = epoch;
        x->seq = ++t->seq;
    }
    if (x->got[rank]) {
        ftrt_log_warn("checkpoint of step %lld: logical rank %d reported twice; ignored",
                      (long long)step, rank);
        return 0;
    }
    x->got[rank] = 1;
    x->reported++;
    if (result < 0 && x->result >= 0) x->result = result; /* an error wins over a skip */
    else if (result == FTRT_SKIPPED && x->result == 0) x->result = FTRT_SKIPPED;
    if (x->reported < n) return 0;
    *decided = 1;
    int r = x->result;
    drop(x);
    return r;
}
