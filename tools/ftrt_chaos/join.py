"""ftrt-chaos's joins: join-spare, a new process joining the running job as a hot spare
(tools/ftrt-run --join, docs/join.md), and its verdict. A plan with join-spare runs each launch
under `ftrt-run --joinable` (Open MPI 4.1's ompi-server beside the job); the joiner's command is
the job's own mpirun command with -np 1 (on simulated hosts: a hostfile of the one host the
entry names, "host": "coordinator" (its host), "host:NAME" or "host:<i>"; default the
coordinator's). The injection waits (up to --join-wait-s) until the status file counts the join
and lists the joined process as a hot spare, so that the entry's "then" entries strike a job
that holds it; with "promoted": true the verdict also wants it promoted in a later recovery of
the same launch. With "refused": TEXT the join must be refused instead (the joiner's ftrt-run
exits 1 with TEXT in a line, the job undisturbed, the refusal counted by the coordinator unless
"refusal_counted": false); "host": "head" runs the joiner beside ftrt-chaos, outside the
simulated hosts, under its own mpirun."""
import os
import signal
import subprocess
import sys
import time

from ftrt_run.joinable import joinable_dir  # (tools/ beside this package)
from ftrt_run.launcher import program_index

from .common import FTRT_RUN, alive, now

JOIN_KIND = "join-spare"
COUNT_OPTS = ("-np", "-n", "--np", "-c")  # mpirun's process count, replaced by -np 1


def plan_joins(plan):
    """Whether plan (entries, with their "then" entries) has a join-spare."""
    return any(f.get("kind") == JOIN_KIND or plan_joins(f.get("then", [])) for f in plan)


def joinable_cmd(cmd):
    """cmd run under ftrt-run --joinable: the option added after ftrt-run where cmd starts with
    it, else `python3 tools/ftrt-run --joinable --` put in front."""
    i = next((k for k, x in enumerate(cmd) if os.path.basename(x) == "ftrt-run"), None)
    if i is None:
        return [sys.executable, FTRT_RUN, "--joinable", "--"] + list(cmd)
    return cmd if "--joinable" in cmd[:cmd.index("--") if "--" in cmd else len(cmd)] else \
        cmd[:i + 1] + ["--joinable"] + cmd[i + 1:]


def joiner_mpirun(cmd, hostfile=None):
    """The joiner's mpirun command from the job's launched command cmd: its mpirun, the same
    options but the process count (-np 1 instead) and, with hostfile, that --hostfile; the same
    program and arguments. None when cmd has no mpirun."""
    m = next((k for k, x in enumerate(cmd) if os.path.basename(x) == "mpirun"), None)
    if m is None:
        return None
    args = cmd[m + 1:]
    p = program_index(args)
    opts, k = [], 0
    while k < p:
        if args[k] in COUNT_OPTS or (hostfile == "" and args[k] == "--hostfile"):
            k += 2
            continue
        if hostfile == "" and args[k] == "--mca" and k + 1 < p and \
                args[k + 1].startswith("plm_rsh_"):
            k += 3
            continue
        opts.append(args[k])
        if args[k] == "--hostfile" and hostfile and k + 1 < p:
            opts.append(hostfile)
            k += 2
            continue
        k += 1
    return [cmd[m]] + opts + ["-np", "1"] + args[p:]


def run_dir_of(pid, timeout_s=10.0):
    """The run directory of the ftrt-run whose pid is pid, once its join.json exists; None."""
    deadline = now() + timeout_s
    while now() < deadline:
        found = joinable_dir(pid)
        if found:
            return found
        time.sleep(0.02)
    return None


