#!/usr/bin/env python3
"""commit_scale.py - the checkpoint commit at 16,384+ shards, before and after, in one run
(docs/benchmarks.md "Checkpoint commit at scale").

Runs bench/commit_scale (see its header) at each size with the --before binary (built against
the older tree) and the --after binary, one after the other on the same shard files, and prints
one table: the time of ftrt__ckpt_commit_ex (the coordinator's commit thread, from the last
SHARD_DONE's decision to LATEST replaced) with the shards' pages cached (warm) and dropped
(cold), before and after and their ratio; and, from the after binary, where the time went
(header checks, MANIFEST, LATEST), the commit with one checking thread, and the system calls
alone of a serial check.

Usage: bench/commit_scale.py [--before BIN] --after BIN [--dir DIR] [--reps R] N [N ...]
DIR (default /dev/shm/ftrt-commit-scale: tmpfs, where "cold" drops nothing) is removed at the
end. Exit status 0 when every run passed.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)


def run(binary, n, args):
    cmd = [binary, "--dir", args.dir, "--reps", str(args.reps), str(n)]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    res = {}
    for line in p.stdout.splitlines():
        if not line.startswith("RESULT "):
            print("  " + line)
            continue
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        res[(kv["cache"], kv["variant"])] = {k: float(v) for k, v in kv.items()
                                             if k not in ("cache", "variant")}
    for line in p.stderr.splitlines()[:8]:
        print("  ! " + line)
    sys.stdout.flush()
    return res, p.returncode


def cell(res, cache, variant, key):
    v = res.get((cache, variant), {}).get(key)
    return "-" if v is None or v < 0 else f"{v:.1f}"


def table(n, before, after):
    print(f"N = {n} shards (ms, p50)")
    print("| figure | warm | cold |")
    print("|---|---:|---:|")
    rows = []
    if before is not None:
        rows.append(("commit, before", before, "commit", "commit_ms"))
    rows += [("commit, after", after, "commit", "commit_ms"),
             ("  header checks", after, "commit", "check_ms"),
             ("  MANIFEST (build, write, fsync)", after, "commit", "manifest_ms"),
             ("  LATEST", after, "commit", "latest_ms"),
             ("commit, after, one checking thread", after, "threads1", "commit_ms"),
             ("system calls of a serial check alone", after, "syscalls", "commit_ms")]
    for label, res, variant, key in rows:
        print(f"| {label} | {cell(res, 'warm', variant, key)} | "
              f"{cell(res, 'cold', variant, key)} |")
    if before is not None:
        r = []
        for cache in ("warm", "cold"):
            b = before.get((cache, "commit"), {}).get("commit_ms")
            a = after.get((cache, "commit"), {}).get("commit_ms")
            r.append(f"{a / b:.3f}" if a is not None and b else "-")
        print(f"| after / before | {r[0]} | {r[1]} |")
    thr = after.get(("warm", "commit"), {}).get("threads")
    if thr is not None:
        print(f"(after: the header checks on {thr:.0f} threads)")
    print()


def main():
    ap = example_args.Parser()
    ap.add_argument("--before")
    ap.add_argument("--after", required=True)
    ap.add_argument("--dir", default="/dev/shm/ftrt-commit-scale")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("sizes", type=int, nargs="+")
    args = ap.parse_args()
    example_args.check_paths(ap, args, inputs=("before", "after"))
    ok, tables = True, []
    try:
        for n in args.sizes:
            before = None
            if args.before:
                before, rc = run(args.before, n, args)
                ok &= rc == 0
            after, rc = run(args.after, n, args)
            ok &= rc == 0
            tables.append((n, before, after))
            shutil.rmtree(os.path.join(args.dir, f"n{n}"), ignore_errors=True)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print()
    for n, before, after in tables:
        table(n, before, after)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
