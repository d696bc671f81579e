#!/usr/bin/env python3
"""Multi-host integration tests for ftrt: train_mlp jobs on 3 simulated hosts (network
namespaces with their own hostnames, tests/hosts/ftrt-hosts; 2 slots each, so world ranks 0-1
run on ftrt-h1, 2-3 on ftrt-h2, 4-5 on ftrt-h3), launched by tools/ftrt-run + mpirun through the
namespace rsh agent, with real processes, whole hosts and links disturbed. Every case checks
that the job ends within a bound after its last rank's exit (ftrt-run's summary), with the
job's true exit status, that nothing is left in the hosts or in Open MPI's session
directories, and, where training completes, that the final parameters are byte-identical to a
one-host run. Python 3 standard library only; root (namespaces): skipped (77) otherwise.

Usage: hosts_itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       hosts_itest.py --list   (the cases, their ctest timeouts and fixtures: read by CMake)
Cases:
  arrangement  the simulated hosts: hostnames, addresses, cut and mend, nothing left after
             them (also after a failure)
  reference  one-host fault-free runs (4 trainers + 1 spare; 3 trainers + 2 spares): keeps
             DIR/reference4.params and DIR/reference3.params for the other cases
  faultfree  1 coordinator + 4 trainers + 1 spare on 3 hosts, no fault
  kill       the same; trainer logical rank 2 (world rank 3, on ftrt-h2) SIGKILLed: the spare
             (world rank 5, ftrt-h3) takes its place
  hostkill   1 + 3 trainers + 2 spares; every process of ftrt-h2 SIGKILLed (its orted and both
             its trainers): both spares (ftrt-h3) take their places. Under Open MPI 5 (PRRTE
             3.0) a lost daemon ends the whole job in mpirun ("PRTE has lost communication with
             a remote daemon"), which no setting of that release prevents: the job must end
             non-zero within the bound, and a relaunch on ftrt-h1 and ftrt-h3 resumes from the
             last committed checkpoint and finishes byte-identical
  linkcut    1 + 3 trainers + 2 spares; ftrt-h2's link taken down: both its trainers are
             declared failed by heartbeat timeout (1 s) and replaced
  nospare    1 + 4 trainers + 1 spare; ftrt-h2 killed (two trainers, one spare): the job fails
             (FTRT_ENOSPARE) and ends; a relaunch on ftrt-h1 and ftrt-h3 (no spare) resumes
             from the last committed checkpoint and finishes byte-identical
  coordhost  1 + 4 trainers + 1 spare; ftrt-h1 (the coordinator's host, with trainer world
             rank 1) killed: the spare (world rank 5, ftrt-h3), the standby coordinator, takes
             over, which leaves no spare for the lost trainer: the job ends FTRT_ENOSPARE
             with a non-zero status; a relaunch on ftrt-h2 and ftrt-h3 resumes and finishes
             (with 2 spares the same loss is survived in place: chaos.kill-coordinator-host)
  agentkill  1 + 4 trainers + 1 spare; the process ftrt-h2's host agent lives in SIGKILLed: its
             trainer is replaced by the spare (ftrt-h3), the other rank of ftrt-h2 goes on
             with its own connection to the coordinator, then elects a new host agent (in its
             own process; FTRT_TEST_REELECT_MS=200 after its fallback) and moves to it: no rank
             off ftrt-h1 is left on a connection of its own, nothing else is declared failed
  agentstall  1 + 4 trainers + 1 spare; the process ftrt-h2's host agent lives in SIGSTOPped
             for 0.6 s (0.6 x the 1 s heartbeat timeout), then SIGCONTed: the other rank of
             ftrt-h2 leaves the silent agent for its own connection after half the timeout
             (and the agent's own trainer may too, when it wakes), then moves back to the
             agent (FTRT_TEST_REELECT_MS=200); the agent, resuming, reports the ranks that
             left it, which the coordinator ignores: nothing is declared failed (no timeout
             was exceeded), no rank off ftrt-h1 is left on a connection of its own, and the
             result is byte-identical
  agentfence  1 + 4 trainers + 1 spare; the trainer of ftrt-h2 whose host agent lives in the
             other rank's process SIGSTOPped: its agent reports it silent after the heartbeat
             timeout (1 s), the coordinator declares it failed and has its agent fence it (CUT
             with fence: SIGKILL through the pidfd the agent took when it connected); the
             stopped process is gone before the job ends, the spare (ftrt-h3) took its place
             and the result is byte-identical
  hoststagger  1 + 3 trainers + 2 spares; ftrt-h2 lost process by process, slowly: the process
             its host agent lives in SIGKILLed first, its other trainer only once it is back on
             its own connection and every survivor has reported for the recovery (the status
             file's reports_in_epoch), then the rest of the host.
             The second death must join the same recovery (one epoch, both spares), not abort
             it: the plan waits for a lost agent's host within the orphan grace, widened here to
             4 s (FTRT_TEST_ORPHAN_GRACE_MS) so that the second kill lands in it; and the
             survivors wait 2 s after a PLAN (FTRT_DEBUG_RECOVERY_DELAY_MS), so that a plan sent
             before the second death (the old code) is still being applied when it comes: that
             ended the job with FTRT_EABORT (4 runs of 4 against commit cf9ab20)
  sparemove  1 + 3 trainers + 2 spares, ftrt-h1 world ranks 0-1, ftrt-h2 2-4 (trainers 2 and 3,
             spare 4), ftrt-h3 5 (spare, the standby coordinator); FTRT_TEST_AGENT_LATE_RANKS
             keeps world rank 4 from starting ftrt-h2's first host agent and makes it the one
             that starts the next. The process of ftrt-h2's host agent (a trainer) SIGKILLed:
             the spare of ftrt-h2 (world rank 4) takes its place, and ftrt-h2's survivors (the
             promoted spare and the other trainer) move to the new host agent, in world rank
             4's process. Then that other trainer SIGSTOPped: the new agent reports it silent,
             the coordinator declares it failed (heartbeat timeout) and the new agent fences it
             (SIGKILL through its pidfd) while the job runs; world rank 5 takes its place.
             Two failures, both recovered, byte-identical (steps of 40 ms: the job outlasts both)
  relaykill  relay groups among the host agents (FTRT_TEST_RELAY_GROUP=2; by default there are
             none below about 2,000 processes): 1 + 3 trainers + 2 spares placed round-robin
             (--map-by node: ftrt-h1 world ranks 0 and 3, ftrt-h2 1 and 4, ftrt-h3 2 and 5),
             the host agents of ftrt-h2 and ftrt-h3 in the spares' processes (4, 5;
             FTRT_TEST_AGENT_LATE_RANKS); the first of them to join is the relay, the other its
             member, confirmed in the status file ("relay") before the fault. The member's
             trainer SIGKILLed: its FAILURE and PLAN reach the member's host through the relay
             (no fallback to direct sends is logged), recovered in place by a spare,
             byte-identical
  relayhostkill  the same arrangement; every process of the RELAY's host SIGKILLed (its trainer
             and the spare its host agent lives in): the member falls back to direct fan-outs
             and is caught up (the coordinator's log says so), the lost trainer is replaced by
             the member's spare, byte-identical
  relayreselect  4 hosts, 1 + 4 trainers + 3 spares placed round-robin (ftrt-h1: world 0, 4;
             ftrt-h2: 1, 5; ftrt-h3: 2, 6; ftrt-h4: 3, 7), one relay group of the three host
             agents (in the spares 5-7; FTRT_TEST_RELAY_GROUP=3). The relay's whole host
             SIGKILLed: a new relay is chosen among the two host agents left (the status file's
             "relay" names it for both hosts' ranks); then the member host's trainer SIGKILLed:
             its FAILURE and PLAN come through the new relay (the member falls back once only,
             at the first relay's loss), both failures recovered, byte-identical
Each case prints "measured:" lines: the exit after the last rank's exit, MTTD and MTTR.
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import Fail, check, same_bytes, trainer  # noqa: E402

CASES = {}
EXIT_BOUND_S = 5.0     # ftrt-run's exit after the last rank's exit
HB_TIMEOUT_MS = 1000


def ref(args, trainers):
    return os.path.join(args.work, f"reference{trainers}.params")


def need_reference(args, trainers):
    if not os.path.exists(ref(args, trainers)):
        one_host_reference(args, trainers)
    return ref(args, trainers)


def one_host_reference(args, trainers):
    spares = 5 - trainers
    job = h.train_job(os.path.join(args.work, f"reference{trainers}"), args.bin, 6,
                      spares=spares)
    rc = job.run(180)
    check(rc == 0, f"one-host fault-free run, {trainers} trainers + {spares} spare(s), exits 0 "
          f"(got {rc})")
    rep = job.load_report()
    check(rep["status"] == "finished" and not rep["failures"], "report: finished, no failures")
    shutil.copyfile(job.params, ref(args, trainers))


def sessions(hosts):
    """Open MPI session directories now: the simulated hosts' (every one is this test's):
    4.1's <tmp>/ompi.<host>.<uid>/*, and 5's <tmp>/ompi.<pid> (one per daemon and mpirun);
    and the launching host's <tmp>/ompi.*/pid.* (4.1's mpirun; other tests' too), so that one
    an earlier killed mpirun left under a pid the kernel has since given this job's mpirun is
    known as older than the job."""
    tmp = tempfile.gettempdir()
    return set(glob.glob(os.path.join(tmp, f"ompi.{hosts.prefix}*.*", "*")) +
               glob.glob(os.path.join(tmp, "ompi.*", "pid.*")) +
               [d for d in glob.glob(os.path.join(tmp, "ompi.*"))
                if os.path.basename(d)[5:].isdigit()])


def hosts_job(args, hosts, name, spares, hostfile=None, fresh=True, np_=6):
    job = h.train_job(os.path.join(args.work, name), args.bin, np_, spares=spares,
                      heartbeat_timeout_ms=HB_TIMEOUT_MS, fresh=fresh,
                      mpirun_opts=hosts.mpirun_opts(hostfile))
    return job


def latest_step(job):
    """The step LATEST names in job's checkpoint directory."""
    with open(os.path.join(job.ckpt, "LATEST")) as f:
        return int(f.read().strip()[5:])


