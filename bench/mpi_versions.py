#!/usr/bin/env python3
"""Open MPI 4.1 against Open MPI 5 with ULFM, in the same run, on 3 simulated hosts × 2 slots
(tests/hosts): MTTD, MTTR and the exit bound of a killed trainer, a killed host and a cut
host, each case run --runs times per version, the versions alternating. Not a test: figures
only (docs/benchmarks.md "Open MPI 5 with ULFM").

Usage: bench/mpi_versions.py [--bin41 build/examples/train_mlp]
                             [--bin5 build-ompi5/examples/train_mlp] [--runs N] [--work DIR]
Each binary is launched by tools/ftrt-run with a bare `mpirun`: ftrt-run runs the launcher of
the Open MPI the binary links (Debian's 4.1, or the Open MPI 5 of `cmake -DMPI_HOME=...`) and
adds `--with-ft ulfm` for 5. Cases (train_mlp of the integration tests, heartbeat timeout 1 s):
  trainer  1 coordinator + 4 trainers + 1 spare; trainer logical rank 2 (on ftrt-h2) SIGKILLed
  host     1 + 3 trainers + 2 spares; every process of ftrt-h2 SIGKILLed (its daemon too).
           Under 5, mpirun ends the job when it loses the daemon: the row gives the time from
           the kill to a relaunch on ftrt-h1 and ftrt-h3 training again past its resume step
           (restore from the last committed checkpoint), and the steps lost (steps done in the
           last status file, refreshed every 0.25 s, minus the resume step)
  cut      1 + 3 trainers + 2 spares; ftrt-h2's link taken down (heartbeat timeout)
MTTD is the report's, from the injection time in the fault log; MTTR the report's (detection
to every member back in the loop); the exit bound is ftrt-run's exit after the last rank's
exit (its --summary). Root, network namespaces (exit 77 where they cannot be made).
"""
import os
import signal
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
import ftrt_harness as h  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

HB_MS = 1000


def job_on(hosts, work, name, binary, version, spares, hostfile=None, fresh=True):
    opts = hosts.mpirun_opts(hostfile, version=version)
    return h.train_job(os.path.join(work, name), binary, 6, spares=spares,
                       heartbeat_timeout_ms=HB_MS, fresh=fresh, mpirun_opts=opts)


def exit_bound(job):
    s = job.load_summary()
    return s["t_exit"] - s["t_last_rank_exit"] if s["t_last_rank_exit"] else None


def in_place(job, rc, want):
    """(MTTD ms, MTTR ms) of the first failure of a recovered job, or a failure message."""
    if rc != 0:
        return f"exit {rc}; log {job.log_path()}"
    fl = job.load_report()["failures"]
    if len(fl) != want or not all(f["recovered"] for f in fl):
        return f"{len(fl)} failures, not all recovered; log {job.log_path()}"
    return (statistics.median(f["mttd_s"] for f in fl) * 1e3,
            statistics.median(f["mttr_s"] for f in fl) * 1e3)


def case_trainer(hosts, work, binary, version):
    job = job_on(hosts, work, "trainer", binary, version, 1).start()
    job.inject(signal.SIGKILL, job.wait_trainer(2, 40), "sigkill")
    rc = job.wait(180)
    return in_place(job, rc, 1), exit_bound(job)


def case_cut(hosts, work, binary, version):
    job = job_on(hosts, work, "cut", binary, version, 2).start()
    job.wait_trainer(1, 40)
    hosts.cut("ftrt-h2", job)
    rc = job.wait(180)
    hosts.mend("ftrt-h2")
    return in_place(job, rc, 2), exit_bound(job)


