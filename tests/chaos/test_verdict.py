"""ftrt-chaos's verdict on where a trainer recovered in place took its sharded state from
(tools/ftrt_chaos/verdict.py, Verdict.judge_state), on the facts recorded by real runs and on
variations of them that must fail. Pure Python: no libftrt, no MPI (ctest unit.chaos_verdict).

The first case is run 5 of `bench/chaos_campaign.py --runs 16 --seed 40417 --sharded 3`
(kill-during-ckpt): logical rank 3 SIGKILLed while the checkpoint of step 125 was being
written, LATEST at the injection step 100. Its shard had been written and acknowledged: the
coordinator committed step 125 with all 4 shards (no checkpoint abandoned) before its plan,
whose replicas were of step 123, older than the commit (replica_miss older_than_checkpoint);
every member reloaded step 125, rework 0, the parameters byte-identical to the reference. The
verdict before had accepted only the replica or a refresh in flight, and failed that run."""
import argparse
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools"))
sys.dont_write_bytecode = True
from ftrt_chaos.verdict import Verdict  # noqa: E402

CRC_LINE = ("ftrt[w2] ERROR replica.c:387: partner replica: the image of logical rank 0, "
            "step 48, fails its CRC32C (memory corrupted since it arrived); not offered\n")


class Recorded(Verdict):
    """A Verdict over recorded facts: --sharded K and the launch's log, nothing else."""

    def __init__(self, sharded: int, log: str = "", erasure: Optional[int] = None) -> None:
        self.a = argparse.Namespace(sharded=sharded, erasure=erasure)
        self.log = log

    def launch_log(self, i: int) -> str:
        """The launch's log (one launch here)."""
        return self.log


def failure(world: int, logical: int, state_from: str, miss: Optional[str], resume: int,
            rework: int, epoch: int = 1) -> Dict[str, Any]:
    """A report's failure entry (docs/report-schema.md), the fields the verdict reads."""
    return {"world_rank": world, "logical_rank": logical, "pid": 1000 + world,
            "kind": "connection_lost", "role": "trainer", "recovered": True, "epoch": epoch,
            "resume_step": resume, "rework_steps": rework, "state_from": state_from,
            "replica_miss": miss}


def judge(kind: str, fails: List[Dict[str, Any]], targets: List[int], latest: Optional[int],
          extra: Dict[str, Any], k: int = 3, log: str = "",
          erasure: Optional[int] = None) -> List[Tuple[str, bool, str]]:
    """The state rows of one injection of `kind` whose targets are the failures of world ranks
    `targets`, 4 trainers, partners at shift 1, LATEST `latest` at the injection, and `extra`
    (what the injector recorded besides: kill-during-ckpt's inflight, shard_at_death)."""
    inj: Dict[str, Any] = {"kind": kind, "launch": 0,
           "targets": [{"pid": f["pid"], "world_rank": f["world_rank"], "role": "trainer",
                        "logical_rank": f["logical_rank"]}
                       for f in fails if f["world_rank"] in targets],
           "partners": {"n": 4, "shift": 1, "latest": latest}, **extra}
    rows: List[Tuple[str, bool, str]] = []

    def check(name: str, passed: bool, detail: str = "") -> None:
        rows.append((name, passed, detail))

    Recorded(k, log, erasure).judge_state(inj, fails, {f["pid"]: f for f in fails}, f"{kind} @launch0",
                                 check)
    return rows


