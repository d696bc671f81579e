#!/usr/bin/env python3
"""MTTR and its state transfer against the size of the replicated state, with their floor.

For each state size S (MiB per rank: train_mlp's parameters + momentum, both replicated; no
checkpoints, so recovery moves the state in memory), a job of 1 coordinator + 4 trainers + 1
hot spare runs train_mlp; trainer logical rank 2 is SIGKILLed once it completed a few steps; the
report's MTTR (detection -> every member back in the training loop) and its phases are kept.
--runs repetitions per size, alternating the variants given (--bin; --bin-old for an earlier
build and/or --old-args for other train_mlp arguments, e.g. "--check-every 0"; --args for
arguments of every variant, e.g. "--sharded-momentum" with FTRT_SHARD_REPLICA_EVERY=2 in the
environment: the shard then comes from the partner replica), so that both see the same
machine. The floor, measured in the same run for each size by build/bench/xfer_bench
(--quick, under mpirun -np 4: 3 sources and a receiver, as in the recovery): one local copy of
S MiB with its CRC32C (the library's fused ftrt__copy_crc32c), with, for reference, the transfer
alone between 4 processes (4 MiB chunks, every CRC32C checked; written into the receiver by the
sources, as the recovery does on one host, and as MPI messages, as between hosts) and plain MPI
messages of the same bytes (no CRC). The transfer of the job is the report's phase "state transfer". --batch sets
the minibatch per trainer (default 1: short steps; at 32 a step of a large model takes about a
second on a small machine, and the survivors' reaching the recovery point shows). --hosts runs
everything on 4 simulated hosts (tests/hosts/ftrt-hosts: network namespaces on one bridge, TCP
over veth pairs): the job with the hot spare alone on the 4th host, so that the state it
receives crosses the link from every survivor, and xfer_bench with one process per host; its
"mpi" row (plain MPI messages of the same bytes, 3 sources -> 1 receiver) is then the link's own
throughput with those bytes, and its floor the local copy on the receiver's host.

--kill mid-pass: instead of a SIGKILL from outside once the victim did a few steps (at whatever
point of its step: when it lands after the step's allreduce, the survivors finish their update
and the bench's 20 ms step sleep before they can answer, the phase "reach"), the victim
SIGKILLs itself in the gradient pass of step 6 (train_mlp's --die-rank/--die-at-step test knob,
a check every 1024 hidden units), when every survivor is mid-pass and answers within a check:
the MTTR of the recovery itself. --huge: 2 MiB huge pages reserved on the host for the run
(vm.nr_hugepages raised by what the sizes need, set back at the end; root), so that variants
given --ftrt-alloc (--new-args / --old-args / --args) hold their state in ftrt_alloc() memory
files of huge pages, which the recovery's sources map (comm/cma.h), and xfer_bench adds its
"mapped" row (the transfer into such memory) and the floor into such memory.

Usage: bench/mttr_size.py [--sizes 16,256,1024] [--runs 3] [--batch 1] [--hosts]
                          [--bin build/examples/train_mlp] [--bin-old OTHER/train_mlp]
                          [--xfer-bench build/bench/xfer_bench] [--kill outside|mid-pass]
                          [--huge] [--new-args "ARGS"] [--old-args "ARGS"] [--args "ARGS"]
                          [--json FILE]
Prints a table (medians): the floor, the bench's transfer and MPI, and per variant the MTTR and
its transfer phase with their ratios to the floor; then per variant the median of each phase of
MTTR (the report's phases_ms; the old variant's only when its build reports them). Not a
test: figures only.
"""
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "harness"))
import ftrt_harness as h  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)


def hidden_for(mib):
    """train_mlp --hidden H holds 2 x (75 H + 10) float32 of replicated state."""
    return max(1, int(mib * 1048576 / 600))


# xfer_bench --quick's rows, by the start of their line: the key each is kept under
XFER_ROWS = {"floor:": "floor", "xfer as messages": "msg", "xfer,": "xfer", "mpi": "mpi",
             "mapped:": "mapped", "floor into huge pages": "floor_huge"}


