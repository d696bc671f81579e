"""ftrt-chaos's fault plans: read from --plan (JSON), or drawn at random (--random), and when
an entry's trigger is reached (see the usage in cli.py)."""
import json

from .common import DRAIN_KINDS, HOST_KINDS, JOIN_KINDS, KINDS, SHARDED_KINDS, now, read_json


class PlanError(Exception):
    """A plan that cannot be used: its one-line message (exit status 2)."""


def load(path):
    """The fault entries of the plan file at path; raises PlanError."""
    try:
        with open(path) as f:
            p = json.load(f)
    except OSError as e:
        raise PlanError(f"--plan {path}: {e.strerror}")
    except ValueError as e:
        raise PlanError(f"--plan {path}: not JSON ({e})")
    plan = p.get("faults") if isinstance(p, dict) else p
    if not isinstance(plan, list) or not all(isinstance(f, dict) for f in plan):
        raise PlanError(f"--plan {path}: expected {{\"faults\": [{{\"kind\": ...}}, ...]}}")
    known = KINDS + HOST_KINDS + DRAIN_KINDS + JOIN_KINDS
    bad = [f.get("kind") for f in flat(plan) if f.get("kind") not in known]
    if bad:
        raise PlanError(f"--plan {path}: unknown fault kind(s) {bad}; known: "
                        f"{', '.join(known)}")
    check_when(plan, f"--plan {path}")
    return plan


def flat(plan):
    """The entries of plan and, after each, its "then" entries (recursively)."""
    out = []
    for f in plan:
        out.append(f)
        out += flat(f.get("then", []))
    return out


# "when" of a "then" entry: the recovery stage (status file) it waits for, as a predicate
WHEN = {
    # the FAILURE of the current epoch went out, its PLAN not yet
    "failure-sent": lambda st: st.get("job") == "recovering" and
    st.get("failure_sent_epoch", 0) == st.get("epoch") > st.get("plan_sent_epoch", 0),
    # the PLAN of the current epoch went out, the members not all resumed yet
    "plan-sent": lambda st: st.get("job") == "recovering" and
    st.get("plan_sent_epoch", 0) == st.get("epoch", -1),
}


def check_when(plan, where):
    """Raises PlanError for a "when" that WHEN does not know, in plan or its "then" entries."""
    for f in plan:
        w = f.get("when")
        if w is not None and w not in WHEN:
            raise PlanError(f"{where}: unknown \"when\" {w!r}; known: {', '.join(WHEN)}")
        check_when(f.get("then", []), where)


def random_plan(a, rng):
    """--random: --max-faults entries of the --kinds (default: every kind, the sharded ones
    with --sharded only), at exponentially distributed times of mean --mtbf seconds."""
    kinds = a.kinds.split(",") if a.kinds else \
        [k for k in KINDS if a.sharded is not None or k not in SHARDED_KINDS]
    t, plan = 0.0, []
    for _ in range(a.max_faults):
        t += rng.expovariate(1.0 / a.mtbf)
        plan.append({"kind": rng.choice(kinds), "at_s": round(t, 3)})
    return plan


def trigger_ready(f, status, t_running):
    """Entry f's trigger reached: the job runs and some trainer has done at_step steps, or
    at_s seconds have passed since it runs (t_running)."""
    st = read_json(status)
    if not st or st.get("job") not in ("running",):
        return False
    if "at_step" in f:
        return max((r["steps_done"] for r in st.get("ranks", []) if r["role"] == "trainer"),
                   default=0) >= f["at_step"]
    return now() - t_running >= f.get("at_s", 0)
