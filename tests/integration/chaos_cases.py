#!/usr/bin/env python3
"""ctest cases: every fault kind of tools/ftrt-chaos against examples/train_mlp under mpirun.

Usage: chaos_cases.py --bin BUILD/examples/train_mlp --work DIR <case>
Each case writes a plan, runs ftrt-chaos (which injects the faults, relaunches when the job
fails and prints its verdict) and passes when the verdict passes; where the case promises more
(a failure mid-recovery aborts promptly, ...) it checks that too. A fault-free reference run of
the same configuration is made once and cached, so "byte-identical" is always checked.
Exit 0 = pass, 1 = fail, 77 = skipped. Python 3 standard library only.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHAOS = os.path.join(HERE, "..", "..", "tools", "ftrt-chaos")
BASE = ["--steps", "200", "--batch", "32", "--seed", "7", "--step-sleep-ms", "15",
        "--ckpt-every", "25"]

# case: (np, spares, extra train args, plan, chaos options, extra env)
CASES = {
    "kill-trainer": (6, 1, [], [{"kind": "kill-trainer", "at_step": 60, "target": "trainer:2"}],
                     [], {}),
    "kill-spare": (6, 1, [], [{"kind": "kill-spare", "at_step": 40},
                              {"kind": "kill-trainer", "at_step": 90, "target": "trainer:1"}],
                   ["--relaunch", "1"], {}),
    "kill-two-trainers": (7, 2, [], [{"kind": "kill-two-trainers", "at_step": 60}], [], {}),
    "hang-trainer": (6, 1, [], [{"kind": "hang-trainer", "at_step": 60, "target": "trainer:3"}],
                     [], {}),
    "pause-trainer": (6, 1, [], [{"kind": "pause-trainer", "at_step": 60, "target": "trainer:0"}],
                      ["--pause-ms", "400"], {"FTRT_HEARTBEAT_TIMEOUT_MS": "1500"}),
    "kill-during-ckpt": (6, 1, ["--hidden", "8192"],
                         [{"kind": "kill-during-ckpt", "at_step": 60}], [], {}),
    "corrupt-shard": (6, 1, [], [{"kind": "corrupt-shard", "at_step": 110,
                                  "then": [{"kind": "kill-coordinator"}]}],
                      ["--relaunch", "1"], {}),
    "truncate-shard": (6, 1, [], [{"kind": "truncate-shard", "at_step": 110,
                                   "then": [{"kind": "kill-coordinator"}]}],
                       ["--relaunch", "1"], {}),
    "enospc": (6, 1, [], [{"kind": "enospc", "at_step": 60}],
               ["--ckpt-tmpfs", "2m", "--enospc-hold-s", "0.8"], {}),
    "kill-coordinator": (6, 1, [], [{"kind": "kill-coordinator", "at_step": 80}],
                         ["--relaunch", "1"], {}),
    "kill-beyond-spares": (6, 1, [], [{"kind": "kill-beyond-spares", "at_step": 80}],
                           ["--relaunch", "1"], {}),
    # A second failure while the first recovery's plan is being applied: the job must end
    # promptly and cleanly (spares left or not), and the relaunch must finish the job.
    "fail-during-recovery": (7, 2, [], [{"kind": "kill-trainer", "at_step": 60,
                                         "target": "trainer:1",
                                         "then": [{"kind": "kill-trainer", "delay_s": 0.4,
                                                   "target": "trainer:3"}]}],
                             ["--relaunch", "1"], {"FTRT_DEBUG_RECOVERY_DELAY_MS": "1500"}),
}


def mpirun(binary, np_, args):
    return ["mpirun", "--enable-recovery", "--oversubscribe", "--bind-to", "none",
            "--mca", "mpi_yield_when_idle", "1", "-np", str(np_), binary] + BASE + args


def env_for(spares, extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               FTRT_SPARES=str(spares))
    env.update(extra)
    return env


def reference(a, args):
    """Params of a fault-free run with these training args (4 trainers), cached."""
    key = hashlib.sha1(" ".join(args).encode()).hexdigest()[:12]
    path = os.path.join(a.work, f"reference-{key}.params")
    if os.path.exists(path):
        return path
    d = os.path.join(a.work, f"reference-{key}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cmd = mpirun(a.bin, 5, args + ["--ckpt-dir", os.path.join(d, "ckpt"),
                                   "--params-out", path + ".tmp"])
    r = subprocess.run(cmd, env=env_for(0, {}), capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not os.path.exists(path + ".tmp"):
        print(r.stdout[-3000:], r.stderr[-3000:])
        raise SystemExit("reference run failed")
    os.rename(path + ".tmp", path)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    a = ap.parse_args()
    if shutil.which("mpirun") is None:
        return 77
    os.makedirs(a.work, exist_ok=True)
    np_, spares, targs, plan, opts, extra = CASES[a.case]
    ref = reference(a, targs)
    d = os.path.join(a.work, a.case)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ckpt = os.path.join(d, "ckpt")
    params = os.path.join(d, "final.params")
    with open(os.path.join(d, "plan.json"), "w") as f:
        json.dump({"faults": plan}, f)
    cmd = [sys.executable, CHAOS, "--plan", os.path.join(d, "plan.json"), "--workdir", d,
           "--ckpt-dir", ckpt, "--report", os.path.join(d, "report.json"), "--reference", ref,
           "--params", params, "--json", os.path.join(d, "verdict.json"), "--timeout", "120"]
    cmd += opts + ["--"] + mpirun(a.bin, np_, targs + ["--ckpt-dir", ckpt, "--params-out", params])
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, env=env_for(spares, extra))
    if rc != 0:
        return rc
    v = json.load(open(os.path.join(d, "verdict.json")))
    if a.case == "fail-during-recovery":
        first = v["launches"][0]
        kill2 = [i for i in v["injections"] if i["launch"] == 0][-1]["time"]
        took = first["t_end"] - kill2
        print(f"first launch ended {took:.2f} s after the second kill (exit {first['rc']})")
        if first["rc"] == 0 or took > 15:
            print("FAIL: a failure during recovery must end the launch promptly and non-zero")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
