/*
 * ledger.h - the goodput ledger (internal): where every rank-second of the job went.
 *
 * Each rank keeps a timeline of intervals of its own time, one kind at a time (ledger.c); the
 * coordinator merges them with the failure events and computes, following docs/ARCHITECTURE.md
 * ("Goodput ledger"; the GAU x ECTR x eMFU decomposition):
 *   allocated  = (trainers + spares) x wall                      (rank-seconds)
 *   GAU        = trainer rank-seconds / allocated
 *   ECTR       = compute rank-seconds (rework included) / trainer rank-seconds
 *   eMFU       = useful FLOPs / (peak FLOP/s x compute rank-seconds); reworked FLOPs count 0
 *   effective  = GAU x ECTR x eMFU = useful FLOPs / (peak x allocated)
 *   goodput    = rank-seconds of steps that were kept / allocated
 * Times are wall-clock (CLOCK_REALTIME) seconds so that ranks' timelines line up; ranks on
 * different hosts rely on NTP-synchronised clocks.
 */
#ifndef FTRT_LEDGER_H
#define FTRT_LEDGER_H

#include <stddef.h>
#include <stdint.h>

/* Interval kinds. X(enum, JSON name, trainer time?) */
#define FTRT__IV_MAP(X)                                                                        \
    X(FTRT__IV_STARTUP, "startup", 1)     /* init and restore, before the first step */       \
    X(FTRT__IV_COMPUTE, "compute", 1)     /* application code, steps that are kept */         \
    X(FTRT__IV_COMM, "exposed_comm", 1)   /* waiting on a collective beyond the overlap */    \
    X(FTRT__IV_CKPT, "checkpoint_stall", 1) /* blocked in ftrt_checkpoint */                  \
    X(FTRT__IV_DETECT, "detection_wait", 1) /* failure happened, not yet known here */        \
    X(FTRT__IV_RECOVERY, "recovery", 1)   /* plan, new communicator, state transfer */        \
    X(FTRT__IV_REWORK, "rework", 1)       /* steps (or the part of one) computed again */     \
    X(FTRT__IV_SPARE_IDLE, "spare_idle", 0) /* a hot spare waiting */                         \
    X(FTRT__IV_DOWN, "down", 0)           /* a failed rank's slot after its failure */        \
    X(FTRT__IV_TEARDOWN, "teardown", 1)   /* after the last step, until the job ends */

enum ftrt__iv_kind {
#define FTRT__IV_ENUM(e, name, trainer) e,
    FTRT__IV_MAP(FTRT__IV_ENUM)
#undef FTRT__IV_ENUM
    FTRT__IV_KINDS
};

/* JSON name of a kind ("compute", ...), or "unknown". */
const char *ftrt__iv_name(int kind);
/* 1 when time of this kind is time the slot spent as a trainer (GAU's numerator). */
int ftrt__iv_is_trainer(int kind);

typedef struct ftrt__interval {
    double t0, t1; /* wall seconds */
    int32_t kind;
    int32_t pad;
} ftrt__interval;

/* One rank's timeline. Not thread-safe: the owner (the application thread) updates it. */
typedef struct ftrt__ledger {
    int kind;                          /* current kind, open since t_open */
    double t_open;
    double totals[FTRT__IV_KINDS];     /* closed intervals, seconds */
    ftrt__interval *iv;                /* closed intervals, in time order */
    size_t n, cap, max;                /* max: intervals kept (totals are always exact) */
    int truncated;                     /* more than max intervals happened */
    size_t step_mark;                  /* index of the first interval after the last step end */
    int64_t rework_until;              /* steps below this are rework after a rollback */
} ftrt__ledger;

/* Starts a timeline at wall time t in `kind`, keeping at most max_intervals intervals (the
 * totals stay exact beyond that). Returns 0 or -ENOMEM. */
int ftrt__ledger_init(ftrt__ledger *l, int kind, double t, size_t max_intervals);
void ftrt__ledger_free(ftrt__ledger *l);

/* Closes the open interval at t (t is clamped to be >= its start) and opens `kind`. A switch
 * to the kind already open does nothing. Adjacent intervals of one kind are merged. */
void ftrt__ledger_switch(ftrt__ledger *l, int kind, double t);

/* Splits the open interval at t_split: the part before keeps its kind, the part after becomes
 * `kind` (still open). t_split is clamped into [t_open, t]; used when a failure time becomes
 * known to turn the tail of a collective wait into detection wait. */
