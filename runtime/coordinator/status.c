/*
 * status.c - the coordinator's status file (FTRT_STATUS_FILE, default <ckpt_dir>/status.json).
 *
 * Rewritten atomically (temp file + rename) on every membership change and, at most four times a
 * second, when progress changes, so fault injectors and people can see who is who:
 * {"schema":1, "job": "starting|running|recovering|failing|finished|failed", "epoch": E,
 *  "updated": unix seconds, "coordinator": {"world_rank", "host", "pid", "term"} (the one that
 *  wrote it: world rank 0, or a standby that took over), "trainers": N, "spares_left": k,
 *  "last_committed_step": S|-1,
 *  "failure_sent_epoch", "reports_in_epoch", "plan_sent_epoch": the newest epoch whose
 *  FAILURE this coordinator sent, whose survivors' REPORTs it all had (the PLAN goes out then,
 *  unless held for a host whose agent was lost), whose PLAN it sent (0: none; with "epoch",
 *  where a recovery stands),
 *  "standby": the ready standby coordinator's world rank (-1: none),
 *  "ranks": [{"world_rank", "pid", "host", "role", "logical_rank" (or null), "steps_done",
 *             "last_step", "state": "coordinator|joining|running|left|dead|stuck"}],
 *  "accounted": every non-coordinator rank left, dead or stuck, "final": the last write,
 *  after the report}
 * A launcher ends mpirun once "final" (or "accounted" with a finished/failed job) is seen.
 *
 * The text is written to the file as it is made (64 KiB at a time: never the whole status in
 * memory, issue 22), one rank a line, not built as a json-c tree: at 16,433 ranks
 * the tree took 60-65 ms of the coordinator's loop per write (about once a second), and a
 * rank's death that arrived meanwhile waited for it (docs/benchmarks.md "Coordinator at scale:
 * the crash MTTD tail").
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* Where world rank w stands, for a launcher deciding whether the job can be ended:
 * "coordinator" (this one: world rank 0, or the standby that took over; an old coordinator is
 * "dead"), "left" (said goodbye, or a spare told the job is over), "dead" (declared failed),
 * "stuck" (did not leave after the abort, on a host the coordinator cannot fence), "running"
 * or "joining". */
static const char *rank_state(const ftrt__coord *c, int w)
{
    const ftrt__crank *r = &c->r[w];
    if (w == c->self) return "coordinator";
    if (r->drained) return ftrt__rank_connected(c, w) ? "running" : "left";
    if (r->role == FTRT__ROLE_FAILED) return "dead";
    if (r->said_bye || (r->hello && !ftrt__rank_connected(c, w) && r->orphan_until <= 0))
        return "left";
    if (c->phase == PH_DONE && ftrt__rank_connected(c, w) && c->result != FTRT_DONE) return "stuck";
    if (c->phase == PH_DONE && r->role == FTRT__ROLE_SPARE) return "left"; /* SHUTDOWN sent */
    return r->hello ? "running" : "joining";
}

static const char *job_state(const ftrt__coord *c)
{
    switch (c->phase) {
    case PH_INIT: return "starting";
    case PH_RUNNING: return "running";
    case PH_COLLECT:
    case PH_RESUMING: return "recovering";
    case PH_ABORTING: return "failing";
    default: return c->result == FTRT_DONE ? "finished" : "failed";
    }
}

/* ---- the text ---------------------------------------------------------------------------- */

/* A text buffer in front of the file: flushed to f once it holds SB_FLUSH bytes (so that the
 * status of 131,072 ranks, about 30 MB, is never held whole), grown only for a longer piece;
 * oom once an allocation failed, err once a write did (-errno; the rest is dropped). */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom, err;
    FILE *f;
} sbuf;

enum { SB_FLUSH = 64 * 1024 };

static void sb_flush(sbuf *b)
{
    if (b->n && !b->err && fwrite(b->p, 1, b->n, b->f) != b->n) b->err = errno ? -errno : -EIO;
    b->n = 0;
}

