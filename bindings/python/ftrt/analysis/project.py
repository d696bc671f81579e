"""Project goodput / ETTR at scale from a job's measured recovery costs.

Usage: python3 -m ftrt.analysis.project REPORT.json [--json OUT.json] [--plot OUT.png] [flags]
       (`ftrt-project` once the package is pip-installed; from a source tree:
       PYTHONPATH=bindings/python python3 -m ftrt.analysis.project)

Takes an ftrt job report (schema 1 or 2: MTTD, MTTR, rework per failure, checkpoint stall, step
time; with --scale, MTTD and the control plane's part of MTTR from bench/coord_load at 16,384
simulated ranks instead) and published failure rates per node-day, and projects the effective training time
ratio (ETTR: useful training time / wall time) and goodput (ETTR x trainers / (trainers +
spares), spares being paid for) of a job of 1,024, 16,384 and 131,072 GPUs under two
policies:

  ftrt   detection in the measured MTTD (crashes) or the heartbeat timeout (hangs), in-place
         recovery on a hot spare in the measured MTTR, rework as measured; when the spare nodes
         are all in repair, or the coordinator's node fails, a whole-job restart from the last
         checkpoint (asynchronous: the training stall is the measured one);
  plain  checkpoint-restart: crashes detected by the launcher, hangs by a 10-minute collective
         timeout, every failure a whole-job restart (relaunch + re-init + reload from shared
         storage) that rolls back to the last (blocking) checkpoint;

each with its Young/Daly-optimal checkpoint interval. For ftrt, what a failure that finds no
spare node costs is projected under three no-spare policies (issue 35; `fold` and `shrink` are
built for replicated state, joins for a job on one node: these rows are the model's):
`stop` (above: a whole-job restart),
`shrink` (the job goes on with the nodes it has: its throughput falls by the nodes missing),
`fold` (a surviving node takes a missing node's logical ranks as well: the step waits for it,
half the throughput while any node is missing); --join-h H makes a replacement node join the
running job H hours after a failure when that is sooner than its repair (--spare-refill-h). The closed form (docs/goodput-
projection.md) is exact for its model; a seeded discrete-event simulation of the same model
runs beside it as a check. Prints the inputs (measured or assumed, with their sources) and a
table; --json writes both, --plot draws goodput against job size (256 to 131,072 GPUs).
Needs numpy for the simulation (--no-des skips it) and matplotlib for --plot.
"""
import argparse
import json
import math
import statistics
import sys
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple

# A model (closed_form(), simulate()): its keys are described below.
Model = Dict[str, Any]
# A distribution: [(probability, value)].
Dist = Sequence[Tuple[float, float]]

DAY_S = 86400.0
# Published failure rates, failures per 1,000 node-days. Meta's research clusters RSC-1 and
# RSC-2: Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research
# Clusters", arXiv 2410.21680 (HPCA 2025). Llama 3: "The Llama 3 Herd of Models", arXiv
# 2407.21783, section 3.3.4: 419 unexpected interruptions in a 54-day snapshot on 16,384 GPUs
# (converted to node-days with --gpus-per-node).
RATE_SOURCES = {
    "meta-rsc1": (6.50, "Meta RSC-1, arXiv 2410.21680"),
    "meta-rsc2": (2.34, "Meta RSC-2, arXiv 2410.21680"),
    "llama3": (None, "Llama 3: 419 in 54 days on 16,384 GPUs, arXiv 2407.21783"),
}
SIZES = (1024, 16384, 131072)
PLOT_MIN, PLOT_MAX = 256, 131072


def llama3_rate(gpus_per_node: int) -> float:
    """Llama 3's unexpected interruptions per 1,000 node-days."""
    return 419.0 / 54.0 / (16384.0 / gpus_per_node) * 1000.0


# ---- Young / Daly ------------------------------------------------------------------------------

def young_interval(c: float, m: float) -> float:
    """Young 1974: sqrt(2 C M)."""
    return math.sqrt(2.0 * c * m)


def daly_interval(c: float, m: float) -> float:
    """Daly 2006 (FGCS 22(3)), higher-order optimum of the compute time between checkpoints:
    sqrt(2CM) (1 + sqrt(C/2M)/3 + (C/2M)/9) - C for C < 2M, else M. Same as base/ledger.c's
    ftrt__daly_interval, which the report's advice uses."""
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


