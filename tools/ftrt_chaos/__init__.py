"""ftrt-chaos (tools/ftrt-chaos): inject faults into an ftrt job and check that nothing was lost.

  cli.py      the command line (its usage: `tools/ftrt-chaos --help`) and main()
  plan.py     fault plans: --plan files, --random draws, triggers
  chaos.py    the run: launches and relaunches, the injection schedule, observations
  inject.py   one handler per fault kind, targets, the ground truth of each injection
  verdict.py  the verdict table: each injection judged against the report and ground truth
  hosts.py    simulated hosts (tests/hosts/ftrt-hosts) and the partition write watch
  common.py   fault kinds, the tree's tool paths, small helpers

Python 3 standard library only.
"""
