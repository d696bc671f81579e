/*
 * goodput.c - the goodput ledger on the coordinator: the intake of the ranks' LEDGER messages
 * (ftrt__ledger_take: from service.c, and a standby's own timeline from takeover.c), every
 * slot's timeline over the job window, the GAU x ECTR x eMFU figures, the "where the rank-hours
 * went" waterfall, the Young/Daly checkpoint-interval advice, the OpenMetrics file and the live
 * progress line.
 *
 * Slots are world ranks 1..W-1 (trainers and hot spares: what the job pays for); the
 * coordinator is not a slot. A slot's timeline comes from the LEDGER messages of the process
 * that held it (sent every heartbeat period; a hot spare's also when it joins and when it is
 * promoted); what those do not cover is filled in: start-up before the first interval,
 * teardown after a finished rank's last one or from a spare's SHUTDOWN, and for a rank that
 * failed, its last reported activity from its last report to the failure (under a heartbeat
 * period plus one step; its step in flight is counted as compute, not rework) and "down" from
 * then to the end.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/coordinator/coord.h"
#include "base/jsonw.h"
#include "base/fs.h"
#include "base/log.h"

/* ---- the LEDGER messages' intake (service.c and a standby's takeover.c hand them here) ---- */

/* Intervals world rank w's timeline may hold here: 0 for a rank left out (its totals only). */
static size_t timeline_share(const ftrt__coord *c, int w)
{
    const ftrt_config *cfg = c->a->cfg;
    return ftrt__timeline_share(w, c->W, c->W - 1 - c->N0, cfg->timeline_ranks,
                                cfg->timeline_budget_mb, cfg->timeline_max);
}

/* Notes the earliest start and the newest end (and its kind) among n intervals: with the
 * totals, they rebuild a timeline that is not held (goodput.c). */
static void timeline_ends(ftrt__crank *r, const ftrt__interval *iv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r->tl_first == 0 || iv[i].t0 < r->tl_first) r->tl_first = iv[i].t0;
        if (iv[i].t1 >= r->tl_last) {
            r->tl_last = iv[i].t1;
            r->tl_last_kind = iv[i].kind;
        }
    }
}

/* Appends n intervals to world rank w's timeline, up to its share of FTRT_TIMELINE_BUDGET_MB
 * (the array never grows past it); beyond, or once the rank sends only its ends (`sparse` 1)
 * or says no more will come (2), the timeline is cut short: the report rebuilds the rest from
 * the totals. A rank left out (share 0) holds none. */
static void timeline_append(ftrt__coord *c, int w, const ftrt__interval *iv, size_t n, int sparse)
{
    ftrt__crank *r = &c->r[w];
    timeline_ends(r, iv, n);
    if (r->tl_left_out || r->tl_truncated) return;
    size_t share = timeline_share(c, w);
    if (share == 0) {
        r->tl_left_out = 1;
        free(r->tl);
        r->tl = NULL;
        r->tl_n = r->tl_cap = 0;
        return;
    }
    int cut = sparse != 0 || r->tl_n + n > share; /* (sparse 2: these, then no more) */
    if (sparse == 1)
        n = 0; /* only its ends: not contiguous */
    else if (r->tl_n + n > share)
        n = share - r->tl_n; /* what fits: the first of them */
    if (cut) r->tl_truncated = 1;
    if (n == 0) return;
    if (r->tl_n + n > r->tl_cap) {
        size_t ncap = r->tl_cap ? r->tl_cap : 1024;
        while (ncap < r->tl_n + n) ncap *= 2;
        if (ncap > share) ncap = share;
        ftrt__interval *grown = realloc(r->tl, ncap * sizeof *grown);
        if (!grown) { /* a lost ledger update is not a protocol error */
            r->tl_truncated = 1;
            return;
        }
        r->tl = grown;
        r->tl_cap = ncap;
    }
    memcpy(r->tl + r->tl_n, iv, n * sizeof *iv);
    r->tl_n += n;
}

