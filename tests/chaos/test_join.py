"""ftrt-chaos's join-spare commands (tools/ftrt_chaos/join.py): the job's command put under
`ftrt-run --joinable`, and the joiner's mpirun made from the job's launched command (-np 1, a
one-host hostfile on simulated hosts, no hostfile and no rsh agent beside them). Pure Python:
no libftrt, no MPI (ctest unit.chaos_verdict)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools"))
sys.dont_write_bytecode = True
from ftrt_chaos.join import joinable_cmd, joiner_mpirun, plan_joins  # noqa: E402

JOB = ["/usr/bin/mpirun", "--enable-recovery", "--oversubscribe", "--mca",
       "mpi_yield_when_idle", "1", "-np", "6", "./train_mlp", "--steps", "200", "-n", "3"]
HOSTS = ["--hostfile", "/run/h/hostfile", "--mca", "plm_rsh_agent", "/x/rsh-agent", "--mca",
         "plm_rsh_no_tree_spawn", "1", "--mca", "btl", "tcp,self"]


def test_plan_joins_sees_then_entries():
    assert plan_joins([{"kind": "kill-trainer", "then": [{"kind": "join-spare"}]}])
    assert not plan_joins([{"kind": "kill-trainer", "then": [{"kind": "kill-spare"}]}])


def test_joinable_cmd_wraps_or_adds_the_option():
    wrapped = joinable_cmd(JOB)
    assert wrapped[1].endswith("ftrt-run") and wrapped[2:4] == ["--joinable", "--"]
    assert wrapped[4:] == JOB
    under = ["python3", "/t/ftrt-run", "--summary", "s.json", "--"] + JOB
    assert joinable_cmd(under) == ["python3", "/t/ftrt-run", "--joinable", "--summary",
                                   "s.json", "--"] + JOB
    already = ["python3", "/t/ftrt-run", "--joinable", "--"] + JOB
    assert joinable_cmd(already) == already


def test_joiner_mpirun_one_process_same_program():
    mp = joiner_mpirun(["python3", "/t/ftrt-run", "--joinable", "--"] + JOB)
    assert mp == ["/usr/bin/mpirun", "--enable-recovery", "--oversubscribe", "--mca",
                  "mpi_yield_when_idle", "1", "-np", "1", "./train_mlp", "--steps", "200",
                  "-n", "3"]  # (the program's own -n stays)


def test_joiner_mpirun_on_one_simulated_host():
    job = [JOB[0]] + HOSTS + JOB[1:]
    mp = joiner_mpirun(job, "/w/joiner0.hostfile")
    assert mp[mp.index("--hostfile") + 1] == "/w/joiner0.hostfile"
    assert "/run/h/hostfile" not in mp and "plm_rsh_agent" in mp
    head = joiner_mpirun(job, "")  # beside the hosts: no hostfile, no rsh agent
    assert "--hostfile" not in head and not any(x.startswith("plm_rsh") for x in head)
    assert head[head.index("btl") + 1] == "tcp,self" and head[-5:] == JOB[-5:]


def test_joiner_mpirun_without_mpirun():
    assert joiner_mpirun(["srun", "./train_mlp"]) is None