def relaunch_resumes(args, hosts, job, keep, at, ref, before, spares, np_=6):
    """job relaunched (same name, its checkpoint kept) on the hosts `keep`, 3 slots each: it
    exits 0, resumes at step `at` and ends byte-identical to the reference `ref`."""
    hf = hosts.hostfile(os.path.join(job.dir, "hostfile.relaunch"), keep, 3)
    job2 = hosts_job(args, hosts, os.path.basename(job.dir), spares=spares, hostfile=hf,
                     fresh=False, np_=np_).start()
    run_to_end(job2, hosts, 0, before)
    check(f"resumed at step {at}" in job2.out,
          f"the relaunch on {' and '.join(keep)} resumed at step {at}")
    check(same_bytes(job2.params, ref), "final parameters byte-identical to the one-host run")


def run_to_end(job, hosts, want_rc, before, timeout=120):
    """Waits for the job; checks its exit status, the exit bound, and that nothing is left."""
    rc = job.wait(timeout)
    check(rc == want_rc if want_rc is not None else rc != 0,
          f"the job ends with exit status {'non-zero' if want_rc is None else want_rc} "
          f"(got {rc}, {job.elapsed:.1f} s after the start)")
    s = job.load_summary()
    check(s["exit_status"] == rc, "ftrt-run's summary agrees")
    last = s["t_last_rank_exit"]
    check(last is not None, f"ftrt-run saw the ranks' processes ({s['ranks_seen']})")
    took = s["t_exit"] - last
    how = (f"mpirun ended by ftrt-run ({s['ended_mpirun']})" if s["ended_mpirun"]
           else f"mpirun exited by itself ({s['mpirun_status']})")
    print(f"  measured: ftrt-run exited {took:.2f} s after the last rank's exit; {how}; "
          f"{s['leftovers_killed']} leftover process(es) killed", flush=True)
    check(took <= EXIT_BOUND_S, f"exit within {EXIT_BOUND_S} s of the last rank's exit "
          f"({took:.2f} s)")
    left = hosts.leftovers()
    check(not left, f"no process left in the hosts ({left})")
    new = sessions(hosts) - before
    heads = {d for d in new if os.path.basename(d).startswith("pid.") and not
             os.path.basename(os.path.dirname(d)).startswith(f"ompi.{hosts.prefix}")}
    left = sorted(new - heads)
    check(not left, f"no Open MPI session directory left in the hosts ({left})")
    head = [d for d in heads if os.path.basename(d) == f"pid.{s['mpirun_pid']}"]
    check(not head, f"mpirun's session directory is gone ({head})")
    return rc


def print_failures(rep):
    for f in rep["failures"]:
        mttr = f"{f['mttr_s'] * 1e3:.1f} ms" if f.get("mttr_s") is not None else "n/a"
        print(f"  measured: world rank {f['world_rank']} ({f['kind']}): MTTD "
              f"{f['mttd_s'] * 1e3:.1f} ms ({f['mttd_source']}), MTTR {mttr}, "
              f"recovered={f['recovered']}", flush=True)