int ftrt__ledger_take(ftrt__coord *c, int w, const void *payload, size_t len)
{
    ftrt__ledger_msg *m = malloc(len);
    if (!m) return 0; /* a lost ledger update is not a protocol error */
    memcpy(m, payload, len);
    if (ftrt__ledger_msg_check(m, len)) {
        free(m);
        return FTRT_EPROTO;
    }
    ftrt__crank *r = &c->r[w];
    /* A rank's open interval never starts earlier than before: a message built before the one
     * taken last (the agent's tick and the application thread's send race to the socket)
     * brings its intervals, not its older totals and open kind. */
    if (!r->tl_seen || m->t_open >= r->tl_t_open) {
        memcpy(r->tl_totals, m->totals, sizeof r->tl_totals);
        r->tl_t_open = m->t_open;
        r->tl_kind_open = m->kind_open;
        r->kept_steps = m->kept_steps;
        r->flops_per_step = m->flops_per_step;
        r->peak_flops = m->peak_flops;
        r->total_steps = m->total_steps;
    }
    r->tl_final |= m->final;
    r->tl_seen = 1;
    r->tl_resend = 0; /* (after a takeover: its whole timeline, from its first interval) */
    timeline_append(c, w, m->iv, (size_t)m->n, m->sparse);
    free(m);
    return 0;
}

/* ---- the report's figures ---- */

typedef void (*emit_fn)(void *arg, int kind, double t0, double t1);

