#!/usr/bin/env python3
"""Chaos campaign (a bench, not a CI test): N randomized runs of ftrt-chaos against
examples/train_mlp (1 coordinator + 4 trainers + 2 hot spares), one random fault per run at a
random step and target, each run relaunched up to twice when the job fails. Prints the matrix
of fault kind x outcome and MTTD (crash, hang, silent data corruption) and MTTR: median and
worst. flip-bit runs fingerprint every 5 steps (FTRT_SDC_EVERY=5, a divisor of the checkpoint
interval of 25, so a verified checkpoint is always among the 2 kept). join-spare runs have 1 hot
spare (6 ranks, the same 4 trainers): a new process joins (ftrt-run --join, Open MPI 4.1), then
two trainers are SIGKILLed at once; the joiner and the spare must replace them in one epoch.

With --hosts N (N >= 3; --slots S >= 2, default 2) the runs go to N simulated hosts (network
namespaces, tests/hosts/ftrt-hosts; root), made once for the campaign and handed to each
ftrt-chaos run (--hosts-made), N x S ranks per job, the kinds drawn from the host-aware ones:
  kill-trainer-remote           a trainer on another host than the coordinator's (1 spare)
  kill-host                     every process of a host with trainers, its orted included; a
                                host's worth of spares (S) on another host: replaced in one epoch
  partition-host                the same host's link cut instead (heartbeat timeouts; the cut
                                side must give up by itself and write nothing that counts)
  partition-host-in-ckpt        partition-host while a checkpoint is being written (write
                                requests held 100 ms): the partitioned ranks' shards written
                                after the cut must never be committed
  kill-host-beyond-spares       a host with more trainers than the spares elsewhere (1 spare):
                                clean failure, relaunch without the host resumes
  partition-host-beyond-spares  the same with the link cut
  kill-coord-host               the coordinator's host killed (the coordinator and a
                                trainer; 2 spares on another host): the standby coordinator
                                takes over in place, the trainer replaced in the same launch
  partition-coord-host          the same host's link cut: taken over by silence; the cut-off
                                coordinator gives up by itself and writes nothing that counts
  hang-coord-host               the coordinator SIGSTOPped (its host's trainer untouched):
                                taken over by silence in place; resumed, it gives up
  partition-standby-host        the standby coordinator's host (the spares') cut off: the
                                standby takes over on its side, never claims the term and
                                gives up; the job goes on in the same launch
  kill-coord-host-beyond-spares the coordinator's host killed with 1 spare (the standby): it
                                takes over, no spare is left for the trainer: clean failure,
                                relaunch without the host resumes
  drain-host                    every rank of a host drained (tools/ftrt-ctl drain --host): its
                                trainers to spares elsewhere in one epoch, no rework, no failure
  join-refused-host             a new process asks to join (ftrt-run --join beside the hosts'
                                mpirun): refused by the coordinator in one line (joins need
                                the job on its mpirun's node alone: docs/join.md "Limits"),
                                the job undisturbed
  join-refused-orted            the same from the coordinator's host, where the joiner runs
                                under an orted: it refuses itself before asking
Each run is judged by ftrt-chaos's verdict (also: ftrt-run's exit within 5 s of the last rank's
exit, nothing left in the hosts, byte-identical to a one-host run with as many trainers). It
prints the verdict counts per kind, MTTD and MTTR per detection kind, how long the partitioned
ranks took to give up, and the exit bound (ftrt-run's summary). The hosts are named by
--hosts-prefix (default ftrt-c, on 10.78.0.0/24, bridge ftrtbr-c: apart from the ctests'
ftrt-h hosts) unless FTRT_HOSTS_PREFIX / FTRT_HOSTS_NET / FTRT_HOSTS_BRIDGE are set.

With --sharded K every run registers the momentum SHARDED (train_mlp --sharded-momentum) with
partner replicas refreshed every K steps (ftrt-chaos --sharded K: FTRT_SHARD_REPLICA_EVERY=K),
is compared with a fault-free sharded run, and two more kinds are drawn:
  kill-partners    a trainer and the trainer holding its replica SIGKILLed at once: the
                   recovery falls back to the committed checkpoint
  corrupt-replica  every held replica corrupted after its arrival check
                   (FTRT_TEST_REPLICA_CORRUPT=1), a trainer SIGKILLed: checkpoint
and ftrt-chaos's verdict checks, for every trainer recovered in place, that its state came from
the newest usable state: its partner's replica (rework <= K + 1 steps) when that partner
survived, or the committed checkpoint when newer than the replicas or struck during a refresh;
else from the checkpoint (docs/testing.md, "Sharded state and partner replicas"). The per-kind
table then shows where the state came from and the rework.
With --erasure G as well (--sharded K needed) the jobs keep the sharded state in erasure groups
of G trainers instead (ftrt-chaos --erasure G: FTRT_SHARD_REDUNDANCY=erasure, FTRT_EC_GROUP=G;
docs/detection-and-recovery.md "Erasure groups"), corrupt-replica is not drawn, and the verdict
wants every trainer whose group lost at most 2 rebuilt from memory (state_from erasure, rework
<= K + 1) unless the loss struck during a refresh or the checkpoint is newer; with --hosts
the jobs (and their references) have the sharded momentum too.
With --device sim every run keeps the parameters and momentum in the simulated device's
memory (train_mlp --device sim, FTRT_TEST_SIM_DEVICE=1: a test arrangement, no GPU): the
checkpoints, restores, the state transfer to a promoted spare, the partner replicas (with
--sharded) and the fingerprints (flip-bit flips a bit in the device arena) all go through the
device backend; compared with a fault-free --device sim run.

Each run's line and the per-kind table say where every lost trainer's state came from: its
in-place recovery's state_from (peers, replica, checkpoint, with the replica miss), and for
each relaunch the checkpoint step it resumed at (read from the launch's log).
--summary FILE writes the per-kind table and every run's row as JSON.

With --no-spare POLICY (stop, shrink or fold) every job runs under FTRT_NO_SPARE=POLICY
(docs/detection-and-recovery.md "No spare left"), and the kinds that lose more trainers than
spares are left (kill-beyond-spares; with --hosts kill-host-beyond-spares,
partition-host-beyond-spares, kill-coord-host-beyond-spares) are judged by it: under shrink and
fold every loss is recovered in place in one launch (the spares first); under fold the jobs
and their reference reduce with train_mlp --ordered, so the run stays byte-identical; under
shrink a shrunk run's parameters must differ from the reference (data skipped), the others'
be identical.

Usage: bench/chaos_campaign.py [--runs 50] [--seed 1] [--bin build/examples/train_mlp]
                               [--sharded K [--erasure G]] [--device host|sim]
                               [--kinds k1,k2]
                               [--summary FILE] [--hosts N [--slots S]]
                               [--no-spare stop|shrink|fold]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import chaos_cases  # noqa: E402  (its train_mlp configuration and cached reference)
import ftrt_harness as h  # noqa: E402

KINDS = ["kill-trainer", "kill-spare", "kill-two-trainers", "hang-trainer", "pause-trainer",
         "kill-during-ckpt", "corrupt-shard", "truncate-shard", "enospc", "kill-coordinator",
         "hang-coordinator", "kill-beyond-spares", "flip-bit", "drain-rank", "sigterm-rank",
         "join-spare"]
SHARDED_KINDS = ["kill-partners", "corrupt-replica"]  # with --sharded only

# --hosts: campaign kind -> (spares: "host" = a host's worth (slots) or a number, the plan
# entry of tools/ftrt-chaos, extra environment of the job)
HOST_KINDS = {
    "kill-trainer-remote": (1, {"kind": "kill-trainer", "target": "remote"}, {}),
    "kill-host": ("host", {"kind": "kill-host", "target": "covered"}, {}),
    "partition-host": ("host", {"kind": "partition-host", "target": "covered"}, {}),
    # the cut while a checkpoint is being written (each write request held 100 ms): the
    # partitioned ranks go on writing their shards after the cut, and that step must never
    # be committed
    "partition-host-in-ckpt": ("host", {"kind": "partition-host", "target": "covered",
                                        "in_ckpt": True},
                               {"FTRT_DEBUG_CKPT_WRITE_DELAY_MS": "100"}),
    "kill-host-beyond-spares": (1, {"kind": "kill-host", "target": "uncovered"}, {}),
    "partition-host-beyond-spares": (1, {"kind": "partition-host", "target": "uncovered"}, {}),
    # the coordinator's host (the coordinator and a trainer): the standby coordinator (a
    # spare on another host) takes over and the other spare replaces the trainer in place
    "kill-coord-host": ("host", {"kind": "kill-host", "target": "coordinator"}, {}),
    "partition-coord-host": ("host", {"kind": "partition-host", "target": "coordinator"}, {}),
    # the coordinator frozen (SIGSTOP): the host agents' COORD_LOST after the heartbeat
    # timeout, the standby takes over in place; resumed, the old one gives up
    "hang-coord-host": ("host", {"kind": "hang-coordinator"}, {}),
    # the standby coordinator's host cut off (the spares'): its standby takes over on its
    # side but never claims the term (no rank of a third host reaches it) and gives up; the
    # coordinator goes on without the host's spares
    # (drawn before step 100: a host of spares cut later may outlive the job undetected)
    "partition-standby-host": ("host", {"kind": "partition-host", "target": "standby"}, {}),
    # the same with one spare, the standby: no spare is left for the lost trainer: clean
    # failure, relaunch without the host resumes
    "kill-coord-host-beyond-spares": (1, {"kind": "kill-host", "target": "coordinator"}, {}),
    # a planned move: every rank of a host other than the coordinator's drained (ftrt-ctl
    # drain --host): its trainers to the spares elsewhere in one epoch, no rework, no failure
    "drain-host": ("host", {"kind": "drain-host"}, {}),
    # joins on several hosts are refused (Open MPI 4.1 crashes a daemon that reads another
    # mpirun's job data when it spans several nodes: docs/join.md "Limits"): a joiner beside
    # the hosts' mpirun, refused by the coordinator; one on the coordinator's host, under an
    # orted there, refuses itself; either way the job is undisturbed
    "join-refused-host": (1, {"kind": "join-spare", "host": "head",
                              "refused": "the job runs on 3 hosts"}, {}),
    "join-refused-orted": (1, {"kind": "join-spare", "host": "coordinator",
                               "refused": "this process runs under an Open MPI daemon",
                               "refusal_counted": False}, {}),
}
# join-spare (one host): the job with 1 world spare (6 ranks, the same 4 trainers); a new
# process joins (ftrt-run --join), then two trainers are killed at once: the joiner and the
# spare replace them in one epoch (the joiner must be promoted), where the spare alone could not
JOIN_THEN = [{"kind": "kill-two-trainers"}]


def stat(name, v, unit="ms", width=28):
    if v:
        k = 1e3 if unit == "ms" else 1.0
        print(f"  {name:<{width}} median {statistics.median(v) * k:8.1f} {unit}   worst "
              f"{max(v) * k:8.1f} {unit}   (n={len(v)})")


def sharded_opts(a):
    """ftrt-chaos's options for --sharded K [--erasure G]."""
    if a.sharded is None:
        return []
    return ["--sharded", str(a.sharded)] + (["--erasure", str(a.erasure)]
                                            if a.erasure is not None else [])