void ftrt__ledger_split_open(ftrt__ledger *l, double t_split, int kind);

/* Marks the end of a step: intervals before this point belong to finished steps. */
static inline void ftrt__ledger_step_end(ftrt__ledger *l) { l->step_mark = l->n; }

/* Reclassifies every closed interval since the last step end of kind COMPUTE or COMM as
 * `kind` (the partial step in flight at a failure is lost work: REWORK), and the open one.
 * Totals are moved accordingly. Returns the seconds reclassified. */
double ftrt__ledger_reclass_since_step(ftrt__ledger *l, int kind);

/* Closes the open interval at t without opening another (end of the timeline). */
void ftrt__ledger_close(ftrt__ledger *l, double t);

/* ---- which ranks' timelines the coordinator holds (docs/goodput-ledger.md "Timelines at
 * scale"; the coordinator and every rank compute it alike, so that a rank does not send
 * intervals the coordinator would drop) ---- */

/* Intervals of world rank w's timeline that the coordinator holds, in a world of W processes
 * (world rank 0 the coordinator, the last `spares` ones hot spares) whose settings are
 * `ranks` (FTRT_TIMELINE_RANKS: the first this many world ranks are held), budget_mb
 * (FTRT_TIMELINE_BUDGET_MB: MiB for all held timelines) and timeline_max (FTRT_TIMELINE_MAX:
 * the most a rank holds). Held: world ranks 1..ranks and every hot spare; each holds at most
 * min(timeline_max, budget / (held ranks x sizeof(ftrt__interval))), so that all held
 * timelines together stay within the budget. Returns 0 for a rank left out (its totals only),
 * or for w outside 1..W-1. Pure; thread-safe. */
size_t ftrt__timeline_share(int w, int W, int spares, int ranks, int budget_mb, int timeline_max);

/* ---- the job's figures, from per-slot totals (pure arithmetic, unit-tested) ---- */

typedef struct ftrt__goodput_in {
    int slots;                     /* trainers + spares at start, then joined processes */
    double wall_s;                 /* job wall time */
    double allocated_s;            /* the slots' seconds in the job (a joined process's from
                                    * its join, docs/join.md); 0: slots x wall_s */
    const double (*totals)[FTRT__IV_KINDS]; /* per slot, seconds; each slot's sum ~ wall_s */
    double kept_step_s;            /* rank-seconds of steps that were kept */
    double useful_flops;           /* FLOPs of kept steps, all trainers */
    double peak_flops;             /* per rank, FLOP/s; 0 = unknown */
} ftrt__goodput_in;

typedef struct ftrt__goodput {
    double allocated_s;            /* the slots' seconds in the job (slots x wall without
                                    * joined processes) */
    double wall_s;                 /* the job's wall time (in's) */
    double by_kind[FTRT__IV_KINDS]; /* rank-seconds */
    double accounted_s;            /* sum of by_kind */
    double trainer_s, compute_s, useful_s;
    double gau, ectr, emfu, effective, goodput; /* emfu/effective < 0 when peak unknown */
    int order[FTRT__IV_KINDS];     /* loss kinds, largest first (COMPUTE excluded) */
    int nlosses;
} ftrt__goodput;

/* Computes the ledger figures. Returns 0, or -EINVAL for bad input (no slots, wall <= 0). */
int ftrt__goodput_compute(const ftrt__goodput_in *in, ftrt__goodput *out);

/* Young/Daly optimal checkpoint interval (seconds) for checkpoint cost c_s and mean time between
 * failures m_s: Young's sqrt(2 c M) with Daly's higher-order correction
 * (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
 * FGCS 22(3), 2006): sqrt(2cM) * (1 + sqrt(c/(2M))/3 + (c/(2M))/9) - c for c < 2M, else M.
 * Returns -1 for non-positive inputs. */
double ftrt__daly_interval(double c_s, double m_s);

/* First-order goodput model for checkpoint interval tau, checkpoint cost c, restart cost r
 * (MTTD + MTTR + reload) and MTBF m, every failure rolling back to the last checkpoint:
 * 1 - c/tau - (tau/2 + r)/m, clamped to [0, 1]; -1 for bad input. */
double ftrt__model_goodput(double tau_s, double c_s, double r_s, double m_s);

#endif