RUN5 = [failure(4, 3, "checkpoint", "older_than_checkpoint", 125, 0)]
# (id, kind, failures, target world ranks, LATEST at the injection, CRC line logged, passes[,
# the injection's other records])
CASES: List[Tuple[Any, ...]] = [
    # recorded: seed 40417 run 5, the checkpoint of step 125 newer than the replicas of 123
    ("run5-kill-during-ckpt-newer-checkpoint", "kill-during-ckpt", RUN5, [4], 100, False, True,
     {"inflight": "step-125"}),
    # the same with the ground truth of the killed trainer's shard (ftrt-chaos records it now):
    # in place at its death, as the commit needs; not in place: step 125 committed without it
    ("run5-killed-shard-in-place", "kill-during-ckpt", RUN5, [4], 100, False, True,
     {"inflight": "step-125", "shard_at_death": {"3": True}}),
    ("run5-killed-shard-missing", "kill-during-ckpt", RUN5, [4], 100, False, False,
     {"inflight": "step-125", "shard_at_death": {"3": False}}),
    ("run5-killed-trainer-not-seen-dead", "kill-during-ckpt", RUN5, [4], 100, False, True,
     {"inflight": "step-125", "shard_at_death": {"3": None}}),
    # the shard of an in-flight step that is not the one resumed at: not judged by it
    ("shard-missing-of-another-step", "kill-during-ckpt",
     [failure(4, 3, "checkpoint", "older_than_checkpoint", 125, 1)], [4], 125, False, True,
     {"inflight": "step-150", "shard_at_death": {"3": False}}),
    # recorded: seed 40417 run 14 (corrupt-replica): the corrupted replicas of step 48, the
    # checkpoint of step 50 committed before the plan
    ("run14-corrupt-replica-newer-checkpoint", "corrupt-replica",
     [failure(1, 0, "checkpoint", "older_than_checkpoint", 50, 0)], [1], 50, True, True),
    # more rework than a checkpoint newer than the replica can give (at most K + 1 = 4)
    ("newer-checkpoint-too-much-rework", "kill-during-ckpt",
     [failure(4, 3, "checkpoint", "older_than_checkpoint", 125, 5)], [4], 100, False, False),
    # a checkpoint older than LATEST at the injection: not the newest usable state
    ("newer-checkpoint-older-than-latest", "kill-during-ckpt",
     [failure(4, 3, "checkpoint", "older_than_checkpoint", 75, 2)], [4], 100, False, False),
    # the partner replica: rework <= K + 1
    ("replica", "kill-trainer", [failure(2, 1, "replica", None, 120, 4)], [2], 100, False, True),
    ("replica-too-much-rework", "kill-trainer", [failure(2, 1, "replica", None, 120, 5)], [2],
     100, False, False),
    # struck during a refresh (123 steps done, K = 3): the checkpoint of LATEST
    ("refresh-in-flight", "kill-trainer",
     [failure(2, 1, "checkpoint", "no_common_image", 100, 23)], [2], 100, False, True),
    ("not-in-a-refresh", "kill-trainer",
     [failure(2, 1, "checkpoint", "no_common_image", 100, 24)], [2], 100, False, False),
    ("refresh-in-flight-older-than-latest", "kill-during-ckpt",
     [failure(2, 1, "checkpoint", "no_common_image", 75, 48)], [2], 100, False, False),
    # the partner lost too: the checkpoint, lost_image_not_held or (newer) older_than_checkpoint
    ("partners-lost", "kill-partners",
     [failure(2, 1, "checkpoint", "lost_image_not_held", 100, 11),
      failure(3, 2, "checkpoint", "lost_image_not_held", 100, 11)], [2, 3], 100, False, True),
    ("partners-lost-newer-checkpoint", "kill-partners",
     [failure(2, 1, "checkpoint", "older_than_checkpoint", 125, 1),
      failure(3, 2, "checkpoint", "older_than_checkpoint", 125, 1)], [2, 3], 125, False, True),
    ("partners-lost-older-than-latest", "kill-partners",
     [failure(2, 1, "checkpoint", "older_than_checkpoint", 100, 26),
      failure(3, 2, "checkpoint", "older_than_checkpoint", 100, 26)], [2, 3], 125, False, False),
    # corrupt-replica without the CRC32C failure in the log
    ("corrupt-replica-no-crc-logged", "corrupt-replica",
     [failure(1, 0, "checkpoint", "older_than_checkpoint", 50, 0)], [1], 50, False, False),
]


@pytest.mark.parametrize("kind,fails,targets,latest,crc,passes,extra",
                         [c[1:] + (() if len(c) == 8 else ({},)) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_state_row(kind: str, fails: List[Dict[str, Any]], targets: List[int],
                   latest: Optional[int], crc: bool, passes: bool,
                   extra: Dict[str, Any]) -> None:
    """Each lost trainer's state row passes or fails as the case says."""
    rows = judge(kind, fails, targets, latest, extra, log=CRC_LINE if crc else "")
    assert len(rows) == len(targets), rows
    for r in rows:
        print(r)
        assert r[1] == passes, r


# Erasure groups (--erasure 4: one group of the 4 trainers, 2 parity): (id, kind, failures,
# target world ranks, LATEST at the injection, passes)
ERASURE_CASES: List[Tuple[Any, ...]] = [
    # two lost at once, rebuilt from the group: rework <= K + 1
    ("pair-rebuilt", "kill-partners",
     [failure(2, 1, "erasure", None, 120, 2), failure(3, 2, "erasure", None, 120, 2)],
     [2, 3], 100, True),
    ("pair-rebuilt-too-much-rework", "kill-two-trainers",
     [failure(2, 1, "erasure", None, 120, 5), failure(4, 3, "erasure", None, 120, 5)],
     [2, 4], 100, False),
    # two lost and the checkpoint without a reason that allows it: a missed rebuild
    ("pair-not-rebuilt", "kill-partners",
     [failure(2, 1, "checkpoint", "lost_image_not_held", 100, 22),
      failure(3, 2, "checkpoint", "lost_image_not_held", 100, 22)], [2, 3], 100, False),
    # three lost in the group: the checkpoint, with the reason
    ("three-lost", "kill-beyond-spares",
     [failure(1, 0, "checkpoint", "erasure_group_lost_more_than_parity", 100, 22),
      failure(2, 1, "checkpoint", "erasure_group_lost_more_than_parity", 100, 22),
      failure(3, 2, "checkpoint", "erasure_group_lost_more_than_parity", 100, 22)],
     [1, 2, 3], 100, True),
    # struck during a refresh (123 done, K = 3): no complete parity, the checkpoint
    ("refresh-in-flight", "kill-two-trainers",
     [failure(2, 1, "checkpoint", "erasure_fragments_missing", 100, 23),
      failure(4, 3, "checkpoint", "erasure_fragments_missing", 100, 23)], [2, 4], 100, True),
    ("fragments-missing-not-in-a-refresh", "kill-trainer",
     [failure(2, 1, "checkpoint", "erasure_fragments_missing", 100, 24)], [2], 100, False),
]


@pytest.mark.parametrize("kind,fails,targets,latest,passes", [c[1:] for c in ERASURE_CASES],
                         ids=[c[0] for c in ERASURE_CASES])
def test_erasure_state_row(kind: str, fails: List[Dict[str, Any]], targets: List[int],
                           latest: Optional[int], passes: bool) -> None:
    """Each lost trainer's state row under --erasure 4 passes or fails as the case says."""
    rows = judge(kind, fails, targets, latest, {}, erasure=4)
    assert len(rows) == len(targets), rows
    for r in rows:
        print(r)
        assert r[1] == passes, r