def sharded_desc(a):
    """The campaign line's words on --sharded / --erasure."""
    if a.sharded is None:
        return ""
    how = "replicas" if a.erasure is None else f"erasure groups of {a.erasure}"
    return f", sharded momentum, {how} every {a.sharded} steps"


def run_one(a, d, fault, opts, ref, np_, env, rng, targs=()):
    """One ftrt-chaos run in d (train_mlp with targs too); returns (exit status, its verdict
    JSON)."""
    os.makedirs(d)
    json.dump({"faults": [fault]}, open(os.path.join(d, "plan.json"), "w"))
    ckpt, params = os.path.join(d, "ckpt"), os.path.join(d, "final.params")
    cmd = [sys.executable, h.FTRT_CHAOS, "--plan", os.path.join(d, "plan.json"),
           "--workdir", d, "--ckpt-dir", ckpt, "--report", os.path.join(d, "report.json"),
           "--reference", ref, "--params", params, "--json", os.path.join(d, "v.json"),
           "--timeout", "120", "--seed", str(rng.randrange(1 << 30))] + opts + ["--"] + \
        chaos_cases.job_cmd(a.bin, np_, ["--ckpt-dir", ckpt, "--params-out", params] +
                            list(targs))
    with open(os.path.join(d, "chaos.out"), "w") as out:
        rc = subprocess.call(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    v = json.load(open(os.path.join(d, "v.json"))) if os.path.exists(
        os.path.join(d, "v.json")) else {"ok": False, "rows": [], "launches": []}
    return rc, v


def main():
    ap = example_args.Parser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples", "train_mlp"))
    ap.add_argument("--hosts", type=int, help="run on N simulated hosts (host-aware kinds)")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--kinds", help="draw only these kinds (comma-separated)")
    ap.add_argument("--sharded", type=int, metavar="K",
                    help="sharded momentum with partner replicas every K steps (0: at each "
                         "checkpoint), and the kinds kill-partners, corrupt-replica")
    ap.add_argument("--erasure", type=int, metavar="G",
                    help="with --sharded: erasure groups of G trainers instead of partner "
                         "replicas (ftrt-chaos --erasure G; corrupt-replica is not drawn)")
    ap.add_argument("--device", choices=("host", "sim"), default="host",
                    help="where train_mlp keeps parameters and momentum: host memory or the "
                         "simulated device (a test arrangement; FTRT_TEST_SIM_DEVICE=1)")
    ap.add_argument("--summary", help="write the per-kind table and the runs as JSON here")
    ap.add_argument("--no-spare", choices=("stop", "shrink", "fold"), default="stop",
                    help="FTRT_NO_SPARE of every job (fold adds train_mlp --ordered)")
    ap.add_argument("--hosts-prefix", default="ftrt-c")
    a = ap.parse_args()
    example_args.check_paths(ap, a, outputs=("summary",), inputs=("bin",))
    if a.erasure is not None and (a.sharded is None or not 3 <= a.erasure <= 32):
        ap.error("--erasure G needs --sharded K and 3 <= G <= 32")
    if a.hosts is not None:
        if a.device != "host":
            ap.error("--device sim runs on one host only (without --hosts)")
        return hosts_campaign(a)
    kinds = KINDS + ([k for k in SHARDED_KINDS if a.erasure is None or k != "corrupt-replica"]
                     if a.sharded is not None else [])
    if a.kinds:
        kinds = a.kinds.split(",")
        bad = [k for k in kinds if k not in KINDS + SHARDED_KINDS]
        if bad or (a.sharded is None and set(kinds) & set(SHARDED_KINDS)):
            print(f"chaos_campaign: unknown kind(s) {bad} or {SHARDED_KINDS} without --sharded; "
                  f"known: {', '.join(KINDS + SHARDED_KINDS)}", file=sys.stderr)
            return 2
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ftrt-campaign-")
    ns = argparse.Namespace(bin=a.bin, work=work)
    sharded_args = ["--sharded-momentum"] if a.sharded is not None else []
    device_args = ["--device", "sim"] if a.device == "sim" else []
    device_env = {"FTRT_TEST_SIM_DEVICE": "1"} if a.device == "sim" else {}
    device_env["FTRT_NO_SPARE"] = a.no_spare
    device_args += ["--ordered"] if a.no_spare == "fold" else []
    ref = chaos_cases.reference(ns, sharded_args + device_args)
    print(f"campaign: {a.runs} runs, seed {a.seed}, kinds {','.join(kinds)}"
          + sharded_desc(a)
          + (", state in the simulated device's memory" if a.device == "sim" else "")
          + f", FTRT_NO_SPARE={a.no_spare}"
          + f", work dir {work}", flush=True)
    matrix, mttd_crash, mttd_hang, mttd_sdc, mttr, rows = {}, [], [], [], [], []
    per = {}  # kind -> runs, passed, true MTTDs, MTTRs, state_from counts, rework steps
    for i in range(a.runs):
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
        fault = {"kind": kind, "at_step": rng.randrange(40, 140),
                 "target": f"trainer:{rng.randrange(4)}"}
        opts = ["--relaunch", "2"]
        opts += sharded_opts(a)
        if kind in ("corrupt-shard", "truncate-shard"):
            fault["then"] = [{"kind": "kill-coordinator"}]
        if kind == "enospc":
            opts += ["--ckpt-tmpfs", "2m"]
        if kind == "pause-trainer":
            opts += ["--pause-ms", str(rng.randrange(100, 600))]
        np_, spares = 7, 2
        if kind == "join-spare":
            fault.update(promoted=True, then=JOIN_THEN)
            np_, spares = 6, 1
        d = os.path.join(work, f"run{i}")
        os.makedirs(d)
        targs, extra = [], {}
        if kind == "flip-bit":  # trainers publish where their parameters are
            opts += ["--addr-prefix", os.path.join(d, "addr")]
            targs = ["--publish-addr", os.path.join(d, "addr")]
            extra = {"FTRT_SDC_EVERY": "5"}
        json.dump({"faults": [fault]}, open(os.path.join(d, "plan.json"), "w"))
        ckpt, params = os.path.join(d, "ckpt"), os.path.join(d, "final.params")
        cmd = [sys.executable, h.FTRT_CHAOS, "--plan", os.path.join(d, "plan.json"),
               "--workdir", d, "--ckpt-dir", ckpt, "--report", os.path.join(d, "report.json"),
               "--reference", ref, "--params", params, "--json", os.path.join(d, "v.json"),
               "--timeout", "120", "--seed", str(rng.randrange(1 << 30))] + opts + ["--"] + \
            chaos_cases.job_cmd(a.bin, np_, ["--ckpt-dir", ckpt, "--params-out", params] +
                                targs + sharded_args + device_args)
        env = h.job_env(dict(extra, **device_env), spares=spares, heartbeat_timeout_ms=1000)
        with open(os.path.join(d, "chaos.out"), "w") as out:
            rc = subprocess.call(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        v = json.load(open(os.path.join(d, "v.json"))) if os.path.exists(
            os.path.join(d, "v.json")) else {"ok": False, "rows": [], "launches": []}
        outcome = "pass" if rc == 0 else ("skipped" if rc == 77 else "FAIL")
        relaunches = max(0, len(v["launches"]) - 1)
        key = (kind, outcome + (f", {relaunches} relaunch" if relaunches else ""))
        matrix[key] = matrix.get(key, 0) + 1
        pk = per.setdefault(kind, {"runs": 0, "passed": 0, "mttd_s": [], "mttr_s": [],
                                   "state_from": {}, "rework_steps": [], "relaunches": 0})
        pk["runs"] += 1
        pk["passed"] += rc == 0
        pk["relaunches"] += relaunches
        sources = state_sources(v)
        for src in sources:  # the relaunches' steps are in the run's line
            src = re.sub(r" step \d+", "", src)
            pk["state_from"][src] = pk["state_from"].get(src, 0) + 1
        for inj in v.get("injections", []):
            for m in inj.get("measured", []):
                pk["mttd_s"].append(m["true_mttd_s"])
                if m.get("mttr_s") is not None and m.get("recovered"):
                    pk["mttr_s"].append(m["mttr_s"])
                if m.get("state_from") and m.get("recovered"):
                    pk["rework_steps"].append(m.get("rework_steps") or 0)
                (mttd_crash if m["detect_kind"] == "connection_lost" else
                 mttd_sdc if m["detect_kind"] == "silent_data_corruption" else mttd_hang).append(
                    m["true_mttd_s"])
                if m.get("mttr_s") is not None:
                    mttr.append(m["mttr_s"])
        rows.append((i, kind, fault["at_step"], outcome, relaunches, "; ".join(sources)))
        print(f"run {i:3d}  {kind:<20} step {fault['at_step']:3d}  {outcome}"
              f"{'  relaunches ' + str(relaunches) if relaunches else ''}"
              f"  state: {'; '.join(sources) or 'none lost'}"
              f"{'' if rc == 0 else '  (' + d + ')'}", flush=True)
    print("\nfault kind x outcome")
    for (kind, out), n in sorted(matrix.items()):
        print(f"  {kind:<20} {out:<22} {n}")

    print("\ndetection and recovery (ground truth from the fault log)")
    stat("MTTD crash (connection)", mttd_crash)
    stat("MTTD hang (heartbeat)", mttd_hang)
    stat("MTTD silent data corruption", mttd_sdc)
    stat("MTTR (in-place recovery)", mttr)
    table = per_kind_table(per)
    fails = sum(1 for r in rows if r[3] == "FAIL")
    print(f"\n{a.runs} runs, {fails} failed; work dir {work}")
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"runs": a.runs, "seed": a.seed, "kinds": kinds, "sharded": a.sharded,
                       "failed": fails, "work": work, "per_kind": table,
                       "device": a.device,
                       "rows": [dict(zip(("run", "kind", "at_step", "outcome", "relaunches",
                                          "state_from"), r)) for r in rows]}, f, indent=1)
    return 1 if fails else 0


