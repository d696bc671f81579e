#!/usr/bin/env python3
"""coord_scale.py - the coordinator at scale, before and after, in one run (docs/benchmarks.md
"Coordinator at scale").

Runs bench/coord_load (see its header) at each size: the --before binary and the --after
binary with one TCP connection per simulated rank, and, with --per-host K, the --after binary
again with host agents (K ranks per simulated host: one connection per host, heartbeats
batched, rank deaths reported by the host agent, and whole hosts killed and cut off), one after
the other at each size so that all see the same machine state; then prints one table per size:
the figures of each run and the ratios to the before run.

Usage: bench/coord_scale.py [--before BIN] --after BIN [--per-host K [--hosts-only]] [--host-kills H]
                            [--host-silents G] [--threads T] [--steady S] [--kills K]
                            [--silents Q] [--commits C] [--spares S] [--limit SECONDS]
                            [--hb-ms MS] [--timeout-ms MS] [--behind K] N [N ...]
--before is optional (without it, only the after columns are printed); --hosts-only runs only
the host agents' column, and the before run with host agents too (for sizes where one
connection per rank does not fit the machine). --behind K is coord_load's (every K-th survivor
reports a step fewer at each failure: a peers plan with survivors behind its resume step). Each
run is bounded by --limit seconds (default 580); a run that does not finish in time prints what
it measured so far and its column shows "-". --hb-ms and --timeout-ms go to coord_load (the
heartbeat period and timeout; defaults 100 and 1000 ms, as coord_load's). Exit status 0 when
every run of --after passed.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

COLS = [  # (RESULT key, label, format)
    ("cpu", "coordinator CPU (cores)", "{:.3f}"),
    ("probe_p50_ms", "loop latency p50 (ms)", "{:.2f}"),
    ("probe_p99_ms", "loop latency p99 (ms)", "{:.2f}"),
    ("gap_steady_ms", "longest coordinator silence at an agent, steady (ms)", "{:.0f}"),
    ("gap_all_ms", "longest coordinator silence at an agent, whole run (ms)", "{:.0f}"),
    ("mttd_p50_ms", "rank crash: detection -> first FAILURE p50 (ms)", "{:.2f}"),
    ("mttd_p99_ms", "rank crash: detection -> first FAILURE p99 (ms)", "{:.2f}"),
    ("fanout_max_ms", "rank crash: -> last survivor's FAILURE max (ms)", "{:.1f}"),
    ("silent_max_ms", "rank silence: timeout expiry -> FAILURE max (ms)", "{:.2f}"),
    ("hostkill_p50_ms", "host killed: close -> first FAILURE p50 (ms)", "{:.2f}"),
    ("hostkill_plan_max_ms", "host killed: close -> PLAN (all its ranks replaced) max (ms)",
     "{:.1f}"),
    ("hostcut_max_ms", "host cut off: timeout expiry -> first FAILURE max (ms)", "{:.2f}"),
    ("hostcut_plan_max_ms", "host cut off: timeout expiry -> PLAN max (ms)", "{:.1f}"),
    ("plan_last_ms", "last REPORT -> last PLAN p50 (ms)", "{:.1f}"),
    ("plan_bytes", "PLAN bytes to all members per recovery, p50", "{:.0f}"),
    ("plan_msg_max", "largest PLAN message (bytes)", "{:.0f}"),
    ("commit_first_ms", "last SHARD_DONE -> first COMMIT (LATEST replaced) p50 (ms)", "{:.1f}"),
    ("commit_last_ms", "last SHARD_DONE -> last COMMIT p50 (ms)", "{:.1f}"),
    ("rss_mib", "RSS, steady (MiB)", "{:.1f}"),
    ("hwm_mib", "peak RSS before the end (MiB)", "{:.1f}"),
    ("hwm_exit_mib", "peak RSS over the whole run, the report included (MiB)", "{:.1f}"),
    ("report_rise_mib", "peak RSS rise at the end: final ledgers + report (MiB)", "{:.1f}"),
    ("report_bytes", "report file (bytes)", "{:.0f}"),
    ("startup_s", "start-up: connect + hello of all (s)", "{:.2f}"),
    ("end_s", "last BYE -> coordinator exit (s)", "{:.2f}"),
    ("false_pos", "false positives", "{:.0f}"),
    ("hb_rate", "heartbeat messages sent by the generator (/s)", "{:.0f}"),
    ("gen_cpu", "generator CPU (cores)", "{:.2f}"),
]


def show(out, err):
    for line in (out or "").splitlines():
        if not line.startswith("RESULT"):
            print("  " + line)
    for line in (err or "").splitlines()[:8]:
        print("  ! " + line)


def text(b):
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def run(binary, n, args, per_host=0):
    spares = args.spares
    cmd = [binary, "-n", str(n), "--steady", str(args.steady), "--kills", str(args.kills),
           "--silents", str(args.silents), "--commits", str(args.commits), "--threads",
           str(args.threads), "--hb-ms", str(args.hb_ms), "--timeout-ms", str(args.timeout_ms)]
    if args.behind:
        cmd += ["--behind", str(args.behind)]
    if per_host:
        need = args.kills + args.silents + per_host * (args.host_kills + args.host_silents)
        spares = max(spares, -(-need // per_host) * per_host)  # whole spare hosts
        cmd += ["--per-host", str(per_host), "--host-kills", str(args.host_kills),
                "--host-silents", str(args.host_silents)]
    cmd[3:3] = ["-s", str(spares)]
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.limit)
    except subprocess.TimeoutExpired as e:
        show(text(e.stdout), text(e.stderr))
        print(f"  timed out after {args.limit} s", flush=True)
        return None, 1
    show(p.stdout, p.stderr)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = {}
            for kv in line.split()[1:]:
                k, v = kv.split("=", 1)
                try:
                    res[k] = float(v)
                except ValueError:
                    res[k] = v
    sys.stdout.flush()
    return res, p.returncode


def fmt(res, key, f):
    if res is None or key not in res or res[key] != res[key]:  # missing or NaN
        return "-"
    return f.format(res[key])


def ratio(before, after, key):
    if before and after and key in before and key in after:
        x, y = before[key], after[key]
        if x == x and y == y and x > 0:
            return f"{y / x:.2f}"
    return "-"


def table(n, args, runs):
    names = [name for name, _ in runs]
    print(f"N = {n} trainers")
    cols = names + ([f"{nm} / before" for nm in names[1:]] if names[0] == "before" else [])
    print("| figure | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    before = runs[0][1] if runs[0][0] == "before" else None
    for key, label, f in COLS:
        cells = [fmt(res, key, f) for _, res in runs]
        ratios = [ratio(before, res, key) for _, res in runs[1:]] if before else []
        print(f"| {label} | " + " | ".join(cells + ratios) + " |")
    print()


def main():
    ap = example_args.Parser()
    ap.add_argument("--before")
    ap.add_argument("--after", required=True)
    ap.add_argument("--per-host", type=int, default=0)
    ap.add_argument("--hosts-only", action="store_true")
    ap.add_argument("--host-kills", type=int, default=2)
    ap.add_argument("--host-silents", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steady", type=float, default=10)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--silents", type=int, default=3)
    ap.add_argument("--commits", type=int, default=3)
    ap.add_argument("--spares", type=int, default=8)
    ap.add_argument("--limit", type=int, default=580)
    ap.add_argument("--hb-ms", type=int, default=100)
    ap.add_argument("--timeout-ms", type=int, default=1000)
    ap.add_argument("--behind", type=int, default=0)
    ap.add_argument("sizes", type=int, nargs="+")
    args = ap.parse_args()
    example_args.check_paths(ap, args, inputs=("before", "after"))
    tables, ok = [], True
    for n in args.sizes:
        runs = []
        if args.before:  # (with --hosts-only, with host agents too)
            hosts = args.per_host if args.hosts_only else 0
            runs.append(("before", run(args.before, n, args, hosts)[0]))
        if not (args.hosts_only and args.per_host):
            res, rc = run(args.after, n, args)
            ok &= rc == 0
            runs.append(("after", res))
        if args.per_host:
            res, rc = run(args.after, n, args, args.per_host)
            ok &= rc == 0
            runs.append((f"after, {args.per_host} per host agent", res))
        tables.append((n, runs))
    print()
    for n, runs in tables:
        table(n, args, runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
