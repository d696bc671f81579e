"""ftrt-chaos's verdict: a table of checks (PASS/FAIL) after the last launch - the job
finished, the parameters byte-identical to the reference, every injection judged against the
job's report and the ground truth (see the usage in cli.py), nothing committed lost."""
import json
import os
from dataclasses import dataclass
from typing import Optional, Tuple

from .drain import Drains
from .join import Joins
from .common import HOST_KINDS, TRAINER_LOSS, committed_steps, latest_step, now, read_json

# kinds whose targets must each be detected as failed (judge_loss)
LOSS_KINDS = ("kill-trainer", "hang-trainer", "kill-spare", "kill-during-ckpt",
              "kill-two-trainers", "kill-beyond-spares", "kill-partners", "corrupt-replica")


# replica_miss values (docs/report-schema.md) under which the committed checkpoint is the
# state to take although the trainer's partner survived: the images of a refresh in flight are
# not kept (no_common_image, lost_image_not_held) ...
IN_REFRESH_MISSES = ("no_common_image", "lost_image_not_held")
# ... and the replicas are older than the last committed checkpoint (a commit that completed
# after the last refresh: the checkpoint is the newest usable state)
NEWER_CHECKPOINT_MISS = "older_than_checkpoint"


def no_spare_policy():
    """The job's FTRT_NO_SPARE (the environment ftrt-chaos runs it in), lower case."""
    return os.environ.get("FTRT_NO_SPARE", "stop").strip().lower()


@dataclass(frozen=True)
class StateFacts:
    """What the verdict knows of one trainer lost and recovered in place under --sharded: the
    injection's kind, K (replicas every K steps, 0: at each checkpoint), the report's failure
    (state_from, replica_miss, resume_step, rework_steps), whether its partner was lost in the
    same recovery, LATEST at the injection (None: no checkpoint directory or none committed
    yet), whether the launch's log has a replica failing its CRC32C, and, for kill-during-ckpt
    resumed at the step whose checkpoint was in flight at the kill, whether the killed
    trainer's shard of that step was in place once it was dead (inflight_shard; None
    otherwise)."""
    kind: str
    every: int
    state_from: Optional[str]
    replica_miss: Optional[str]
    resume_step: Optional[int]
    rework_steps: int
    pair_lost: bool
    latest: Optional[int]
    crc_logged: bool = False
    inflight_shard: Optional[bool] = None
    # erasure groups (--erasure): the trainers lost in the same recovery in its group
    erasure: bool = False
    group_lost: int = 0


# replica_miss values of erasure groups: a stripe short of fragments (a refresh in flight:
# no complete parity) or a survivor's image of another step; a group that lost more than 2
ERASURE_REFRESH_MISSES = ("no_common_image", "erasure_fragments_missing")
ERASURE_TOO_MANY_MISS = "erasure_group_lost_more_than_parity"