def floors(xbench, mib, mpirun_opts=()):
    """xfer_bench --quick at mib MiB: {floor, xfer, msg, mpi[, mapped, floor_huge]} in seconds
    (medians of 5; the last two where huge pages were free); mpirun_opts: those of simulated
    hosts (one process per host), else one host."""
    cmd = ["mpirun", *mpirun_opts, "--oversubscribe", "--bind-to", "none", "--mca",
           "mpi_yield_when_idle", "1", "-np", "4", xbench, "--mib", f"{mib:g}", "--reps", "5",
           "--quick"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600).stdout
    got = {}
    for line in out.splitlines():
        m = re.match(r"\s*(.*?)\s+([0-9.]+) ms ", line)
        key = next((k for p, k in XFER_ROWS.items() if m and m.group(1).startswith(p)), None)
        if key:
            got[key] = float(m.group(2)) / 1e3
    if not {"floor", "xfer", "msg", "mpi"} <= set(got):
        raise SystemExit(f"xfer_bench gave no figures:\n{out}")
    return got


# --kill mid-pass: the victim (logical rank 2) SIGKILLs itself at its 8th check of step 6's
# gradient pass; every trainer checks every 1024 hidden units (2 ms apart in that step)
MID_PASS = ["--check-every", "1024", "--die-rank", "2", "--die-at-step", "6"]


def one_run(binary, mib, work, batch=1, extra=(), mpirun_opts=None, kill="outside"):
    """One job (mpirun_opts: those of simulated hosts, else one host); returns the failure's
    entry of the report."""
    hid = hidden_for(mib)
    # A short sleep per step: MTTR ends when every member is back in the training loop, and a
    # survivor notices the failure at its next ftrt call, so long sleeps would inflate it.
    args = ["--steps", "12", "--batch", str(batch), "--hidden", str(hid), "--seed", "3",
            "--ckpt-every", "0", "--step-sleep-ms", "20"] + list(extra)
    if kill == "mid-pass":
        args += MID_PASS
    job = h.train_job(work, binary, 6, args, spares=1, mpirun_opts=mpirun_opts)
    # Steps of several seconds at 1 GiB on a small machine: no progress-stall false positive;
    # and no rank declared silent when a loaded machine starves it for a second (a kill is
    # detected by its connection's loss, whatever this timeout).
    job.env["FTRT_PROGRESS_TIMEOUT_MS"] = "120000"
    job.env["FTRT_HEARTBEAT_TIMEOUT_MS"] = "10000"
    job.start()
    if kill == "outside":
        victim = job.wait_trainer(2, 3, timeout=900)
        job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(900)
    rep = job.load_report()
    f = rep["failures"]
    if rc != 0 or len(f) != 1 or not f[0]["recovered"]:
        raise SystemExit(f"{mib} MiB with {binary}: the job did not recover (rc {rc}); see {work}")
    return f[0]