def on_host(st, w, host):
    r = [x for x in st["ranks"] if x["world_rank"] == w][0]
    return r["host"] == host


def h2_agent(job):
    """ftrt-h2's two trainers (world ranks 2 and 3) and the host agent serving both, from the
    status file now: checks that one agent serves both, in one of their processes. Returns
    (the status entry of the rank whose process holds the agent, the other one's world rank)."""
    st = job.status_json()
    a = [r["host_agent"] for r in st["ranks"] if r["host"] == "ftrt-h2"]
    check(len(a) == 2 and a[0] == a[1] and a[0] in (2, 3),
          f"ftrt-h2's trainers (world 2, 3) share one host agent, in one of them ({a})")
    return next(r for r in st["ranks"] if r["world_rank"] == a[0]), 5 - a[0]


def reelect_job(args, hosts, name):
    """A 4-trainer + 1-spare job whose ranks elect a new host agent 200 ms after a fallback
    (FTRT_TEST_REELECT_MS), started and training. Returns (job, the status entry of the ftrt-h2
    rank whose process holds the agent, the other ftrt-h2 trainer's world rank)."""
    job = hosts_job(args, hosts, name, spares=1)
    job.env.update(FTRT_TEST_REELECT_MS="200")
    job.start()
    job.wait_trainer(1, 40)
    victim, other = h2_agent(job)
    return job, victim, other


def check_none_direct(st):
    """Checks that no running rank off ftrt-h1 (the coordinator's host) is on a connection of
    its own: each is served by a host agent."""
    direct = [r["world_rank"] for r in st["ranks"] if r["world_rank"] > 0
              and r["host"] != "ftrt-h1" and r["state"] == "running" and r["host_agent"] is None]
    check(not direct, f"no rank off ftrt-h1 left on a connection of its own ({direct})")


def check_back_then_moved(job, w, agent, what):
    """Checks the coordinator's log: ftrt-h2's world rank w came back on its own connection,
    then moved to the host agent in world rank `agent`. Returns the move's milliseconds."""
    back = f"world rank {w} (ftrt-h2) is back on its own connection"
    moved = re.search(rf"world rank {w} \(ftrt-h2\) moved to the host agent in world rank "
                      rf"{agent} \(([0-9.]+) ms after its MOVE\)", job.out)
    check(back in job.out and moved and job.out.index(back) < moved.start(),
          f"the coordinator's log: world rank {w} {what}")
    return moved.group(1)


@h.case(CASES, timeout_s=120)
def case_arrangement(args):
    """The hosts themselves: own hostnames and addresses, a cut link silences a host and a
    mend restores it, and leaving the `with` block removes every namespace, veth and the
    bridge, also when the block fails."""
    import subprocess

    def netdevs():  # this set's: its bridge (ftrtbr0) and veths (ftrt-hNv), not those of a
        # campaign's ftrt-c hosts that may run beside it
        out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
        names = [l.split()[0].split("@")[0] for l in out.splitlines()]
        return [n for n in names if n == "ftrtbr0" or n.startswith("ftrt-h")]

    def netns():
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [l.split()[0] for l in out.splitlines() if l.startswith("ftrt-h")]

    def in_host(hosts, host, *cmd):
        return subprocess.run([h.FTRT_HOSTS, "exec", host] + list(cmd), env=hosts.env,
                              capture_output=True, text=True, timeout=20)

    def reach(hosts, host, addr, tries=1):
        for _ in range(tries):  # a TCP connection to a closed port refused: the path works
            r = in_host(hosts, host, "timeout", "2", "bash", "-c", f"exec 3<>/dev/tcp/{addr}/9")
            if "refused" in r.stderr or r.returncode == 0:
                return True
            print(f"  ({host} -> {addr}: {r.stderr.strip() or 'timed out'})", flush=True)
        return False

    with h.Hosts(3, 2) as hosts:
        for i, name in enumerate(hosts.names, 1):
            r = in_host(hosts, name, "sh", "-c", "hostname; ip -4 -br addr show eth0")
            check(r.stdout.split()[0] == name and f"10.77.0.{i}/24" in r.stdout,
                  f"{name}: its own hostname and address 10.77.0.{i}")
        check(reach(hosts, "ftrt-h1", "10.77.0.3"), "ftrt-h1 reaches ftrt-h3")
        hosts.cut("ftrt-h2")
        check(not reach(hosts, "ftrt-h1", "10.77.0.2"), "a cut host cannot be reached")
        hosts.mend("ftrt-h2")
        check(reach(hosts, "ftrt-h1", "10.77.0.2", tries=5), "a mended host can be reached again")
        opts = hosts.mpirun_opts()
        check("--hostfile" in opts and os.path.exists(opts[opts.index("--hostfile") + 1]),
              f"mpirun options with the hostfile ({' '.join(opts)})")
    check(not netns() and not netdevs(), f"no namespace or link left ({netns()} {netdevs()})")
    try:
        with h.Hosts(2, 1):
            raise RuntimeError("a failing test body")
    except RuntimeError:
        pass
    check(not netns() and not netdevs(), "nothing left after a failing body either")


@h.case(CASES, fixture="setup", timeout_s=400)
def case_reference(args):
    one_host_reference(args, 4)
    one_host_reference(args, 3)