static int sb_room(sbuf *b, size_t more)
{
    if (b->oom || b->err) return -1;
    if (b->n + more + 1 <= b->cap) return 0;
    if (b->n >= SB_FLUSH) {
        sb_flush(b);
        if (b->err) return -1;
        if (more + 1 <= b->cap) return 0;
    }
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->n + more + 1) nc *= 2;
    char *q = realloc(b->p, nc);
    if (!q) {
        b->oom = 1;
        return -1;
    }
    b->p = q;
    b->cap = nc;
    return 0;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    for (int pass = 0; pass < 2; pass++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        if (sb_room(b, (size_t)k)) return;
    }
}

/* s as a JSON string into out (quoted; '"', '\\' and control characters escaped), at most cap
 * bytes with the NUL (cap >= 6 * strlen(s) + 3 holds any s). Returns out. */
static char *json_str(char *out, size_t cap, const char *s)
{
    char *o = out, *end = out + cap - 8;
    *o++ = '"';
    for (const unsigned char *q = (const unsigned char *)s; *q && o < end; q++) {
        if (*q == '"' || *q == '\\') {
            *o++ = '\\';
            *o++ = (char)*q;
        } else if (*q < 0x20) {
            o += sprintf(o, "\\u%04x", *q);
        } else {
            *o++ = (char)*q;
        }
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

static void sb_str(sbuf *b, const char *s)
{
    char q[6 * 256 + 3];
    if (strlen(s) < 256) sb_printf(b, "%s", json_str(q, sizeof q, s));
}

/* The job's fields, before the ranks. */
static void status_head(sbuf *b, const ftrt__coord *c)
{
    int spares = 0, nsdc = 0;
    for (int w = 1; w < c->Wused; w++) spares += c->r[w].role == FTRT__ROLE_SPARE;
    for (int i = 0; i < c->ninc; i++) nsdc += c->inc[i].kind == FK_SDC;
    size_t first = strcspn(c->a->addr, " ");
    sb_printf(b, "{\n  \"schema\": 1,\n  \"job\": \"%s\",\n  \"epoch\": %d,\n"
                 "  \"updated\": %.6f,\n", job_state(c), c->epoch, ftrt__wallclock());
    sb_printf(b, "  \"coordinator\": {\"world_rank\": %d, \"host\": ", c->self);
    sb_str(b, c->r[c->self].host);
    sb_printf(b, ", \"pid\": %d, \"term\": %d},\n", c->r[c->self].pid, c->term);
    sb_printf(b, "  \"trainers\": %d,\n  \"spares_left\": %d,\n  \"last_committed_step\": %lld,\n"
                 "  \"control_plane\": \"%.*s:%d\",\n  \"control_plane_addresses\": [",
              c->N, spares, (long long)c->last_committed, (int)first, c->a->addr, c->a->port);
    int n = 0;
    for (const char *p = c->a->addr; *p;) {
        size_t l = strcspn(p, " ");
        char one[256];
        if (l && l < sizeof one) {
            snprintf(one, sizeof one, "%.*s", (int)l, p);
            sb_printf(b, "%s", n++ ? ", " : "");
            sb_str(b, one);
        }
        p += l;
        p += strspn(p, " ");
    }
    sb_printf(b, "],\n  \"joins\": %d,\n  \"join_slots_left\": %d,\n  \"join_refused\": %d",
              c->njoined, c->W - c->Wused, c->join_refused);
    sb_printf(b, ",\n  \"standby\": %d", /* (ready, and it has acknowledged a SYNC) */
              c->sb_ready && c->sb_acked > 0 ? c->sb_w : -1);
    sb_printf(b, ",\n  \"rejected_connections\": %d,\n  \"failure_sent_epoch\": %d,\n"
                 "  \"reports_in_epoch\": %d,\n  \"plan_sent_epoch\": %d,\n"
                 "  \"sdc\": {\"every\": %d, \"checks\": %d, \"last_agreed_step\": %lld, "
                 "\"incidents\": %d},\n  \"ranks\": [\n",
              c->rejected_connections, c->failure_sent_epoch, c->reports_in_epoch,
              c->plan_sent_epoch, c->a->cfg->sdc_every, c->sdc_checks,
              (long long)c->sdc_agreed_step, nsdc);
}

/* Appends s (no escaping) at o; returns the end. */
static char *put_s(char *o, const char *s)
{
    size_t l = strlen(s);
    memcpy(o, s, l);
    return o + l;
}

/* Appends v in decimal at o; returns the end. */
static char *put_i(char *o, long long v)
{
    char t[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        t[n++] = (char)('0' + u % 10);
    } while (u /= 10);
    if (v < 0) *o++ = '-';
    while (n) *o++ = t[--n];
    return o;
}

/* Bytes a rank's line takes at most (the host name escaped: 6 bytes a character). */
#define RANK_LINE_MAX (440 + 6 * FTRT__HOST_MAX)

/* World rank w's entry, one line, formatted by hand (this runs for every rank of the job on
 * the coordinator's loop: snprintf took 8 ms at 16,433 ranks here); returns 1 when the rank
 * still counts as running or joining. */
static int status_rank(sbuf *b, const ftrt__coord *c, int w)
{
    const ftrt__crank *r = &c->r[w];
    const char *st = rank_state(c, w);
    if (sb_room(b, RANK_LINE_MAX)) return 0;
    char *o = b->p + b->n;
    o = put_i(put_s(o, "    {\"world_rank\": "), w);
    o = put_i(put_s(o, ", \"pid\": "), r->pid);
    o = put_s(o, ", \"host\": ");
    json_str(o, 6 * FTRT__HOST_MAX + 3, r->host);
    o = put_s(put_s(put_s(o + strlen(o), ", \"role\": \""),
                    r->drained ? "drained" : ftrt__role_name(r->role)), "\"");
    o = put_s(o, ", \"logical_rank\": ");
    o = r->logical >= 0 ? put_i(o, r->logical) : put_s(o, "null");
    o = put_i(put_s(o, ", \"steps_done\": "), r->steps_done);
    o = put_i(put_s(o, ", \"last_step\": "), r->steps_done - 1);
    o = put_s(put_s(put_s(o, ", \"state\": \""), st), "\", \"host_agent\": ");
    /* the world rank of the process its host agent lives in; null: its own connection */
    o = r->link >= 0 && w != c->self ? put_i(o, c->hl[r->link].agent_w) : put_s(o, "null");
    /* the world rank of the relay whose FANOUT carries its fan-outs; null: sent directly */
    int relay = r->link < 0 || w == c->self ? -1
                : c->hl[r->link].via >= 0   ? c->hl[c->hl[r->link].via].agent_w
                : c->hl[r->link].nvia > 0   ? c->hl[r->link].agent_w
                                            : -1;
    o = relay >= 0 ? put_i(put_s(o, ", \"relay\": "), relay) : put_s(o, ", \"relay\": null");
    o = put_s(o, w + 1 < c->Wused ? "},\n" : "}\n");
    *o = '\0';
    b->n = (size_t)(o - b->p);
    return w != c->self && (!strcmp(st, "running") || !strcmp(st, "joining"));
}

int ftrt__status_write(ftrt__coord *c)
{
    static int warned;
    char tmp[1200];
    sbuf b = {.f = ftrt__atomic_open(c->a->status_file, tmp, sizeof tmp)};
    int accounted = 1, rc = b.f ? 0 : -errno;
    if (b.f) {
        status_head(&b, c);
        for (int w = 0; w < c->Wused; w++)
            if (status_rank(&b, c, w)) accounted = 0;
        sb_printf(&b, "  ],\n  \"accounted\": %s,\n  \"final\": %s\n}\n",
                  accounted ? "true" : "false", c->final_written ? "true" : "false");
        sb_flush(&b);
        rc = ftrt__atomic_finish(b.f, tmp, c->a->status_file, b.oom ? -ENOMEM : b.err);
    }
    free(b.p);
    if (rc && !warned) {
        warned = 1;
        ftrt_log_warn("cannot write the status file %s: %s", c->a->status_file, strerror(-rc));
    }
    return rc;
}
