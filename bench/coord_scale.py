#!/usr/bin/env python3
"""coord_scale.py - the coordinator at scale, before and after, in one run (README "The
coordinator at scale").

Runs bench/coord_load (see its header) with each binary given, at each size, one after the
other (before then after at each size, so that both see the same machine state), and prints
one table: the figures of each binary and the ratio after / before.

Usage: bench/coord_scale.py [--before BIN] [--after BIN] [--threads T] [--steady S]
                            [--kills K] [--silents Q] [--commits C] [--spares S] N [N ...]
--before is optional (without it, only the after column is printed). Each run is bounded by
--limit seconds (default 580). Exit status 0 when every run of --after passed.
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
    ("mttd_p50_ms", "crash: close -> first FAILURE p50 (ms)", "{:.2f}"),
    ("mttd_max_ms", "crash: close -> first FAILURE max (ms)", "{:.2f}"),
    ("fanout_max_ms", "crash: close -> last survivor's FAILURE max (ms)", "{:.1f}"),
    ("silent_max_ms", "silence: timeout expiry -> FAILURE max (ms)", "{:.2f}"),
    ("plan_last_ms", "last REPORT -> last PLAN p50 (ms)", "{:.1f}"),
    ("plan_bytes", "PLAN bytes to all members per recovery, p50", "{:.0f}"),
    ("plan_msg_max", "largest PLAN message (bytes)", "{:.0f}"),
    ("commit_last_ms", "last SHARD_DONE -> last COMMIT p50 (ms)", "{:.1f}"),
    ("rss_mib", "RSS, steady (MiB)", "{:.1f}"),
    ("hwm_mib", "peak RSS (MiB)", "{:.1f}"),
    ("startup_s", "start-up: connect + hello of all (s)", "{:.2f}"),
    ("end_s", "last BYE -> coordinator exit (s)", "{:.2f}"),
    ("false_pos", "false positives", "{:.0f}"),
    ("hb_rate", "heartbeats sent by the generator (/s)", "{:.0f}"),
    ("gen_cpu", "generator CPU (cores)", "{:.2f}"),
]


def run(binary, n, args):
    cmd = [binary, "-n", str(n), "-s", str(args.spares), "--steady", str(args.steady),
           "--kills", str(args.kills), "--silents", str(args.silents), "--commits",
           str(args.commits), "--threads", str(args.threads)]
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.limit)
    except subprocess.TimeoutExpired:
        print(f"  timed out after {args.limit} s", flush=True)
        return None, 1
    for line in p.stdout.splitlines():
        if not line.startswith("RESULT"):
            print("  " + line)
    for line in p.stderr.splitlines()[:8]:
        print("  ! " + line)
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


def main():
    ap = example_args.Parser()
    ap.add_argument("--before")
    ap.add_argument("--after", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steady", type=float, default=10)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--silents", type=int, default=3)
    ap.add_argument("--commits", type=int, default=3)
    ap.add_argument("--spares", type=int, default=8)
    ap.add_argument("--limit", type=int, default=580)
    ap.add_argument("sizes", type=int, nargs="+")
    args = ap.parse_args()
    example_args.check_paths(ap, args, inputs=("before", "after"))
    rows = []
    ok = True
    for n in args.sizes:
        before = run(args.before, n, args)[0] if args.before else None
        after, rc = run(args.after, n, args)
        ok &= rc == 0
        rows.append((n, before, after))

    def fmt(res, key, f):
        if res is None or key not in res or res[key] != res[key]:  # missing or NaN
            return "-"
        return f.format(res[key])

    print()
    for n, before, after in rows:
        print(f"N = {n} trainers + {args.spares} spares")
        print("| figure | before | after | after / before |")
        print("|---|---:|---:|---:|")
        for key, label, f in COLS:
            b, a = fmt(before, key, f), fmt(after, key, f)
            ratio = "-"
            if before and after and key in before and key in after:
                x, y = before[key], after[key]
                if x == x and y == y and x > 0:
                    ratio = f"{y / x:.2f}"
            print(f"| {label} | {b} | {a} | {ratio} |")
        print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