static int cmp_iv(const void *a, const void *b)
{
    const ftrt__interval *x = a, *y = b;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* Takes d seconds off t: from kind k first, then from the others, last kind first. */
static void take_off(double *t, int k, double d)
{
    for (int i = -1; i < FTRT__IV_KINDS && d > 0; i++) {
        int x = i < 0 ? k : FTRT__IV_KINDS - 1 - i;
        double m = fmin(t[x], d);
        t[x] -= m;
        d -= m;
    }
}

/* Emits the intervals held for slot r over [j0, stop] (a gap: start-up before the first, else
 * the next one's kind) and takes each one's length off rest[its kind]. Returns where they end. */
static double rebuild_held(ftrt__crank *r, double j0, double stop, emit_fn emit, void *arg,
                           double *rest)
{
    double cur = j0;
    if (r->tl_n > 1) qsort(r->tl, r->tl_n, sizeof *r->tl, cmp_iv); /* arrival order may differ */
    for (size_t i = 0; i < r->tl_n; i++) {
        rest[r->tl[i].kind] -= r->tl[i].t1 - r->tl[i].t0;
        double t0 = fmax(r->tl[i].t0, cur), t1 = fmin(r->tl[i].t1, stop);
        if (cur >= stop || t1 <= t0) continue;
        if (t0 > cur) emit(arg, cur == j0 ? FTRT__IV_STARTUP : r->tl[i].kind, cur, t0);
        emit(arg, r->tl[i].kind, t0, t1);
        cur = t1;
    }
    return cur;
}

/* What the intervals held do not give (all of a timeline left out, the rest of one cut short,
 * a standby's copy): the rank's exact totals less those intervals, `rest`, laid end to end kind
 * by kind from cur. With nothing held, from its first interval's start (from j0 when unknown:
 * a standby's copy), start-up before it as for a held one, what lies before j0 off the
 * start-up; what lies past stop comes off the newest interval's kind, as clipping a held
 * timeline would. Returns where the pieces end (<= stop). */
static double rebuild_rest(const ftrt__crank *r, double j0, double cur, double stop, double *t,
                           emit_fn emit, void *arg)
{
    double sum = 0;
    for (int k = 0; k < FTRT__IV_KINDS; k++) t[k] = fmax(t[k], 0);
    if (r->tl_last > 0) {
        if (cur == j0 && r->tl_first < j0) take_off(t, FTRT__IV_STARTUP, j0 - r->tl_first);
        if (cur == j0 && r->tl_first > j0) {
            cur = fmin(r->tl_first, stop);
            emit(arg, FTRT__IV_STARTUP, j0, cur);
        }
        for (int k = 0; k < FTRT__IV_KINDS; k++) sum += t[k];
        if (cur + sum > stop) take_off(t, r->tl_last_kind, cur + sum - stop);
    }
    for (int k = 0; k < FTRT__IV_KINDS && cur < stop; k++) {
        double t1 = fmin(cur + t[k], stop);
        if (t1 > cur) emit(arg, k, cur, t1);
        cur = t1;
    }
    return cur;
}

/* Walks slot w's timeline over [j0, j1], emitting contiguous pieces that cover it exactly. */
static void rebuild_slot(ftrt__coord *c, int w, double j0, double j1, emit_fn emit, void *arg)
{
    ftrt__crank *r = &c->r[w];
    double rest[FTRT__IV_KINDS];
    memcpy(rest, r->tl_totals, sizeof rest);
    int dead = r->role == FTRT__ROLE_FAILED && r->t_fail_wall > 0;
    double stop = dead ? fmin(fmax(r->t_fail_wall, j0), j1) : j1;
    double cur = rebuild_held(r, j0, stop, emit, arg, rest);
    if (r->tl_truncated || r->tl_left_out || r->tl_resend) /* cut short, not held, or not
                                                             * sent again after a takeover */
        cur = rebuild_rest(r, j0, cur, stop, rest, emit, arg);
    if (cur < stop) {
        int kind;
        if (!r->tl_seen)
            kind = FTRT__IV_STARTUP;
        else if (dead) /* its last unreported moments (< a heartbeat period and a step) */
            kind = r->tl_kind_open == FTRT__IV_SPARE_IDLE ? FTRT__IV_SPARE_IDLE : FTRT__IV_COMPUTE;
        else if (r->tl_final)
            kind = FTRT__IV_TEARDOWN;
        else
            kind = r->tl_kind_open;
        if (kind == FTRT__IV_SPARE_IDLE && !dead && r->t_released_wall > 0) {
            /* a spare sent SHUTDOWN (it sends nothing after): idle until then, leaving after */
            double t = fmin(fmax(r->t_released_wall, cur), stop);
            if (t > cur) emit(arg, kind, cur, t);
            cur = t;
            kind = FTRT__IV_TEARDOWN;
        }
        if (cur < stop) emit(arg, kind, cur, stop);
        cur = stop;
    }
    if (cur < j1) emit(arg, FTRT__IV_DOWN, cur, j1);
}

static void add_total(void *arg, int kind, double t0, double t1)
{
    double *t = arg;
    t[kind] += t1 - t0;
}

/* Where slot w's time in the job starts (wall clock): the job's start j0, or a joined
 * process's admission when later (docs/join.md). */
static double slot_start(const ftrt__coord *c, int w, double j0)
{
    double t = w >= c->Wworld ? c->r[w].t_joined_wall : 0;
    return t > j0 ? t : j0;
}

double ftrt__allocated_s(const ftrt__coord *c, double j0, double wall)
{
    double s = 0;
    for (int w = 1; w < c->Wused; w++) s += fmax(wall - (slot_start(c, w, j0) - j0), 0);
    return s;
}

int ftrt__ledger_figures(const ftrt__coord *cc, double j1, double (*totals)[FTRT__IV_KINDS],
                         ftrt__goodput *g, double *useful_flops, double *peak_flops)
{
    ftrt__coord *c = (ftrt__coord *)cc; /* rebuild_slot sorts the received intervals */
    double j0 = c->t_start_wall, kept = 0, useful = 0, peak = c->a->cfg->peak_flops;
    for (int w = 1; w < c->Wused; w++) {
        memset(totals[w - 1], 0, sizeof totals[w - 1]);
        rebuild_slot(c, w, fmin(slot_start(c, w, j0), j1), j1, add_total, totals[w - 1]);
        kept += c->r[w].kept_s;
        useful += (double)c->r[w].kept_steps * c->r[w].flops_per_step;
        if (c->r[w].peak_flops > peak) peak = c->r[w].peak_flops;
    }
    ftrt__goodput_in in = {.slots = c->Wused - 1, .wall_s = j1 - j0,
                           .allocated_s = ftrt__allocated_s(c, j0, j1 - j0),
                           .totals = (const double (*)[FTRT__IV_KINDS])totals,
                           .kept_step_s = kept, .useful_flops = useful, .peak_flops = peak};
    *useful_flops = useful;
    *peak_flops = peak;
    return ftrt__goodput_compute(&in, g);
}

/* ---- report (streamed: base/jsonw.h) ---- */

typedef struct tl_arg {
    ftrt__jw *w;
    double j0;
} tl_arg;

/* One interval of the timeline: [kind, t0, t1], seconds from the job's start (to 1 us). */
static void add_json(void *arg, int kind, double t0, double t1)
{
    tl_arg *a = arg;
    ftrt__jw_array(a->w, NULL);
    ftrt__jw_int(a->w, NULL, kind);
    ftrt__jw_double(a->w, NULL, round((t0 - a->j0) * 1e6) / 1e6);
    ftrt__jw_double(a->w, NULL, round((t1 - a->j0) * 1e6) / 1e6);
    ftrt__jw_end(a->w);
}

static void add_event(ftrt__jw *w, double j0, double t, const char *what, const ftrt__incident *x)
{
    if (!(t > 0)) return;
    ftrt__jw_object(w, NULL);
    ftrt__jw_double(w, "t", t - j0);
    ftrt__jw_string(w, "event", what);
    ftrt__jw_int(w, "world_rank", x->world_rank);
    ftrt__jw_string(w, "kind", ftrt__failure_kind_name(x->kind));
    ftrt__jw_end(w);
}

/* key: v, or null when v < 0 (unknown). */
static void num_or_null(ftrt__jw *w, const char *key, double v)
{
    if (v >= 0)
        ftrt__jw_double(w, key, v);
    else
        ftrt__jw_null(w, key);
}

/* The model's figures for the report's "advice" object. */
typedef struct advice_in {
    double cost, mtbf, restart, tau, young, daly, g_use, g_daly;
    const char *mtbf_source;
} advice_in;

static void advice_json(ftrt__jw *w, const advice_in *a)
{
    ftrt__jw_object(w, "advice");
    num_or_null(w, "checkpoint_cost_s", a->cost);
    num_or_null(w, "mtbf_s", a->mtbf);
    ftrt__jw_string(w, "mtbf_source", a->mtbf_source);
    ftrt__jw_double(w, "restart_cost_s", a->restart);
    num_or_null(w, "interval_in_use_s", a->tau);
    num_or_null(w, "young_interval_s", a->young);
    num_or_null(w, "daly_interval_s", a->daly);
    num_or_null(w, "model_goodput_in_use", a->g_use);
    num_or_null(w, "model_goodput_daly", a->g_daly);
    ftrt__jw_string(w, "model",
        "1 - C/tau - (tau/2 + R)/M: every failure rolls back to the last checkpoint (a job-level "
        "restart); hot-spare recovery from a survivor's memory avoids that rollback");
    ftrt__jw_end(w);
}

static void advice(ftrt__coord *c, const ftrt__goodput *g, ftrt__jw *w)
{
    const ftrt_config *cfg = c->a->cfg;
    int nck = c->ncommitted + c->nckpt_failed, trainer_failures = 0;
    for (int i = 0; i < c->ninc; i++)
        trainer_failures += !c->inc[i].was_spare && c->inc[i].kind != FK_DRAIN;
    double wall = g->wall_s;
    advice_in a;
    a.cost = nck > 0 ? g->by_kind[FTRT__IV_CKPT] / ((double)c->N * nck) : -1;
    a.mtbf = cfg->mtbf_s > 0 ? cfg->mtbf_s : (trainer_failures ? wall / trainer_failures : -1);
    a.mtbf_source = cfg->mtbf_s > 0 ? "configured" : (trainer_failures ? "observed" : "none");
    a.restart = g->by_kind[FTRT__IV_STARTUP] / (c->Wused - 1);
    a.tau = c->ncommitted > 1
                ? (c->last_commit_wall - c->first_commit_wall) / (c->ncommitted - 1)
                : -1;
    a.young = a.cost > 0 && a.mtbf > 0 ? sqrt(2 * a.cost * a.mtbf) : -1;
    a.daly = ftrt__daly_interval(a.cost, a.mtbf);
    a.g_use = a.tau > 0 ? ftrt__model_goodput(a.tau, fmax(a.cost, 0), a.restart, a.mtbf) : -1;
    a.g_daly = a.daly > 0 ? ftrt__model_goodput(a.daly, a.cost, a.restart, a.mtbf) : -1;
    advice_json(w, &a);
    if (a.daly > 0 && a.tau > 0)
        printf("  checkpoint interval: %.2f s in use, Young/Daly optimum %.2f s (C %.3f s, M %.1f s "
               "%s): model goodput %.3f in use, %.3f at the optimum\n",
               a.tau, a.daly, a.cost, a.mtbf, cfg->mtbf_s > 0 ? "configured" : "observed",
               a.g_use, a.g_daly);
    else
        printf("  checkpoint interval advice: needs a measured checkpoint cost and a failure rate "
               "(failures observed or FTRT_MTBF_S)\n");
}

/* The ledger's totals and figures as the report's "ledger" object. */
static void ledger_json(const ftrt__goodput *g, double useful_flops, double peak, ftrt__jw *w)
{
    ftrt__jw_object(w, "ledger");
    ftrt__jw_double(w, "allocated_rank_s", g->allocated_s);
    ftrt__jw_double(w, "accounted_rank_s", g->accounted_s);
    ftrt__jw_object(w, "rank_s_by_kind");
    for (int k = 0; k < FTRT__IV_KINDS; k++) ftrt__jw_double(w, ftrt__iv_name(k), g->by_kind[k]);
    ftrt__jw_end(w);
    ftrt__jw_double(w, "trainer_rank_s", g->trainer_s);
    ftrt__jw_double(w, "compute_rank_s", g->compute_s);
    ftrt__jw_double(w, "useful_compute_rank_s", g->useful_s);
    ftrt__jw_double(w, "useful_flops", useful_flops);
    num_or_null(w, "peak_flops_per_rank", peak > 0 ? peak : -1);
    ftrt__jw_double(w, "gau", g->gau);
    ftrt__jw_double(w, "ectr", g->ectr);
    num_or_null(w, "emfu", g->emfu);
    num_or_null(w, "effective_utilization", g->effective);
    ftrt__jw_double(w, "goodput", g->goodput);
    ftrt__jw_end(w);
}

/* Where the rank-hours went: the text waterfall and the report's "waterfall" array, then the
 * GAU x ECTR x eMFU line. */
static void waterfall(const ftrt__goodput *g, int slots, ftrt__jw *w)
{
    double a = g->allocated_s;
    printf("  where the rank-hours went (%d ranks x %.3f s):\n", slots, a / slots);
    printf("    %-22s %12.6f rank-h %9.3f rank-s %6.1f%%\n", "allocated", a / 3600, a, 100.0);
    ftrt__jw_array(w, "waterfall");
    for (int i = 0; i < g->nlosses; i++) {
        int k = g->order[i];
        if (g->by_kind[k] <= 0) continue;
        printf("    - %-20s %12.6f rank-h %9.3f rank-s %6.1f%%\n", ftrt__iv_name(k),
               g->by_kind[k] / 3600, g->by_kind[k], 100 * g->by_kind[k] / a);
        ftrt__jw_object(w, NULL);
        ftrt__jw_string(w, "cause", ftrt__iv_name(k));
        ftrt__jw_double(w, "rank_s", g->by_kind[k]);
        ftrt__jw_double(w, "percent", 100 * g->by_kind[k] / a);
        ftrt__jw_end(w);
    }
    ftrt__jw_end(w);
    printf("    = %-20s %12.6f rank-h %9.3f rank-s %6.1f%%\n", "useful compute",
           g->useful_s / 3600, g->useful_s, 100 * g->useful_s / a);
    if (g->emfu >= 0)
        printf("  GAU %.3f x ECTR %.3f x eMFU %.4f = effective utilization %.4f; goodput %.3f\n",
               g->gau, g->ectr, g->emfu, g->effective, g->goodput);
    else
        printf("  GAU %.3f x ECTR %.3f (eMFU unknown: no FLOPs per step or peak FLOP/s given); "
               "goodput %.3f\n", g->gau, g->ectr, g->goodput);
}

/* "logical_rank": its logical rank, or null (a spare, or the coordinator). */
static void opt_logical(ftrt__jw *w, int logical)
{
    if (logical >= 0)
        ftrt__jw_int(w, "logical_rank", logical);
    else
        ftrt__jw_null(w, "logical_rank");
}

/* One element of the timeline's "ranks": world rank w's role and intervals from j0 to j1. */
static void timeline_rank(ftrt__coord *c, int w, double j0, double j1, ftrt__jw *jw)
{
    const ftrt__crank *r = &c->r[w];
    ftrt__jw_object(jw, NULL);
    ftrt__jw_int(jw, "world_rank", w);
    ftrt__jw_string(jw, "role", ftrt__role_name(r->role));
    opt_logical(jw, r->logical);
    ftrt__jw_bool(jw, "truncated", r->tl_truncated || r->tl_resend);
    ftrt__jw_array(jw, "intervals");
    tl_arg ta = {jw, j0};
    rebuild_slot(c, w, fmin(slot_start(c, w, j0), j1), j1, add_json, &ta);
    ftrt__jw_end(jw);
    ftrt__jw_end(jw);
}

/* One element of the timeline's "left_out": world rank w's role and rank-seconds by kind. */
static void timeline_left_out(ftrt__coord *c, int w, double j0, double j1, ftrt__jw *jw)
{
    const ftrt__crank *r = &c->r[w];
    double t[FTRT__IV_KINDS] = {0};
    rebuild_slot(c, w, fmin(slot_start(c, w, j0), j1), j1, add_total, t);
    ftrt__jw_object(jw, NULL);
    ftrt__jw_int(jw, "world_rank", w);
    ftrt__jw_string(jw, "role", ftrt__role_name(r->role));
    opt_logical(jw, r->logical);
    ftrt__jw_array(jw, "rank_s");
    for (int k = 0; k < FTRT__IV_KINDS; k++) ftrt__jw_double(jw, NULL, round(t[k] * 1e6) / 1e6);
    ftrt__jw_end(jw);
    ftrt__jw_end(jw);
}

/* What the coordinator held: the budget, the ranks whose timelines are in "ranks" and the
 * bytes their intervals took, the ranks left out. */
static void timeline_held(const ftrt__coord *c, ftrt__jw *w)
{
    int held = 0, unsent = 0;
    long long bytes = 0;
    for (int x = 1; x < c->Wused; x++) {
        held += !c->r[x].tl_left_out;
        unsent += c->r[x].tl_resend;
        bytes += (long long)(c->r[x].tl_cap * sizeof(ftrt__interval));
    }
    ftrt__jw_int(w, "budget_mib", c->a->cfg->timeline_budget_mb);
    ftrt__jw_int(w, "held_ranks", held);
    ftrt__jw_int(w, "held_bytes", bytes);
    ftrt__jw_int(w, "left_out_ranks", c->Wused - 1 - held);
    /* after a standby's takeover: the ranks that never sent their timeline again (they did not
     * come back to it): cut short, their intervals before it not known */
    ftrt__jw_int(w, "not_resent_ranks", unsent);
}

/* The report's "timeline": the intervals from j0 to j1 of every rank whose timeline the
 * coordinator held, the others' rank-seconds by kind, and the incidents' events, written rank
 * by rank (nothing per rank is held). */
static void timeline_json(ftrt__coord *c, double j0, double j1, ftrt__jw *w)
{
    ftrt__jw_object(w, "timeline");
    ftrt__jw_double(w, "t0", j0);
    ftrt__jw_double(w, "wall_s", j1 - j0);
    ftrt__jw_array(w, "kinds");
    for (int k = 0; k < FTRT__IV_KINDS; k++) ftrt__jw_string(w, NULL, ftrt__iv_name(k));
    ftrt__jw_end(w);
    timeline_held(c, w);
    ftrt__jw_array(w, "ranks");
    for (int x = 1; x < c->Wused; x++)
        if (!c->r[x].tl_left_out) timeline_rank(c, x, j0, j1, w);
    ftrt__jw_end(w);
    ftrt__jw_array(w, "left_out");
    for (int x = 1; x < c->Wused; x++)
        if (c->r[x].tl_left_out) timeline_left_out(c, x, j0, j1, w);
    ftrt__jw_end(w);
    ftrt__jw_array(w, "events");
    for (int i = 0; i < c->ninc; i++) {
        const ftrt__incident *x = &c->inc[i];
        if (x->kind == FK_DRAIN) {
            add_event(w, j0, x->t_detect_wall, "drain", x);
        } else {
            add_event(w, j0, x->t_fail_wall, "failure", x);
            add_event(w, j0, x->t_detect_wall, "detected", x);
        }
        add_event(w, j0, x->t_plan_wall, "plan", x);
        if (x->recovered)
            add_event(w, j0, x->t_detect_wall + (x->t_resumed - x->t_detect), "resumed", x);
    }
    ftrt__jw_end(w);
    ftrt__jw_end(w);
}

/* eMFU above 1 means the peak or the FLOPs per step are wrong (the peak is an upper bound of
 * the hardware): the figure is reported as it is, never clamped, and this warning names both. */
static void warn_emfu(const ftrt__coord *c, const ftrt__goodput *g, double useful, double peak)
{
    if (!(g->emfu > 1)) return;
    double fps = 0;
    for (int w = 1; w < c->Wused; w++)
        if (c->r[w].flops_per_step > fps) fps = c->r[w].flops_per_step;
    ftrt_log_warn("eMFU %.4f is above 1: the peak FLOP/s per rank (%.6g, from FTRT_PEAK_FLOPS "
                  "or ftrt_set_job_info) is below what the trainers did, or the FLOPs per step "
                  "(%.6g) are too many: %.6g useful FLOPs in %.3f compute rank-s is %.6g FLOP/s "
                  "per rank", g->emfu, peak, fps, useful, g->compute_s,
                  g->compute_s > 0 ? useful / g->compute_s : 0.0);
}

void ftrt__ledger_report(ftrt__coord *c, ftrt__jw *w)
{
    int slots = c->Wused - 1;
    double j0 = c->t_start_wall, j1 = j0 + (c->t_end - c->t_start);
    double (*totals)[FTRT__IV_KINDS] = calloc((size_t)slots, sizeof *totals);
    ftrt__goodput g;
    double useful_flops, peak;
    if (!totals || ftrt__ledger_figures(c, j1, totals, &g, &useful_flops, &peak)) {
        /* no ledger: the report has none of its four sections, as before */
        free(totals);
        return;
    }
    free(totals); /* (the figures are all in g) */
    warn_emfu(c, &g, useful_flops, peak);
    ledger_json(&g, useful_flops, peak, w);
    waterfall(&g, slots, w);
    advice(c, &g, w);
    if (w->f) timeline_json(c, j0, j1, w); /* (no report file: no need to rebuild the ranks') */
}

/* ---- OpenMetrics ---- */

static void metric(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# TYPE %s %s\n# HELP %s %s\n", name, type, name, help);
}

/* The job's gauges and counters: running, epoch, steps, trainers, spares, checkpoints. */
static void metrics_job(FILE *f, const ftrt__coord *c)
{
    int64_t steps = 0;
    int spares = 0;
    for (int w = 1; w < c->Wused; w++) {
        if (c->r[w].steps_done > steps) steps = c->r[w].steps_done;
        spares += c->r[w].role == FTRT__ROLE_SPARE;
    }
    metric(f, "ftrt_job_running", "gauge", "1 while the job runs, 0 once it ended.");
    fprintf(f, "ftrt_job_running %d\n", c->phase != PH_DONE);
    metric(f, "ftrt_epoch", "gauge", "Membership epoch (one more per recovery).");
    fprintf(f, "ftrt_epoch %d\n", c->epoch);
    metric(f, "ftrt_steps_done", "gauge", "Training steps done by the most advanced trainer.");
    fprintf(f, "ftrt_steps_done %lld\n", (long long)steps);
    metric(f, "ftrt_trainers", "gauge", "Trainers in the data-parallel world.");
    fprintf(f, "ftrt_trainers %d\n", c->N);
    metric(f, "ftrt_spares_available", "gauge", "Hot spares left in the pool.");
    fprintf(f, "ftrt_spares_available %d\n", spares);
    metric(f, "ftrt_last_committed_step", "gauge", "Step of the newest committed checkpoint.");
    fprintf(f, "ftrt_last_committed_step %lld\n", (long long)c->last_committed);
    metric(f, "ftrt_checkpoints_committed", "counter", "Checkpoints committed.");
    fprintf(f, "ftrt_checkpoints_committed_total %d\n", c->ncommitted);
    metric(f, "ftrt_checkpoints_failed", "counter", "Checkpoints that failed.");
    fprintf(f, "ftrt_checkpoints_failed_total %d\n", c->nckpt_failed);
    metric(f, "ftrt_rejected_connections", "counter", "Control-plane connections rejected.");
    fprintf(f, "ftrt_rejected_connections_total %d\n", c->rejected_connections);
}

/* The incidents: failures by kind, SDC checks, rework, each incident's MTTD and MTTR. */
static void metrics_incidents(FILE *f, ftrt__coord *c)
{
    metric(f, "ftrt_failures", "counter", "Ranks declared failed, by detection kind.");
    int nk[FK_KINDS] = {0};
    int64_t rework = 0;
    for (int i = 0; i < c->ninc; i++) {
        nk[c->inc[i].kind]++;
        rework += c->inc[i].rework_steps;
    }
    for (int k = 0; k < FK_KINDS; k++)
        if (k != FK_DRAIN)
            fprintf(f, "ftrt_failures_total{kind=\"%s\"} %d\n", ftrt__failure_kind_name(k),
                    nk[k]);
    metric(f, "ftrt_drains", "counter", "Ranks drained: planned moves out of the job.");
    fprintf(f, "ftrt_drains_total %d\n", nk[FK_DRAIN]);
    metric(f, "ftrt_sdc_checks", "counter",
           "Steps whose replicas' fingerprints were compared (silent data corruption check).");
    fprintf(f, "ftrt_sdc_checks_total %d\n", c->sdc_checks);
    metric(f, "ftrt_rework_steps", "counter", "Completed steps computed again after rollbacks.");
    fprintf(f, "ftrt_rework_steps_total %lld\n", (long long)rework);
    metric(f, "ftrt_mttd_seconds", "gauge", "Time to detect each failure (fault log or bound).");
    for (int i = 0; i < c->ninc; i++) {
        const ftrt__incident *x = &c->inc[i];
        if (x->kind == FK_DRAIN) continue; /* (nothing to detect) */
        double inj = ftrt__incident_injected_at(c, x);
        fprintf(f, "ftrt_mttd_seconds{incident=\"%d\",kind=\"%s\"} %.6f\n", i + 1,
                ftrt__failure_kind_name(x->kind),
                inj > 0 ? x->t_detect_wall - inj : x->t_detect - x->t_last_heard);
    }
    metric(f, "ftrt_mttr_seconds", "gauge", "Detection to every member back in the loop.");
    for (int i = 0; i < c->ninc; i++)
        if (c->inc[i].recovered && c->inc[i].kind != FK_DRAIN)
            fprintf(f, "ftrt_mttr_seconds{incident=\"%d\"} %.6f\n", i + 1,
                    c->inc[i].t_resumed - c->inc[i].t_detect);
}

/* The ledger so far: rank-seconds by kind, goodput, GAU, ECTR, eMFU. */
static void metrics_ledger(FILE *f, const ftrt__goodput *g)
{
    metric(f, "ftrt_rank_seconds", "counter", "Rank-seconds of the job by ledger kind.");
    for (int k = 0; k < FTRT__IV_KINDS; k++)
        fprintf(f, "ftrt_rank_seconds_total{kind=\"%s\"} %.6f\n", ftrt__iv_name(k),
                g->by_kind[k]);
    metric(f, "ftrt_goodput_ratio", "gauge", "Kept step rank-seconds over allocated, so far.");
    fprintf(f, "ftrt_goodput_ratio %.6f\n", g->goodput);
    metric(f, "ftrt_gau_ratio", "gauge", "Allocation utilization: trainer time / allocated.");
    fprintf(f, "ftrt_gau_ratio %.6f\n", g->gau);
    metric(f, "ftrt_ectr_ratio", "gauge", "Effective compute time ratio.");
    fprintf(f, "ftrt_ectr_ratio %.6f\n", g->ectr);
    if (g->emfu >= 0) {
        metric(f, "ftrt_emfu_ratio", "gauge", "Effective model FLOPs utilization.");
        fprintf(f, "ftrt_emfu_ratio %.6f\n", g->emfu);
        metric(f, "ftrt_effective_utilization_ratio", "gauge", "GAU x ECTR x eMFU.");
        fprintf(f, "ftrt_effective_utilization_ratio %.6f\n", g->effective);
    }
}

int ftrt__metrics_write(ftrt__coord *c, double t_wall)
{
    int slots = c->Wused - 1;
    double (*totals)[FTRT__IV_KINDS] = calloc((size_t)slots, sizeof *totals);
    if (!totals) return -ENOMEM;
    ftrt__goodput g;
    double useful, peak;
    int have = t_wall > c->t_start_wall &&
               ftrt__ledger_figures(c, t_wall, totals, &g, &useful, &peak) == 0;
    free(totals);
    char tmp[1200];
    FILE *f = ftrt__atomic_open(c->a->cfg->metrics_file, tmp, sizeof tmp);
    if (!f) return -errno;
    metrics_job(f, c);
    metrics_incidents(f, c);
    if (have) metrics_ledger(f, &g);
    int e = fprintf(f, "# EOF\n") < 0 ? -EIO : 0;
    return ftrt__atomic_finish(f, tmp, c->a->cfg->metrics_file, e);
}

void ftrt__progress_line(ftrt__coord *c, int final)
{
    int on = c->a->cfg->progress;
    if (on < 0) on = isatty(2);
    if (!on) return;
    int64_t steps = 0, total = 0;
    for (int w = 1; w < c->Wused; w++) {
        if (c->r[w].steps_done > steps) steps = c->r[w].steps_done;
        if (c->r[w].total_steps > total) total = c->r[w].total_steps;
    }
    double now = ftrt__now();
    double rate = c->progress_t > 0 && now > c->progress_t
                      ? (double)(steps - c->progress_steps) / (now - c->progress_t)
                      : 0;
    c->progress_steps = steps;
    c->progress_t = now;
    char eta[32] = "?";
    if (total > steps && rate > 0) {
        long s = (long)((double)(total - steps) / rate);
        snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    char of[32] = "";
    if (total) snprintf(of, sizeof of, "/%lld", (long long)total);
    fprintf(stderr, "\rftrt: step %lld%s  %.1f steps/s  ETA %s  failures %d  epoch %d   %s",
            (long long)steps, of, rate, eta, c->ninc, c->epoch, final ? "\n" : "");
    fflush(stderr);
}