# ---- the model ---------------------------------------------------------------------------------
#
# A model ("m", a dict) is one policy at one job size:
#   lam         failures of the job per second (Poisson)
#   C           training stall per checkpoint, s; the checkpoint is taken every tau s of work
#   pi_rb       probability that a failure is a rollback incident (whole-job restart)
#   ip_detect   [(probability, seconds)]: detection of an in-place incident
#   ip_busy     recovery + rework of an in-place incident, s (failure-prone)
#   ip_reset    1: an in-place recovery also rolls back to the last checkpoint (sharded state)
#   rb_detect   [(probability, seconds)]: detection of a rollback incident
#   rb_busy     relaunch + re-init + reload, s (failure-prone)
# Semantics (the closed form and the simulation share them): failures arrive at rate lam at
# any time. During a detection wait they join the incident already under way (the job is
# stopped anyway). A failure during an in-place recovery (or its rework) starts a new incident
# of its own kind; one during a whole-job restart starts a new whole-job restart. Work since
# the last completed checkpoint is lost on a rollback; an in-place recovery keeps it (ftrt
# resumes at the most advanced survivor) unless ip_reset.


def _mean(dist: Dist) -> float:
    return sum(p * v for p, v in dist)


def closed_form(m: Model, tau: float) -> Tuple[float, float]:
    """Expected ETTR (useful work / wall time) of model m with checkpoint interval tau, and
    the rate of rollbacks (1/s). Exact for the model above (docs/goodput-projection.md)."""
    lam, L = m["lam"], tau + m["C"]
    pi_rb = m["pi_rb"]
    pi_ip = 1.0 - pi_rb
    # one in-place excursion: detection, then ip_busy; a failure in ip_busy restarts it
    # (another in-place incident, probability pi_ip) or turns it into a rollback (pi_rb)
    s = math.exp(-lam * m["ip_busy"])
    n_try = 1.0 / (1.0 - (1.0 - s) * pi_ip)
    x_ip = (_mean(m["ip_detect"]) + (1.0 - s) / lam) * n_try
    p_esc = (1.0 - s) * pi_rb * n_try
    # one whole-job restart: detection, then rb_busy, restarted by any failure in it
    t_rb = math.exp(lam * m["rb_busy"]) * _mean(m["rb_detect"]) + math.expm1(lam * m["rb_busy"]) / lam
    lam_rb = lam * (pi_rb + pi_ip * p_esc)            # rollbacks through a whole-job restart
    lam_reset = lam_rb + lam * pi_ip * (1.0 - p_esc) * m["ip_reset"]
    # productive time until L passes without a reset, and what it carries with it
    prod = math.expm1(lam_reset * L) / lam_reset if lam_reset > 0 else L
    wall = prod * (1.0 + lam * pi_ip * x_ip + lam_rb * t_rb)
    return tau / wall, lam_reset


def optimal_interval(m: Model) -> Tuple[float, float]:
    """Daly's interval for model m: C its stall, M the mean time between rollbacks (what a
    checkpoint protects against: the closed form's wall time is proportional to
    exp((tau + C)/M) - 1, whose optimum Daly approximates)."""
    _, lam_reset = closed_form(m, 1.0)
    if lam_reset <= 0:
        return math.inf, math.inf
    mr = 1.0 / lam_reset
    if m["C"] <= 0:
        return math.inf, mr
    return daly_interval(m["C"], mr), mr


