#!/usr/bin/env python3
"""Chaos campaign (a bench, not a CI test): N randomized runs of ftrt-chaos against
examples/train_mlp (1 coordinator + 4 trainers + 2 hot spares), one random fault per run at a
random step and target, each run relaunched up to twice when the job fails. Prints the matrix
of fault kind x outcome and MTTD (crash, hang, silent data corruption) and MTTR: median and
worst. flip-bit runs fingerprint every 5 steps (FTRT_SDC_EVERY=5, a divisor of the checkpoint
interval of 25, so a verified checkpoint is always among the 2 kept).

Usage: bench/chaos_campaign.py [--runs 50] [--seed 1] [--bin build/examples/train_mlp]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import chaos_cases  # noqa: E402  (its train_mlp configuration and cached reference)
import ftrt_harness as h  # noqa: E402

KINDS = ["kill-trainer", "kill-spare", "kill-two-trainers", "hang-trainer", "pause-trainer",
         "kill-during-ckpt", "corrupt-shard", "truncate-shard", "enospc", "kill-coordinator",
         "hang-coordinator", "kill-beyond-spares", "flip-bit"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples", "train_mlp"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ftrt-campaign-")
    ns = argparse.Namespace(bin=a.bin, work=work)
    ref = chaos_cases.reference(ns, [])
    matrix, mttd_crash, mttd_hang, mttd_sdc, mttr, rows = {}, [], [], [], [], []
    for i in range(a.runs):
        kind = KINDS[i % len(KINDS)] if i < len(KINDS) else rng.choice(KINDS)
        fault = {"kind": kind, "at_step": rng.randrange(40, 140),
                 "target": f"trainer:{rng.randrange(4)}"}
        opts = ["--relaunch", "2"]
        if kind in ("corrupt-shard", "truncate-shard"):
            fault["then"] = [{"kind": "kill-coordinator"}]
        if kind == "enospc":
            opts += ["--ckpt-tmpfs", "2m"]
        if kind == "pause-trainer":
            opts += ["--pause-ms", str(rng.randrange(100, 600))]
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
            chaos_cases.job_cmd(a.bin, 7, ["--ckpt-dir", ckpt, "--params-out", params] + targs)
        env = h.job_env(extra, spares=2, heartbeat_timeout_ms=1000)
        rc = subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        v = json.load(open(os.path.join(d, "v.json"))) if os.path.exists(
            os.path.join(d, "v.json")) else {"ok": False, "rows": [], "launches": []}
        outcome = "pass" if rc == 0 else ("skipped" if rc == 77 else "FAIL")
        relaunches = max(0, len(v["launches"]) - 1)
        key = (kind, outcome + (f", {relaunches} relaunch" if relaunches else ""))
        matrix[key] = matrix.get(key, 0) + 1
        for inj in v.get("injections", []):
            for m in inj.get("measured", []):
                (mttd_crash if m["detect_kind"] == "connection_lost" else
                 mttd_sdc if m["detect_kind"] == "silent_data_corruption" else mttd_hang).append(
                    m["true_mttd_s"])
                if m.get("mttr_s") is not None:
                    mttr.append(m["mttr_s"])
        rows.append((i, kind, fault["at_step"], outcome, relaunches))
        print(f"run {i:3d}  {kind:<20} step {fault['at_step']:3d}  {outcome}"
              f"{'  relaunches ' + str(relaunches) if relaunches else ''}"
              f"{'' if rc == 0 else '  (' + d + ')'}", flush=True)
    print("\nfault kind x outcome")
    for (kind, out), n in sorted(matrix.items()):
        print(f"  {kind:<20} {out:<22} {n}")

    def stat(name, v):
        if v:
            print(f"  {name:<28} median {statistics.median(v) * 1e3:8.1f} ms   worst "
                  f"{max(v) * 1e3:8.1f} ms   (n={len(v)})")
    print("\ndetection and recovery (ground truth from the fault log)")
    stat("MTTD crash (connection)", mttd_crash)
    stat("MTTD hang (heartbeat)", mttd_hang)
    stat("MTTD silent data corruption", mttd_sdc)
    stat("MTTR (in-place recovery)", mttr)
    fails = sum(1 for r in rows if r[3] == "FAIL")
    print(f"\n{a.runs} runs, {fails} failed; work dir {work}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