def case_host(hosts, work, binary, version):
    job = job_on(hosts, work, "host", binary, version, 2).start()
    job.wait_status(lambda s: s["last_committed_step"] >= 50 and h.trainer(s, 1))
    t_kill = time.time()
    hosts.kill_host("ftrt-h2", job)
    rc = job.wait(180)
    if version < 5:
        return in_place(job, rc, 2), exit_bound(job)
    if rc == 0:
        return f"Open MPI 5: the job survived the host loss (new behaviour?); {job.log_path()}", None
    with open(os.path.join(job.ckpt, "LATEST")) as f:
        latest = int(f.read().strip()[5:])
    st = job.status_json() or {"ranks": []}  # its last refresh (every 0.25 s) before the end
    done = max([r["steps_done"] for r in st["ranks"]] + [latest])
    hf = hosts.hostfile(os.path.join(job.dir, "hostfile.relaunch"), ["ftrt-h1", "ftrt-h3"], 3)
    job2 = job_on(hosts, work, "host", binary, version, 2, hostfile=hf, fresh=False).start()
    job2.wait_trainer(0, latest + 1, timeout=120)
    t_back = time.time()
    rc2 = job2.wait(180)
    if rc2 != 0:
        return f"relaunch exit {rc2}; log {job2.log_path()}", None
    return ("relaunch", (t_back - t_kill) * 1e3, done - latest), exit_bound(job)


CASES = (("trainer", case_trainer), ("host", case_host), ("cut", case_cut))


def summarize(results):
    print(f"\n{'case':<8} {'MPI':<4} {'runs':>4}  {'MTTD ms (median, max)':<22} "
          f"{'MTTR ms (median, max)':<24} exit bound s (median, max)")
    for (case, major), rows in results.items():
        ver = {4: "4.1", 5: "5.0"}[major]
        ok = [r for r in rows if not isinstance(r[0], str)]
        bounds = [b for _, b in ok if b is not None]
        eb = f"{statistics.median(bounds):.2f}, {max(bounds):.2f}" if bounds else "-"
        if ok and ok[0][0][0] == "relaunch":
            back = [r[0][1] for r in ok]
            lost = [r[0][2] for r in ok]
            print(f"{case:<8} {ver:<4} {len(ok):>4}  {'(job ended)':<22} "
                  f"{'relaunch back in ' + format(statistics.median(back), '.0f') + ', ' + format(max(back), '.0f'):<24} "
                  f"{eb}   (steps lost: median {statistics.median(lost):.0f})")
        elif ok:
            d = [r[0][0] for r in ok]
            m = [r[0][1] for r in ok]
            print(f"{case:<8} {ver:<4} {len(ok):>4}  {statistics.median(d):8.1f}, {max(d):8.1f}"
                  f"      {statistics.median(m):8.1f}, {max(m):8.1f}        {eb}")
        failed = len(rows) - len(ok)
        if failed:
            print(f"{'':<8} {ver:<4} {failed} run(s) failed: {[r[0] for r in rows if isinstance(r[0], str)]}")


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    root = os.path.join(HERE, "..")
    ap.add_argument("--bin41", default=os.path.join(root, "build", "examples", "train_mlp"),
                    help="train_mlp built against Open MPI 4.1 (default: build/)")
    ap.add_argument("--bin5", default=os.path.join(root, "build-ompi5", "examples", "train_mlp"),
                    help="train_mlp built against Open MPI 5 (default: build-ompi5/)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", help="work directory (default: a new temporary one)")
    a = ap.parse_args()
    example_args.check_paths(ap, a, inputs=("bin41", "bin5"))
    work = a.work or tempfile.mkdtemp(prefix="ftrt-bench-mpi-")
    h.MPIRUN = "mpirun"  # a bare name: ftrt-run runs the launcher each binary links
    os.environ.pop("FTRT_MPIRUN", None)
    results = {}
    try:
        with h.Hosts(3, 2) as hosts:
            for i in range(a.runs):
                order = ((4, a.bin41), (5, a.bin5)) if i % 2 == 0 else ((5, a.bin5), (4, a.bin41))
                for case, fn in CASES:
                    for ver, binary in order:
                        r = fn(hosts, os.path.join(work, f"run{i}-{ver}"), binary, ver)
                        results.setdefault((case, ver), []).append(r)
                        print(f"run {i} {case:<8} Open MPI {ver}: {r}", flush=True)
                        left = hosts.leftovers()
                        if left:
                            print(f"  processes left in the hosts: {left}", flush=True)
    except h.Skip as e:
        print(f"bench/mpi_versions.py: {e}: skipped")
        return h.SKIP
    summarize(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