@h.case(CASES, fixture="required")
def case_faultfree(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "faultfree", spares=1).start()
        job.wait_trainer(0, 20)
        st = job.status_json()
        check([r["host"] for r in st["ranks"]] ==
              ["ftrt-h1", "ftrt-h1", "ftrt-h2", "ftrt-h2", "ftrt-h3", "ftrt-h3"],
              "two ranks on each of the three hosts, each with its own hostname")
        agents = [r["host_agent"] for r in st["ranks"]]
        check(agents[:2] == [None, None] and agents[2] == agents[3] in (2, 3)
              and agents[4] == agents[5] in (4, 5),
              f"ftrt-h2 and ftrt-h3 each reach the coordinator through one host agent in one of "
              f"their ranks, ftrt-h1's rank (the coordinator's host) directly ({agents})")
        run_to_end(job, hosts, 0, before)
        rep = job.load_report()
        check(rep["status"] == "finished" and not rep["failures"], "finished, no failures")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_kill(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "kill", spares=1).start()
        victim = job.wait_trainer(2, 40)
        st = job.status_json()
        check(victim["host"] == "ftrt-h2" and on_host(st, 5, "ftrt-h3"),
              "the victim (logical rank 2) runs on ftrt-h2, the spare on ftrt-h3")
        job.inject(signal.SIGKILL, victim, "sigkill")
        run_to_end(job, hosts, 0, before)
        rep = job.load_report()
        print_failures(rep)
        check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"]
              and rep["failures"][0]["kind"] == "connection_lost"
              and rep["failures"][0]["spare_world_rank"] == 5,
              "one failure, connection lost, recovered by the spare on ftrt-h3")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_hostkill(args):
    r3 = need_reference(args, 3)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "hostkill", spares=2).start()
        if (h.open_mpi_major() or 0) >= 5:
            return hostkill_prrte(args, hosts, job, before, r3)
        job.wait_trainer(1, 40)
        ranks = hosts.kill_host("ftrt-h2", job)
        check(sorted(r["world_rank"] for r in ranks) == [2, 3],
              "ftrt-h2 held trainers world ranks 2 and 3")
        run_to_end(job, hosts, 0, before)
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 2 and all(f["recovered"] for f in fl)
              and {f["spare_world_rank"] for f in fl} == {4, 5},
              "two failures, both recovered by the spares on ftrt-h3")
        check(all(f["cause"] == "host_lost" and f["host"] == "ftrt-h2" and
                  f["spare_host"] == "ftrt-h3" for f in fl),
              "the report names the cause: host ftrt-h2 lost, spares from ftrt-h3")
        check(len({f["epoch"] for f in fl}) == 1 and rep["epoch"] == 1,
              "the lost host's two ranks were replaced in one epoch")
        check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")


def hostkill_prrte(args, hosts, job, before, r3):
    """hostkill under Open MPI 5: PRRTE 3.0's mpirun ends the job when it loses a daemon
    (errmgr_dvm.c: "Comm failure: daemon ... aborting"); ftrt's part is a true, bounded end and
    a relaunch without the host that resumes from the last committed checkpoint."""
    job.wait_status(lambda s: s["last_committed_step"] >= 25 and trainer(s, 1))
    hosts.kill_host("ftrt-h2", job)
    run_to_end(job, hosts, None, before)
    # PRRTE words it one of two ways (errmgr_dvm.c: "node-died" or "failed-daemon")
    check("lost communication with a remote daemon" in job.out or
          "daemon failed to report back" in job.out,
          "Open MPI 5 (PRRTE 3.0): mpirun ended the job because it lost ftrt-h2's daemon")
    relaunch_resumes(args, hosts, job, ["ftrt-h1", "ftrt-h3"], latest_step(job), r3, before,
                     spares=2)


@h.case(CASES, fixture="required")
def case_linkcut(args):
    r3 = need_reference(args, 3)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "linkcut", spares=2).start()
        job.wait_trainer(1, 40)
        ranks = hosts.cut("ftrt-h2", job)
        check(sorted(r["world_rank"] for r in ranks) == [2, 3],
              "ftrt-h2 held trainers world ranks 2 and 3")
        run_to_end(job, hosts, 0, before)
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 2 and all(f["recovered"] and f["kind"] == "heartbeat_timeout"
                                   for f in fl),
              "two failures by heartbeat timeout, both recovered")
        check(all(0.9 <= f["mttd_s"] < 2.0 for f in fl), "MTTD about the 1 s timeout")
        check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_nospare(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "nospare", spares=1).start()
        job.wait_status(lambda s: s["last_committed_step"] >= 50 and trainer(s, 0))
        hosts.kill_host("ftrt-h2", job)
        run_to_end(job, hosts, 1, before)
        rep = job.load_report()
        print_failures(rep)
        # Both trainers of ftrt-h2 die at once: the second death is folded into the first
        # recovery (no spare left: FTRT_ENOSPARE) or, when it is detected after the recovery
        # plan went out, aborts it (FTRT_EABORT).
        check(rep["status"] == "failed" and rep["error"] in ("FTRT_ENOSPARE", "FTRT_EABORT"),
              f"the report says the job failed: {rep['error']}")
        committed = rep["checkpoints"]["last_committed_step"]
        check(committed >= 50, f"a committed checkpoint remains (step {committed})")
        relaunch_resumes(args, hosts, job, ["ftrt-h1", "ftrt-h3"], committed, r4, before,
                         spares=0, np_=5)


@h.case(CASES, fixture="required")
def case_coordhost(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "coordhost", spares=1).start()
        job.wait_status(lambda s: s["last_committed_step"] >= 50 and trainer(s, 0))
        hosts.kill_host("ftrt-h1", job)
        run_to_end(job, hosts, None, before)
        rep = job.load_report()
        print_failures(rep)
        fl = {f["world_rank"]: f for f in rep["failures"]}
        check(0 in fl and fl[0]["cause"] == "coordinator_lost" and fl[0]["recovered"] and
              "standby world rank 5 took over" in job.out,
              "the standby coordinator (world rank 5, ftrt-h3) took over from world rank 0")
        term = os.stat(os.path.join(job.ckpt, "coordinator.term"))
        check(stat.S_IMODE(term.st_mode) == 0o600,
              f"the term file (it holds the job's secret) is the job user's only: "
              f"{stat.S_IMODE(term.st_mode):o}")
        check(1 in fl and not fl[1]["recovered"] and rep["status"] == "failed" and
              rep["error"] == "FTRT_ENOSPARE",
              f"trainer world rank 1 (ftrt-h1) lost with no spare left: {rep['status']} "
              f"{rep['error']}")
        relaunch_resumes(args, hosts, job, ["ftrt-h2", "ftrt-h3"], latest_step(job), r4, before,
                         spares=1)


