"""ftrt-chaos's planned moves: drain-rank (tools/ftrt-ctl drain --rank of a trainer),
sigterm-rank (SIGTERM to one trainer; the job runs with FTRT_SIGTERM=drain) and drain-host
(ftrt-ctl drain --host of a host without the coordinator; needs --hosts or --hosts-made), with
their verdicts: with a hot spare for each trainer, each is in the report's "drains", moved with
no rework and not among the failures, in one epoch per request; without, the drain is refused
and nothing changes (no failure, no drain: the rank keeps training)."""
import signal
import subprocess
import sys

from .common import DRAIN_KINDS, REPO

FTRT_CTL = REPO + "/tools/ftrt-ctl"


def ctl(status, *target):
    """ftrt-ctl drain <target> (answer awaited up to 10 s); (exit status, its output)."""
    r = subprocess.run([sys.executable, FTRT_CTL, "drain", *target, "--status", status],
                       capture_output=True, text=True, timeout=30)
    return r.returncode, (r.stdout + r.stderr).strip()


class Drains:
    """Mixin of Chaos (chaos.py) beside Injector and Verdict."""

    def inject_drain_rank(self, f, st):
        kind = f["kind"]
        t = self.pick_trainers(st, f.get("target"))
        if not t:
            return self.skip(kind, "no trainer")
        spares = len(self.ranks(st, "spare"))
        e = self.record(kind, t, {"spares": spares})
        if kind == "sigterm-rank":
            self.signal_all(t, signal.SIGTERM)
        else:
            e["ctl_rc"], e["ctl_out"] = ctl(self.status, "--rank", str(t[0]["world_rank"]))
        return True

    def inject_drain_host(self, f, st):
        kind = f["kind"]
        if not self.hosts:
            return self.skip(kind, "needs --hosts or --hosts-made")
        ch = self.coord_host(st)
        live = [r for r in (st or {}).get("ranks", []) if r["role"] in ("trainer", "spare")]
        hosts = sorted({r["host"] for r in live if r["host"] != ch})
        if not hosts:
            return self.skip(kind, "no host without the coordinator")
        host = f.get("host") or self.rng.choice(hosts)
        mine = [r for r in live if r["host"] == host]
        trainers = sum(r["role"] == "trainer" for r in mine)
        elsewhere = sum(r["role"] == "spare" and r["host"] != host for r in live)
        e = self.record(kind, mine, {"host": host, "spares": elsewhere,
                                     "covered": elsewhere >= trainers})
        e["ctl_rc"], e["ctl_out"] = ctl(self.status, "--host", host)
        return True

    def judge_drain(self, inj, check, name, rep, by_pid):
        """Covered: every trainer target in "drains", moved, rework 0, one epoch, not a
        failure. Not covered: refused, no drain and no failure of the targets."""
        drains = {d["pid"]: d for d in rep.get("drains", [])}
        trainers = [t for t in inj["targets"] if t["role"] == "trainer"]
        covered = inj.get("covered", inj.get("spares", 0) >= len(trainers))
        failed = [t["world_rank"] for t in inj["targets"] if t["pid"] in by_pid]
        if all(j["kind"] in DRAIN_KINDS for j in self.injections if j["launch"] == inj["launch"]):
            # nothing but drains in this launch: nothing may have failed at all (a drain that
            # breaks its host's agent, say)
            failed = sorted({f.get("world_rank") for f in rep.get("failures", [])}, key=str)
        if "ctl_rc" in inj:
            check(name + " answered", inj["ctl_rc"] == (0 if covered else 1),
                  f"ftrt-ctl exit {inj['ctl_rc']}: {inj['ctl_out'][:200]}")
        if not covered:
            mine = [t for t in inj["targets"] if t["pid"] in drains]
            check(name + ": no spare, refused; the rank(s) kept training", not mine and not failed,
                  f"drains {[t['world_rank'] for t in mine]}, failures {failed}")
            return
        spares = [t for t in inj["targets"] if t["role"] == "spare"]
        if not trainers:  # a host of spares only: they leave the pool
            gone = [t for t in spares if drains.get(t["pid"], {}).get("role") == "spare"]
            check(name + f": its {len(spares)} spare(s) left the pool",
                  len(gone) == len(spares) and not failed,
                  f"drained {[t['world_rank'] for t in gone]} of "
                  f"{[t['world_rank'] for t in spares]}; failures {failed}")
            return
        ds = [drains.get(t["pid"]) for t in trainers]
        ok = bool(ds) and None not in ds and all(d["moved"] and d["rework_steps"] == 0
                                                 for d in ds) and \
            len({d["epoch"] for d in ds}) == 1 and not failed
        det = ", ".join(f"w{d['world_rank']} -> w{d['spare_world_rank']} in "
                        f"{d['time_to_move_s'] * 1e3:.1f} ms, rework {d['rework_steps']}"
                        for d in ds if d and d.get("moved")) or "not in the report"
        check(name + f": {len(trainers)} trainer(s) moved to spares, no rework", ok,
              det + (f"; failures {failed}" if failed else ""))
        for d in ds:
            if d and d.get("moved"):
                self.drain_times.append(d["time_to_move_s"])
