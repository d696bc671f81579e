"""ftrt-chaos's run: the job's launches (under ftrt-run on simulated hosts, or submitted to a
Slurm cluster on them: slurm.py), the schedule of the plan's injections, what is observed from
outside the runtime, and the verdict at the end."""
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

from .plan import trigger_ready
from .common import FTRT_RUN, alive, gone, latest_step, now, read_json
from .hosts import Arrangement
from .drain import Drains
from .inject import Injector
from .join import Joins, joinable_cmd, plan_joins
from .slurm import SlurmArrangement
from .verdict import Verdict


class Chaos(Injector, Verdict, Drains, Joins):
    """One ftrt-chaos run: launches (and relaunches) the job, injects the plan's faults while
    watching the status file, and gives the verdict."""

    def __init__(self, a, cmd):
        self.a = a
        self.cmd = cmd
        self.work = os.path.abspath(a.workdir)
        os.makedirs(self.work, exist_ok=True)
        self.status = os.path.abspath(a.status or os.path.join(self.work, "status.json"))
        self.fault_log = os.path.abspath(a.fault_log or os.path.join(self.work, "faults.jsonl"))
        self.report = a.report
        self.ckpt = a.ckpt_dir
        self.rng = random.Random(a.seed)
        self.injections = []  # dicts: kind, time, targets [{pid, world_rank, role, logical}], launch
        self.launches = []    # dicts: rc, log, report, t_start, t_end
        self.commit_history = []  # (time, LATEST step) as observed
        self.filler = None
        self.tmpfs = False
        self.lock = threading.Lock()
        self.hosts = None  # Arrangement (--hosts / --hosts-made), SlurmArrangement (--slurm)
        self.replica_corrupt = False  # FTRT_TEST_REPLICA_CORRUPT=1 for the job (corrupt-replica)
        self.lost_hosts = []       # hosts killed or cut: left out of the relaunches
        self.drain_times = []      # time to move of each drain judged moved (drain.py)
        self.write_watch = None    # WriteWatch of the launch (a partition)
        self.joinable = False      # a plan with join-spare: launches under ftrt-run --joinable
        self.joiners = []          # {"proc": the joiner's ftrt-run, "inj": its injection}
        self.launched_cmd = None   # the command of the launch running (the joiner's model)
        self.hb_timeout_s = float(os.environ.get("FTRT_HEARTBEAT_TIMEOUT_MS", "1000")) / 1000.0

    def st(self):
        return read_json(self.status)

    def ranks(self, st, role):
        return [r for r in (st or {}).get("ranks", []) if r["role"] == role]

    # ------------------------------------------------------------------ schedule
    def observe(self, st):
        """Ground truth seen from outside the runtime, in the status file (rewritten at once on
        every membership change): when each victim shows as failed, and when the job runs
        again in a newer epoch; each both as read here (seen_*: late by this poll's period and
        by however long a busy machine kept this process from running) and as bracketed by
        the status file's own write times ("updated"): *_written = [the write time of the last
        file read without it (None: none read since the injection), that of the first read
        with it]. The event lies inside its bracket whatever the polling's delays: a file
        written after it shows it, one written before does not (one loop writes it)."""
        if not st:
            return
        t = now()
        upd = st.get("updated")
        roles = {r["pid"]: r["role"] for r in st.get("ranks", [])}
        with self.lock:
            for inj in self.injections:
                if inj["launch"] != len(self.launches) or not inj.get("targets"):
                    continue
                for tg in inj["targets"]:
                    if roles.get(tg["pid"]) != "failed":
                        tg["unfailed_written"] = upd
                    elif "seen_failed" not in tg:
                        tg["seen_failed"] = t
                        tg["failed_written"] = [tg.get("unfailed_written"), upd]
                running = st.get("job") == "running" and \
                    st.get("epoch", 0) > inj.get("epoch_before", 0)
                if not running:
                    inj["unresumed_written"] = upd
                elif "seen_resumed" not in inj:
                    inj["seen_resumed"] = t
                    inj["resumed_written"] = [inj.get("unresumed_written"), upd]
        self.observe_exits()

    def observe_exits(self):
        """When each watched process (a host fault's) exits, seen from /proc (the simulated
        hosts share this machine's pid namespace)."""
        t = now()
        with self.lock:
            for inj in self.injections:
                if inj["launch"] != len(self.launches):
                    continue
                for w in inj.get("watch", []):
                    if "exited_at" not in w and gone(w["pid"]):
                        w["exited_at"] = t

    def watching(self):
        with self.lock:
            return any("exited_at" not in w for inj in self.injections
                       if inj["launch"] == len(self.launches) for w in inj.get("watch", []))

    def injector(self, faults, deadline):
        """Injects the faults as their triggers come while the launch runs, observing the
        status file and the committed steps, until the launch ends or the monotonic deadline
        (the launch's --timeout) passes; returns the faults not injected."""
        t_running = None
        pending = list(faults)
        while self.job.poll() is None and now() < deadline:
            if not pending and not self.ckpt and not self.watching():
                break
            st = self.st()
            if t_running is None and st and st.get("job") == "running":
                t_running = now()
            if pending and t_running is not None and \
                    trigger_ready(pending[0], self.status, t_running):
                self.inject(pending.pop(0))
            self.observe(st)
            if self.ckpt:
                ls = latest_step(self.ckpt)
                if ls is not None and (not self.commit_history or self.commit_history[-1][1] != ls):
                    self.commit_history.append((now(), ls))
            time.sleep(0.01)
        return pending

    # ------------------------------------------------------------------ run
    def launch(self, plan):
        env = dict(os.environ, FTRT_STATUS_FILE=self.status, FTRT_FAULT_LOG=self.fault_log)
        if self.a.sharded is not None:
            env["FTRT_SHARD_REPLICA_EVERY"] = str(self.a.sharded)
        if self.a.erasure is not None:
            env.update(FTRT_SHARD_REDUNDANCY="erasure", FTRT_EC_GROUP=str(self.a.erasure))
        if any(f.get("kind") == "sigterm-rank" for f in plan):
            env["FTRT_SIGTERM"] = "drain"  # (drain.py)
        if self.replica_corrupt:
            env["FTRT_TEST_REPLICA_CORRUPT"] = "1"
        if self.report:
            env["FTRT_REPORT"] = self.report
        for p in (self.status, self.report):  # nothing of a previous launch may count for this one
            if p and os.path.exists(p):
                os.unlink(p)
        n = len(self.launches)
        logp = os.path.join(self.work, f"launch{n}.log")
        log = open(logp, "w")
        t0 = now()
        if self.a.slurm:  # sbatch --wait of the command, on the cluster's nodes left
            cmd, summary, _ = self.hosts.command(self.cmd, n, self.lost_hosts, self.work)
            env = self.hosts.env(env, summary)
        else:
            cmd, summary = self.host_cmd(n) if self.hosts else (self.cmd, None)
            if self.joinable:
                cmd = joinable_cmd(cmd)
        self.launched_cmd = cmd
        print(f"ftrt-chaos: launch {n}: {' '.join(cmd)}", flush=True)
        self.job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        left = self.injector(plan, t0 + self.a.timeout)
        try:
            rc = self.job.wait(timeout=max(1, self.a.timeout - (now() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(self.job.pid, signal.SIGKILL)
            rc = self.job.wait()
            if self.a.slurm:
                self.hosts.cancel(logp)
            print(f"ftrt-chaos: launch {n} timed out after {self.a.timeout} s", flush=True)
            rc = 124
        log.close()
        self.observe_exits()
        self.joiners_end(n, rc)
        st = self.st() or {}
        for r in st.get("ranks", []):  # nothing may outlive the launch
            if r.get("pid") and alive(r["pid"]):
                try:
                    os.kill(r["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.release_filler()
        extra = self.host_launch_end(n, summary) if self.hosts else {}
        job_state = st.get("job")
        if rc == 0 and job_state != "finished":  # mpirun --enable-recovery loses exit codes
            rc = 1
        rep_copy = None
        if self.report and os.path.exists(self.report):
            rep_copy = os.path.join(self.work, f"launch{n}.report.json")
            shutil.copyfile(self.report, rep_copy)
        self.launches.append(dict({"rc": rc, "log": logp, "report": rep_copy, "t_start": t0,
                                   "t_end": now(), "job": job_state, "left": left,
                                   "latest": latest_step(self.ckpt) if self.ckpt else None},
                                  **extra))
        print(f"ftrt-chaos: launch {n} ended: exit {rc}, job {job_state}", flush=True)
        return rc, left

    def host_cmd(self, n):
        """The command of launch n on the hosts: under ftrt-run (--summary), with the
        arrangement's mpirun options after `mpirun`, and a hostfile without the lost hosts."""
        cmd = list(self.cmd)
        summary = os.path.join(self.work, f"launch{n}.summary.json")
        i = next((k for k, x in enumerate(cmd) if os.path.basename(x) == "ftrt-run"), None)
        if i is None:
            cmd = [sys.executable, FTRT_RUN, "--summary", summary, "--"] + cmd
        else:
            cmd = cmd[:i + 1] + ["--summary", summary] + cmd[i + 1:]
        m = next((k for k, x in enumerate(cmd) if os.path.basename(x) == "mpirun"), None)
        if m is None:
            raise SystemExit("ftrt-chaos: --hosts: the command has no mpirun")
        opts = list(self.hosts.opts)
        left = [h for h in self.hosts.names if h not in self.lost_hosts]
        self.cur_hosts = left
        if len(left) < len(self.hosts.names) and left:
            np_ = next((int(cmd[k + 1]) for k in range(m, len(cmd) - 1)
                        if cmd[k] in ("-np", "-n", "--np", "-c")), None) or \
                len(self.hosts.names) * self.hosts.slots
            hf = self.hosts.write_hostfile(os.path.join(self.work, f"launch{n}.hostfile"), left,
                                           math.ceil(np_ / len(left)))
            opts[opts.index("--hostfile") + 1] = hf
            print(f"ftrt-chaos: launch {n} on {', '.join(left)} (without "
                  f"{', '.join(sorted(set(self.lost_hosts)))})", flush=True)
        if os.path.exists(summary):
            os.unlink(summary)
        return cmd[:m + 1] + opts + cmd[m + 1:], summary

    def host_launch_end(self, n, summary):
        """After launch n on the hosts: ftrt-run's timings, what is left in the hosts (killed),
        and the writes seen since a partition (WriteWatch), judged later."""
        out = {"hosts": self.hosts.cur_hosts if self.a.slurm else self.cur_hosts}
        sm = read_json(summary) if summary else None
        if sm:
            out["summary"] = sm
            if sm.get("t_last_rank_exit") is not None:
                out["exit_after_last_rank_s"] = sm["t_exit"] - sm["t_last_rank_exit"]
        if self.a.slurm:  # the job's record and output; its processes left (not the daemons)
            out.update(self.hosts.launch_end(n, self.work, self.st()))
            return out
        left = {}
        for h in self.hosts.names:
            pids = self.hosts.pids(h)
            if pids:
                left[h] = pids
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        out["leftovers"] = left
        if self.write_watch is not None:
            ww, self.write_watch = self.write_watch, None
            events = ww.stop()
            special = {"status": self.status, "report": self.report, "params": self.a.params}
            with self.lock:
                for inj in self.injections:
                    if inj["launch"] != n or inj["kind"] != "partition-host":
                        continue
                    hp = set(inj.get("host_pids", []))
                    inj["writes_after_cut"] = sorted(
                        {(p, pid) for t, pid, p, _ in events if pid in hp and t >= inj["time"]})
                    inj["special_writers"] = {
                        k: sorted({pid for t, pid, p, _ in events if v and t >= inj["time"] and
                                   (p == v or p.startswith(v + ".tmp."))})
                        for k, v in special.items()}
                    inj["write_watch_overflow"] = ww.overflow
                    if inj.get("coordinator_host"):
                        self.after_takeover(inj, events, special, hp)
        return out

    def after_takeover(self, inj, events, special, hp):
        """The coordinator's host cut: which writes came after a standby's takeover, in the
        order fanotify queued them (its read times are 50 ms coarse): the first write of the
        term file (coordinator.term in --ckpt-dir) by a process off the cut host marks it.
        Sets takeover_seen, the cut side's writes after it (path, pid), and the writers of
        the status file and report after it."""
        t0 = inj["time"]
        evs = [(pid, p) for t, pid, p, _ in events if t >= t0]
        i = next((k for k, (pid, p) in enumerate(evs) if pid not in hp and
                  os.path.basename(p).startswith("coordinator.term")), None)
        inj["takeover_seen"] = i is not None
        later = evs[i:] if i is not None else evs
        inj["cut_side_after_takeover"] = sorted({(p, pid) for pid, p in later if pid in hp})
        inj["special_writers_after_takeover"] = {
            k: sorted({pid for pid, p in later if v and (p == v or p.startswith(v + ".tmp."))})
            for k, v in special.items()}

    def run(self, plan):
        self.replica_corrupt = self.a.sharded is not None and \
            any(f.get("kind") == "corrupt-replica" for f in plan)
        self.joinable = plan_joins(plan)
        if self.a.ckpt_tmpfs:
            os.makedirs(self.ckpt, exist_ok=True)
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.a.ckpt_tmpfs}", "tmpfs",
                                self.ckpt], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"ftrt-chaos: cannot mount a tmpfs on {self.ckpt}: {r.stderr.strip()}")
                return 77
            self.tmpfs = True
        if self.a.hosts or self.a.hosts_made or self.a.slurm:
            self.hosts = SlurmArrangement(self.work) if self.a.slurm else \
                Arrangement(self.a.hosts, self.a.slots, make=not self.a.hosts_made)
            bad = self.hosts.open()
            if bad:
                print(f"ftrt-chaos: no hosts: {bad[1]}", flush=True)
                if self.tmpfs:
                    subprocess.run(["umount", "-l", self.ckpt])
                return bad[0]
            print(f"ftrt-chaos: hosts {', '.join(self.hosts.names)}, {self.hosts.slots} slot(s) "
                  f"each{' (made here)' if getattr(self.hosts, 'make', True) else ''}"
                  + (f"; Slurm: controller on {self.hosts.slurm.ctl}" if self.a.slurm else ""),
                  flush=True)
        try:
            rc, left = self.launch(plan)
            tries = 0
            while rc != 0 and tries < self.a.relaunch:
                tries += 1
                rc, left = self.launch(left)
            return self.verdict(rc)
        finally:
            if self.write_watch is not None:
                self.write_watch.stop()
            if self.hosts:
                self.hosts.close()
            if self.tmpfs:
                subprocess.run(["umount", "-l", self.ckpt])
