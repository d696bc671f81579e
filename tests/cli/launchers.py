#!/usr/bin/env python3
"""ctest unit.launchers: every launcher and example of the tree answers --help and -h (exit 0,
the usage on stdout) and a bad argument or path with one line on stderr that names the option
or the path, a non-zero exit and no Python traceback. No MPI job is started: each bad input is
refused before one would be (tools/ftrt-run's filter of Open MPI's PMIx notice is checked with
a stand-in command that prints it; mpi.kill checks it after a real kill). ftrt-run's run
directories are checked with stand-in commands too: the one of an ftrt-run SIGKILLed with its
command is removed by the next ftrt-run's start, a live run's is kept.

Usage: launchers.py --bin BUILD/examples/train_mlp [-v]
Exit 0 = pass, 1 = fail. Python 3 standard library only.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PY = sys.executable
NOTICE = ("[vm:4242] PMIX ERROR: BAD-PARAM in file ../../../src/event/"
          "pmix_event_notification.c at line 1033")


def launchers(train_mlp):
    """(name, command prefix) of every launcher and example that users run."""
    py = [(f, [PY, os.path.join(REPO, f)]) for f in (
        "tools/ftrt-run", "tools/ftrt-chaos", "tools/ftrt-ckpt", "tools/ftrt-ctl",
        "examples/train_torch.py", "examples/train_lm.py",
        "examples/train_cnn.py", "bench/chaos_campaign.py", "bench/coord_scale.py",
        "bench/mttr_size.py", "bench/recovery.py", "bench/join.py", "bench/replica_rework.py",
        "bench/slurm_recovery.py",
        "bench/torch_overhead.py", "bench/mpi_versions.py", "bench/profile_rank.py")]
    sh = [(f, ["bash", os.path.join(REPO, f)]) for f in (
        "examples/demo.sh", "scripts/ensure-deps.sh", "scripts/fresh-chroot-test.sh",
        "scripts/gpu-kit.sh", "scripts/gpu-prep.sh", "scripts/gpu-run.sh", "scripts/gpu-sim.sh",
        "scripts/ensure-ompi5.sh")]
    return py + sh + [("train_mlp", [train_mlp])]


def unlisted_examples(cmd):
    """Problems for each Python program of examples/ (a file with a __main__ block) that
    launchers() leaves out, so that a new example cannot escape these checks."""
    d = os.path.join(REPO, "examples")
    out = []
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if not name.endswith(".py") or f"examples/{name}" in cmd:
            continue
        with open(path) as fh:
            if "__name__ == \"__main__\"" in fh.read():
                out.append(f"examples/{name}: a program that launchers() does not list")
    return out


def bad_inputs(cmd, train_mlp, f, d):
    """(name, command, extra environment, strings the one line must hold). f: a regular file;
    d: a directory."""
    under = os.path.join(f, "ckpt")  # a checkpoint directory under a regular file
    run, chaos = cmd["tools/ftrt-run"], cmd["tools/ftrt-chaos"]
    plan = os.path.join(d, "plan.json")
    with open(plan, "w") as fh:
        fh.write('{"faults": [{"kind": "no-such-kind", "at_step": 1}]}')
    fake = os.path.join(d, "other-mpi", "bin", "mpirun")  # not the launcher train_mlp needs
    os.makedirs(os.path.dirname(fake), exist_ok=True)
    bad_tmp = os.path.join(d, "bad-tmp")  # a $TMPDIR whose ftrt-run.<uid> is a regular file
    os.makedirs(bad_tmp, exist_ok=True)
    bad_parent = os.path.join(bad_tmp, f"ftrt-run.{os.getuid()}")
    open(bad_parent, "w").close()
    with open(fake, "w") as fh:
        fh.write("#!/bin/sh\necho 'mpirun (Open MPI) 5.0.0'\n")
    os.chmod(fake, 0o755)
    cases = [
        ("ftrt-run: a launcher of another Open MPI than the program links",
         run + ["--", fake, "-np", "2", train_mlp], {}, [fake, train_mlp, "libmpi"]),
        ("ftrt-run: demo-style --status under a regular file",
         run + ["--status", os.path.join(under, "status.json"), "--", "true"], {},
         ["--status", under, f"{f} is not a directory"]),
        ("ftrt-run: FTRT_STATUS_FILE under a regular file", run + ["--", "true"],
         {"FTRT_STATUS_FILE": os.path.join(under, "status.json")}, ["FTRT_STATUS_FILE", f]),
        ("ftrt-run: --summary in a missing directory",
         run + ["--summary", os.path.join(d, "no", "s.json"), "--", "true"], {}, ["--summary"]),
        ("ftrt-run: FTRT_RUN_SUMMARY in a missing directory", run + ["--", "true"],
         {"FTRT_RUN_SUMMARY": os.path.join(d, "no", "s.json")}, ["FTRT_RUN_SUMMARY"]),
        ("ftrt-run: unknown option", run + ["--bogus", "--", "true"], {}, ["--bogus"]),
        ("ftrt-run: $TMPDIR/ftrt-run.<uid> not a directory", run + ["--", "true"],
         {"TMPDIR": bad_tmp}, [bad_parent, "not a directory"]),
        ("ftrt-run: no command", run, {}, ["no command"]),
        ("ftrt-run: --linger not a number", run + ["--linger", "x", "--", "true"], {},
         ["--linger", "'x'"]),
        ("ftrt-run: FTRT_RUN_TERM_GRACE_S not a number", run + ["--", "true"],
         {"FTRT_RUN_TERM_GRACE_S": "soon"}, ["FTRT_RUN_TERM_GRACE_S"]),
        ("ftrt-run: a command that does not exist", run + ["--", os.path.join(d, "nope")], {},
         [os.path.join(d, "nope")]),
        ("ftrt-run: mpirun --enable-recovery with a missing program (mpirun would hang)",
         run + ["--", "mpirun", "--enable-recovery", "-np", "2", "--mca", "btl", "self",
                os.path.join(d, "nope")], {}, [os.path.join(d, "nope"), "does not exist"]),
        ("ftrt-run: mpirun with a program that is not executable",
         run + ["--", "mpirun", "-np", "2", f], {}, [f, "not executable"]),
        ("ftrt-run: mpirun with a program not on PATH",
         run + ["--", "mpirun", "-x", "A=1", "no-such-program-ftrt"], {},
         ["no-such-program-ftrt", "not on PATH"]),
        ("ftrt-run + train_mlp --ckpt-dir under a regular file",
         run + ["--", train_mlp, "--ckpt-dir", under], {}, ["--ckpt-dir", under, f]),
        ("ftrt-chaos: no command", chaos + ["--plan", plan], {}, ["no command"]),
        ("ftrt-chaos: unknown option", chaos + ["--bogus", "--", "true"], {}, ["--bogus"]),
        ("ftrt-chaos: --plan missing", chaos + ["--plan", os.path.join(d, "x.json"), "--",
                                                "true"], {}, ["--plan", "x.json"]),
        ("ftrt-chaos: --plan with an unknown kind", chaos + ["--plan", plan, "--", "true"], {},
         ["--plan", "no-such-kind"]),
        ("ftrt-chaos: --workdir under a regular file",
         chaos + ["--workdir", under, "--", "true"], {}, ["--workdir", f]),
        ("ftrt-chaos: --ckpt-dir under a regular file",
         chaos + ["--workdir", d, "--ckpt-dir", under, "--", "true"], {}, ["--ckpt-dir", f]),
        ("ftrt-chaos: --mtbf not a number", chaos + ["--mtbf", "x", "--", "true"], {},
         ["--mtbf"]),
        ("ftrt-chaos: --kinds unknown", chaos + ["--kinds", "zap", "--", "true"], {},
         ["--kinds", "zap"]),
        ("ftrt-ckpt: no command", cmd["tools/ftrt-ckpt"], {}, ["ls", "verify", "export"]),
        ("ftrt-ckpt: ls of a missing directory", cmd["tools/ftrt-ckpt"] + [
            "ls", os.path.join(d, "none")], {}, ["none", "not a directory"]),
        ("ftrt-ckpt: verify of a regular file", cmd["tools/ftrt-ckpt"] + ["verify", f], {},
         [f, "not a directory"]),
        ("ftrt-ckpt: export without --out", cmd["tools/ftrt-ckpt"] + ["export", d], {},
         ["--out"]),
        ("ftrt-ckpt: export of a directory without steps", cmd["tools/ftrt-ckpt"] + [
            "export", d, "--out", os.path.join(d, "x.pt")], {}, [d, "no committed step"]),
        ("ftrt-ctl: no command", cmd["tools/ftrt-ctl"], {}, ["drain"]),
        ("ftrt-ctl: drain without a target", cmd["tools/ftrt-ctl"] + ["drain"], {},
         ["--rank", "--host"]),
        ("ftrt-ctl: drain of a job with no status file", cmd["tools/ftrt-ctl"] + [
            "drain", "--rank", "1", "--status", os.path.join(d, "none.json")], {},
         [os.path.join(d, "none.json"), "no job status"]),
        ("demo.sh: FTRT_DEMO_DIR under a regular file", cmd["examples/demo.sh"],
         {"FTRT_DEMO_DIR": under}, ["FTRT_DEMO_DIR", f]),
        ("train_mlp: --steps not a number", [train_mlp, "--steps", "x"], {}, ["--steps", "'x'"]),
        ("train_mlp: unknown option", [train_mlp, "--bogus"], {}, ["--bogus"]),
        ("train_mlp: --device not host, sim or cuda", [train_mlp, "--device", "gpu"], {},
         ["--device", "'gpu'"]),
        ("train_mlp: --device cuda in the build without CUDA", [train_mlp, "--device", "cuda"],
         {}, ["--device cuda", "train_mlp_gpu"]),
        ("train_mlp: --check-device without --device cuda", [train_mlp, "--check-device"], {},
         ["--check-device"]),
        ("train_mlp: DIGITS_DATA names a missing file (the default --data)",
         [train_mlp, "--steps", "1"], {"DIGITS_DATA": os.path.join(d, "no-digits.csv.gz")},
         [os.path.join(d, "no-digits.csv.gz"), "DIGITS_DATA"]),
        ("train_mlp: --steps without a value", [train_mlp, "--steps"], {}, ["--steps"]),
        ("train_mlp: --ckpt-dir under a regular file", [train_mlp, "--ckpt-dir", under], {},
         ["--ckpt-dir", under, f]),
        ("train_mlp: --params-out under a regular file",
         [train_mlp, "--params-out", os.path.join(f, "p")], {}, ["--params-out", f]),
        ("train_mlp: --report is a directory", [train_mlp, "--report", d], {}, ["--report", d]),
    ]
    for ex, data in (("examples/train_torch.py", "--data"), ("examples/train_lm.py", "--text"),
                     ("examples/train_cnn.py", "--data")):
        c = cmd[ex]
        cases += [
            (f"{ex}: --steps not a number", c + ["--steps", "x"], {}, ["--steps", "'x'"]),
            (f"{ex}: {data} missing", c + [data, os.path.join(d, "none")], {}, [data, "none"]),
            (f"{ex}: --ckpt-dir under a regular file", c + ["--ckpt-dir", under], {},
             ["--ckpt-dir", f]),
            (f"{ex}: --report is a directory", c + ["--report", d], {}, ["--report", d]),
        ]
    for name, c in cmd.items():
        if name.startswith(("bench/", "scripts/")):
            need = ["--after", "/bin/true", "1"] if name == "bench/coord_scale.py" else []
            cases.append((f"{name}: unknown option", c + need + ["--bogus"], {}, ["--bogus"]))
    cases += [
        ("examples/train_cnn.py: --batch 0", cmd["examples/train_cnn.py"] + ["--batch", "0"],
         {}, ["--batch"]),
        ("examples/train_lm.py: --accum 0", cmd["examples/train_lm.py"] + ["--accum", "0"], {},
         ["--accum"]),
        ("bench/torch_overhead.py: --configs unknown", cmd["bench/torch_overhead.py"] + [
            "--configs", "lm,bogus"], {}, ["--configs", "bogus"]),
        ("examples/train_lm.py: --backend nccl on the CPU", cmd["examples/train_lm.py"] + [
            "--backend", "nccl"], {}, ["--backend nccl", "--device cuda"]),
        ("bench/torch_overhead.py: a CPU config with --device cuda",
         cmd["bench/torch_overhead.py"] + ["--device", "cuda", "--configs", "lm"], {},
         ["--configs", "'lm'", "--device cuda"]),
        ("bench/profile_rank.py: --report missing", cmd["bench/profile_rank.py"] + [
            "--report", os.path.join(d, "none.prof")], {}, ["--report", "none.prof"]),
        ("bench/profile_rank.py: program missing", cmd["bench/profile_rank.py"] + [
            "--rank", "1", "--out", os.path.join(d, "p"), "--", os.path.join(d, "none.py")], {},
         ["none.py"]),
        ("bench/profile_rank.py: --out under a regular file", cmd["bench/profile_rank.py"] + [
            "--rank", "1", "--out", os.path.join(f, "p"), "--",
            cmd["bench/torch_overhead.py"][1]],
         {}, ["--out", f]),
    ]
    cases.append(("bench/coord_scale.py: --after missing", cmd["bench/coord_scale.py"] + [
        "--after", os.path.join(d, "none"), "1"], {}, ["--after", "none"]))
    cases += [
        ("bench/recovery.py: --bin missing", cmd["bench/recovery.py"] + [
            "--bin", os.path.join(d, "none")], {}, ["--bin", "none"]),
        ("bench/slurm_recovery.py: --bin missing", cmd["bench/slurm_recovery.py"] + [
            "--bin", os.path.join(d, "none")], {}, ["--bin", "none"]),
        ("bench/slurm_recovery.py: --runs 0", cmd["bench/slurm_recovery.py"] + [
            "--runs", "0"], {}, ["--runs"]),
        ("bench/torch_overhead.py: --work under a regular file",
         cmd["bench/torch_overhead.py"] + ["--work", under], {}, ["--work", f]),
        ("scripts/gpu-run.sh: --kit missing", cmd["scripts/gpu-run.sh"] + [
            "--kit", os.path.join(d, "none")], {}, ["--kit", "none"]),
        ("scripts/gpu-run.sh: --budget without a value", cmd["scripts/gpu-run.sh"] + [
            "--budget"], {}, ["--budget"]),
        ("scripts/gpu-run.sh: --rest with --only", cmd["scripts/gpu-run.sh"] + [
            "--rest", "--only", "ctest-gpu"], {}, ["--only", "--rest"]),
        ("scripts/gpu-prep.sh: --arch not a number", cmd["scripts/gpu-prep.sh"] + [
            "--arch", "sm90"], {}, ["--arch", "sm90"]),
        ("scripts/fresh-chroot-test.sh: --dir under a regular file",
         cmd["scripts/fresh-chroot-test.sh"] + ["--dir", under], {}, ["--dir", f]),
        ("scripts/gpu-kit.sh: --out under a regular file",
         cmd["scripts/gpu-kit.sh"] + ["--out", under], {}, ["--out", f]),
        ("scripts/gpu-sim.sh: SCRATCH under a regular file",
         cmd["scripts/gpu-sim.sh"] + [under], {}, ["SCRATCH", f]),
        ("scripts/ensure-ompi5.sh: unknown option", cmd["scripts/ensure-ompi5.sh"] + [
            "--bogus"], {}, ["--bogus"]),
        ("bench/mpi_versions.py: --bin5 missing", cmd["bench/mpi_versions.py"] + [
            "--bin41", train_mlp, "--bin5", os.path.join(d, "none")], {}, ["--bin5", "none"]),
    ]
    return cases


def run(argv, env, cwd):
    return subprocess.run(argv, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **env),
                          cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def check_help(name, prefix, cwd):
    """The problems of `prefix --help` and `prefix -h` (empty list when fine)."""
    bad = []
    for flag in ("--help", "-h"):
        r = run(prefix + [flag], {}, cwd)
        if r.returncode != 0 or not r.stdout.strip() or "Traceback" in r.stderr:
            bad.append(f"{name} {flag}: exit {r.returncode}, stdout {len(r.stdout)} chars, "
                       f"stderr {r.stderr.strip()[-300:]!r}")
    return bad


def check_bad(name, argv, env, want, cwd):
    r = run(argv, env, cwd)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    missing = [w for w in want if not lines or w not in lines[0]]
    if r.returncode == 0 or len(lines) != 1 or missing or "Traceback" in r.stderr:
        return [f"{name}: exit {r.returncode}, stderr {r.stderr.strip()[-400:]!r}"
                + (f" (does not name {missing})" if missing else "")]
    return []


def check_ctl_job_ends(ctl, d):
    """ftrt-ctl drain waiting for an answer stops once the job's status file says the job
    ended (here 0.5 s after the request; no coordinator answers), well before its --timeout,
    and says so: exit 3 and one line naming the end."""
    status = os.path.join(d, "ctl-status.json")

    def write(job):
        with open(status + ".tmp", "w") as fh:
            json.dump({"job": job, "ranks": [{"world_rank": 1, "host": "h"}]}, fh)
        os.replace(status + ".tmp", status)
    write("running")
    t0 = time.monotonic()
    p = subprocess.Popen(ctl + ["drain", "--rank", "1", "--status", status, "--timeout", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    write("finished")
    out, err = p.communicate(timeout=30)
    took = time.monotonic() - t0
    if p.returncode != 3 or "the job ended (finished)" not in err or took > 5:
        return [f"ftrt-ctl while the job ends: exit {p.returncode} after {took:.1f} s, "
                f"stderr {err.strip()!r}"]
    return []


def check_ctl_moved_then_finished(ctl, d):
    """ftrt-ctl drain --wait whose drain was made just before the job's end (the status file
    goes from running straight to finished with the rank drained and gone: no poll saw it
    running again, as in python.zero once): "moved", exit 0; the same end without the rank
    drained: exit 1, "withdrawn"."""
    problems = []
    for drained in (True, False):
        status = os.path.join(d, f"ctl-moved-{drained}.json")

        def write(job, role):
            with open(status + ".tmp", "w") as fh:
                json.dump({"job": job, "epoch": 1, "ranks": [
                    {"world_rank": 1, "host": "h", "role": role,
                     "state": "left" if role == "drained" else "running"}]}, fh)
            os.replace(status + ".tmp", status)
        write("running", "trainer")
        p = subprocess.Popen(ctl + ["drain", "--rank", "1", "--status", status, "--timeout",
                                    "30", "--wait", "30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        control = status + ".control"
        deadline = time.monotonic() + 20
        req = []
        while not req and time.monotonic() < deadline:  # the coordinator's part, by hand
            req = [n for n in os.listdir(control) if n.startswith("drain-")] \
                if os.path.isdir(control) else []
            time.sleep(0.05)
        if req:
            with open(os.path.join(control, req[0] + ".result"), "w") as fh:
                fh.write("accepted: world rank 1 (logical rank 0) moves to hot spare world "
                         "rank 2 in epoch 1\n")
        time.sleep(0.3)
        write("finished", "drained" if drained else "trainer")
        out, err = p.communicate(timeout=30)
        want = (0, "moved") if drained else (1, "withdrawn")
        if not req or p.returncode != want[0] or want[1] not in out:
            problems.append(f"ftrt-ctl, the job finished after the drain (drained {drained}): "
                            f"exit {p.returncode}, stdout {out.strip()!r}, stderr "
                            f"{err.strip()!r}")
    return problems


def check_pmix_filter(run_cmd, cwd):
    """ftrt-run leaves out exactly the PMIx notice and forwards every other line, in order,
    and a partial last line."""
    other = NOTICE.replace("line 1033", "line 1058")
    script = (f"printf 'a\\n{NOTICE}\\nb\\n{other}\\n{NOTICE}\\nprompt> ' >&2; "
              f"printf 'out\\n'")
    r = run(run_cmd + ["--", "sh", "-c", script], {}, cwd)
    lines = r.stderr.splitlines()
    want = ["a", "b", other, "prompt> ftrt-run: the ftrt job ended without a final state in "
            f"its status file; its last message: {other}; exiting 1"]
    if lines != want or r.stdout != "out\n":
        return [f"PMIx filter: stderr {lines!r}, stdout {r.stdout!r}; want stderr {want!r}"]
    return []


def killpg(p):
    """SIGKILLs process p's process group, if any of it is left."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(pred, timeout=20.0):
    """Polls pred() every 20 ms until it is true (True) or timeout seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def check_run_dirs(run_cmd, d):
    """ftrt-run's run directories ($TMPDIR/ftrt-run.<uid>/<pid>-<random>): one of a SIGKILLed
    ftrt-run (with its command: tests' kill_all) is removed by the next ftrt-run's start; those
    of a live ftrt-run, and of a SIGKILLed one whose command still runs (holding the lock), are
    kept; a lock that no process holds is stale whatever pid the name carries; a directory
    without a lock is kept while young; other names are left alone; a run that ends removes
    its own. Stand-in commands (sleep, true), no MPI job."""
    tmp = os.path.join(d, "tmp")
    os.makedirs(tmp)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TMPDIR=tmp)
    parent = os.path.join(tmp, f"ftrt-run.{os.getuid()}")

    def launch(*cmd):
        p = subprocess.Popen(run_cmd + ["--", *cmd], env=env, cwd=d, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: any(n.startswith(f"{p.pid}-") and os.path.exists(
                os.path.join(parent, n, "lock")) for n in listing()), 10.0):
            p.kill()
        return p

    def listing():
        return sorted(os.listdir(parent)) if os.path.isdir(parent) else []

    def dir_of(p):
        return next((n for n in listing() if n.startswith(f"{p.pid}-")), None)

    names = {}
    for _ in range(3):  # the killed one, the live one, the orphaned one
        p = launch("sleep", "60")
        names[p] = dir_of(p)
        if names[p] is None:
            for p in names:
                killpg(p)
                p.wait()
            return [f"run dirs: ftrt-run made no $TMPDIR/ftrt-run.<uid>/<pid>-*/lock "
                    f"({listing()}; $TMPDIR: {os.listdir(tmp)})"]
    killed, live, orphaned = names
    killpg(killed)  # ftrt-run and its command, as kill_all does
    killed.wait()
    os.kill(orphaned.pid, signal.SIGKILL)  # ftrt-run alone: its command runs on
    orphaned.wait()
    stale = os.path.join(parent, f"{os.getpid()}-unlocked")  # a live pid, a lock no one holds
    young = os.path.join(parent, "1-nolock")
    old = os.path.join(parent, "2-oldnolock")
    other = os.path.join(parent, "notes")
    for x in (stale, young, old, other):
        os.mkdir(x)
    open(os.path.join(stale, "lock"), "w").close()
    os.utime(old, (time.time() - 120, time.time() - 120))
    subprocess.run(run_cmd + ["--", "true"], env=env, cwd=d, capture_output=True, timeout=60)
    after_first = listing()
    killpg(orphaned)  # its command too: the lock is free now
    subprocess.run(run_cmd + ["--", "true"], env=env, cwd=d, capture_output=True, timeout=60)
    after_second = listing()
    live.terminate()
    rc = live.wait(30)
    killpg(live)  # nothing should be left; if something is, end it
    want_first = sorted([names[live], names[orphaned], "1-nolock", "notes"])
    want_second = sorted([names[live], "1-nolock", "notes"])
    want_end = ["1-nolock", "notes"]
    problems = []
    for what, got, want in (("after a SIGKILL and a start", after_first, want_first),
                            ("after the orphaned command's end and a start", after_second,
                             want_second), ("after the live run ended", listing(), want_end)):
        if got != want:
            problems.append(f"run dirs {what}: {got}, want {want} (killed {names[killed]}, "
                            f"live {names[live]}, orphaned {names[orphaned]})")
    if rc != 143:
        problems.append(f"run dirs: SIGTERMed ftrt-run exited {rc}, want 143")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build/examples/train_mlp")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    cmd = dict(launchers(os.path.abspath(a.bin)))
    problems = unlisted_examples(cmd)
    with tempfile.TemporaryDirectory(prefix="ftrt-launchers-") as d:
        f = os.path.join(d, "a-file")
        with open(f, "w") as fh:
            fh.write("a regular file\n")
        for name, prefix in cmd.items():
            problems += check_help(name, prefix, d)
        cases = bad_inputs(cmd, os.path.abspath(a.bin), f, d)
        for name, argv, env, want in cases:
            got = check_bad(name, argv, env, want, d)
            problems += got
            if a.v and not got:
                print(f"  ok: {name}")
        problems += check_pmix_filter(cmd["tools/ftrt-run"], d)
        problems += check_ctl_job_ends(cmd["tools/ftrt-ctl"], d)
        problems += check_ctl_moved_then_finished(cmd["tools/ftrt-ctl"], d)
        problems += check_run_dirs(cmd["tools/ftrt-run"], d)
    for p in problems:
        print("FAIL:", p)
    print(f"launchers: {len(cmd)} launchers' --help and -h, {len(cases)} bad inputs, the PMIx "
          f"filter, ftrt-run's run directories, ftrt-ctl as the job ends: "
          f"{'all passed' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