def state_sources(v):
    """Where each lost trainer's state came from in one ftrt-chaos run (its verdict JSON v), in
    launch order: per failure recovered in place, the launch report's state_from and resume
    step (with the replica miss: why not from the partner's memory); per relaunch, the
    checkpoint step that launch resumed at (train_mlp's "resumed at step N" in the launch's
    log; "fresh start" when none)."""
    out = []
    for j, ln in enumerate(v.get("launches", [])):
        if j > 0:
            try:
                with open(ln["log"]) as f:
                    found = re.findall(r"resumed at step (\d+)", f.read())
            except (OSError, KeyError):
                found = []
            out.append(f"relaunch: checkpoint step {found[0]}" if found
                       else "relaunch: fresh start")
        try:
            with open(ln["report"]) as f:
                failures = json.load(f).get("failures", [])
        except (OSError, KeyError, TypeError, ValueError):
            failures = []
        for x in failures:  # (a takeover moves no state: not listed)
            if x.get("recovered") and x.get("state_from") and x.get("role") != "coordinator":
                out.append(f"{x['state_from']} step {x.get('resume_step')}"
                           + (f" ({x['replica_miss']})" if x.get("replica_miss") else ""))
    return out


def per_kind_table(per):
    """Prints and returns the per-kind table: runs, passed, median true MTTD and MTTR (in-place
    recoveries), where the lost trainers' state came from (state_sources: in-place recoveries
    and relaunches; the relaunch's step is left out here, it is in each run's line), and the
    in-place recoveries' rework steps."""
    def med(v, k=1e3):
        return round(statistics.median(v) * k, 1) if v else None
    table = {}
    print("\nper kind: runs, passed, median MTTD (ground truth) and MTTR, state source, rework")
    print(f"  {'kind':<20} {'runs':>4} {'pass':>4} {'MTTD ms':>9} {'MTTR ms':>9} "
          f"{'rework med/max':>14}  state from")
    for kind, pk in sorted(per.items()):
        rw = pk["rework_steps"]
        row = {"runs": pk["runs"], "passed": pk["passed"], "relaunches": pk["relaunches"],
               "mttd_median_ms": med(pk["mttd_s"]), "mttr_median_ms": med(pk["mttr_s"]),
               "rework_median": statistics.median(rw) if rw else None,
               "rework_max": max(rw) if rw else None, "state_from": pk["state_from"]}
        table[kind] = row
        fmt = (lambda x: "-" if x is None else f"{x:.1f}")
        rws = f"{row['rework_median']:g}/{row['rework_max']}" if rw else "-"
        print(f"  {kind:<20} {row['runs']:>4} {row['passed']:>4} {fmt(row['mttd_median_ms']):>9} "
              f"{fmt(row['mttr_median_ms']):>9} {rws:>14}  "
              + (", ".join(f"{k} x{n}" for k, n in sorted(pk["state_from"].items())) or "-"))
    return table