def huge_pages_for(sizes, replicas):
    """2 MiB pages that the largest of `sizes` (MiB per trainer) needs: 5 processes of the job
    holding params and momentum (ftrt_alloc rounds each up) and, with partner replicas
    (replicas true), an image of both (the library's own, from ftrt_alloc too), and
    xfer_bench's receiver, plus 16."""
    mib = max(float(x) for x in sizes.split(","))
    per = 2 * -(-int(mib * 1048576 / 2) // 2097152)
    return 5 * (2 if replicas else 1) * per + -(-int(mib * 1048576) // 2097152) + 16


def print_phases(name, extra, fails):
    """One line per variant: the median of each MTTR phase over its runs (ms), and each run's
    MTTR with its largest phase."""
    ph = [f.get("phases_ms") for f in fails]
    if not all(ph):
        print(f"  {name}: no phases in its report (an older build)")
        return
    med = {k: statistics.median(p[k] for p in ph) for k in ph[0]}
    runs = ", ".join(f"{f['mttr_s'] * 1e3:.0f} ({max(p, key=p.get)} {max(p.values()):.0f})"
                     for f, p in zip(fails, ph))
    print(f"  {name} {' '.join(extra)}: phases, median ms: "
          + ", ".join(f"{k} {v:.1f}" for k, v in med.items()) + f"; runs: {runs}", flush=True)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,256,1024")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(root, "build", "examples", "train_mlp"))
    ap.add_argument("--xfer-bench", default=os.path.join(root, "build", "bench", "xfer_bench"))
    ap.add_argument("--bin-old", default=None)
    ap.add_argument("--old-args", default=None)
    ap.add_argument("--new-args", default="")
    ap.add_argument("--args", default="")
    ap.add_argument("--kill", choices=("outside", "mid-pass"), default="outside")
    ap.add_argument("--huge", action="store_true",
                    help="huge pages reserved for the run (root): see the description")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--hosts", action="store_true",
                    help="on 4 simulated hosts, the spare alone on the 4th (needs root)")
    a = ap.parse_args()
    example_args.check_paths(ap, a, outputs=("json",), inputs=("bin", "bin_old", "xfer_bench"))
    common = shlex.split(a.args)
    bins = [("new", a.bin, common + shlex.split(a.new_args))]
    if a.bin_old or a.old_args is not None:
        bins.append(("old", a.bin_old or a.bin, common + shlex.split(a.old_args or "")))
    if a.huge and a.hosts:
        ap.error("--huge is for one host (the simulated hosts' sources never map a receiver)")
    work = tempfile.mkdtemp(prefix="ftrt-mttr-")
    if a.huge:
        n = huge_pages_for(a.sizes, "--sharded-momentum" in
                           " ".join((a.args, a.new_args, a.old_args or "")))
        try:
            with h.HugePages(n):
                print(f"huge pages: {n} more reserved for the run", flush=True)
                return measure(a, bins, work, (), None)
        except h.Skip as e:
            raise SystemExit(f"--huge: {e}")
    if not a.hosts:
        return measure(a, bins, work, (), None)
    with h.Hosts(4, slots=2) as hosts:
        # the job: world 0-1 on host 1, 2 on host 2, 3-4 on host 3 (logical rank 2, the
        # victim, is world 3), the spare (world 5) alone on host 4; xfer_bench: one per host
        job_opts = hosts.mpirun_opts(hostfile=hosts.hostfile_slots(
            os.path.join(work, "job.hosts"), [2, 1, 2, 1]))
        bench_opts = hosts.mpirun_opts(hostfile=hosts.hostfile_slots(
            os.path.join(work, "bench.hosts"), [1, 1, 1, 1]))
        return measure(a, bins, work, bench_opts, job_opts)


def measure(a, bins, work, bench_opts, job_opts):
    """The table for every size of a.sizes: floors (xfer_bench under bench_opts), then a.runs
    jobs of each variant of bins (under job_opts, None: one host); a.json written. Returns 0."""
    rows = []
    print(f"{'MiB':>5} {'floor ms':>8} {'bench xfer':>10} {'bench msgs':>10} {'bench mpi':>9}"
          + "".join(f" {n + ' MTTR':>9} {'/floor':>6} {n + ' xfer':>9} {'/floor':>6}"
                    for n, _, _ in bins), flush=True)
    for mib in [float(x) for x in a.sizes.split(",")]:
        fl = floors(a.xfer_bench, mib, bench_opts)
        got = {n: [] for n, _, _ in bins}
        for i in range(a.runs):
            for n, b, extra in bins:
                got[n].append(one_run(b, mib, os.path.join(work, f"{n}-{mib:g}-{i}"), a.batch,
                                      extra, job_opts, a.kill))
        row = {"state_mib": mib, "floor_s": fl["floor"], "bench_xfer_s": fl["xfer"],
               "bench_msgs_s": fl["msg"], "bench_mpi_s": fl["mpi"], "batch": a.batch,
               "hosts": 4 if job_opts else 1, "kill": a.kill,
               "bench_mapped_s": fl.get("mapped"), "floor_huge_s": fl.get("floor_huge")}
        line = (f"{mib:5g} {fl['floor'] * 1e3:8.1f} {fl['xfer'] * 1e3:10.1f} "
                f"{fl['msg'] * 1e3:10.1f} {fl['mpi'] * 1e3:9.1f}")
        for n, _, _ in bins:
            mttr = [f["mttr_s"] for f in got[n]]
            xfer = [f["phases_ms"]["transfer"] / 1e3 for f in got[n]
                    if f.get("phases_ms") and "transfer" in f["phases_ms"]]
            m = statistics.median(mttr)
            x = statistics.median(xfer) if xfer else float("nan")
            row[n] = {"mttr_s": mttr, "median_s": m, "transfer_s": xfer, "transfer_median_s": x,
                      "phases_ms": [f.get("phases_ms") for f in got[n]]}
            line += f" {m * 1e3:9.1f} {m / fl['floor']:6.2f} {x * 1e3:9.1f} {x / fl['floor']:6.2f}"
        rows.append(row)
        print(line, flush=True)
        if "mapped" in fl:
            print(f"  bench: the transfer into huge pages, mapped by the sources "
                  f"{fl['mapped'] * 1e3:.1f} ms ({fl['mapped'] / fl['floor']:.2f}x the floor); "
                  f"the floor into huge pages {fl['floor_huge'] * 1e3:.1f} ms", flush=True)
        for n, _, extra in bins:
            print_phases(n, extra, got[n])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": a.runs, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