def ec_group_of(n, g, logical):
    """The erasure group of a logical rank among n trainers for FTRT_EC_GROUP = g (as
    kernels/erasure.c ftrt__ec_group_of): max(1, n // g) groups, at least ceil(n / 32)."""
    ng = max(1, n // g, -(-n // 32))
    return logical % ng


def checkpoint_facts(x: StateFacts) -> Tuple[Optional[int], bool, str]:
    """What both judges need: the rework bound K + 1 (None at K = 0), whether the state came
    from an acceptable checkpoint (the last commit at the injection or a newer one, never an
    older one; with the killed trainer's shard in place when it is the step that was in flight
    at a kill-during-ckpt), and the note on LATEST."""
    resume = x.resume_step
    bound = x.every + 1 if x.every > 0 else None
    from_ckpt = x.state_from == "checkpoint" and resume is not None
    ckpt_ok = from_ckpt and (x.latest is None or (resume is not None and resume >= x.latest)) \
        and x.inflight_shard is not False
    latest = f"LATEST at the injection: step {x.latest}"
    if x.inflight_shard is not None:
        latest += (f"; step {resume} was in flight at the kill, the killed trainer's shard "
                   + ("in place at its death" if x.inflight_shard else
                      "NOT in place at its death: committed without it"))
    return bound, ckpt_ok, latest


def judge_erasure_state(x: StateFacts) -> Tuple[str, bool, str]:
    """As judge_sharded_state, with erasure groups: rebuilt from the group (state_from
    "erasure") with rework <= K + 1 while the group lost at most 2; the committed checkpoint
    (no older than LATEST at the injection) when the group lost 3 or more, when it is newer
    than the parity, or when the failure struck during a refresh (the steps done at the failure
    a multiple of K)."""
    k, miss, resume, rework = x.every, x.replica_miss, x.resume_step, x.rework_steps
    bound, ckpt_ok, latest = checkpoint_facts(x)
    if x.group_lost > 2:
        ok = ckpt_ok and miss in (ERASURE_TOO_MANY_MISS, NEWER_CHECKPOINT_MISS)
        return (f"from the checkpoint ({x.group_lost} lost in its group)", ok, latest)
    title = "rebuilt from its erasure group" + (f" (rework <= {bound})" if bound else "") + \
        ", or the checkpoint when newer or struck during a refresh"
    if x.state_from == "erasure":
        return title, bound is None or rework <= bound, f"{x.group_lost} lost in its group"
    if miss == NEWER_CHECKPOINT_MISS:
        ok = ckpt_ok and (bound is None or rework <= bound)
        return title, ok, f"the committed checkpoint is newer than the parity; {latest}"
    before = (resume or 0) + rework
    ok = ckpt_ok and k > 0 and before % k == 0 and miss in ERASURE_REFRESH_MISSES
    return title, ok, (f"struck at step {before}, a refresh (every {k}): its parity was in "
                       f"flight; {latest}" if ok else latest)


def judge_sharded_state(x: StateFacts) -> Tuple[str, bool, str]:
    """The verdict on where a recovered trainer's sharded state came from: the row's title,
    whether it passed, and a note for its detail. The newest usable state is accepted, with no
    more rework than that state gives:

    - the partner replica (its partner survived): rework <= K + 1 steps (K > 0);
    - the committed checkpoint, always resumed at a step no older than LATEST at the injection
      (no more rework than the last commit gives) and, if it is the step whose checkpoint was
      in flight at a kill-during-ckpt, with the killed trainer's shard of it in place at its
      death (else that step was committed without it), when (a) it is newer than the replicas
      (replica_miss older_than_checkpoint: a commit that completed after the last refresh;
      with K > 0 rework <= K + 1 too, since the replica would have given that much), (b) the
      failure struck during a refresh, whose images are not kept (the steps done at the
      failure, resume step + rework, a multiple of K; no_common_image or
      lost_image_not_held), (c) the partner was lost too (lost_image_not_held or
      older_than_checkpoint), or (d) corrupt-replica: the held images were corrupted
      (lost_image_not_held or older_than_checkpoint, and "fails its CRC32C" logged)."""
    k, miss, resume, rework = x.every, x.replica_miss, x.resume_step, x.rework_steps
    bound, ckpt_ok, latest = checkpoint_facts(x)
    if x.kind == "corrupt-replica":
        ok = ckpt_ok and miss in ("lost_image_not_held", NEWER_CHECKPOINT_MISS) and \
            x.crc_logged
        return ("from the checkpoint (its replica corrupted)", ok,
                latest + ("; the CRC32C failure logged" if x.crc_logged
                          else "; no CRC32C failure logged"))
    if x.pair_lost:
        ok = ckpt_ok and miss in ("lost_image_not_held", NEWER_CHECKPOINT_MISS)
        return "from the checkpoint (its partner lost too)", ok, latest
    title = "from the partner replica" + (f" (rework <= {bound})" if bound else "") + \
        ", or the checkpoint when newer or struck during a refresh"
    if x.state_from == "replica":
        return title, bound is None or rework <= bound, ""
    if miss == NEWER_CHECKPOINT_MISS:
        ok = ckpt_ok and (bound is None or rework <= bound)
        return title, ok, f"the committed checkpoint is newer than the replica; {latest}"
    before = (resume or 0) + rework  # the most steps done at the failure
    ok = ckpt_ok and k > 0 and before % k == 0 and miss in IN_REFRESH_MISSES
    return title, ok, (f"struck at step {before}, a refresh (every {k}): that image was in "
                       f"flight; {latest}" if ok else latest)



class Verdict:
    """Mixin of Chaos (chaos.py): needs self.a, injections, launches, hosts, ckpt, work,
    commit_history, status, report, fault_log, hb_timeout_s."""

    def verdict(self, rc):
        rows, ok = [], True

        def check(name, passed, detail=""):
            nonlocal ok
            ok = ok and passed
            rows.append((name, "PASS" if passed else "FAIL", detail))

        check("job finished", rc == 0,
              f"{len(self.launches)} launch(es), last exit {rc}")
        if self.a.reference and self.a.params:
            same = os.path.exists(self.a.params) and open(self.a.params, "rb").read() == \
                open(self.a.reference, "rb").read()
            last = self.launch_report(len(self.launches) - 1) or {}
            if last.get("shrinks"):  # FTRT_NO_SPARE=shrink skipped data: other bytes, by design
                check("parameters differ from the reference (a shrink skipped data)",
                      not same and os.path.exists(self.a.params), self.a.params)
            else:
                check("parameters byte-identical to the reference", same, self.a.params)
        for inj in self.injections:
            self.judge(inj, check)
        if self.hosts:
            for i, ln in enumerate(self.launches):
                took = ln.get("exit_after_last_rank_s")
                sm = ln.get("summary") or {}
                check(f"launch{i}: exit within {self.a.exit_bound_s:g} s of the last rank's exit",
                      took is not None and took <= self.a.exit_bound_s,
                      f"{took:.2f} s; mpirun " + (f"ended by ftrt-run ({sm.get('ended_mpirun')})"
                                                  if sm.get("ended_mpirun") else "exited by itself")
                      if took is not None else "no ftrt-run summary")
                check(f"launch{i}: nothing left in the hosts", not ln.get("leftovers"),
                      f"{ln.get('leftovers')}" if ln.get("leftovers") else "")
        if self.ckpt:
            self.check_commits(check)
        print("\nftrt-chaos verdict")
        w = max(len(r[0]) for r in rows)
        for name, res, detail in rows:
            print(f"  {name:<{w}}  {res}  {detail}")
        print(f"  {'overall':<{w}}  {'PASS' if ok else 'FAIL'}", flush=True)
        if self.a.json:
            with open(self.a.json, "w") as f:
                json.dump({"ok": ok, "rows": rows, "injections": self.injections,
                           "launches": self.launches}, f, indent=1)
        return 0 if ok else 1

    def launch_report(self, i):
        if i < len(self.launches) and self.launches[i]["report"]:
            return read_json(self.launches[i]["report"])
        return None

    def launch_log(self, i):
        if i < len(self.launches):
            with open(self.launches[i]["log"], errors="replace") as f:
                return f.read()
        return ""

    def judge(self, inj, check):
        """The rows of one injection, by its kind."""
        kind, li = inj["kind"], inj["launch"]
        name = f"{kind} @launch{li}"
        if "skipped" in inj:
            check(name + " injected", False, inj["skipped"])
            return
        rep = self.launch_report(li) or {}
        fails = rep.get("failures", [])
        by_pid = {f["pid"]: f for f in fails}
        coord_end = not rep and any(
            j["kind"] in ("kill-coordinator", "hang-coordinator") and j["launch"] == li and
            j["time"] > inj["time"] for j in self.injections)
        if kind in LOSS_KINDS and coord_end:
            # the launch ended with its coordinator (no standby left): no report to judge by
            check(name + " not judged", li + 1 < len(self.launches),
                  "the launch ended with its coordinator, without a report; relaunched")
        elif kind in LOSS_KINDS:
            self.judge_loss(inj, check, name, fails, by_pid)
        elif kind in HOST_KINDS:
            self.judge_host(inj, check, name, rep, by_pid)
        elif kind == "flip-bit":
            self.judge_flip(inj, rep, fails, name, check)
        elif kind in JUDGES:
            JUDGES[kind](self, inj, check, name, rep, by_pid)

    def judge_loss(self, inj, check, name, fails, by_pid):
        """Killed or frozen ranks: each detected (with the reported and the true MTTD, MTTR);
        under --sharded also where each recovered trainer's state came from."""
        for t in inj["targets"]:
            f = by_pid.get(t["pid"])
            if f is None:
                check(name + f" detected (w{t['world_rank']})", False, "not in the report")
                continue
            check(name + f" detected (w{t['world_rank']})", True, self.loss_detail(inj, t, f))
            self.measure_loss(inj, t, f)
        if self.a.sharded is not None and inj["kind"] in TRAINER_LOSS:
            self.judge_state(inj, fails, by_pid, name, check)
        if inj["kind"] == "kill-beyond-spares":
            self.judge_no_spare(inj, check, name, [by_pid.get(t["pid"]) for t in inj["targets"]])

    def judge_no_spare(self, inj, check, name, fs):
        """More trainers lost at once than spares were left (kill-beyond-spares), by the
        no-spare policy of the job's environment (FTRT_NO_SPARE; docs/detection-and-recovery.md
        "No spare left"): `stop` ends the launch with FTRT_ENOSPARE and a relaunch resumes;
        `shrink` and `fold` recover every loss in place, the spares taking as many as they
        can and the rest shrunk or folded, with no relaunch."""
        policy = no_spare_policy()
        li, spares = inj["launch"], inj.get("spares", 0)
        rep = self.launch_report(li) or {}
        if policy not in ("shrink", "fold"):
            check(name + ": FTRT_NO_SPARE=stop ended the launch, relaunched",
                  rep.get("error") == "FTRT_ENOSPARE" and li + 1 < len(self.launches),
                  f"launch{li} {rep.get('status')} ({rep.get('error')}), "
                  f"{len(self.launches)} launch(es)")
            return
        got = [f for f in fs if f]
        spared = sum(1 for f in got if f.get("spare_world_rank") is not None)
        removed = sum(1 for f in got if f.get("shrunk") or
                      f.get("folded_onto_world_rank") is not None)
        count = rep.get("shrinks" if policy == "shrink" else "folds", 0)
        check(name + f": FTRT_NO_SPARE={policy} recovered every loss in place",
              len(got) == len(fs) and all(f.get("recovered") for f in got)
              and spared == spares and removed == len(fs) - spares and count == removed
              and li + 1 == len(self.launches),
              f"{len(fs)} lost, {spared} to spares, {removed} {policy}, report {policy}s "
              f"{count}, {len(self.launches)} launch(es)")

    def loss_detail(self, inj, t, f):
        true_mttd = f["detected_at"] - inj["time"]
        seen = t.get("seen_failed")
        obs = f", seen failed after {(seen - inj['time']) * 1e3:.1f} ms" if seen else ""
        det = (f"{f['kind']}: MTTD reported {f['mttd_s'] * 1e3:.1f} ms "
               f"({f['mttd_source']}), ground truth {true_mttd * 1e3:.1f} ms{obs}")
        if f.get("recovered"):
            det += f", MTTR {f['mttr_s'] * 1e3:.1f} ms"
            if inj.get("seen_resumed") and seen:
                det += f" (seen {(inj['seen_resumed'] - seen) * 1e3:.1f} ms)"
        elif f.get("role") == "trainer":
            det += ", not recovered (job-level restart)"
        if self.hosts:
            det += f"; on {t.get('host')}" + (
                f", spare w{f['spare_world_rank']} on {f.get('spare_host')}"
                if f.get("recovered") and f.get("spare_world_rank", -1) >= 0 else "")
        return det

    def measure_loss(self, inj, t, f):
        seen = t.get("seen_failed")
        inj.setdefault("measured", []).append(
            {"mttd_s": f["mttd_s"], "true_mttd_s": f["detected_at"] - inj["time"],
             "mttr_s": f.get("mttr_s"), "detect_kind": f["kind"],
             "recovered": f.get("recovered"), "cause": f.get("cause"),
             "observed_mttd_s": (seen - inj["time"]) if seen else None,
             "observed_mttr_s": (inj["seen_resumed"] - seen)
             if seen and inj.get("seen_resumed") else None,
             "detected_at": f["detected_at"], "injected_at": inj["time"],
             "failed_written": t.get("failed_written"),
             "resumed_written": inj.get("resumed_written"),
             "state_from": f.get("state_from"), "replica_miss": f.get("replica_miss"),
             "resume_step": f.get("resume_step"), "rework_steps": f.get("rework_steps")})

    def judge_pause(self, inj, check, name, rep, by_pid):
        hit = [t for t in inj["targets"] if t["pid"] in by_pid]
        check(name + " not declared failed", not hit and bool(rep),
              f"paused {inj.get('pause_ms')} ms")

    def judge_takeover(self, inj, check, name, rep, by_pid, want_kind, bound=None,
                       whole=True):
        """A standby coordinator took over in place: the report's coordinator_lost failure
        (the killed or frozen coordinator's pid), recovered, its MTTD and MTTR, and (whole)
        the launch exiting 0 without a relaunch. Returns False when the report has no
        takeover."""
        f = next((by_pid[t["pid"]] for t in inj["targets"] if t["pid"] in by_pid and
                  by_pid[t["pid"]].get("cause") == "coordinator_lost"), None)
        if f is None:
            return False
        li = inj["launch"]
        rc = self.launches[li]["rc"] if li < len(self.launches) else None
        true_mttd = f["detected_at"] - inj["time"]
        if bound is None:
            bound = self.hb_timeout_s + 0.5 if want_kind == "heartbeat_timeout" else \
                self.a.kill_mttd_s
        ok = f.get("recovered") and f["kind"] == want_kind and true_mttd <= bound and \
            f["mttr_s"] <= 1.0 and (not whole or (rc == 0 and li + 1 == len(self.launches)))
        check(name + ": standby took over in place", bool(ok),
              f"{f['kind']}: MTTD {true_mttd * 1e3:.1f} ms (ground truth; bound "
              f"{bound * 1e3:.0f} ms), MTTR {(f.get('mttr_s') or 0) * 1e3:.1f} ms (bound 1000 ms), "
              f"launch exit {rc}, {len(self.launches)} launch(es)")
        inj.setdefault("measured", []).append(
            {"mttd_s": f["mttd_s"], "true_mttd_s": true_mttd, "mttr_s": f.get("mttr_s"),
             "detect_kind": f["kind"], "cause": "coordinator_lost",
             "recovered": f.get("recovered"), "observed_mttd_s": None, "observed_mttr_s": None})
        if li + 1 == len(self.launches):  # the status file is the last launch's
            self.judge_new_coordinator(check, name, rep, f["world_rank"])
        return True

    def judge_new_coordinator(self, check, name, rep, old_w):
        """After a takeover, the report and the final status file both name the coordinator that
        wrote them (world rank, host, pid, term; the same in both): not world rank old_w, whose
        status entry is dead, while the new one's is the coordinator."""
        st = read_json(self.status) or {}
        co, cs = rep.get("coordinator") or {}, st.get("coordinator") or {}
        ranks = {r["world_rank"]: r for r in st.get("ranks", [])}
        me, old = ranks.get(co.get("world_rank"), {}), ranks.get(old_w, {})
        ok = co and co == cs and co.get("world_rank") != old_w and co.get("term", 0) >= 1 and \
            me.get("role") == me.get("state") == "coordinator" and me.get("pid") == co["pid"] \
            and me.get("host") == co["host"] and old.get("state") == "dead"
        check(name + ": report and status file name the new coordinator", bool(ok),
              f"report {co}, status file {cs}; world rank {old_w}: {old.get('role')} "
              f"{old.get('state')}")

    def judge_hang_coordinator(self, inj, check, name, rep, by_pid):
        if self.judge_takeover(inj, check, name, rep, by_pid, "heartbeat_timeout"):
            left = inj.get("resumed_left_s")
            check(name + ": the frozen coordinator, resumed, gave up by itself and wrote "
                  "nothing", left is not None and bool(inj.get("status_after_resume")),
                  (f"left {left:.2f} s after SIGCONT" if left is not None else "still there 5 s "
                   "after SIGCONT") + f"; status file names coordinator(s) "
                  f"{inj.get('status_after_resume')}")
            return
        left = inj.get("others_left_s")
        check(name + ": every other rank left", left is not None and
              left < self.a.coord_exit_s,
              f"all left {left:.2f} s after the freeze" if left is not None else "some stayed")

    def judge_kill_coordinator(self, inj, check, name, rep, by_pid):
        if self.judge_takeover(inj, check, name, rep, by_pid, "connection_lost"):
            return
        li = inj["launch"]
        end = self.launches[li]["t_end"] if li < len(self.launches) else now()
        took = end - inj["time"]
        check(name + ": no standby; every rank left promptly", took < self.a.coord_exit_s,
              f"job ended {took:.2f} s after the kill")

    def judge_damaged_shard(self, inj, check, name, rep, by_pid):
        """Detected when a later restore refused the damaged step and fell back."""
        li = inj["launch"]
        later = "".join(self.launch_log(i) for i in range(li + 1, len(self.launches)))
        step = inj.get("step")
        seen = f"checkpoint step {step} is not usable" in later
        relaunched = li + 1 < len(self.launches)
        check(name + " detected at restore", seen or not relaunched,
              "restore fell back" if seen else
              ("no restore after it (latent)" if not relaunched else "restore used it"))

    def judge_enospc(self, inj, check, name, rep, by_pid):
        failed = (rep.get("checkpoints") or {}).get("failed", 0)
        check(name + ": checkpoint failed cleanly, training went on", failed >= 1 and
              self.launches[inj["launch"]]["rc"] == 0, f"{failed} checkpoint(s) failed")

    def judge_state(self, inj, fails, by_pid, name, check):
        """--sharded: where each trainer recovered in place took its state from, judged by
        judge_sharded_state() on the report's facts (state_from, replica_miss, resume_step,
        rework_steps), the partner layout and LATEST at the injection, and whether the launch's
        log has a replica's CRC32C failure."""
        k, lay = self.a.sharded, inj.get("partners") or {}
        n, s = lay.get("n", 0), lay.get("shift", 1)
        crc = "fails its CRC32C" in self.launch_log(inj["launch"]) \
            if inj["kind"] == "corrupt-replica" else False
        for t in inj["targets"]:
            f = by_pid.get(t["pid"])
            if f is None or t.get("role") != "trainer" or not f.get("recovered") or n < 2:
                continue  # not in the report (already a failing row), or a job-level restart
            lost = {g["logical_rank"] for g in fails if g.get("epoch") == f.get("epoch") and
                    g.get("role") == "trainer" and g.get("recovered")}
            holder = (f["logical_rank"] + s) % n
            shard = (inj.get("shard_at_death") or {}).get(str(f["logical_rank"]))
            inflight = inj.get("inflight") or ""
            at_inflight = inflight[5:].isdigit() and int(inflight[5:]) == f.get("resume_step") \
                and f.get("state_from") == "checkpoint"
            g = getattr(self.a, "erasure", None)
            grp = [x for x in lost if g and ec_group_of(n, g, x) ==
                   ec_group_of(n, g, f["logical_rank"])]
            facts = StateFacts(kind=inj["kind"], every=k or 0, state_from=f.get("state_from"),
                               replica_miss=f.get("replica_miss"),
                               resume_step=f.get("resume_step"),
                               rework_steps=f.get("rework_steps") or 0,
                               pair_lost=any((x + s) % n in lost for x in lost),
                               latest=lay.get("latest"), crc_logged=crc,
                               inflight_shard=shard if at_inflight else None,
                               erasure=g is not None, group_lost=len(grp))
            title, passed, note = (judge_erasure_state if g else judge_sharded_state)(facts)
            where = f"group {ec_group_of(n, g, f['logical_rank'])}" if g else f"holder l{holder}"
            det = (f"l{f['logical_rank']} ({where}, lost in epoch {f.get('epoch')}: "
                   f"{sorted(lost)}): state from {facts.state_from}"
                   + (f" ({facts.replica_miss})" if facts.replica_miss else "")
                   + f", resumed at step {facts.resume_step}, rework {facts.rework_steps} "
                   f"step(s)" + (f"; {note}" if note else ""))
            check(name + f" w{t['world_rank']}: state " + title, passed, det)

    def judge_flip(self, inj, rep, fails, name, check):
        """flip-bit: detected as silent_data_corruption within FTRT_SDC_EVERY steps of the
        flip (steps counted by the trainer itself); with 3+ trainers a majority names the
        flipped rank, which is fenced and replaced; with 2 no rank is named and every member
        rolls back to a verified checkpoint."""
        t = inj["targets"][0]
        k = (rep.get("sdc") or {}).get("every")
        majority = rep.get("trainers", 0) >= 3
        sdc = [f for f in fails if f["kind"] == "silent_data_corruption"]
        f = next((f for f in sdc if f["world_rank"] == t["world_rank"]), None) if majority \
            else (sdc[0] if sdc else None)
        if f is None:
            check(name + " detected", False,
                  f"no silent_data_corruption{' naming w%d' % t['world_rank'] if majority else ''}"
                  f" in the report ({len(sdc)} such failure(s))")
            return
        d = f["sdc"]
        late = d["step_detected"] - inj["step"]
        check(name + f" detected within FTRT_SDC_EVERY={k} steps",
              k is not None and 0 <= late <= k,
              f"bit {inj['bit']} at byte {inj['offset']} ({inj['before']:.6g} -> "
              f"{inj['after']:.6g}) at step {inj['step']}, detected at step {d['step_detected']}; "
              f"MTTD {f['mttd_s'] * 1e3:.1f} ms ({f['mttd_source']})")
        mttr = f" MTTR {f['mttr_s'] * 1e3:.1f} ms," if f.get("recovered") else ""
        back = (f" every member reloaded checkpoint step {d['rollback_checkpoint_step']}"
                f" ({d.get('uncommitted_checkpoints', 0)} later one(s) un-committed)"
                if d.get("rollback_checkpoint_step") is not None else " no verified checkpoint")
        if majority:
            check(name + f" names the corrupted rank (w{t['world_rank']})",
                  d["majority"] and f["world_rank"] == t["world_rank"],
                  f"majority of {rep.get('trainers')}")
            check(name + " rank fenced and replaced", f.get("recovered") and
                  f.get("spare_world_rank") is not None,
                  f"hot spare w{f.get('spare_world_rank')},{mttr}{back}")
        else:
            check(name + " rolled back, no rank fenced", f["world_rank"] is None and
                  f.get("recovered") and d.get("rollback_checkpoint_step") is not None,
                  f"{rep.get('trainers')} replicas, no majority:{mttr}{back}")
        inj.setdefault("measured", []).append(
            {"mttd_s": f["mttd_s"], "true_mttd_s": f["detected_at"] - inj["time"],
             "mttr_s": f.get("mttr_s"), "detect_kind": f["kind"], "recovered": f.get("recovered"),
             "detect_steps": late, "observed_mttd_s": None, "observed_mttr_s": None})
    def judge_host(self, inj, check, name, rep, by_pid):
        """The rows of kill-host and partition-host (see the usage in cli.py)."""
        kind, li, host = inj["kind"], inj["launch"], inj["host"]
        name = f"{kind} {host} @launch{li}"
        launch = self.launches[li] if li < len(self.launches) else {}
        if inj["coordinator_host"]:
            if not self.judge_coordinator_host_takeover(inj, check, name, rep, by_pid):
                self.judge_coordinator_host(inj, check, name)
            return
        self.judge_host_detection(inj, check, name, by_pid)
        trainers = [t for t in inj["targets"] if t["role"] == "trainer"]
        if not trainers:
            check(name + ": no trainer on it; the job went on in the same launch",
                  launch.get("rc") == 0 and li + 1 == len(self.launches),
                  f"exit {launch.get('rc')}, {len(self.launches)} launch(es)")
        elif inj["covered"]:
            fl = [by_pid.get(t["pid"]) for t in trainers]
            ok = bool(fl) and None not in fl and all(
                f.get("recovered") and f.get("spare_host") not in (None, host) for f in fl) and \
                len({f.get("epoch") for f in fl}) == 1 and launch.get("rc") == 0
            det = ", ".join(f"w{f['world_rank']} -> w{f.get('spare_world_rank')} on "
                            f"{f.get('spare_host')}" for f in fl if f) + \
                f"; epoch(s) {sorted({f.get('epoch') for f in fl if f})}"
            check(name + f": its {len(trainers)} trainer(s) replaced by spares on other hosts "
                  f"in one epoch", ok, det)
            if self.a.sharded is not None:  # where their sharded state came from
                self.judge_state(inj, rep.get("failures") or [], by_pid, name, check)
        elif no_spare_policy() in ("shrink", "fold"):
            self.judge_in_place(check, name, [by_pid.get(t["pid"]) for t in trainers],
                                inj["spares_elsewhere"], host, launch, li)
        else:
            ok = launch.get("rc", 0) != 0 and rep.get("status") == "failed" and \
                rep.get("error") in ("FTRT_ENOSPARE", "FTRT_EABORT")
            check(name + f": {len(trainers)} trainer(s), {inj['spares_elsewhere']} spare(s) "
                  f"elsewhere: clean failure", ok,
                  f"exit {launch.get('rc')}, report {rep.get('status')} {rep.get('error')}")
            self.check_resume(li, check, name, host)
        if kind == "partition-host":
            self.judge_partition(inj, check, name, launch)

    def judge_in_place(self, check, name, fl, spares, host, launch, li):
        """A host's trainers lost with fewer spares elsewhere (`spares`) under FTRT_NO_SPARE
        shrink or fold: every one recovered in the same launch (exit 0), min(len, spares) by
        spares on other hosts, the rest shrunk or folded."""
        policy = no_spare_policy()
        got = [f for f in fl if f]
        spared = [f for f in got if f.get("spare_world_rank") is not None]
        removed = [f for f in got if f.get("shrunk") or f.get("folded_onto_world_rank") is not None]
        ok = len(got) == len(fl) and all(f.get("recovered") for f in got) and \
            len(spared) == min(len(fl), spares) and len(removed) == len(fl) - len(spared) and \
            all(f.get("spare_host") != host for f in spared) and launch.get("rc") == 0 and \
            li + 1 == len(self.launches)
        check(name + f" {len(fl)} trainer(s), {spares} spare(s) elsewhere: recovered in place "
              f"under FTRT_NO_SPARE={policy}", ok,
              f"{len(spared)} to spares, {len(removed)} {policy}; exit {launch.get('rc')}, "
              f"{len(self.launches)} launch(es)")

    def judge_coordinator_host_takeover(self, inj, check, name, rep, by_pid):
        """The coordinator's host killed or cut, with a standby coordinator on another host: it
        took over in place (the takeover's incident: connection_lost for a kill, heartbeat_timeout
        for a cut; MTTR <= 1 s), the host's trainers were each detected (cause host_lost) and
        replaced by spares on other hosts in one epoch, in the same launch, exit 0; a cut
        host's side gave up by itself and wrote nothing that counts. False when the report has
        no takeover (no standby: the old path)."""
        coord = [t for t in inj["targets"] if t["role"] == "coordinator"]
        f = next((by_pid.get(t["pid"]) for t in coord if t["pid"] in by_pid), None)
        if f is None or f.get("cause") != "coordinator_lost":
            return False
        cut = inj["kind"] == "partition-host"
        want = "heartbeat_timeout" if cut else "connection_lost"
        li, host = inj["launch"], inj["host"]
        launch = self.launches[li] if li < len(self.launches) else {}
        trainers = [t for t in inj["targets"] if t["role"] == "trainer"]
        # the standby was one of the spares elsewhere: the others can replace the host's trainers
        covered = len(trainers) <= inj["spares_elsewhere"] - 1
        self.judge_takeover(inj, check, name, rep, by_pid, want,
                            bound=self.hb_timeout_s + self.a.partition_margin_s if cut else None,
                            whole=covered)
        # a trainer of the coordinator's host is known lost when it does not come back to the
        # standby within the heartbeat timeout (it may be alive and reconnecting)
        bound = self.hb_timeout_s * (2 if cut else 1) + self.a.partition_margin_s
        fl = [by_pid.get(t["pid"]) for t in trainers]
        for t, g in zip(trainers, fl):
            if not covered and g is None and li + 1 < len(self.launches):
                continue  # the job may have ended (no spare) before declaring it
            true_mttd = g["detected_at"] - inj["time"] if g else None
            ok = g is not None and g.get("cause") == "host_lost" and g.get("host") == host and \
                true_mttd <= bound
            mttr = f"{g['mttr_s'] * 1e3:.1f} ms" if g and g.get("recovered") else "none (not " \
                "recovered)"
            check(name + f" detected (w{t['world_rank']})", ok,
                  f"trainer: {g['kind']}, cause {g.get('cause')}, MTTD {true_mttd * 1e3:.1f} ms "
                  f"(ground truth; bound {bound * 1e3:.0f} ms), MTTR {mttr}" if g
                  else "not in the report")
            if g:
                inj.setdefault("measured", []).append(
                    {"mttd_s": g["mttd_s"], "true_mttd_s": true_mttd, "mttr_s": g.get("mttr_s"),
                     "detect_kind": g["kind"], "cause": g.get("cause"),
                     "recovered": g.get("recovered"), "role": "trainer", "host": host,
                     "spare_host": g.get("spare_host"), "epoch": g.get("epoch")})
        if covered:
            ok = None not in fl and all(g.get("recovered") and g.get("spare_host") not in
                                        (None, host) for g in fl) and \
                len({g.get("epoch") for g in fl}) <= 1 and launch.get("rc") == 0 and \
                li + 1 == len(self.launches)
            check(name + f": the standby took over and the host's {len(trainers)} trainer(s) "
                  f"were replaced in the same launch", ok,
                  ", ".join(f"w{g['world_rank']} -> w{g.get('spare_world_rank')} on "
                            f"{g.get('spare_host')}" for g in fl if g) +
                  f"; exit {launch.get('rc')}, {len(self.launches)} launch(es)")
        elif no_spare_policy() in ("shrink", "fold"):
            self.judge_in_place(check, name + ": the standby took over;", fl,
                                inj["spares_elsewhere"] - 1, host, launch, li)
        else:
            rep = self.launch_report(li) or {}
            ok = launch.get("rc", 0) != 0 and rep.get("status") == "failed" and \
                rep.get("error") in ("FTRT_ENOSPARE", "FTRT_EABORT")
            check(name + f": the standby took over; {len(trainers)} trainer(s), "
                  f"{inj['spares_elsewhere'] - 1} spare(s) elsewhere besides it: clean failure",
                  ok, f"exit {launch.get('rc')}, report {rep.get('status')} {rep.get('error')}")
            self.check_resume(li, check, name, host)
        if cut:
            self.judge_partition(inj, check, name, launch, takeover=True)
        return True

    def judge_coordinator_host(self, inj, check, name):
        """No report: the coordinator is gone; every other rank must leave by itself, and the
        relaunch without the host resume."""
        ex = [w.get("exited_at") for w in inj.get("watch", []) if w.get("host") != inj["host"]]
        took = max(x - inj["time"] for x in ex) if ex and None not in ex else None
        check(name + ": the coordinator's host; every other rank left",
              took is not None and took < self.a.coord_exit_s,
              f"{len(ex)} rank(s) left within {took:.2f} s (bound {self.a.coord_exit_s} s)"
              if took is not None else "some stayed until the launch was ended")
        self.check_resume(inj["launch"], check, name, inj["host"])

    def judge_host_detection(self, inj, check, name, by_pid):
        """Each rank of the host detected as lost with the host (connection_lost for a kill,
        heartbeat_timeout for a cut), within the bound."""
        cut, host = inj["kind"] == "partition-host", inj["host"]
        want = "heartbeat_timeout" if cut else "connection_lost"
        bound = self.hb_timeout_s + self.a.partition_margin_s if cut else self.a.kill_mttd_s
        mttds = []
        for t in inj["targets"]:
            f = by_pid.get(t["pid"])
            if f is None:
                check(name + f" detected (w{t['world_rank']})", False, "not in the report")
                continue
            true_mttd = f["detected_at"] - inj["time"]
            mttds.append(true_mttd)
            ok = f["kind"] == want and f.get("cause") == "host_lost" and f.get("host") == host
            det = (f"{t['role']}: {f['kind']}, cause {f.get('cause')}, host {f.get('host')}; MTTD "
                   f"{true_mttd * 1e3:.1f} ms (ground truth; reported {f['mttd_s'] * 1e3:.1f} ms, "
                   f"{f['mttd_source']})")
            if f.get("recovered"):
                det += (f", MTTR {f['mttr_s'] * 1e3:.1f} ms, spare w{f['spare_world_rank']} on "
                        f"{f.get('spare_host')}")
            check(name + f" detected (w{t['world_rank']})", ok, det)
            inj.setdefault("measured", []).append(
                {"mttd_s": f["mttd_s"], "true_mttd_s": true_mttd, "mttr_s": f.get("mttr_s"),
                 "detect_kind": f["kind"], "cause": f.get("cause"), "recovered": f.get("recovered"),
                 "role": t["role"], "host": host, "spare_host": f.get("spare_host"),
                 "epoch": f.get("epoch")})
        check(name + " MTTD within bound", bool(mttds) and max(mttds) <= bound,
              f"worst {max(mttds) * 1e3:.1f} ms, bound {bound * 1e3:.0f} ms" if mttds else
              "nothing detected")

    def judge_partition(self, inj, check, name, launch, takeover=False):
        limit = self.hb_timeout_s + self.a.partition_exit_s
        sm = launch.get("summary") or {}
        end = sm.get("t_mpirun_exit") or launch.get("t_end") or now()  # ftrt-run's kills: after
        ex = [(w["world_rank"], w.get("exited_at")) for w in inj.get("watch", [])
              if w.get("host") == inj["host"]]
        ok = bool(ex) and all(x is not None and x - inj["time"] <= limit and x <= end
                              for _, x in ex)
        check(name + ": the partitioned ranks gave up by themselves", ok,
              ", ".join(f"w{w} left {x - inj['time']:.2f} s after the cut" if x is not None
                        else f"w{w} never left" for w, x in ex) + f" (bound {limit:.1f} s)")
        if "writes_after_cut" not in inj:
            check(name + ": the partitioned side wrote nothing that counts", True,
                  f"not checked: write watch {inj.get('write_watch', 'missing')}")
            return
        committed = set(committed_steps(self.ckpt)) if self.ckpt else set()
        committed |= {s for t, s in self.commit_history if t >= inj["time"]}
        special = [p for p in (self.status, self.report, self.a.params, self.fault_log) if p]
        # the cut-off coordinator's host: the status file may still have been written there
        # between the cut and the standby's takeover (it was the coordinator then); after it,
        # nothing (cut_side_after_takeover)
        late = set(inj.get("cut_side_after_takeover", [])) if takeover else None
        bad = []
        if takeover and not inj.get("takeover_seen"):
            bad.append("no write of coordinator.term by the standby seen")
        for path, pid in inj["writes_after_cut"]:
            base = os.path.basename(path)
            is_special = any(path == p or path.startswith(p + ".tmp.") for p in special)
            if (is_special and (late is None or (path, pid) in late or
                                not path.startswith(self.status))) or \
                    base.startswith(("MANIFEST", "LATEST", "coordinator.term")):
                bad.append(f"{path} (pid {pid})")
            elif self.ckpt and path.startswith(self.ckpt + "/step-"):
                step = path[len(self.ckpt) + 6:].split("/")[0]
                if step.isdigit() and int(step) in committed:
                    bad.append(f"{path} (pid {pid}, step committed)")
        n = len(inj["writes_after_cut"])
        check(name + ": the partitioned side wrote nothing that counts",
              not bad and not inj.get("write_watch_overflow"),
              ("; ".join(bad) if bad else f"{n} file(s) written after the cut, none committed"
               + (": " + ", ".join(sorted({os.path.relpath(p, self.work) if p.startswith(
                   self.work) else p for p, _ in inj["writes_after_cut"]}))[:200] if n else ""))
              + (" (fanotify queue overflowed)" if inj.get("write_watch_overflow") else ""))
        if takeover:
            w = inj.get("special_writers_after_takeover", {})
            ws = set(w.get("status", [])) | set(w.get("report", []))
            hp = set(inj.get("host_pids", []))
            early = sorted({pid for p, pid in inj["writes_after_cut"] if p == self.status})
            check(name + ": after the takeover, status file and report written by the new "
                  "coordinator only", len(ws) == 1 and not ws & hp,
                  f"writers after the takeover: status {w.get('status')}, report "
                  f"{w.get('report')}; the cut side wrote the status file after the cut but "
                  f"before the takeover: {'pid ' + str(early) if early else 'no'}")
            return
        cpid = inj.get("coordinator_pid")
        w = inj.get("special_writers", {})
        ws = set(w.get("status", [])) | set(w.get("report", []))
        check(name + ": status file and report written by the coordinator only",
              ws <= {cpid} and not set(w.get("params", [])) & set(inj.get("host_pids", [])),
              f"writers since the cut: status {w.get('status')}, report {w.get('report')} "
              f"(coordinator pid {cpid})")

    def check_resume(self, li, check, name, host):
        """The relaunch after launch li ran without `host` and resumed from launch li's last
        committed step."""
        if li + 1 >= len(self.launches):
            check(name + ": relaunched without the host", False, "no relaunch (--relaunch?)")
            return
        k = self.launches[li].get("latest")
        nxt = self.launches[li + 1]
        log = self.launch_log(li + 1)
        without = host not in nxt.get("hosts", [])
        ok = without and (f"resumed at step {k}\n" in log if k is not None
                          else "resumed at step" not in log)
        check(name + f": relaunch without {host} resumed at step {k if k is not None else 0}",
              ok, f"launch{li + 1} on {', '.join(nxt.get('hosts', []))}, exit {nxt['rc']}")

    def check_commits(self, check):
        steps = committed_steps(self.ckpt)
        latest = latest_step(self.ckpt)
        good = latest is not None and latest in steps
        if good:
            d = os.path.join(self.ckpt, f"step-{latest}")
            man = read_json(os.path.join(d, "MANIFEST")) or {}
            for s in man.get("shards", []):
                p = os.path.join(d, s["file"])
                good = good and os.path.exists(p) and os.path.getsize(p) == s["bytes"]
        check("LATEST names a complete committed checkpoint", good, f"LATEST step {latest}")
        # Within a launch LATEST never goes back, except to fall back from a damaged step or
        # after silent data corruption (checkpoints taken after the last agreement of the
        # replicas are un-committed on purpose).
        regress = [(a, b) for (_, a), (_, b) in zip(self.commit_history, self.commit_history[1:])
                   if b < a]
        damaged = any(i["kind"] in ("corrupt-shard", "truncate-shard", "flip-bit")
                      for i in self.injections)
        check("no committed step lost", not regress or damaged,
              f"LATEST history {[s for _, s in self.commit_history][:12]}")


JUDGES = {"pause-trainer": Verdict.judge_pause,
          "drain-rank": Drains.judge_drain, "sigterm-rank": Drains.judge_drain,
          "drain-host": Drains.judge_drain, "join-spare": Joins.judge_join,
          "hang-coordinator": Verdict.judge_hang_coordinator,
          "kill-coordinator": Verdict.judge_kill_coordinator,
          "corrupt-shard": Verdict.judge_damaged_shard,
          "truncate-shard": Verdict.judge_damaged_shard,
          "enospc": Verdict.judge_enospc}