@h.case(CASES, fixture="required")
def case_agentkill(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job, victim, other = reelect_job(args, hosts, "agentkill")
        agent = victim["world_rank"]
        job.inject(signal.SIGKILL, victim, "sigkill")
        # (its fallback lasts 200 ms at least: the status file may or may not show it; the log
        # says it below)
        st = job.wait_status(lambda s: s["ranks"][other]["host_agent"] == other
                             and s["ranks"][other]["state"] == "running", 20)
        check(st["ranks"][other]["role"] == "trainer",
              f"world rank {other}, ftrt-h2's other trainer, is served by a new host agent, in "
              f"its own process")
        check_none_direct(st)
        run_to_end(job, hosts, 0, before)
        ms = check_back_then_moved(job, other, other, "fell back, then moved to the new agent")
        print(f"  measured: the move took {ms} ms from the coordinator's MOVE to the end of the "
              f"rank's own connection", flush=True)
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 1 and fl[0]["world_rank"] == agent and fl[0]["recovered"]
              and fl[0]["kind"] == "connection_lost" and fl[0]["spare_world_rank"] == 5,
              f"one failure: world rank {agent} (the agent's process), connection lost, recovered "
              f"by the spare on ftrt-h3; world rank {other} not failed")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_agentstall(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job, victim, other = reelect_job(args, hosts, "agentstall")
        agent = victim["world_rank"]
        stop_s = 0.6 * HB_TIMEOUT_MS / 1000.0
        os.kill(victim["pid"], signal.SIGSTOP)
        t0 = time.monotonic()
        print(f"  injected SIGSTOP into world rank {agent} (pid {victim['pid']}), ftrt-h2's "
              f"host agent's process, for {stop_s:.1f} s", flush=True)
        time.sleep(max(0.0, stop_s - (time.monotonic() - t0)))
        os.kill(victim["pid"], signal.SIGCONT)
        stopped = time.monotonic() - t0
        print(f"  measured: stopped for {stopped:.3f} s", flush=True)
        check(stopped < 0.9 * HB_TIMEOUT_MS / 1000.0, f"stopped for less than the heartbeat "
              f"timeout ({stopped:.3f} s)")
        st = job.wait_status(lambda s: s["ranks"][other]["host_agent"] == agent
                             and s["ranks"][other]["state"] == "running"
                             and s["ranks"][agent]["host_agent"] == agent, 20)
        check_none_direct(st)
        run_to_end(job, hosts, 0, before)
        check_back_then_moved(job, other, agent, "left the stalled agent, then moved back to it")
        own = f"world rank {agent} (ftrt-h2) is back on its own connection" in job.out
        print(f"  measured: the agent's own trainer (world rank {agent}) "
              f"{'also fell back and moved back' if own else 'stayed with its agent'}", flush=True)
        rep = job.load_report()
        print_failures(rep)
        check(not rep["failures"], f"nothing declared failed ({len(rep['failures'])} failure(s))")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


def proc_state(pid):
    """The state letter of process pid (/proc/PID/stat: R, S, T stopped, Z zombie, ...), or
    None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


@h.case(CASES, fixture="required")
def case_agentfence(args):
    r4 = need_reference(args, 4)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "agentfence", spares=1).start()
        job.wait_trainer(1, 40)
        st = job.status_json()
        a = [r["host_agent"] for r in st["ranks"] if r["host"] == "ftrt-h2"]
        check(len(a) == 2 and a[0] == a[1] and a[0] in (2, 3),
              f"ftrt-h2's ranks (world 2, 3) share one host agent, in one of them ({a})")
        victim = st["ranks"][5 - a[0]]  # served by the agent, not in the agent's process
        check(victim["role"] == "trainer", f"world rank {victim['world_rank']} is a trainer")
        pid = victim["pid"]
        job.inject(signal.SIGSTOP, victim, "sigstop")
        deadline = time.monotonic() + 5
        while proc_state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        check(proc_state(pid) == "T", f"world rank {victim['world_rank']} (pid {pid}) is stopped")
        job.wait_status(lambda s: s["ranks"][victim["world_rank"]]["state"] == "dead", 20)
        deadline = time.monotonic() + 5
        while proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.01)
        state = proc_state(pid)
        check(state in (None, "Z") and job.proc.poll() is None,
              f"the stopped process was killed while the job still ran (state {state})")
        line = (f"host agent: fencing world rank {victim['world_rank']} (pid {pid}) with SIGKILL "
                f"through its pidfd")
        run_to_end(job, hosts, 0, before)
        check(line in job.out, f"its host agent fenced it: '{line}'")
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 1 and fl[0]["world_rank"] == victim["world_rank"] and fl[0]["recovered"]
              and fl[0]["kind"] == "heartbeat_timeout" and fl[0]["spare_world_rank"] == 5,
              f"one failure: world rank {victim['world_rank']}, heartbeat timeout, recovered by "
              f"the spare on ftrt-h3")
        check(0.9 <= fl[0]["mttd_s"] < 2.0, f"MTTD about the 1 s timeout ({fl[0]['mttd_s']:.3f} s)")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


def wait_fenced(job, w, pid, what):
    """Waits (20 s at most) until world rank w is declared failed and its process (pid) is gone
    (or a zombie); checks that this happened while the job still ran."""
    job.wait_status(lambda s: s["ranks"][w]["state"] == "dead", 20)
    deadline = time.monotonic() + 5
    while proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.01)
    state = proc_state(pid)
    check(state in (None, "Z") and job.proc.poll() is None,
          f"{what} was killed while the job still ran (state {state})")


@h.case(CASES, fixture="required", timeout_s=120)
def case_sparemove(args):
    r3 = need_reference(args, 3)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        hf = hosts.hostfile_slots(os.path.join(args.work, "sparemove.hostfile"), [2, 3, 1])
        job = hosts_job(args, hosts, "sparemove", spares=2, hostfile=hf)
        job.cmd[job.cmd.index("--step-sleep-ms") + 1] = "40"  # (the result does not change)
        job.env.update(FTRT_TEST_REELECT_MS="200", FTRT_TEST_AGENT_LATE_RANKS=str(1 << 4))
        job.start()
        job.wait_trainer(2, 5, 40)
        st = job.status_json()
        check([r["host"] for r in st["ranks"]] == ["ftrt-h1"] * 2 + ["ftrt-h2"] * 3 + ["ftrt-h3"]
              and [r["role"] for r in st["ranks"][1:]] == ["trainer"] * 3 + ["spare"] * 2,
              "trainers world 1 (ftrt-h1), 2 and 3 (ftrt-h2); spares 4 (ftrt-h2), 5 (ftrt-h3)")
        a = [r["host_agent"] for r in st["ranks"][2:5]]
        check(a[0] == a[1] == a[2] in (2, 3),
              f"ftrt-h2's ranks share one host agent, in a trainer's process ({a})")
        first, other = a[0], 5 - a[0]
        job.inject(signal.SIGKILL, st["ranks"][first], "sigkill")
        st = job.wait_status(lambda s: all(s["ranks"][w]["host_agent"] == 4
                                           and s["ranks"][w]["state"] == "running"
                                           for w in (other, 4)), 20)
        check(st["ranks"][4]["role"] == "trainer" and st["ranks"][other]["role"] == "trainer",
              f"the spare of ftrt-h2 (world rank 4) was promoted, and it and world rank {other} "
              f"are served by one new host agent, in world rank 4's process")
        victim = st["ranks"][other]
        job.inject(signal.SIGSTOP, victim, "sigstop")
        wait_fenced(job, other, victim["pid"], f"the stopped world rank {other}")
        run_to_end(job, hosts, 0, before)
        for w in (other, 4):
            check(re.search(rf"world rank {w} \(ftrt-h2\) moved to the host agent in world rank "
                            rf"4 \(", job.out), f"the coordinator's log: world rank {w} moved")
        line = (f"host agent: fencing world rank {other} (pid {victim['pid']}) with SIGKILL "
                f"through its pidfd")
        check(line in job.out, f"the new host agent fenced it: '{line}'")
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 2 and all(f["recovered"] for f in fl)
              and [(f["world_rank"], f["kind"], f["spare_world_rank"]) for f in fl] ==
              [(first, "connection_lost", 4), (other, "heartbeat_timeout", 5)],
              f"two failures: world rank {first} (connection lost, replaced by the spare of its "
              f"host, 4), then world rank {other} (heartbeat timeout, replaced by 5)")
        check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_hoststagger(args):
    r3 = need_reference(args, 3)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "hoststagger", spares=2)
        job.env.update(FTRT_TEST_ORPHAN_GRACE_MS="4000", FTRT_DEBUG_RECOVERY_DELAY_MS="2000")
        job.start()
        job.wait_trainer(1, 40)
        first, other = h2_agent(job)
        job.inject(signal.SIGKILL, first, "sigkill")
        # every survivor's REPORT in, its own among them (back on its own connection): the
        # old code's plan went out here; the plan now waits for ftrt-h2 within the grace
        st = job.wait_status(lambda s: s["epoch"] == 1 and s["reports_in_epoch"] == 1
                             and s["ranks"][other]["host_agent"] is None
                             and s["ranks"][other]["state"] != "dead", 20)
        check(st["plan_sent_epoch"] == 0, "the plan waits for ftrt-h2 within the orphan grace")
        job.inject(signal.SIGKILL, st["ranks"][other], "sigkill")
        rest = hosts.pids("ftrt-h2")  # its orted
        for pid in rest:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        print(f"  killed world rank {first['world_rank']} (host agent), then world rank "
              f"{other}, then {len(rest)} other process(es) of ftrt-h2", flush=True)
        run_to_end(job, hosts, 0, before)
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 2 and all(f["recovered"] for f in fl)
              and {f["spare_world_rank"] for f in fl} == {4, 5},
              "two failures, both recovered by the spares on ftrt-h3")
        check(len({f["epoch"] for f in fl}) == 1 and rep["epoch"] == 1,
              "the host's second death joined the recovery of its first: one epoch")
        check(all(f["cause"] == "host_lost" and f["host"] == "ftrt-h2" for f in fl),
              "the report names the cause: host ftrt-h2 lost")
        check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")


def relay_job(args, hosts, name, np_=6):
    """1 + 3 trainers + 2 spares, one rank a host in turn (ftrt-h1: world 0, 3; ftrt-h2: 1, 4;
    ftrt-h3: 2, 5), relay groups of 2 host agents, the host agents in the spares' processes.
    Started; returns (job, the status once the relay group formed, the relay's host, the
    member's host)."""
    opts = hosts.mpirun_opts()
    if "--map-by" in opts:  # (Open MPI 5's options place by slot)
        del opts[opts.index("--map-by"):opts.index("--map-by") + 2]
    job = h.train_job(os.path.join(args.work, name), args.bin, np_, spares=np_ - 4,
                      heartbeat_timeout_ms=HB_TIMEOUT_MS, mpirun_opts=opts + ["--map-by", "node"])
    job.env.update(FTRT_TEST_RELAY_GROUP="2", FTRT_TEST_AGENT_LATE_RANKS=str((1 << 1) | (1 << 2)),
                   FTRT_LOG="info")  # (the coordinator says when a member joins its relay)
    job.start()
    job.wait_trainer(1, 2, 40)

    def formed(s):
        r = s["ranks"]
        return (all(r[w]["host_agent"] in (4, 5) and r[w]["relay"] in (4, 5) for w in (1, 2, 4, 5))
                and r[4]["relay"] == r[5]["relay"])
    st = job.wait_status(formed, 20)
    r = st["ranks"]
    check([x["host"] for x in r] == (["ftrt-h1", "ftrt-h2", "ftrt-h3"] * 3)[:len(r)]
          and [x["role"] for x in r[1:]] == ["trainer"] * 3 + ["spare"] * (len(r) - 4),
          "trainers world 1 (ftrt-h2), 2 (ftrt-h3), 3 (ftrt-h1); spares 4 (ftrt-h2), 5 (ftrt-h3)")
    check(r[1]["host_agent"] == r[4]["host_agent"] == 4 and r[2]["host_agent"] == r[5]["host_agent"]
          == 5 and r[3]["host_agent"] is None and r[3]["relay"] is None,
          "ftrt-h2's and ftrt-h3's host agents live in the spares (4, 5); ftrt-h1's trainer is "
          "direct")
    relay = r[4]["relay"]
    member = 9 - relay
    check(r[1]["relay"] == r[2]["relay"] == relay,
          f"one relay group: the host agent in world rank {relay} ({r[relay]['host']}) relays the "
          f"fan-outs of its own host and of world rank {member}'s ({r[member]['host']})")
    print(f"  relay: {r[relay]['host']} (world rank {relay}); member: {r[member]['host']}",
          flush=True)
    return job, st, r[relay]["host"], r[member]["host"]


def relay_joined(job, st, relay_host, member_host):
    """Checks (once the job ended) that the coordinator logged the member's joining its relay."""
    relay, member = (next(x["world_rank"] for x in st["ranks"]
                          if x["host"] == host and x["role"] == "spare")
                     for host in (relay_host, member_host))
    line = (f"host agent of {member_host} (in world rank {member}): fan-outs through the relay "
            f"of {relay_host} (in world rank {relay})")
    check(line in job.out, f"the coordinator's log: '{line}'")


FALLBACK = "fan-outs go to it directly from now on (its relay is lost)"


@h.case(CASES, fixture="required")
def case_relaykill(args):
    r4 = need_reference(args, 4)
    with h.Hosts(4, 2) as hosts:
        before = sessions(hosts)
        hf = hosts.hostfile_slots(os.path.join(args.work, "relaykill.hostfile"), [1, 2, 2, 1])
        job = hosts_job(args, hosts, "relaykill", spares=1, hostfile=hf)
        # one relay group of the three host agents (ftrt-h2's in world rank 1, ftrt-h3's in 3)
        job.env.update(FTRT_TEST_RELAY_GROUP="3", FTRT_TEST_AGENT_LATE_RANKS=str((1 << 2) | (1 << 4)),
                       FTRT_LOG="info")  # (the coordinator says when a member joins its relay)
        job.start()
        job.wait_trainer(1, 2, 40)
        agents = {"ftrt-h2": 1, "ftrt-h3": 3, "ftrt-h4": 5}

        def formed(s):
            r = s["ranks"]
            return all(r[w]["host_agent"] == agents[r[w]["host"]] and r[w]["relay"] is not None
                       for w in range(1, 6)) and len({r[w]["relay"] for w in range(1, 6)}) == 1
        st = job.wait_status(formed, 20)
        r = st["ranks"]
        check([x["host"] for x in r] == ["ftrt-h1"] + ["ftrt-h2"] * 2 + ["ftrt-h3"] * 2 + ["ftrt-h4"]
              and [x["role"] for x in r[1:]] == ["trainer"] * 4 + ["spare"],
              "trainers world 1, 2 (ftrt-h2), 3, 4 (ftrt-h3); the spare 5 (ftrt-h4)")
        relay = r[1]["relay"]
        members = [hst for hst, a in agents.items() if a != relay]
        check(relay in agents.values(), f"one relay group: the host agent in world rank {relay} "
              f"({r[relay]['host']}) relays every fan-out to the ranks of ftrt-h2, -h3 and -h4")
        member = next(m for m in members if m != "ftrt-h4")  # (a member with two trainers)
        victim = r[agents[member] + 1]  # the trainer whose process holds no host agent
        other = agents[member]
        print(f"  relay: {r[relay]['host']} (world rank {relay}); members {members}", flush=True)
        job.inject(signal.SIGKILL, victim, "sigkill")
        st = job.wait_status(lambda s: s["epoch"] == 1 and s["job"] == "running"
                             and s["ranks"][5]["role"] == "trainer"
                             and s["ranks"][5]["state"] == "running", 20)
        check(st["ranks"][other]["relay"] == relay and st["ranks"][other]["state"] == "running",
              f"after the recovery, world rank {other} ({member}) still gets its fan-outs through "
              f"the relay in world rank {relay}")
        run_to_end(job, hosts, 0, before)
        for m in members:
            line = (f"host agent of {m} (in world rank {agents[m]}): fan-outs through the relay "
                    f"of {r[relay]['host']} (in world rank {relay})")
            check(line in job.out, f"the coordinator's log: '{line}'")
        rep = job.load_report()
        print_failures(rep)
        fl = rep["failures"]
        check(len(fl) == 1 and fl[0]["world_rank"] == victim["world_rank"] and fl[0]["recovered"]
              and fl[0]["kind"] == "connection_lost" and fl[0]["spare_world_rank"] == 5,
              f"one failure: world rank {victim['world_rank']} ({member}), connection lost, "
              f"recovered by the spare (ftrt-h4)")
        check(FALLBACK not in job.out, f"no fallback to direct fan-outs: world rank {other}, the "
              f"survivor of {member}, had its FAILURE and PLAN through the relay")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_relayhostkill(args):
    r3 = need_reference(args, 3)
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job, st, relay_host, member_host = relay_job(args, hosts, "relayhostkill")
        ranks = hosts.kill_host(relay_host, job)
        trainer_w = next(x["world_rank"] for x in ranks if x["role"] == "trainer")
        spare_w = next(x["world_rank"] for x in st["ranks"]
                       if x["host"] == member_host and x["role"] == "spare")
        run_to_end(job, hosts, 0, before)
        relay_joined(job, st, relay_host, member_host)
        rep = job.load_report()
        print_failures(rep)
        line = f"host agent of {member_host}: {FALLBACK}"
        check(line in job.out, f"the coordinator's log: '{line}'")
        fl = {f["world_rank"]: f for f in rep["failures"]}
        t = fl.get(trainer_w)
        check(t is not None and t["recovered"] and t["cause"] == "host_lost"
              and t["host"] == relay_host and t["spare_world_rank"] == spare_w,
              f"the relay host's trainer (world rank {trainer_w}) lost with {relay_host} and "
              f"replaced by the member's spare (world rank {spare_w}, {member_host})")
        check(sorted(fl) == sorted(x["world_rank"] for x in ranks) and rep["epoch"] == 1,
              f"the relay host's ranks, and only they, failed, in one epoch ({sorted(fl)})")
        check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_relayreselect(args):
    r4 = need_reference(args, 4)
    with h.Hosts(4, 2) as hosts:
        before = sessions(hosts)
        opts = hosts.mpirun_opts()
        if "--map-by" in opts:  # (Open MPI 5's options place by slot)
            del opts[opts.index("--map-by"):opts.index("--map-by") + 2]
        job = h.train_job(os.path.join(args.work, "relayreselect"), args.bin, 8, spares=3,
                          heartbeat_timeout_ms=HB_TIMEOUT_MS,
                          mpirun_opts=opts + ["--map-by", "node"])
        job.cmd[job.cmd.index("--step-sleep-ms") + 1] = "40"  # (the job outlasts both faults)
        # one relay group of the three host agents, in the spares' processes (5, 6, 7)
        job.env.update(FTRT_TEST_RELAY_GROUP="3",
                       FTRT_TEST_AGENT_LATE_RANKS=str((1 << 1) | (1 << 2) | (1 << 3)),
                       FTRT_LOG="info")  # (the coordinator says when a member joins its relay)
        job.start()
        job.wait_trainer(1, 2, 40)
        agents = (5, 6, 7)

        def one_relay(s, ws, among):
            r = s["ranks"]
            return (all(r[w]["state"] == "running" and r[w]["host_agent"] in among
                        and r[w]["relay"] in among for w in ws)
                    and len({r[w]["relay"] for w in ws}) == 1)
        st = job.wait_status(lambda s: one_relay(s, (1, 2, 3, 5, 6, 7), agents), 20)
        r = st["ranks"]
        check([x["host"] for x in r] == ["ftrt-h1", "ftrt-h2", "ftrt-h3", "ftrt-h4"] * 2
              and [x["role"] for x in r[1:]] == ["trainer"] * 4 + ["spare"] * 3
              and [x["host_agent"] for x in r[1:]] == [5, 6, 7, None, 5, 6, 7],
              "trainers world 1-3 (ftrt-h2..4) and 4 (ftrt-h1, direct); spares 5-7, the host "
              "agents of ftrt-h2..4")
        relay = r[1]["relay"]
        left = [a for a in agents if a != relay]
        print(f"  relay: {r[relay]['host']} (world rank {relay})", flush=True)
        lost = hosts.kill_host(r[relay]["host"], job)  # the relay's trainer and spare
        served = [w for w in range(1, 8) if r[w]["host_agent"] in left]
        st = job.wait_status(lambda s: s["epoch"] == 1 and s["job"] == "running"
                             and one_relay(s, served, left), 30)
        new = st["ranks"][left[0]]["relay"]
        member = next(a for a in left if a != new)
        check(new in left, f"a new relay chosen among the surviving host agents: world rank "
              f"{new} ({r[new]['host']}) relays the fan-outs of its host and of "
              f"{r[member]['host']}")
        # a later fan-out through it: the member host's trainer (no host agent in its process)
        victim = st["ranks"][member - 4]
        job.inject(signal.SIGKILL, victim, "sigkill")
        st = job.wait_status(lambda s: s["epoch"] == 2 and s["job"] == "running"
                             and s["ranks"][member]["relay"] == new
                             and all(x["state"] == "running" for x in s["ranks"][1:]
                                     if x["role"] == "trainer"), 30)
        run_to_end(job, hosts, 0, before)
        mhost, nhost = r[member]["host"], r[new]["host"]
        line = (f"host agent of {mhost} (in world rank {member}): fan-outs through the relay of "
                f"{nhost} (in world rank {new})")
        check(line in job.out, f"the coordinator's log: '{line}'")
        falls = job.out.count(f"host agent of {mhost}: {FALLBACK}")
        check(falls == 1, f"{mhost} fell back to direct fan-outs once, when its first relay was "
              f"lost, not at the second failure (its FAILURE and PLAN came through the new "
              f"relay): {falls} time(s)")
        rep = job.load_report()
        print_failures(rep)
        fl = {f["world_rank"]: f for f in rep["failures"]}
        want = sorted([x["world_rank"] for x in lost] + [victim["world_rank"]])
        trainers = [x["world_rank"] for x in lost if x["role"] == "trainer"] + [victim["world_rank"]]
        check(sorted(fl) == want and rep["epoch"] == 2 and len(trainers) == 2
              and all(fl[w]["recovered"] for w in trainers),
              f"the relay host's ranks, then world rank {victim['world_rank']} ({mhost}) failed, "
              f"in two epochs, the trainers replaced ({want})")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


def stacks_if_stuck(job, st, limit_s):
    """relaylost's diagnostics: when the job has not ended limit_s after this call, writes the
    threads' stacks of every rank still alive (gdb, where installed) and the status file into
    the job's directory (stack.<world rank>, status-stuck.json), for the cause of a hang."""
    end = time.time() + limit_s
    while time.time() < end and job.proc.poll() is None:
        time.sleep(0.2)
    if job.proc.poll() is not None or not shutil.which("gdb"):
        return
    print(f"  the job has not ended {limit_s} s on: the ranks' stacks to {job.dir}", flush=True)
    shutil.copy(job.status, os.path.join(job.dir, "status-stuck.json"))
    for x in st["ranks"]:
        if x.get("pid") and os.path.exists(f"/proc/{x['pid']}"):
            with open(os.path.join(job.dir, f"stack.{x['world_rank']}"), "w") as f:
                subprocess.call(["gdb", "-batch", "-p", str(x["pid"]), "-ex",
                                 "thread apply all bt"], stdout=f, stderr=subprocess.STDOUT,
                                timeout=60)


# Not in ctest yet (listed=False): it hung once under ASan (the relay on ftrt-h2, whose spare the
# first failure's plan had promoted: the member's trainer never reported), cause not found yet.
# Not reproduced since in 50 ASan runs (23 with the relay on ftrt-h2; the 13 whose log was kept
# all took that path: spare 4 promoted, then 6 and 5; 12 runs with the job pinned to one core),
# nor in 42 more ASan runs on 2026-11-24 (15 of them pinned to one core with taskset; at least
# 15 with the relay on ftrt-h2; 6 with the orphan grace at 20 ms or 2 s or the announcement
# taken 300 ms late: FTRT_TEST_ORPHAN_GRACE_MS, FTRT_TEST_EPOCH_DELAY_MS) and 13 RelWithDebInfo
# runs (the same 6 variations among them): about 11 s a run under ASan, 7 s without.
# Open MPI's "peer process has unexpectedly disconnected" in the member's trainer (rank 3's
# death) shows in passing runs too: it does not mark the hang. A next hang leaves the stuck
# ranks' stacks and the status file in the job's directory (stacks_if_stuck, 60 s after the
# relay host's kill).
@h.case(CASES, fixture="required", listed=False)
def case_relaylost(args):
    r3 = need_reference(args, 3)
    with h.Hosts(3, 3) as hosts:
        before = sessions(hosts)
        job, st, relay_host, member_host = relay_job(args, hosts, "relaylost", np_=7)
        ranks = hosts.kill_host(relay_host, None, sig="STOP")  # (frozen: it forwards nothing)
        job.inject(signal.SIGKILL, st["ranks"][3], "sigkill")  # ftrt-h1's trainer
        job.wait_status(lambda s: s["failure_sent_epoch"] == 1, 20)
        ranks = hosts.kill_host(relay_host, job)  # the FAILURE to the member sits in the relay
        member_t = next(x["world_rank"] for x in st["ranks"]
                        if x["host"] == member_host and x["role"] == "trainer")
        stacks_if_stuck(job, job.status_json() or st, 60)
        run_to_end(job, hosts, 0, before)
        relay_joined(job, st, relay_host, member_host)
        rep = job.load_report()
        print_failures(rep)
        line = f"host agent of {member_host}: {FALLBACK}"
        check(line in job.out, f"the coordinator's log: '{line}'")
        fl = {f["world_rank"]: f for f in rep["failures"]}
        lost_t = next(x["world_rank"] for x in ranks if x["role"] == "trainer")
        check(sorted(fl) == sorted([3] + [x["world_rank"] for x in ranks]) and rep["epoch"] == 1
              and fl[3]["recovered"] and fl[lost_t]["recovered"],
              f"trainer world rank 3 (ftrt-h1) and the relay host's ranks failed, the trainers "
              f"replaced in one epoch ({sorted(fl)}): the member's trainer (world rank "
              f"{member_t}) was caught up with the FAILURE its relay never forwarded")
        check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required")
def case_trainererror(args):
    """A trainer killed on ftrt-h2 (mpirun then never exits by itself), and logical rank 0
    fails at the end (its --params-out cannot be written; train_mlp says so with
    ftrt_set_exit_code, and its BYE carries it): the job must end failed, exit non-zero."""
    with h.Hosts(3, 2) as hosts:
        before = sessions(hosts)
        job = hosts_job(args, hosts, "trainererror", spares=1)
        i = job.cmd.index("--params-out")
        job.cmd[i + 1] = os.path.join(job.dir, "no-such-dir", "final.params")
        job.start()
        victim = job.wait_trainer(2, 40)
        job.inject(signal.SIGKILL, victim, "sigkill")
        run_to_end(job, hosts, 1, before)


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
