/* ledger.c - per-rank timelines and the job's goodput figures; see ledger.h. */
#include "base/ledger.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int trainer;
} kinds[] = {
#define FTRT__IV_ROW(e, name, trainer) {name, trainer},
    FTRT__IV_MAP(FTRT__IV_ROW)
#undef FTRT__IV_ROW
};

const char *ftrt__iv_name(int kind)
{
    return kind >= 0 && kind < FTRT__IV_KINDS ? kinds[kind].name : "unknown";
}

int ftrt__iv_is_trainer(int kind)
{
    return kind >= 0 && kind < FTRT__IV_KINDS ? kinds[kind].trainer : 0;
}

int ftrt__ledger_init(ftrt__ledger *l, int kind, double t, size_t max_intervals)
{
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->t_open = t;
    l->max = max_intervals;
    l->cap = max_intervals < 256 ? max_intervals : 256;
    if (l->cap) {
        l->iv = malloc(l->cap * sizeof *l->iv);
        if (!l->iv) return -ENOMEM;
    }
    return 0;
}

void ftrt__ledger_free(ftrt__ledger *l)
{
    free(l->iv);
    memset(l, 0, sizeof *l);
}

static void append(ftrt__ledger *l, int kind, double t0, double t1)
{
    l->totals[kind] += t1 - t0;
    if (l->n > 0 && l->iv[l->n - 1].kind == kind && l->iv[l->n - 1].t1 == t0 &&
        l->step_mark < l->n) {
        l->iv[l->n - 1].t1 = t1; /* merge with the previous interval of the same kind */
        return;
    }
    if (l->n == l->cap) {
        size_t ncap = l->cap ? 2 * l->cap : 256;
        if (ncap > l->max) ncap = l->max;
        ftrt__interval *n = ncap > l->cap ? realloc(l->iv, ncap * sizeof *n) : NULL;
        if (!n) {
            l->truncated = 1; /* totals stay exact; the timeline stops here */
            return;
        }
        l->iv = n;
        l->cap = ncap;
    }
    l->iv[l->n++] = (ftrt__interval){.t0 = t0, .t1 = t1, .kind = kind};
}

void ftrt__ledger_switch(ftrt__ledger *l, int kind, double t)
{
    if (kind == l->kind) return;
    if (t < l->t_open) t = l->t_open;
    append(l, l->kind, l->t_open, t);
    l->kind = kind;
    l->t_open = t;
}

void ftrt__ledger_split_open(ftrt__ledger *l, double t_split, int kind)
{
    if (t_split < l->t_open) t_split = l->t_open;
    if (kind == l->kind) return;
    append(l, l->kind, l->t_open, t_split);
    l->kind = kind;
    l->t_open = t_split;
}

double ftrt__ledger_reclass_since_step(ftrt__ledger *l, int kind)
{
    double moved = 0;
    for (size_t i = l->step_mark; i < l->n; i++) {
        ftrt__interval *v = &l->iv[i];
        if (v->kind != FTRT__IV_COMPUTE && v->kind != FTRT__IV_COMM) continue;
        double d = v->t1 - v->t0;
        l->totals[v->kind] -= d;
        l->totals[kind] += d;
        v->kind = kind;
        moved += d;
    }
    if (l->kind == FTRT__IV_COMPUTE || l->kind == FTRT__IV_COMM) l->kind = kind;
    return moved;
}

void ftrt__ledger_close(ftrt__ledger *l, double t)
{
    if (t < l->t_open) t = l->t_open;
    append(l, l->kind, l->t_open, t);
    l->t_open = t;
}

size_t ftrt__timeline_share(int w, int W, int spares, int ranks, int budget_mb, int timeline_max)
{
    if (w < 1 || w >= W || ranks < 0 || budget_mb <= 0 || timeline_max <= 0) return 0;
    int slots = W - 1, first_spare = W - (spares > 0 ? spares : 0);
    if (first_spare < 1) first_spare = 1;
    int k = ranks < slots ? ranks : slots;
    if (w > k && w < first_spare) return 0; /* left out: its totals only */
    /* held: world ranks 1..k, and the spares first_spare..W-1 beyond them */
    long long held = k + (slots - (k > first_spare - 1 ? k : first_spare - 1));
    long long share = ((long long)budget_mb << 20) / (held * (long long)sizeof(ftrt__interval));
    return share < timeline_max ? (size_t)share : (size_t)timeline_max;
}

int ftrt__goodput_compute(const ftrt__goodput_in *in, ftrt__goodput *out)
{
    memset(out, 0, sizeof *out);
    if (!in || in->slots <= 0 || !(in->wall_s > 0) || !in->totals) return -EINVAL;
    out->wall_s = in->wall_s;
    out->allocated_s = in->allocated_s != 0 ? in->allocated_s : in->slots * in->wall_s;
    if (!(out->allocated_s > 0)) return -EINVAL;
    for (int s = 0; s < in->slots; s++)
        for (int k = 0; k < FTRT__IV_KINDS; k++) {
            out->by_kind[k] += in->totals[s][k];
            out->accounted_s += in->totals[s][k];
            if (ftrt__iv_is_trainer(k)) out->trainer_s += in->totals[s][k];
        }
    out->compute_s = out->by_kind[FTRT__IV_COMPUTE] + out->by_kind[FTRT__IV_REWORK];
    out->useful_s = out->by_kind[FTRT__IV_COMPUTE];
    out->gau = out->trainer_s / out->allocated_s;
    out->ectr = out->trainer_s > 0 ? out->compute_s / out->trainer_s : 0;
    if (in->peak_flops > 0 && out->compute_s > 0) {
        out->emfu = in->useful_flops / (in->peak_flops * out->compute_s);
        out->effective = out->gau * out->ectr * out->emfu;
    } else {
        out->emfu = out->effective = -1;
    }
    out->goodput = in->kept_step_s / out->allocated_s;
    /* losses: every kind but useful compute, largest first (insertion sort, 10 kinds) */
    for (int k = 0; k < FTRT__IV_KINDS; k++) {
        if (k == FTRT__IV_COMPUTE) continue;
        int i = out->nlosses++;
        while (i > 0 && out->by_kind[out->order[i - 1]] < out->by_kind[k]) {
            out->order[i] = out->order[i - 1];
            i--;
        }
        out->order[i] = k;
    }
    return 0;
}

double ftrt__daly_interval(double c, double m)
{
    if (!(c > 0) || !(m > 0)) return -1;
    if (c >= 2 * m) return m;
    double x = c / (2 * m);
    return sqrt(2 * c * m) * (1 + sqrt(x) / 3 + x / 9) - c;
}

double ftrt__model_goodput(double tau, double c, double r, double m)
{
    if (!(tau > 0) || c < 0 || r < 0 || !(m > 0)) return -1;
    double g = 1 - c / tau - (tau / 2 + r) / m;
    return g < 0 ? 0 : (g > 1 ? 1 : g);
}