def hosts_campaign(a):
    if a.hosts < 3 or a.slots < 2:
        print("chaos_campaign: --hosts needs N >= 3 and --slots >= 2 (a host of trainers, a "
              "host of spares, the coordinator's)", file=sys.stderr)
        return 2
    kinds = a.kinds.split(",") if a.kinds else list(HOST_KINDS)
    bad = [k for k in kinds if k not in HOST_KINDS]
    if bad:
        print(f"chaos_campaign: unknown host kind(s) {bad}; known: {', '.join(HOST_KINDS)}",
              file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ftrt-campaign-hosts-")
    ns = argparse.Namespace(bin=a.bin, work=work)
    np_ = a.hosts * a.slots
    hostenv = {"FTRT_HOSTS_PREFIX": os.environ.get("FTRT_HOSTS_PREFIX", a.hosts_prefix),
               "FTRT_HOSTS_NET": os.environ.get("FTRT_HOSTS_NET", "10.78.0"),
               "FTRT_HOSTS_BRIDGE": os.environ.get("FTRT_HOSTS_BRIDGE",
                                                   f"ftrtbr-{a.hosts_prefix[-1]}")}
    refs = {}
    matrix, rows = {}, []
    by_detect, mttr, exit_bound, gave_up = {}, {}, {"first launch": [], "relaunch": []}, []
    late_writes = []  # per partition: files its side wrote after the cut (never committed)
    targs = (["--ordered"] if a.no_spare == "fold" else []) + \
        (["--sharded-momentum"] if a.sharded is not None else [])
    print(f"campaign: {a.runs} runs on {a.hosts} hosts x {a.slots} slots ({np_} ranks), "
          f"seed {a.seed}, FTRT_NO_SPARE={a.no_spare}"
          + sharded_desc(a)
          + f", work dir {work}", flush=True)
    try:
        hosts_cm = h.Hosts(a.hosts, a.slots, env=hostenv)
        hosts = hosts_cm.__enter__()
    except h.Skip as e:
        print(f"chaos_campaign: no simulated hosts here: {e}")
        return 77
    try:
        for i in range(a.runs):
            kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
            spares, entry, extra = HOST_KINDS[kind]
            spares = a.slots if spares == "host" else spares
            trainers = np_ - 1 - spares
            if trainers not in refs:
                refs[trainers] = chaos_cases.reference(ns, targs, trainers)
            # (a host of spares only, cut late, may outlive the job: the last 100 steps take
            # about 1.5 s, its spares' detection the heartbeat timeout of 1 s)
            fault = dict(entry, at_step=rng.randrange(40, 100 if kind == "partition-standby-host"
                                                      else 140))
            d = os.path.join(work, f"run{i}")
            env = h.job_env(dict(hostenv, FTRT_NO_SPARE=a.no_spare, **extra), spares=spares,
                            heartbeat_timeout_ms=1000)
            rc, v = run_one(a, d, fault, ["--relaunch", "2", "--hosts-made"] + sharded_opts(a),
                            refs[trainers],
                            np_, env, rng, targs)
            left = hosts.leftovers()
            if left:  # ftrt-chaos kills what a launch left; anything here is a harness bug
                print(f"  processes left in the hosts after run {i}: {left}", flush=True)
                rc = rc or 1
            outcome = "pass" if rc == 0 else ("skipped" if rc == 77 else "FAIL")
            relaunches = max(0, len(v["launches"]) - 1)
            key = (kind, outcome + (f", {relaunches} relaunch" if relaunches else ""))
            matrix[key] = matrix.get(key, 0) + 1
            for inj in v.get("injections", []):
                for m in inj.get("measured", []):
                    dk = m["detect_kind"] + (" (host lost)" if m.get("cause") == "host_lost"
                                             else " (takeover)"
                                             if m.get("cause") == "coordinator_lost" else "")
                    by_detect.setdefault(dk, []).append(m["true_mttd_s"])
                    if m.get("mttr_s") is not None and m.get("recovered"):
                        mttr.setdefault(dk, []).append(m["mttr_s"])
                if inj["kind"] == "partition-host":
                    gave_up += [w["exited_at"] - inj["time"] for w in inj.get("watch", [])
                                if w.get("exited_at") and w.get("host") == inj.get("host")]
                    late_writes.append(len(inj.get("writes_after_cut", [])))
            for j, ln in enumerate(v.get("launches", [])):
                if ln.get("exit_after_last_rank_s") is not None:
                    exit_bound["first launch" if j == 0 else "relaunch"].append(
                        ln["exit_after_last_rank_s"])
            host = next((inj.get("host") for inj in v.get("injections", []) if inj.get("host")),
                        None)
            rows.append((i, kind, fault["at_step"], outcome, relaunches))
            print(f"run {i:3d}  {kind:<29} step {fault['at_step']:3d}"
                  f"{'  ' + host if host else ''}  {outcome}"
                  f"{'  relaunches ' + str(relaunches) if relaunches else ''}"
                  f"{'' if rc == 0 else '  (' + d + ')'}", flush=True)
    finally:
        hosts_cm.__exit__(None, None, None)
    print("\nfault kind x outcome")
    for (kind, out), n in sorted(matrix.items()):
        print(f"  {kind:<29} {out:<22} {n}")
    print("\ndetection (true MTTD, from the fault log) and in-place recovery, per detection kind")
    for dk in sorted(by_detect):
        stat(f"MTTD {dk}", by_detect[dk], width=42)
        stat(f"MTTR {dk}", mttr.get(dk, []), width=42)
    stat("partitioned ranks gave up after the cut", gave_up, "s", width=42)
    if late_writes:
        print(f"  partitions whose side wrote files after the cut: "
              f"{sum(1 for n in late_writes if n)} of {len(late_writes)} ({sum(late_writes)} "
              f"shard file(s)); committed: none (else the run failed)")
    print("\nexit bound: ftrt-run's exit after the last rank's exit (its --summary)")
    for k, v in exit_bound.items():
        stat(k, v, "s", width=42)
    fails = sum(1 for r in rows if r[3] == "FAIL")
    print(f"\n{a.runs} runs, {fails} failed; work dir {work}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