def simulate(m: Model, tau: float, work_s: float, seed: int) -> Tuple[float, int]:
    """Discrete-event simulation of model m: Poisson failures, a job of work_s seconds of
    useful work. Returns (ETTR, failures)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    lam, C = m["lam"], m["C"]
    L = tau + C
    mean_gap = 1.0 / lam

    def draw(dist: Dist) -> float:
        u, acc = rng.random(), 0.0
        for p, v in dist:
            acc += p
            if u < acc:
                return v
        return dist[-1][1]

    t = done = prog = 0.0
    nf = rng.exponential(mean_gap)
    fails = 0
    while done < work_s:
        need = L - prog
        if nf >= t + need:                    # the segment and its checkpoint complete
            t += need
            done += tau
            prog = 0.0
            k = min(math.floor((nf - t) / L), math.ceil((work_s - done) / tau))
            if k > 0:                         # whole segments before the next failure
                t += k * L
                done += k * tau
            continue
        prog += nf - t
        t = nf
        fails += 1
        rollback = rng.random() < m["pi_rb"]
        while True:
            if not rollback:
                t += draw(m["ip_detect"])
                nf = t + rng.exponential(mean_gap)   # failures during detection joined it
                end = t + m["ip_busy"]
                if nf < end:
                    t = nf
                    fails += 1
                    rollback = rng.random() < m["pi_rb"]
                    continue
                t = end
                if m["ip_reset"]:
                    prog = 0.0
                break
            prog = 0.0
            t += draw(m["rb_detect"])
            nf = t + rng.exponential(mean_gap)
            end = t + m["rb_busy"]
            if nf < end:
                t = nf
                fails += 1
                continue
            t = end
            break
    return done / t, fails


def poisson_sf(k: int, mu: float) -> float:
    """P(N >= k) for N ~ Poisson(mu)."""
    if k <= 0:
        return 1.0
    term = math.exp(-mu)
    cdf = term
    for i in range(1, k):
        term *= mu / i
        cdf += term
    return max(0.0, 1.0 - cdf)


# ---- inputs ------------------------------------------------------------------------------------

class Inputs:
    """Every figure the projection uses, with where it came from."""

    def __init__(self) -> None:
        self.values: Dict[str, Any] = {}
        self.sources: Dict[str, str] = {}

    def set(self, key: str, value: Any, source: str) -> None:
        """Sets figure `key` (units in its name: _s seconds, _h hours) and where it came from."""
        self.values[key] = value
        self.sources[key] = source

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def read_scale(path: str) -> Dict[str, float]:
    """The RESULT line with the most ranks in bench/coord_load's output at path (key=value
    pairs, numbers as floats). Raises ValueError when there is none, or it lacks a figure."""
    best: Optional[Dict[str, float]] = None
    with open(path) as f:
        for line in f:
            i = line.find("RESULT ")
            if i < 0:
                continue
            res: Dict[str, float] = {}
            for kv in line[i + 7:].split():
                k, _, v = kv.partition("=")
                try:
                    res[k] = float(v)
                except ValueError:
                    pass
            if best is None or res.get("n", 0) > best.get("n", 0):
                best = res
    if best is None:
        raise ValueError("%s: no RESULT line of bench/coord_load" % path)
    for k in ("n", "mttd_p50_ms", "fanout_p50_ms", "plan_last_ms"):
        if k not in best or best[k] != best[k]:  # missing or NaN
            raise ValueError("%s: its RESULT line has no %s" % (path, k))
    return best


def at_scale(inp: Inputs, a: argparse.Namespace, res: Dict[str, float]) -> None:
    """MTTD and MTTR from a coord_load run at scale (res: read_scale()) where no flag gives them:
    the crash MTTD is the run's (a rank's death -> the first survivor's FAILURE, p50); the MTTR
    is the report's (its communicator rebuild and state transfer, which the simulated ranks do
    not do) plus the control plane's part at scale: the FAILURE's fan-out to the last survivor
    (p50) and the last REPORT -> the last PLAN (p50)."""
    where = "bench/coord_load, %d simulated ranks%s (%s)" % (
        res["n"], ", %d per host agent" % res["per_host"] if res.get("per_host") else "", a.scale)
    if a.mttd_crash_s is None:
        inp.set("mttd_crash_s", res["mttd_p50_ms"] / 1e3,
                "measured at scale: rank crash -> first FAILURE p50, " + where)
    if a.mttr_s is None:
        ctl = (res["fanout_p50_ms"] + res["plan_last_ms"]) / 1e3
        inp.set("mttr_s", inp["mttr_s"] + ctl,
                "the report's %s (communicator rebuild, state transfer) + %s at scale: FAILURE "
                "to the last survivor p50 %s + last REPORT -> last PLAN p50 %s, %s" % (
                    fmt_s(inp["mttr_s"]), fmt_s(ctl), fmt_s(res["fanout_p50_ms"] / 1e3),
                    fmt_s(res["plan_last_ms"] / 1e3), where))


def from_report(rep: Dict[str, Any], a: argparse.Namespace) -> Inputs:
    """The measured figures of report rep (overridden by flags) and the assumed ones."""
    if rep.get("schema") not in (1, 2):
        raise ValueError("not a schema-1 or schema-2 ftrt report")
    inp = Inputs()
    trainers = rep["trainers"]
    fails = [f for f in rep.get("failures", []) if f.get("kind") != "silent_data_corruption"]
    crash = [f["mttd_s"] for f in fails if f["kind"] in ("connection_lost", "protocol_error")
             and f.get("mttd_s") is not None]
    hang = [f["mttd_s"] for f in fails if f["kind"] in ("heartbeat_timeout", "progress_stall")
            and f.get("mttd_s") is not None]
    mttr = [f["mttr_s"] for f in fails if f.get("recovered") and f.get("mttr_s") is not None]

    def measured(key: str, flag: Optional[float], values: List[float], what: str,
                 unit_note: str = "") -> None:
        if flag is not None:
            inp.set(key, flag, "given (--%s)" % key.replace("_", "-"))
        elif values:
            src = "measured: median of %d %s%s" % (len(values), what, unit_note)
            inp.set(key, statistics.median(values), src)
        else:
            raise ValueError("the report has no %s: give --%s" % (what, key.replace("_", "-")))

    measured("mttd_crash_s", a.mttd_crash_s, crash, "crash failure(s)")
    if a.ftrt_hang_detect_s is not None:
        inp.set("ftrt_hang_detect_s", a.ftrt_hang_detect_s, "given (--ftrt-hang-detect-s)")
    elif hang:
        inp.set("ftrt_hang_detect_s", statistics.median(hang),
                "measured: median of %d hang failure(s)" % len(hang))
    else:
        inp.set("ftrt_hang_detect_s", 1.0,
                "assumed: FTRT_HEARTBEAT_TIMEOUT_MS default (--ftrt-hang-detect-s)")
    measured("mttr_s", a.mttr_s, mttr, "recovered failure(s)")
    if getattr(a, "scale", None):
        at_scale(inp, a, read_scale(a.scale))
    steps = max(int(rep.get("steps") or 0), 1)
    step_s = rep["kept_step_rank_s"] / (trainers * steps)
    inp.set("step_s", a.step_s if a.step_s is not None else step_s,
            "given (--step-s)" if a.step_s is not None else
            "measured: kept step rank-s / (trainers x steps)")
    if a.ftrt_rework_s is not None:
        inp.set("ftrt_rework_s", a.ftrt_rework_s, "given (--ftrt-rework-s)")
    elif fails:
        lost = rep.get("lost_partial_step_rank_s", 0.0)
        if a.ftrt_state == "replicated":
            lost += rep.get("rework_rank_s", 0.0)
        inp.set("ftrt_rework_s", lost / (trainers * len(fails)),
                "measured: (lost partial step%s rank-s) / (trainers x failures)" %
                (" + rework" if a.ftrt_state == "replicated" else ""))
    else:
        inp.set("ftrt_rework_s", inp["step_s"], "assumed: one step (no failure in the report)")
    adv = rep.get("advice") or {}
    if a.ftrt_ckpt_stall_s is not None:
        inp.set("ftrt_ckpt_stall_s", a.ftrt_ckpt_stall_s, "given (--ftrt-ckpt-stall-s)")
    elif adv.get("checkpoint_cost_s") is not None:
        inp.set("ftrt_ckpt_stall_s", adv["checkpoint_cost_s"],
                "measured: stall rank-s / (trainers x checkpoints)")
    else:
        raise ValueError("the report has no checkpoint cost: give --ftrt-ckpt-stall-s")
    inp.set("ftrt_state", a.ftrt_state,
            "--ftrt-state: replicated = resume at the most advanced survivor" if
            a.ftrt_state == "replicated" else
            "--ftrt-state: sharded = every recovery reloads the last checkpoint")
    # assumed, each a flag
    inp.set("gpus_per_node", a.gpus_per_node, "assumed (--gpus-per-node)")
    inp.set("hang_share", a.hang_share, "assumed: no published split (--hang-share)")
    inp.set("plain_crash_detect_s", a.plain_crash_detect_s,
            "assumed: launcher sees the exit, tears the job down (--plain-crash-detect-s)")
    inp.set("plain_hang_timeout_s", a.plain_hang_timeout_s,
            "PyTorch ProcessGroupNCCL default timeout, 10 min (--plain-hang-timeout-s)")
    inp.set("relaunch_s", a.relaunch_s, "assumed: requeue, allocation, process start (--relaunch-s)")
    inp.set("reinit_s", a.reinit_s, "assumed: imports, CUDA, NCCL init, model build (--reinit-s)")
    inp.set("state_gb_per_gpu", a.state_gb_per_gpu,
            "Llama 3: 1 MB to 4 GB of checkpoint per GPU (--state-gb-per-gpu)")
    inp.set("storage_gbps_per_gpu", a.storage_gbps_per_gpu,
            "Llama 3: Tectonic 2 TB/s sustained / 16,384 GPUs (--storage-gbps-per-gpu)")
    io_s = a.state_gb_per_gpu / a.storage_gbps_per_gpu
    inp.set("plain_ckpt_write_s", a.plain_ckpt_write_s if a.plain_ckpt_write_s is not None else io_s,
            "given (--plain-ckpt-write-s)" if a.plain_ckpt_write_s is not None else
            "state / storage bandwidth per GPU (blocking)")
    inp.set("reload_s", a.reload_s if a.reload_s is not None else io_s,
            "given (--reload-s)" if a.reload_s is not None else
            "state / storage bandwidth per GPU")
    inp.set("ftrt_persist_s", a.ftrt_persist_s if a.ftrt_persist_s is not None else io_s,
            "given (--ftrt-persist-s)" if a.ftrt_persist_s is not None else
            "state / storage bandwidth per GPU: ftrt's background write")
    inp.set("spare_nodes_per_128", a.spare_nodes_per_128,
            "assumed: hot spare nodes per 128 job nodes, at least 1 (--spare-nodes-per-128)")
    inp.set("spare_refill_h", a.spare_refill_h,
            "assumed: a failed node is back (or replaced) after this (--spare-refill-h)")
    inp.set("join_h", a.join_h if a.join_h is not None else math.inf,
            "assumed: a replacement node joins the running job this long after a failure "
            "(--join-h; inf: none joins)")
    return inp


def rate_list(a: argparse.Namespace) -> List[Tuple[str, float, str]]:
    """[(name, failures per 1,000 node-days, source)] to project for."""
    out: List[Tuple[str, float, str]] = []
    for name in a.rates.split(","):
        name = name.strip()
        if not name:
            continue
        if name not in RATE_SOURCES:
            raise ValueError("unknown rate source %r (known: %s)" % (name, ", ".join(RATE_SOURCES)))
        given, src = RATE_SOURCES[name]
        if given is None:
            r = llama3_rate(a.gpus_per_node)
            src += ", %d GPUs per node" % a.gpus_per_node
        else:
            r = given
        out.append((name, r, src))
    for r in a.rate or []:
        out.append(("custom-%g" % r, r, "given (--rate)"))
    return out


def models(inp: Inputs, gpus: int,
           rate_per_1000_node_days: float) -> Tuple[Model, Model, Dict[str, Any]]:
    """(plain, ftrt, facts) models of a job of `gpus` trainer GPUs."""
    gpn = inp["gpus_per_node"]
    nodes = max(1, math.ceil(gpus / gpn))
    lam_node = rate_per_1000_node_days / 1000.0 / DAY_S
    lam = nodes * lam_node
    h = inp["hang_share"]
    restart = inp["relaunch_s"] + inp["reinit_s"] + inp["reload_s"]
    plain_detect = [(1.0 - h, inp["plain_crash_detect_s"]), (h, inp["plain_hang_timeout_s"])]
    plain = {"lam": lam, "C": inp["plain_ckpt_write_s"], "pi_rb": 1.0,
             "ip_detect": [(1.0, 0.0)], "ip_busy": 0.0, "ip_reset": 0,
             "rb_detect": plain_detect, "rb_busy": restart}
    spare_nodes = max(1, int(round(nodes * inp["spare_nodes_per_128"] / 128.0)))
    # the spare pool: failed nodes are in repair for spare_refill_h (M/G/inf): a failure finds
    # no spare with the stationary probability P(in repair >= spares)
    missing_h = min(inp["spare_refill_h"], inp.values.get("join_h", math.inf))  # (or a join)
    mu = lam * missing_h * 3600.0
    q_out = poisson_sf(spare_nodes, mu)
    p_coord = 1.0 / nodes                        # the coordinator's node is one of the job's
    pi_rb = p_coord + (1.0 - p_coord) * q_out
    ftrt_detect = [(1.0 - h, inp["mttd_crash_s"]), (h, inp["ftrt_hang_detect_s"])]
    sharded = inp["ftrt_state"] == "sharded"
    # a checkpoint is committed ftrt_persist_s after its snapshot: a rollback goes back that
    # much further on average (to the previous checkpoint when it strikes in that window)
    lag = inp["ftrt_persist_s"]
    busy = inp["mttr_s"] + inp["ftrt_rework_s"] + (inp["reload_s"] + lag if sharded else 0.0)
    ftrt = {"lam": lam, "C": inp["ftrt_ckpt_stall_s"], "pi_rb": pi_rb,
            "ip_detect": ftrt_detect, "ip_busy": busy, "ip_reset": 1 if sharded else 0,
            "rb_detect": ftrt_detect, "rb_busy": restart + lag, "min_interval": lag}
    facts = {"gpus": gpus, "nodes": nodes, "failures_per_day": lam * DAY_S,
             "job_mtbf_h": 1.0 / lam / 3600.0, "spare_nodes": spare_nodes,
             "spares_out_share": q_out, "rollback_share": pi_rb,
             "spare_fraction": spare_nodes / (nodes + spare_nodes), "missing_h": missing_h}
    return plain, ftrt, facts


def deficit(spares: int, mu: float, nodes: int) -> Tuple[float, float]:
    """(P(D >= 1), E[D]) of the nodes missing, D = min(nodes, max(0, X - spares)), X ~
    Poisson(mu) the failed nodes not back yet (the M/G/inf pool of models())."""
    top = int(mu + 12.0 * math.sqrt(mu + 1.0) + spares + 20)
    p_any = e_d = 0.0
    term = math.exp(-mu)
    for k in range(0, top + 1):
        if k > 0:
            term *= mu / k
        if k > spares:
            p_any += term
            e_d += term * min(nodes, k - spares)
    return p_any, e_d


def no_spare_policies(inp: Inputs, ftrt: Model, facts: Dict[str, Any],
                      tau: float) -> Dict[str, Dict[str, float]]:
    """ETTR and goodput of ftrt under `shrink` and `fold` (no_spare_policies in the module's
    docstring): failures that find no spare recover in place (only the coordinator's node still
    restarts the job), and the throughput while nodes are missing is 1 - E[D]/nodes (shrink)
    or 1 - P(D >= 1)/2 (fold: the folded node does two nodes' work)."""
    p_coord = 1.0 / facts["nodes"]
    m = dict(ftrt, pi_rb=p_coord)
    base, _ = closed_form(m, tau)
    mu = facts["failures_per_day"] / DAY_S * facts["missing_h"] * 3600.0
    p_any, e_d = deficit(facts["spare_nodes"], mu, facts["nodes"])
    out = {}
    for name, thr in (("shrink", 1.0 - e_d / facts["nodes"]), ("fold", 1.0 - p_any / 2.0)):
        out[name] = {"ettr": base * thr, "throughput": thr,
                     "goodput": base * thr * (1.0 - facts["spare_fraction"])}
    return out


def project_one(inp: Inputs, gpus: int, rate: float, des_failures: int = 0,
                seed: int = 1) -> Dict[str, Any]:
    plain, ftrt, facts = models(inp, gpus, rate)
    row = dict(facts)
    for name, m in (("plain", plain), ("ftrt", ftrt)):
        tau, m_rb = optimal_interval(m)
        young = young_interval(m["C"], m_rb) if math.isfinite(m_rb) and m["C"] > 0 else math.inf
        if not math.isfinite(tau):      # nothing to protect against (or free checkpoints)
            tau = 1e12
        # an asynchronous checkpoint cannot be taken more often than it is written
        tau = max(tau, m.get("min_interval", 0.0))
        ettr, _ = closed_form(m, tau)
        r = {"ckpt_cost_s": m["C"], "rollback_mtbf_h": m_rb / 3600.0,
             "young_interval_s": young, "daly_interval_s": tau,
             "interval_steps": tau / inp["step_s"], "ettr": ettr}
        spare_frac = facts["spare_fraction"] if name == "ftrt" else 0.0
        r["goodput"] = ettr * (1.0 - spare_frac)
        if des_failures:
            work = des_failures / m["lam"] * ettr
            r["des_ettr"], r["des_failures"] = simulate(m, tau, work, seed)
        row[name] = r
    row["no_spare"] = no_spare_policies(inp, ftrt, facts, row["ftrt"]["daly_interval_s"])
    return row


def break_even_mttr(inp: Inputs, gpus: int, rate: float, target: float) -> float:
    """The ftrt MTTR (s) at which ftrt's ETTR falls to `target` (plain's), by bisection."""
    lo, hi = 0.0, 1e6
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        v = dict(inp.values)
        v["mttr_s"] = mid
        i2 = Inputs()
        i2.values = v
        _, ftrt, _ = models(i2, gpus, rate)
        tau, _ = optimal_interval(ftrt)
        tau = max(tau if math.isfinite(tau) else 1e12, ftrt["min_interval"])
        e, _ = closed_form(ftrt, tau)
        if e > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ---- output ------------------------------------------------------------------------------------

def fmt_s(x: float) -> str:
    if not math.isfinite(x):
        return "inf"
    if x < 1.0:
        return "%.1f ms" % (x * 1e3)
    if x < 600:
        return "%.1f s" % x
    if x < 6000:
        return "%.1f min" % (x / 60)
    return "%.1f h" % (x / 3600)


def print_inputs(inp: Inputs, report_path: str, rep: Dict[str, Any], out: IO[str]) -> None:
    print("ftrt-project: goodput at scale, projected from %s" % report_path, file=out)
    print("  the report: %d steps, %d trainers + %d spare(s), %d failure(s), wall %.3f s, goodput %.3f"
          % (rep.get("steps", 0), rep["trainers"], rep.get("spares", 0),
             len(rep.get("failures", [])), rep.get("wall_s", 0.0), rep.get("goodput", 0.0)),
          file=out)
    print("inputs:", file=out)
    units = {"gpus_per_node": "", "hang_share": "", "ftrt_state": "",
             "state_gb_per_gpu": " GB", "storage_gbps_per_gpu": " GB/s",
             "spare_nodes_per_128": "", "spare_refill_h": " h"}
    for k, v in inp.values.items():
        if k in units:
            val = ("%.3g%s" % (v, units[k])) if not isinstance(v, str) else v
        else:
            val = fmt_s(v)
        print("  %-22s %-10s %s" % (k, val, inp.sources[k]), file=out)


def print_table(rows: List[Dict[str, Any]], out: IO[str], des: bool) -> None:
    print("%-10s %7s %6s %8s %9s | %-24s | %s" % ("", "", "", "", "", "plain checkpoint-restart",
                                                  "ftrt"), file=out)
    print("%-10s %7s %6s %8s %9s | %-14s %9s | %-10s %7s %7s %9s"
          % ("rate", "GPUs", "nodes", "fail/day", "job MTBF", "ckpt every", "ETTR",
             "ckpt every", "ETTR", "goodput", "restarts"), file=out)
    for r in rows:
        p, f = r["plain"], r["ftrt"]
        print("%-10s %7d %6d %8.2f %9s | %-14s %9.4f | %-10s %7.4f %7.4f %8.2f%%"
              % (r["rate_source"], r["gpus"], r["nodes"], r["failures_per_day"],
                 fmt_s(r["job_mtbf_h"] * 3600), fmt_s(p["daly_interval_s"]), p["ettr"],
                 fmt_s(f["daly_interval_s"]), f["ettr"], f["goodput"],
                 100 * r["rollback_share"]), file=out)
    print("no spare node left (FTRT_NO_SPARE policies, projected): "
          "ETTR under stop (the table's ftrt) / shrink / fold, throughput while nodes are "
          "missing:", file=out)
    for r in rows:
        ns = r["no_spare"]
        print("  %-10s %7d GPUs: stop %.4f  shrink %.4f (x%.4f)  fold %.4f (x%.4f)"
              % (r["rate_source"], r["gpus"], r["ftrt"]["ettr"], ns["shrink"]["ettr"],
                 ns["shrink"]["throughput"], ns["fold"]["ettr"], ns["fold"]["throughput"]),
              file=out)
    if des:
        print("check, discrete-event simulation of the same model (seeded, ETTR):", file=out)
        for r in rows:
            p, f = r["plain"], r["ftrt"]
            print("  %-10s %7d GPUs: plain %.4f vs %.4f (%+.2f%%, %d failures), "
                  "ftrt %.5f vs %.5f (%+.3f%%, %d failures)"
                  % (r["rate_source"], r["gpus"], p["des_ettr"], p["ettr"],
                     100 * (p["des_ettr"] / p["ettr"] - 1), p["des_failures"],
                     f["des_ettr"], f["ettr"], 100 * (f["des_ettr"] / f["ettr"] - 1),
                     f["des_failures"]), file=out)


def plot(inp: Inputs, rates: List[Tuple[str, float, str]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = [int(round(PLOT_MIN * 2 ** (k / 4.0))) for k in range(4 * 9 + 1)]
    sizes = [s for s in sizes if s <= PLOT_MAX]
    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]
    fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=100)
    for i, (name, rate, src) in enumerate(rates):
        c = colours[i % len(colours)]
        rows = [project_one(inp, g, rate) for g in sizes]
        ax.plot(sizes, [r["ftrt"]["goodput"] for r in rows], color=c, linewidth=1.8,
                label="ftrt, %s (%.2f / 1000 node-days)" % (name, rate))
        ax.plot(sizes, [r["plain"]["goodput"] for r in rows], color=c, linewidth=1.8,
                linestyle="--", label="plain checkpoint-restart, %s" % name)
    ax.set_xscale("log", base=2)
    ax.set_xticks([256, 1024, 4096, 16384, 65536, 131072])
    ax.set_xticklabels(["256", "1,024", "4,096", "16,384", "65,536", "131,072"])
    ax.set_xlim(PLOT_MIN, PLOT_MAX)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("GPUs in the job (%d per node)" % inp["gpus_per_node"])
    ax.set_ylabel("goodput (ETTR x trainers / allocated)")
    ax.set_title("Goodput at scale, projected from the measured recovery costs", fontsize=10)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.6)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _finite(x: Any) -> Any:
    """x with every inf or nan float replaced by None (JSON has neither)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m ftrt.analysis.project",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("report", help="the job's JSON report (FTRT_REPORT, --report)")
    ap.add_argument("--json", metavar="OUT", help="also write inputs and results as JSON ('-': stdout)")
    ap.add_argument("--plot", metavar="OUT", help="draw goodput against job size (PNG, SVG)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="GPUs per job, comma-separated")
    ap.add_argument("--rates", default="meta-rsc1,meta-rsc2,llama3",
                    help="published failure rates to use: " + ", ".join(RATE_SOURCES))
    ap.add_argument("--rate", type=float, action="append",
                    help="another failure rate, per 1,000 node-days (repeatable)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--hang-share", type=float, default=0.2,
                    help="share of failures that hang (no process exits) instead of crashing")
    g = ap.add_argument_group("ftrt (measured in the report unless given)")
    g.add_argument("--scale", metavar="RESULTS",
                   help="MTTD and the control plane's part of the MTTR at scale from this "
                        "output of bench/coord_load (its RESULT line with the most ranks, e.g. "
                        "bench/results/coord-load-16384-2026-11-24.txt) instead of the report's")
    g.add_argument("--mttd-crash-s", type=float, help="detection of a crash")
    g.add_argument("--ftrt-hang-detect-s", type=float,
                   help="detection of a hang (default: the report's, else the 1 s heartbeat timeout)")
    g.add_argument("--mttr-s", type=float, help="in-place recovery, detection -> training")
    g.add_argument("--ftrt-rework-s", type=float, help="work redone per in-place recovery")
    g.add_argument("--ftrt-ckpt-stall-s", type=float, help="training stall per checkpoint")
    g.add_argument("--step-s", type=float, help="step time (reported; sets the interval in steps)")
    g.add_argument("--ftrt-state", choices=("replicated", "sharded"), default="replicated",
                   help="sharded: every recovery reloads the last checkpoint (rework ~ interval/2)")
    g.add_argument("--ftrt-persist-s", type=float,
                   help="background write of a checkpoint (default: state / storage bandwidth)")
    g.add_argument("--spare-nodes-per-128", type=float, default=1.0)
    g.add_argument("--spare-refill-h", type=float, default=4.0)
    g.add_argument("--join-h", type=float,
                   help="a replacement node joins the running job this long after a failure "
                        "(default: none joins)")
    p = ap.add_argument_group("plain checkpoint-restart (and ftrt's whole-job restarts)")
    p.add_argument("--plain-crash-detect-s", type=float, default=30.0)
    p.add_argument("--plain-hang-timeout-s", type=float, default=600.0)
    p.add_argument("--relaunch-s", type=float, default=60.0)
    p.add_argument("--reinit-s", type=float, default=120.0)
    p.add_argument("--state-gb-per-gpu", type=float, default=4.0)
    p.add_argument("--storage-gbps-per-gpu", type=float, default=2000.0 / 16384)
    p.add_argument("--plain-ckpt-write-s", type=float,
                   help="blocking checkpoint write (default: state / storage bandwidth)")
    p.add_argument("--reload-s", type=float,
                   help="checkpoint reload (default: state / storage bandwidth)")
    d = ap.add_argument_group("check")
    d.add_argument("--no-des", action="store_true", help="skip the discrete-event simulation")
    d.add_argument("--des-failures", type=int, default=20000,
                   help="failures per simulated job (sets its length)")
    d.add_argument("--seed", type=int, default=1)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if not 0.0 <= a.hang_share <= 1.0:
        ap.error("--hang-share is a share: 0..1")
    try:
        with open(a.report) as f:
            rep = json.load(f)
        inp = from_report(rep, a)
        rates = rate_list(a)
        sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    except (OSError, ValueError, KeyError) as e:
        print("ftrt-project: %s: %s" % (a.report, e), file=sys.stderr)
        return 1
    des = 0 if a.no_des else a.des_failures
    rows = []
    for name, rate, src in rates:
        for g in sizes:
            r = project_one(inp, g, rate, des, a.seed)
            r["rate_source"], r["rate_per_1000_node_days"], r["rate_citation"] = name, rate, src
            rows.append(r)
    for r in rows:
        r["break_even_mttr_s"] = break_even_mttr(inp, r["gpus"], r["rate_per_1000_node_days"],
                                                 r["plain"]["ettr"])
    out = sys.stdout if a.json != "-" else sys.stderr
    print_inputs(inp, a.report, rep, out)
    print("failure rates (per 1,000 node-days):", file=out)
    for name, rate, src in rates:
        print("  %-10s %6.2f  %s" % (name, rate, src), file=out)
    print("projection (closed form; ckpt every = the Daly-optimal interval of that policy; "
          "goodput = ETTR x trainers / (trainers + spares); restarts = share of ftrt's failures "
          "that need a whole-job restart: no spare node left, or the coordinator's node):",
          file=out)
    print_table(rows, out, des)
    print("ftrt's MTTR at which its ETTR would fall to plain's (break-even):", file=out)
    for r in rows:
        print("  %-10s %7d GPUs: %s (in use: %s)" % (r["rate_source"], r["gpus"],
              fmt_s(r["break_even_mttr_s"]), fmt_s(inp["mttr_s"])), file=out)
    if a.plot:
        try:
            plot(inp, rates, a.plot)
        except ImportError as e:
            print("ftrt-project: --plot needs matplotlib (%s); Debian: apt-get install "
                  "python3-matplotlib" % e, file=sys.stderr)
            return 1
        print("plot: %s" % a.plot, file=out)
    if a.json:
        doc = {"schema": 1, "report": a.report,
               "inputs": {k: {"value": v, "source": inp.sources[k]} for k, v in inp.values.items()},
               "rates": [{"name": n, "per_1000_node_days": r, "source": s} for n, r, s in rates],
               "results": rows}
        text = json.dumps(_finite(doc), indent=1, allow_nan=False)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