class Joins:
    """Mixin of Chaos (chaos.py) beside Injector, Verdict and Drains: needs self.a, job, st(),
    ranks(), record(), skip(), hosts, work, launches, launched_cmd, joiners."""

    def joiner_host(self, f, st):
        """The simulated host the joiner runs on (entry f's "host"); None on one host."""
        if not self.hosts:
            return None
        want = f.get("host", "coordinator")
        if want == "head":
            return "head"
        if want == "coordinator":
            return next((r.get("host") for r in self.ranks(st, "coordinator")), None)
        return self.hosts.name(want[5:]) if want.startswith("host:") else None

    def start_joiner(self, f, st):
        """Starts `ftrt-run --join RUNDIR -- <the joiner's mpirun>`; (Popen, log path, host) or
        (None, why, None)."""
        if self.a.slurm:
            return None, "not with --slurm (the joiner's mpirun would run outside the allocation)", None
        rundir = run_dir_of(self.job.pid)
        if rundir is None:
            return None, "the job's ftrt-run run directory has no join.json", None
        host, hostfile = self.joiner_host(f, st), None
        if host == "head":
            hostfile = ""
        elif self.hosts:
            if host not in self.hosts.names or host in self.lost_hosts:
                return None, f"no live host for the joiner ({host})", None
            hostfile = self.hosts.write_hostfile(
                os.path.join(self.work, f"joiner{len(self.joiners)}.hostfile"), [host], 1)
        mp = joiner_mpirun(self.launched_cmd, hostfile)
        if mp is None:
            return None, "the job's command has no mpirun", None
        logp = os.path.join(self.work, f"joiner{len(self.joiners)}.log")
        with open(logp, "w") as log:  # (the joiner's ftrt-run holds its own copy)
            proc = subprocess.Popen([sys.executable, FTRT_RUN, "--join", rundir, "--"] + mp,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return proc, logp, host

    def inject_join_spare(self, f, st):
        """join-spare: a joiner started, then awaited until the status file lists it as a hot
        spare (joins counted), up to --join-wait-s."""
        kind = f["kind"]
        before = {r["world_rank"] for r in (st or {}).get("ranks", [])}
        joins0 = (st or {}).get("joins", 0)
        t0 = now()
        proc, logp, host = self.start_joiner(f, st)
        if proc is None:
            return self.skip(kind, logp)
        e = self.record(kind, [], {"joiner_log": logp, "joiner_host": host,
                                   "promoted_wanted": bool(f.get("promoted")),
                                   "refused_wanted": f.get("refused"),
                                   "refusal_counted": f.get("refusal_counted", True),
                                   "joins_before": joins0,
                                   "refused_before": (st or {}).get("join_refused", 0)})
        self.joiners.append({"proc": proc, "inj": e})
        if f.get("refused"):
            return self.await_refusal(e, proc, logp, t0)
        deadline = t0 + self.a.join_wait_s
        while now() < deadline and self.job.poll() is None and proc.poll() is None:
            cur = self.st() or {}
            new = [r for r in cur.get("ranks", []) if r["world_rank"] not in before
                   and r["role"] == "spare" and r.get("state") == "running"]
            if cur.get("joins", 0) > joins0 and new:
                e["joined_s"] = now() - t0
                e["joined"] = {k: new[0].get(k) for k in ("pid", "world_rank", "host")}
                print(f"ftrt-chaos: joined: hot spare w{new[0]['world_rank']} pid "
                      f"{new[0]['pid']} after {e['joined_s'] * 1e3:.0f} ms", flush=True)
                return True
            time.sleep(0.01)
        e["not_joined"] = "the joiner exited first" if proc.poll() is not None else \
            "the job ended first" if self.job.poll() is not None else \
            f"not a hot spare within {self.a.join_wait_s:g} s"
        print(f"ftrt-chaos: join-spare: {e['not_joined']}", flush=True)
        return False

    def await_refusal(self, e, proc, logp, t0):
        """A join that must be refused: the joiner's ftrt-run awaited (--join-wait-s), its
        exit status and last lines recorded, and the status file's counters after it."""
        try:
            e["joiner_rc"] = proc.wait(timeout=self.a.join_wait_s)
        except subprocess.TimeoutExpired:
            e["not_refused"] = f"still running after {self.a.join_wait_s:g} s"
            return False
        e["refused_s"] = now() - t0
        with open(logp, errors="replace") as fh:
            e["joiner_tail"] = fh.read()[-2000:]
        st = self.st() or {}
        e["joins_after"], e["refused_after"] = st.get("joins", 0), st.get("join_refused", 0)
        e["epoch_after"] = st.get("epoch", 0)
        print(f"ftrt-chaos: join-spare refused (exit {e['joiner_rc']}) after "
              f"{e['refused_s'] * 1e3:.0f} ms", flush=True)
        return True

    def joiners_end(self, n, rc):
        """After launch n (exit rc): each of its joiners' ftrt-run awaited (60 s, its process
        group SIGKILLed after that), its exit status recorded."""
        for j in self.joiners:
            inj = j["inj"]
            if inj["launch"] != n or "joiner_rc" in inj:
                continue
            try:
                inj["joiner_rc"] = j["proc"].wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(j["proc"].pid, signal.SIGKILL)
                j["proc"].wait()
                inj["joiner_rc"] = None  # still running 60 s after its job: killed here
            pid = (inj.get("joined") or {}).get("pid")
            inj["joined_alive_after"] = bool(pid and alive(pid))
            inj["launch_rc"] = rc

    def judge_join(self, inj, check, name, rep, by_pid):
        """Joined as a hot spare; the report counts the launch's joins; promoted when wanted;
        its ftrt-run exits 0 when the job finished and it was not lost (non-zero when lost),
        and leaves nothing running."""
        if inj.get("refused_wanted"):
            return self.judge_refusal(inj, check, name, rep)
        j = inj.get("joined")
        check(name + ": joined as a hot spare", j is not None,
              f"w{j['world_rank']} pid {j['pid']}" + (f" on {j['host']}" if self.hosts else "")
              + f" in {inj['joined_s'] * 1e3:.0f} ms" if j else inj.get("not_joined", ""))
        if j is None:
            return
        li = inj["launch"]
        want = sum(1 for x in self.injections if x["kind"] == JOIN_KIND and x["launch"] == li
                   and x.get("joined"))
        got = (rep.get("control_plane") or {}).get("joins")
        check(name + f": the report counts {want} join(s)", got == want, f"joins {got}")
        took = [f for f in rep.get("failures", []) if f.get("spare_world_rank") == j["world_rank"]]
        if inj.get("promoted_wanted"):
            check(name + ": promoted in a recovery", bool(took) and took[0].get("recovered"),
                  f"took logical rank {took[0].get('logical_rank')} of w{took[0]['world_rank']}"
                  if took else "never promoted")
        lost = j["pid"] in by_pid
        finished = inj.get("launch_rc") == 0
        rc = inj.get("joiner_rc")
        ok = (rc == 0) if finished and not lost else (rc not in (0, None))
        check(name + ": the joiner's ftrt-run exit status is true", ok and
              not inj.get("joined_alive_after"),
              f"exit {rc}; job {'finished' if finished else 'failed'}"
              + (", joiner lost" if lost else "")
              + (", still running after the launch" if inj.get("joined_alive_after") else ""))

    def judge_refusal(self, inj, check, name, rep):
        """A join that must be refused: the joiner's ftrt-run exits 1 with the expected words
        in one line; nothing of the job changed (no join, no epoch, no failure in the
        report before the plan's next entry); the coordinator counted the refusal, or did not
        ("refusal_counted": false: the joiner refused itself before asking)."""
        want, tail = inj["refused_wanted"], inj.get("joiner_tail", "")
        line = next((ln for ln in tail.splitlines() if want in ln), None)
        check(name + ": refused with one line", inj.get("joiner_rc") == 1 and line is not None,
              (line or inj.get("not_refused") or f"exit {inj.get('joiner_rc')}, no {want!r}")
              [:300])
        fails = [f for f in rep.get("failures", []) if f.get("detected_at", 0) < inj["time"] +
                 (inj.get("refused_s") or 0)]
        li = inj["launch"]
        mine = [x for x in self.injections if x["kind"] == JOIN_KIND and x["launch"] == li]
        cp = rep.get("control_plane") or {}
        want = (sum(1 for x in mine if x.get("joined")),
                sum(1 for x in mine if x.get("refused_wanted") and x["refusal_counted"]))
        got = (cp.get("joins"), cp.get("join_refused"))
        check(name + ": the job undisturbed", got == want and not fails and
              inj.get("epoch_after") == inj["epoch_before"],
              f"report: joins {got[0]}, refusals {got[1]} (want {want[0]}, {want[1]}); epoch "
              f"{inj['epoch_before']} -> {inj.get('epoch_after')}; failures meanwhile "
              f"{len(fails)}")
