"""ftrt-run: run an ftrt job under mpirun, end it once the job is over, and exit with the job's
real outcome.

Usage: ftrt-run [--status FILE] [--summary FILE] [--exit-grace S] [--linger S] [--term-grace S]
                [--joinable] -- mpirun --enable-recovery ... ./train ...
       ftrt-run --join RUNDIR [--exit-grace S] [--term-grace S] -- mpirun -np 1 ./train ...
       ftrt-run -h | --help

Why: with `mpirun --enable-recovery` (needed so that mpirun does not tear the job down when a
rank dies), Open MPI 4.1's mpirun (measured with 4.1.4 on Debian 12)
  - exits 0 whatever its ranks' exit statuses (every rank non-zero, MPI_Abort, a process
    killed by a signal);
  - never exits at all, on more than one host, once a rank died on a host that holds two or
    more ranks: that host's orted reports one abnormal exit and never counts the dead rank as
    terminated, so its "all local ranks finished" never comes (a lost orted is ignored too).
The coordinator records the outcome in the status file, so this wrapper points
FTRT_STATUS_FILE at a known path (unless already set), runs the command and watches both.

Temporary files: each run has a directory of its own, $TMPDIR/ftrt-run.<uid>/<pid>-<random>
(the parent is created mode 0700; one that is not a directory of this user's that only this
user can write is refused, exit 2), holding the status file when --status and FTRT_STATUS_FILE
give none, FTRT_RUN_EXIT_DIR (exits/) and a file `lock` that ftrt-run and mpirun hold an
flock() on while they live. ftrt-run removes the directory when it ends; when it cannot (it
was SIGKILLed), the next ftrt-run's start removes every run directory whose lock no process
holds any more (its ftrt-run and mpirun are gone). A live run's directory is never removed,
whatever its pid: the lock, not the pid, says whether the owner lives.

The launcher: when the command is an Open MPI launcher (mpirun, mpiexec, orterun, prterun),
ftrt-run runs the one of the Open MPI that the job's program links (ldd): a bare `mpirun`
becomes <prefix>/bin/mpirun of the program's libmpi, with one line on stderr (Debian's Open MPI
4.1 and an Open MPI 5 both have a libmpi.so.40 and an mpirun, and the wrong one fails in
MPI_Init); a launcher given by its path that belongs to another Open MPI than the program's
is refused (exit 2), and so is a launcher command whose program is missing, not executable or
not on PATH (Open MPI 4.1's mpirun --enable-recovery would wait for it forever, silently).
For Open MPI 5 it adds `--with-ft ulfm` unless the command sets
--with-ft: PRRTE then keeps the job when a rank dies and the MPI library reports failures
(ULFM), which --enable-recovery alone does not do there.

The job is over when every rank is accounted for: the status file says the job ended
("finished" or "failed"), or the coordinator's process is gone (world rank 0, or the standby
coordinator that took over from it: the status file names it; a takeover within --exit-grace
is not an end), or every rank of the world
has been seen and is gone; and every rank process this host can see has exited. Rank
processes are found by a marker, FTRT_RUN_ID=<random>, that ftrt-run puts in mpirun's
environment (mpirun passes it to its ranks, and to orted daemons started on this machine). A
rank of the status file that this host cannot see (a real remote host), or one that does not
exit, is waited for --exit-grace seconds (default 10) after the job's end, and no more than
1 s when the job failed: the coordinator writes "failed" only after it gave every rank
2 s + 3 heartbeat timeouts to leave, so a rank still there is stuck (in an MPI call with a
dead peer, on a host where the coordinator cannot fence it).

Once the job is over, mpirun gets --linger seconds (default 1) to exit by itself. Then it
gets SIGTERM (it orders its daemons to exit), and so do the daemons this host can see; a
second SIGTERM min(1, term-grace/2) s later (Open MPI's "forcibly terminate": it stops waiting
for daemons it cannot reach, removes its session directory and exits; Open MPI 5's mpirun
does that at a third SIGTERM, 0.2 s after the second), and SIGKILL
--term-grace seconds (default 3) after the first. Whatever this job left behind on this host
(orted daemons, ranks: anything carrying the marker or re-parented to ftrt-run, which is a
child subreaper) is then SIGTERMed and, 0.5 s later, SIGKILLed, and the Open MPI session
directories and shared-memory files those processes had open (Open MPI 4.1:
<tmp>/ompi.<host>.<uid>/pid.N, jf.N, vader_segment.*; 5.0: <tmp>/ompi.N, prte.N, prted.N) are
removed if they are still there. mpirun's own exit status is
lost then; the status file gives the job's.

Exit status:
  - mpirun's own status when it exited by itself with a non-zero status;
  - when the status file says the job finished: 0, or the non-zero exit status of a rank
    process that exited after its ftrt_finalize() (the lowest world rank's, when several), with
    a message naming the rank. mpirun --enable-recovery does not pass it on (4.1's exits 0
    whatever its ranks' statuses), so ftrt-run names a directory of its own (exits/ of its run
    directory) in the job's FTRT_RUN_EXIT_DIR, where libftrt records a non-zero status that a
    process exits with after an ftrt_finalize() in which it took part in the job's end (an
    on_exit() handler: not for a process killed by a signal, nor for a rank declared failed);
    only the rank processes that inherit the variable from mpirun (those on this machine) are
    counted;
  - 1 otherwise (the job failed, or the status file has no final state), with a message that
    names the first ftrt ERROR line of the job, if any;
  - 2 for a bad option, value or path (--status, FTRT_STATUS_FILE or --summary under a
    regular file, --summary in a directory that does not exist, a launcher's program that
    cannot be run, $TMPDIR/ftrt-run.<uid> not this user's own directory, --joinable without
    Open MPI 4's ompi-server), with a one-line message;
  - 127 when the command cannot be run.
SIGINT/SIGTERM to ftrt-run are passed on to mpirun, which then gets --term-grace seconds before
the clean-up (exit 130/143).

--summary FILE writes JSON: exit_status, mpirun_status (null if mpirun was ended by ftrt-run),
job (final state or null), rank_exit_statuses (world rank -> the non-zero exit status its
process recorded after ftrt_finalize(): {} when none), ended_mpirun (null, "SIGTERM",
"SIGTERM x2", "SIGTERM x3" or
"SIGKILL": the last signal ftrt-run sent mpirun), leftovers_killed,
ranks_seen (world ranks whose process this host saw), mpirun_pid, and
wall-clock times (unix s) t_start, t_job_end (status file final or coordinator gone),
t_last_rank_exit (last rank process seen alive + one poll; when ranks outlived mpirun, the
end of ftrt-run's clean-up that ended them; null when none was seen),
t_mpirun_exit, t_exit.
Settings may also come from the environment: FTRT_RUN_EXIT_GRACE_S, FTRT_RUN_LINGER_S,
FTRT_RUN_TERM_GRACE_S (seconds >= 0), FTRT_RUN_SUMMARY (--summary's file: for a launch that
another script makes, such as a Slurm batch script), FTRT_RUN_JOINABLE=1 (--joinable).

Joining a running job (Open MPI 4.1 only: Open MPI 5 has no ompi-server, docs/join.md):
--joinable makes a job that new processes may join as hot spares. It needs an Open MPI 4
launcher with an `ompi-server` beside it (else exit 2, one line), starts
`ompi-server --no-daemonize --report-uri RUNDIR/ompi-server.uri` (RUNDIR: the run directory
below) with the job's environment and waits for its URI (10 s at most), adds
`--ompi-server file:RUNDIR/ompi-server.uri --mca pmix_base_exchange_timeout 3` after the
launcher's name, sets FTRT_JOINABLE=8 (unless the environment gives a count >= 1) and
FTRT_JOB_SECRET=<16 hexadecimal digits> in the job's environment, writes RUNDIR/join.json (mode
0600: format 1, the secret, the URI file, the status file, the Open MPI major version, and the
job's FTRT_* variables but FTRT_STATUS_FILE, FTRT_JOB_SECRET, FTRT_JOINABLE and FTRT_RUN_*),
and prints one line: "ftrt-run: this job can be joined: ftrt-run --join RUNDIR -- mpirun -np 1
<program and arguments>". The server is stopped (SIGTERM, SIGKILL 2 s later) once the job and
its leftovers are ended, whatever ends ftrt-run; it gets SIGTERM when ftrt-run dies, even by
SIGKILL.
--join RUNDIR runs a joiner: checks, each ending ftrt-run with one line and exit 1, that RUNDIR
is a run directory of this user's ($TMPDIR/ftrt-run.<uid>/<pid>-<random>), that its job lives
(its lock is held) and its status file does not say "finished", "failed" or "failing", that
join.json is a regular file of this user's with mode 0600, that the launcher is of the job's
Open MPI major version, and that the status file names the coordinator's control plane; then
runs the command in a run directory of its own with the job's ompi-server options after the
launcher's name and, in its environment, the job's FTRT_* variables of join.json over this
one's, FTRT_JOIN_ADDRS (the coordinator's IPv4 addresses, space-separated), FTRT_JOIN_PORT,
FTRT_JOIN_SECRET, the job's FTRT_STATUS_FILE (which a joiner writes only when it takes over as
the job's coordinator, its standby), FTRT_RUN_EXIT_DIR of its own run directory, without
FTRT_JOINABLE and FTRT_JOB_SECRET. ftrt-run exits with that
mpirun's status (a status the joiner recorded after its ftrt_finalize() when mpirun says 0), or
1 when the job ended and the joiner was still there --exit-grace seconds later (ftrt-run then
ends it: a joiner may wait in an MPI call that nothing interrupts); SIGINT and SIGTERM are
passed on as for a job, and the joiner's leftovers are ended. --status and --summary do not go
with --join (exit 2); FTRT_RUN_SUMMARY and FTRT_RUN_JOINABLE are ignored there.

mpirun's standard error passes through ftrt-run, which leaves out one line: Open MPI 4.1's
harmless PMIx notice after a rank's abnormal exit, "[host:pid] PMIX ERROR: BAD-PARAM in file
.../event/pmix_event_notification.c at line 1033" (PMIx 4.2.2 refuses the range of Open MPI's
"process aborted" event; no MCA or PMIx setting silences that line alone). Every other byte is
forwarded as it comes. Linux, Python 3 standard library only.
"""
