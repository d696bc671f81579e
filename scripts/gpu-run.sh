#!/usr/bin/env bash
# Runs on the GPU machine, from a copy of the repository with the kit of scripts/gpu-kit.sh and
# the tree that scripts/gpu-prep.sh built here carried beside it (device `run`: command `bash
# scripts/gpu-run.sh`, carry ["gpukit", "build-gpu"], timeout_s 510; see docs/gpu.md): sources
# gpukit/env.sh, moves the prebuilt build-gpu to the copy's path and checks that every program
# and library of it loads there (the machine's CUDA runtime, the first NCCL with every function
# it was built against), configuring and building nothing; without such a tree (or where it
# does not load) it configures ftrt with CUDA (sm_90) and NCCL and builds it with every core,
# saying so. Then it runs the steps below in this order, each bounded by `timeout` and all by
# the run's budget (480 s): a failed step does not stop the next ones, and the steps the budget
# leaves out are recorded in gpu-state/steps.tsv (git-ignored, kept on the warm machine) for a
# second call, `--rest`. The exit status is 1 if any step failed or was left out.
#
# The default steps, in order: ctest-gpu (the GPU unit tests), device-gpu (device_cuda.*: the
# device-region jobs with the state in CUDA memory), chaos-kill-gpu (a trainer holding device
# state SIGKILLed through tools/ftrt-chaos), torch-ft-gpu and torch-ft-sync-gpu (FaultTolerant
# on a CUDA model, a trainer killed mid-backward; then with .item() between backward() and
# step()), torch-lm-gpu (examples/train_lm.py on CUDA under bf16 autocast, killed), snapshot-gpu
# (the stall of a checkpoint of 1 GiB of device state), torch-ft-join-gpu (the kill with a
# joined spare), torch-gpu (GradAverager's hooks on autograd's device thread), torch-amp-gpu
# (bf16 and fp16 autocast jobs killed), memcheck-device (compute-sanitizer on a train_mlp_gpu
# job), nccl-rebuild (ncclCommShrink against a re-init), overlap-1trainer and
# overlap-2trainers-1gpu (bench/overlap_gpu_bench), mpi-kit (two CPU integration tests through
# tools/ftrt-run under the kit), memcheck (compute-sanitizer on the kernel test).
# Run only when --only names them: torch-lm-ratio (train_lm.py's step time against torch's NCCL
# DDP), coord-scale (bench/coord_scale.py at 16,384 and 131,072 simulated ranks on the machine's
# cores), nsys-overlap (overlap-1trainer's trainer under Nsight Systems; "absent" without nsys),
# overlap-1trainer-cta (--cta-policy efficiency), overlap-1trainer-inplace (--in-place: no pack
# or unpack kernel), pack-gpu (bench/pack_gpu_bench: the pack and unpack kernels against
# cudaMemcpyAsync D2D).
#
# Writes under $OUT (./gpu-out when OUT is unset), four files:
#   summary.json   the machine (nvidia-smi -L, driver, versions), the tree (prebuilt or built),
#                  what NCCL was used, each step's command, exit status, status and duration,
#                  every ctest's result, the device jobs' failures (state_from, MTTD, MTTR,
#                  rework), the benches' RESULT lines and the steps left for --rest
#   run.log        every step's output, one after another
#   logs.tar.gz    each step's log apart, NCCL's debug logs, CMakeCache.txt, PREBUILT, ctest's
#                  LastTest.log
#   SUMMARY.txt    one line per step (rewritten after each step, printed at the end)
#
# Usage: bash scripts/gpu-run.sh [--kit DIR (gpukit)] [--build DIR (build-gpu)] [--arch SM (90)]
#                                [--budget SECONDS (480; 180 with --rest)] [--only STEP,... | --rest]
#   --only: run only the steps named (of either list above).
#   --rest: run only the steps that the last run on this machine left out for lack of time
#   (gpu-state/steps.tsv), in the tree that run used: the second call, on the warm machine.
# NCCL: $NCCL_HOME if set, else the CUDA toolkit's, else PyTorch's wheel (site-packages/nvidia);
# for a prebuilt tree the first of these with which all of it loads.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
# shellcheck source=scripts/gpu-lib.sh
. "$repo/scripts/gpu-lib.sh"
kit=$repo/gpukit
build=$repo/build-gpu
budget=
arch=90
only=
rest=0
state=$repo/gpu-state/steps.tsv
# The default steps, in the order they run: the CUDA correctness of issues 19, 21, 35 and 38
# first, then the benches, the CPU tests under the kit, and memcheck on the kernel test last.
all_steps=" ctest-gpu device-gpu chaos-kill-gpu torch-ft-gpu torch-ft-sync-gpu torch-lm-gpu
  snapshot-gpu torch-ft-join-gpu torch-gpu torch-amp-gpu memcheck-device nccl-rebuild
  overlap-1trainer overlap-2trainers-1gpu mpi-kit memcheck "
all_steps=${all_steps//$'\n  '/ }
# Steps run only when --only names them: more than a budget's remainder (torch-lm-ratio,
# coord-scale: CPU work that wants the GPU machine's 16 cores), or the NCCL plane's profile.
opt_steps=" torch-lm-ratio coord-scale nsys-overlap overlap-1trainer-cta overlap-1trainer-inplace
  pack-gpu "
opt_steps=${opt_steps//$'\n  '/ }
# left_steps FILE: the steps that the run recorded in FILE (gpu-state/steps.tsv) left out, in
# order: those still "planned" or "no_time" (one "started" and never ended ran, cut off).
left_steps() {
  local s
  for s in $(awk -F'\t' '!/^#/ { if (!($1 in last)) order[++n] = $1; last[$1] = $2 }
      END { for (i = 1; i <= n; i++) if (last[order[i]] ~ /^(planned|no_time)$/) print order[i] }' "$1"); do
    [[ $all_steps$opt_steps == *" $s "* ]] && printf '%s ' "$s"
  done
  return 0
}
bad() { echo "gpu-run: $* (see scripts/gpu-run.sh --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --kit|--build|--budget|--arch|--only) [ $# -ge 2 ] && [ -n "$2" ] || bad "$1 needs a value" ;;
  esac
  case $1 in
    --kit) [ -d "$2" ] || bad "--kit $2: no such directory"; kit=$(cd "$2" && pwd); shift 2 ;;
    --build) build=$(realpath -m "$2"); shift 2 ;;
    --budget) [[ $2 =~ ^[0-9]+$ ]] || bad "--budget: expected seconds, got '$2'"
              budget=$2; shift 2 ;;
    --arch) [[ $2 =~ ^[0-9]+$ ]] || bad "--arch: expected a CUDA architecture (90), got '$2'"
            arch=$2; shift 2 ;;
    --only) for x in ${2//,/ }; do
              [[ $all_steps$opt_steps == *" $x "* ]] ||
                bad "--only: no step '$x' (steps:$all_steps$opt_steps)"
            done
            only=" ${2//,/ } "; shift 2 ;;
    --rest) rest=1; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) bad "unknown argument $1" ;;
  esac
done
[ -n "$only" ] && [ $rest = 1 ] && bad "--only and --rest: one or the other"
# The steps of this run: the default ones, --only's, or those the last run left.
if [ $rest = 1 ]; then
  [ -f "$state" ] || {
    echo "gpu-run: --rest: no $state: no earlier run on this machine (a machine given back" \
      "starts bare); run bash scripts/gpu-run.sh" >&2
    exit 2
  }
  run_steps=" $(left_steps "$state")"
  run_before=$(head -1 "$state")
elif [ -n "$only" ]; then
  run_steps=$only
else
  run_steps=$all_steps
fi
[ -n "$budget" ] || { budget=480; [ $rest = 1 ] && budget=180; }
t0=$(date +%s)
deadline=$((t0 + budget))
out=${OUT:-$repo/gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
say() { echo "gpu-run: $*"; }
if [ $rest = 1 ] && [ "$run_steps" = " " ]; then
  say "--rest: nothing left by the last run (${run_before#\# })" | tee "$out/SUMMARY.txt"
  exit 0
fi
mkdir -p "$(dirname "$state")"
printf '# gpu-run.sh%s, %s, budget %s s\n' "${only:+ --only}$( [ $rest = 1 ] && echo " --rest")" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$budget" >"$state"
for s in $run_steps; do printf '%s\tplanned\n' "$s" >>"$state"; done
[ $rest = 1 ] && say "--rest: the steps that the last run (${run_before#\# }) left:$run_steps"
logs=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-run.XXXXXX")/logs
mkdir -p "$logs"
steps_tsv=$logs/steps.tsv
: >"$steps_tsv"
failed=0

# SUMMARY.txt: rewritten after every step, so that a run cut off still says how far it got.
summary_txt() {
  {
    echo "gpu-run: $1"
    awk -F'\t' '{ printf "  %-24s %-9s exit %-4s %7ss\n", $1, $3, $2, $4 }' "$steps_tsv"
  } >"$out/SUMMARY.txt"
}
record() { # NAME RC STATUS SECONDS LOG CMD: a line of steps.tsv, and the step's state
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$steps_tsv"
  printf '%s\t%s\n' "$1" "$3" >>"$state"
  summary_txt "running, $(( $(date +%s) - t0 ))s of ${budget}s so far"
}
# A step this run has no time left for: a failure, left for --rest.
no_time() {
  say "$1: skipped, the run's ${budget}s budget is spent (left for --rest)"
  n=$((n + 1))
  record "$1" -1 no_time 0 - "the budget was spent"
  failed=1
}
# sel NAME: whether this run runs step NAME (the default steps, --only's or --rest's) and has
# time left to begin it (else recorded no_time).
sel() {
  [[ $run_steps == *" $1 "* ]] || return 1
  [ $((deadline - $(date +%s) - 15)) -ge 10 ] || { no_time "$1"; return 1; }
}
# step NAME MAX_SECONDS CMD...: runs CMD under `timeout`, logging to $logs/NN-NAME.log;
# records name, rc, status (ok, failed, skipped: exit 77, timeout) and seconds.
n=0
step() {
  local name=$1 max=$2; shift 2
  local now left t s e rc status log
  local cmd="$*" # one line of steps.tsv: no tab or newline in the command's field
  cmd=${cmd//$'\t'/ }
  cmd=${cmd//$'\n'/ }
  now=$(date +%s)
  left=$((deadline - now - 15))
  [ "$left" -ge 10 ] || { no_time "$name"; return 1; }
  n=$((n + 1))
  log=$logs/$(printf '%02d' $n)-$name.log
  t=$max
  [ "$left" -lt "$t" ] && t=$left
  say "$name (at most ${t}s): $*"
  printf '%s\tstarted\n' "$name" >>"$state"
  s=$(date +%s.%N)
  {
    echo "\$ $*"
    timeout --kill-after=10 "$t" "$@"
  } >"$log" 2>&1 </dev/null
  rc=$?
  e=$(date +%s.%N)
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status=timeout; failed=1 ;;
    *) status=failed; failed=1 ;;
  esac
  local secs; secs=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }')
  record "$name" "$rc" "$status" "$secs" "$(basename "$log")" "$cmd"
  say "$name: $status (exit $rc, ${secs}s)"
  [ "$status" = ok ] || tail -n 15 "$log" | sed 's/^/    | /'
  [ $rc = 0 ]
}
# A step that could not even be tried (a missing kit, target or tool: a failure; a tool that is
# not there: absent; no usable GPU: skipped).
not_run() {
  n=$((n + 1))
  record "$1" -1 "$2" 0 - "$3"
  say "$1: $2 ($3)"
  case $2 in
    absent) ;;
    skipped) [ "${gpus:-0}" -gt 0 ] && failed=1 ;; # no usable GPU: a failure where one is listed
    *) failed=1 ;;
  esac
}

# Whether $py imports torch: asked once (each import takes seconds of device time).
torch_ok=
have_torch() {
  if [ -z "$torch_ok" ]; then
    torch_ok=no
    [ -n "$py" ] && timeout 120 "$py" -c 'import torch' >/dev/null 2>&1 && torch_ok=yes
  fi
  [ "$torch_ok" = yes ]
}
# One run of tests/python/gpu_ft_prog.py's driver (torch-ft-gpu and its variants): step NAME,
# then the driver's own options.
ft_prog_step() {
  local name=$1
  shift
  if [ ! -f "$build/libftrt_gpu.so" ]; then
    not_run "$name" not_built "$build/libftrt_gpu.so (needs NCCL)"
  elif ! have_torch; then
    not_run "$name" absent "no python3 with torch"
  else
    step "$name" 240 env FTRT_LIB="$build/libftrt_gpu.so" \
      "$py" "$repo/tests/python/gpu_ft_prog.py" --driver "$@"
  fi
}

# --- The kit -----------------------------------------------------------------------------------
if [ ! -f "$kit/env.sh" ]; then
  say "no kit at $kit: run scripts/gpu-kit.sh on the Debian machine and carry gpukit"
  not_run kit missing "$kit/env.sh not found"
else
  # shellcheck source=/dev/null
  . "$kit/env.sh"
fi

# --- CUDA and NCCL -----------------------------------------------------------------------------
nvcc='' cuda_root='' sanitizer='' nsys=''
gpu_find_cuda
py=$(command -v python3 || true)
# CMake and ninja come from pip on the GPU image: look beside python3 if they are not on PATH.
for t in cmake ninja; do
  command -v $t >/dev/null && continue
  for d in ${py:+"$(dirname "$py")"} /opt/torch/.venv/bin /usr/local/bin; do
    [ -x "$d/$t" ] && { PATH=$PATH:$d; break; }
  done
done
gpu_nccl_candidates "$py"
# The NCCL used: the first found; for a prebuilt tree, the first with which it loads (below).
nccl_inc='' nccl_lib='' nccl_from='' nccl_version=''
use_nccl() { # INDEX into the candidates
  nccl_inc=${nccl_c_inc[$1]} nccl_lib=${nccl_c_lib[$1]} nccl_from=${nccl_c_from[$1]}
  nccl_version=$(gpu_nccl_version "$nccl_inc")
}
[ ${#nccl_c_lib[@]} -gt 0 ] && use_nccl 0
say "nvcc: ${nvcc:-none}; compute-sanitizer: ${sanitizer:-none}; nsys: ${nsys:-none}; python3: ${py:-none}"
for i in "${!nccl_c_lib[@]}"; do
  say "NCCL found: $(gpu_nccl_version "${nccl_c_inc[$i]}") from ${nccl_c_from[$i]} (nccl.h in ${nccl_c_inc[$i]}, library ${nccl_c_lib[$i]})"
done
[ ${#nccl_c_lib[@]} -gt 0 ] || say "NCCL: not found"
say "mpicc: $(command -v mpicc || echo none); mpirun: $(command -v mpirun || echo none)"
# train_mlp's data set (the device jobs and mpi-kit read it): the kit's copy, DIGITS_DATA.
if [ -n "${DIGITS_DATA:-}" ] && [ -f "$DIGITS_DATA" ]; then
  say "train_mlp's data set: $DIGITS_DATA"
elif [ ! -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ]; then
  say "no digits data set for train_mlp (DIGITS_DATA='${DIGITS_DATA:-}'): a kit older than" \
      "that setting; run scripts/gpu-kit.sh again. The train_mlp jobs will fail at once."
fi
# --- The machine -------------------------------------------------------------------------------
gpus=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "os: $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null)"
  echo "kernel: $(uname -r)"
  echo "cpus: $(nproc)"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "kit: $(head -1 "$kit/README" 2>/dev/null)"
  echo "--- nvidia-smi -L"; nvidia-smi -L 2>&1
  echo "--- nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  echo "--- nvcc"; [ -n "$nvcc" ] && "$nvcc" --version 2>&1 | tail -2
  echo "--- cmake"; cmake --version 2>&1 | head -1
  echo "--- cc"; cc --version 2>&1 | head -1
  echo "--- mpirun"; mpirun --version 2>&1 | head -1
  echo "--- compute-sanitizer"; [ -n "$sanitizer" ] && "$sanitizer" --version 2>&1 | tail -1
  echo "--- torch"; [ -n "$py" ] && timeout 60 "$py" -c '
import torch
v = [torch.__version__, "cuda", str(torch.version.cuda)]
try:
    v += ["nccl", ".".join(map(str, torch.cuda.nccl.version()))]
except Exception as e:
    v += ["nccl", "unknown (%s)" % type(e).__name__]
print(" ".join(v))' 2>&1 | tail -1
} >"$logs/00-machine.log" 2>&1
gpu_list=$(nvidia-smi -L 2>/dev/null || true)
gpus=$(grep -c '^GPU ' <<<"$gpu_list" || true)
say "$gpus GPU(s)${gpu_list:+: $(head -2 <<<"$gpu_list" | paste -sd';')}"

# --- The build tree: gpu-prep.sh's, moved here and checked; else configured and built here -----
built=0
nccl_first=1 # NCCL's folder goes first on LD_LIBRARY_PATH (a prebuilt tree's choice) or last
if [ -f "$build/PREBUILT" ]; then
  m=$build/PREBUILT
  why=
  pb_s=$(date +%s.%N)
  if [ "$(gpu_manifest_get "$m" arch)" != "$arch" ]; then
    why="built for sm_$(gpu_manifest_get "$m" arch), not --arch $arch"
  elif ! moved=$(gpu_prebuilt_relocate "$build" "$repo" "$kit" "$py" 2>&1); then
    why="moving its paths failed: $moved"
  else
    [ -n "$moved" ] && sed 's/^/gpu-run: prebuilt tree: /' <<<"$moved"
    # The CUDA runtime: the toolkit's folders after the kit's (the tree's RUNPATH names
    # /usr/local/cuda's). NCCL: the first candidate with which every ELF file of the tree
    # loads; one older than the nccl.h it was built against lacks functions (ncclCommRevoke).
    for d in "$cuda_root/lib64" "$cuda_root/targets/x86_64-linux/lib"; do
      [ -n "$cuda_root" ] && [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
    done
    export LD_LIBRARY_PATH
    why="no NCCL found"
    for i in "${!nccl_c_lib[@]}"; do
      p=$(LD_LIBRARY_PATH=$(dirname "${nccl_c_lib[$i]}"):$LD_LIBRARY_PATH gpu_prebuilt_problems "$build")
      rc=$?
      if [ $rc = 2 ]; then
        say "prebuilt tree: no ldd here to check it; NCCL from ${nccl_c_from[$i]}, unchecked"
      elif [ -n "$p" ]; then
        say "prebuilt tree: does not load with NCCL $(gpu_nccl_version "${nccl_c_inc[$i]}") from ${nccl_c_from[$i]}:"
        head -5 <<<"$p" | sed 's/^/    | /'
        why="it does not load (with each NCCL found): $(head -1 <<<"$p")"
        continue
      fi
      use_nccl "$i"
      built=1
      break
    done
  fi
  pb_secs=$(awk -v a="$pb_s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  n=$((n + 1))
  if [ $built = 1 ]; then
    pb="$build of scripts/gpu-prep.sh ($(gpu_manifest_get "$m" commit), NCCL $(gpu_manifest_get "$m" nccl_version), $(gpu_manifest_get "$m" made)), run with NCCL $nccl_version from $nccl_from"
    record prebuilt 0 ok "$pb_secs" - "$pb"
    say "prebuilt: ok (its paths and libraries checked in ${pb_secs}s): $pb"
  else
    # Not a failure of the run: the steps run in the tree built here instead.
    record prebuilt -1 unusable "$pb_secs" - "$why"
    say "prebuilt: unusable ($why): configuring and building here instead"
    rm -rf "$build"
  fi
else
  say "no prebuilt tree ($build/PREBUILT: scripts/gpu-prep.sh makes it): configuring and building here"
fi
if [ -n "$nccl_lib" ]; then
  if [ $built = 1 ]; then
    LD_LIBRARY_PATH=$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    nccl_first=0
    LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$nccl_lib")
  fi
  export LD_LIBRARY_PATH
fi
say "NCCL used: ${nccl_version:-none} from ${nccl_from:-nowhere} (${nccl_lib:-no library}, $( [ $nccl_first = 1 ] && echo first || echo last) on LD_LIBRARY_PATH)"
if [ $built = 0 ]; then
  gpu_cmake_cfg "$repo" "$build" "$arch" "$nvcc" "$nccl_inc" "$nccl_lib"
  if step configure 150 "${cfg[@]}"; then
    step build 300 cmake --build "$build" -j "$(nproc)" "${keep_going[@]}" && built=1
    grep -E 'ftrt: (CUDA|NCCL)' "$logs"/*-configure.log | sed 's/^.*ftrt:/gpu-run: cmake: ftrt:/'
  else
    not_run build not_run "configure failed"
  fi
fi
if [ $built = 1 ]; then
  ldd "$build/libftrt.so" 2>/dev/null | grep -E 'libmpi|liburing|libjson' | sed 's/^[[:space:]]*/gpu-run: ldd libftrt.so: /'
  ldd "$build/libftrt_gpu.so" 2>/dev/null | grep -E 'libnccl|libcudart' | sed 's/^[[:space:]]*/gpu-run: ldd libftrt_gpu.so: /'
fi

# --- The steps, in the order of all_steps (then the --only ones) --------------------------------
# ctest steps: the GPU units (label gpu, not mpi); the device-region jobs on the GPU
# (device_cuda.*); the chaos kill of a trainer with device state (chaos_cuda.*: 4 trainers and a
# spare time-sharing the one GPU); two CPU integration tests through tools/ftrt-run under the
# kit (mpi.reference, mpi.kill: train_mlp reads the kit's DIGITS_DATA).
ct=(ctest --test-dir "$build" --output-on-failure)
tbin=$build/tests
bench=$build/bench/overlap_gpu_bench
mlp_gpu=$build/examples/train_mlp_gpu
gpulib=$build/libftrt_gpu.so
# The benches' NCCL: debug logs (INIT, NET) into files of their own; no spare.
nccl_dbg=(env FTRT_SPARES=0 NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,NET" "NCCL_DEBUG_FILE=$logs/nccl.%h.%p.log")
# Ranks sharing the one GPU: NCCL refuses two ranks on one GPU of one host, so each rank claims
# a host of its own (NCCL_HOSTID) and they talk over sockets on lo: a test arrangement.
sockets=(env NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1)
hostid=(bash -c 'export NCCL_HOSTID=ftrt-gpu-run-rank$OMPI_COMM_WORLD_RANK; exec "$@"' _)
mpi=(mpirun --oversubscribe --bind-to none)
if [ $built = 1 ]; then
  # The GPU units: kernels against the CPU reference, the device snapshot, the NCCL plane on one
  # rank (allreduce, bucketer, broadcast, reduce-scatter, all-gather, 16-bit dtypes, poster
  # threads, the agent's interrupt).
  sel ctest-gpu && step ctest-gpu 120 "${ct[@]}" -L gpu -LE mpi -V --timeout 100
  if sel device-gpu; then
    if [ ! -x "$mlp_gpu" ]; then not_run device-gpu not_built "$mlp_gpu (needs NCCL)"
    else step device-gpu 200 "${ct[@]}" -V -R '^device_cuda\.' --timeout 120
    fi
  fi
  if sel chaos-kill-gpu; then
    if [ ! -x "$mlp_gpu" ]; then not_run chaos-kill-gpu not_built "$mlp_gpu (needs NCCL)"
    else step chaos-kill-gpu 150 "${ct[@]}" -V -R '^chaos_cuda\.' --timeout 140
    fi
  fi
  # ftrt.pytorch.FaultTolerant on a CUDA model (issue 21): 1 coordinator + 2 trainers + 1 hot
  # spare on the one GPU (NCCL over sockets), twice: undisturbed, and with logical rank 1
  # SIGKILLed from an autograd hook mid-backward; gradient norms read between backward() and
  # step() equal across the trainers at every step (p.grad the mean in stream order), final
  # parameters byte-identical. Exit 77: no CUDA in torch.
  sel torch-ft-gpu && ft_prog_step torch-ft-gpu
  # The same with the host synchronized with the stream between backward() and step() (a
  # user's loss.item()): the survivor blocks in .item() on NCCL collectives that wait for the
  # dead trainer until the agent thread aborts the communicator (comm/nccl_plane.c
  # "Interrupts"); it must return, recover and end byte-identical, without hanging.
  sel torch-ft-sync-gpu && ft_prog_step torch-ft-sync-gpu --host-sync
  # The real CUDA example (issue 21): examples/train_lm.py --device cuda --amp bf16 (a GPT-style
  # character LM, about 10.7 M parameters) through FaultTolerant, tests/python/gpu_lm_prog.py:
  # 1 coordinator + 2 trainers + 1 hot spare on the one GPU (NCCL over sockets, a NCCL_HOSTID
  # per rank), undisturbed and with logical rank 1 SIGKILLed mid-backward: byte-identical,
  # MTTD, MTTR and eMFU (the datasheet's bf16 peak) in its RESULT line. Exit 77: no CUDA in torch.
  if sel torch-lm-gpu; then
    if [ ! -f "$gpulib" ]; then not_run torch-lm-gpu not_built "$gpulib (needs NCCL)"
    elif ! have_torch; then not_run torch-lm-gpu absent "no python3 with torch"
    else step torch-lm-gpu 240 env FTRT_LIB="$gpulib" \
      "$py" "$repo/tests/python/gpu_lm_prog.py" --driver --device cuda --amp bf16
    fi
  fi
  # What a checkpoint of device state blocks the trainer for (issue 38): 1 GiB of CUDA memory
  # in one REPLICATED | DEVICE region, ftrt_checkpoint()'s stall against cudaMemcpyAsync D2H of
  # the same bytes into pinned memory, in the same run (target <= 1.1x), then restored and
  # read back bit-exact (bench/dev_snapshot_bench.c; its RESULT line in the summary).
  if sel snapshot-gpu; then
    if [ ! -x "$build/bench/dev_snapshot_bench" ]; then
      not_run snapshot-gpu not_built "$build/bench/dev_snapshot_bench"
    else
      sdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-snapshot.XXXXXX")
      step snapshot-gpu 120 "${mpi[@]}" -np 2 \
        "$build/bench/dev_snapshot_bench" --dir "$sdir" --mib 1024 --reps 5
      rm -rf "$sdir"
    fi
  fi
  # The kill with a joined spare (issue 35): the job (1 coordinator + 2 trainers, no spare)
  # under ftrt-run --joinable, a process joins it through ftrt-run --join (a second mpirun on
  # the one GPU), the victim dies mid-backward and the joiner takes its logical rank: its first
  # NCCL communicator is the recovery's, the unique id broadcast over the MPI communicator
  # that connect/accept made; byte-identical, both ftrt-runs exit 0. Open MPI 4.1 only.
  sel torch-ft-join-gpu && ft_prog_step torch-ft-join-gpu --join
  # ftrt.pytorch on CUDA (issue 21): GradAverager's hooks on autograd's device thread post
  # through ftrt_gpu_bucketer_ready_from_any_thread; p.grad checked bit for bit against the
  # mean of both trainers' local gradients. 1 coordinator + 2 trainers on the one GPU, NCCL
  # over sockets (a test arrangement). Exit 77: no CUDA in torch.
  if sel torch-gpu; then
    if [ ! -f "$gpulib" ]; then not_run torch-gpu not_built "$gpulib (needs NCCL)"
    elif ! have_torch; then not_run torch-gpu absent "no python3 with torch"
    else
      tdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-torch.XXXXXX")
      step torch-gpu 150 env FTRT_LIB="$gpulib" FTRT_SPARES=0 FTRT_CKPT_DIR="$tdir" \
        "${sockets[@]}" "${mpi[@]}" -np 3 "${hostid[@]}" "$py" "$repo/tests/python/gpu_torch_prog.py"
      rm -rf "$tdir"
    fi
  fi
  # Mixed precision on CUDA (issue 21): tests/python/test_mpi_bf16.py's CUDA cases, each an
  # undisturbed job and one with a trainer SIGKILLed (1 coordinator + 2 trainers + 1 spare on
  # the one GPU, NCCL over sockets): a bfloat16-body model (ncclBfloat16, the 16-bit unpack
  # kernels) and float16 autocast with torch.cuda.amp.GradScaler; every averaged gradient the
  # exact 2-trainer mean, final parameters byte-identical. Needs pytest beside torch.
  if sel torch-amp-gpu; then
    if [ ! -f "$gpulib" ]; then
      not_run torch-amp-gpu not_built "$gpulib (needs NCCL)"
    elif [ -z "$py" ] || ! timeout 120 "$py" -c 'import torch, pytest' >/dev/null 2>&1; then
      not_run torch-amp-gpu absent "no python3 with torch and pytest"
    elif [ "$gpus" -eq 0 ]; then
      not_run torch-amp-gpu skipped "nvidia-smi lists no GPU"
    else
      step torch-amp-gpu 300 env FTRT_LIB="$gpulib" FTRT_TEST_REQUIRE_GPU=1 \
        "$py" -m pytest -q -p no:cacheprovider -rs "$repo/tests/python/test_mpi_bf16.py" -k cuda
    fi
  fi
  # 1 coordinator + 2 trainers of train_mlp_gpu --device cuda, fault-free, every rank under
  # memcheck: the CUDA device backend's copies, CRC32C kernels and pinned staging (checkpoints
  # and fingerprints every 10 steps). Without a GPU, train_mlp_gpu exits 77 at once.
  if sel memcheck-device; then
    if [ ! -x "$mlp_gpu" ]; then
      not_run memcheck-device not_built "$mlp_gpu (needs NCCL)"
    elif [ -z "$sanitizer" ]; then
      not_run memcheck-device absent "compute-sanitizer not found"
    elif "$mlp_gpu" --device cuda --check-device >"$logs/check-device.log" 2>&1; then
      mdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-memcheck.XXXXXX")
      step memcheck-device 120 env FTRT_SPARES=0 "${mpi[@]}" -np 3 \
        "$sanitizer" --tool memcheck --error-exitcode 99 --print-limit 20 \
        "$mlp_gpu" --device cuda --steps 40 --ckpt-every 10 --ckpt-dir "$mdir/ckpt"
      rm -rf "$mdir"
    else
      not_run memcheck-device skipped "no usable CUDA device: $(tail -1 "$logs/check-device.log")"
    fi
  fi
  # The survivors' communicator without the dead rank: ncclCommShrink (NCCL_SHRINK_ABORT) of the
  # old one against today's full re-init, in the same run (bench/nccl_rebuild_bench.c: 4 ranks
  # on the one GPU, a host id each, sockets on lo; a test arrangement, so only the ratio says
  # something). Exit 77 where nccl.h has no ncclCommShrink.
  if sel nccl-rebuild; then
    if [ ! -x "$build/bench/nccl_rebuild_bench" ]; then
      not_run nccl-rebuild not_built "$build/bench/nccl_rebuild_bench (needs NCCL)"
    else
      step nccl-rebuild 120 "${sockets[@]}" "${mpi[@]}" -np 4 "${hostid[@]}" \
        "$build/bench/nccl_rebuild_bench" --rounds 5
    fi
  fi
  # The overlap bench: 1 coordinator + 1 trainer (NCCL's one-rank communicator, the documented
  # single-GPU run); 1 coordinator + 2 trainers on the one GPU (a test arrangement of the
  # plane's two-trainer path, not a performance figure). Issue 21 (only when --only names
  # them): overlap-1trainer with the plane's communicator on NCCL's efficiency CTA policy (the
  # bench's --cta-policy: FTRT_NCCL_CTA_POLICY, docs/collectives.md), and with the gradients as
  # bucket views (--in-place: ftrt_bucket_config.in_place, each bucket one buffer, gradients at
  # their ftrt_bucketer_layout() offsets, reduced where they lie with no pack or unpack kernel;
  # the bench fails if a byte was packed): exposed ratios against overlap-1trainer's, same call.
  for s in overlap-1trainer overlap-2trainers-1gpu overlap-1trainer-cta overlap-1trainer-inplace; do
    sel $s || continue
    if [ ! -x "$bench" ]; then not_run $s not_built "$bench (needs NCCL)"; continue; fi
    case $s in
      overlap-1trainer) step $s 90 "${nccl_dbg[@]}" "${mpi[@]}" -np 2 "$bench" --grad-mib 400 --steps 20 ;;
      overlap-2trainers-1gpu) step $s 150 "${nccl_dbg[@]}" "${sockets[@]}" "${mpi[@]}" -np 3 \
        "${hostid[@]}" "$bench" --grad-mib 100 --steps 10 ;;
      overlap-1trainer-cta) step $s 90 "${nccl_dbg[@]}" "${mpi[@]}" -np 2 "$bench" --grad-mib 400 \
        --steps 20 --cta-policy efficiency ;;
      overlap-1trainer-inplace) step $s 90 "${nccl_dbg[@]}" "${mpi[@]}" -np 2 "$bench" --grad-mib 400 \
        --steps 20 --in-place ;;
    esac
  done
  sel mpi-kit && step mpi-kit 120 "${ct[@]}" -R '^mpi\.(reference|kill)$' --timeout 100
  if sel memcheck; then
    if [ ! -x "$tbin/test_kernels_gpu" ]; then
      not_run memcheck not_built "$tbin/test_kernels_gpu"
    elif [ -z "$sanitizer" ]; then
      not_run memcheck absent "compute-sanitizer not found"
    else
      step memcheck 150 "$sanitizer" --tool memcheck --error-exitcode 99 "$tbin/test_kernels_gpu"
    fi
  fi
  # --- Only when --only names them.
  # torch-lm-ratio: bench/torch_overhead.py --device cuda, train_lm.py through ftrt against
  # torch's NCCL DDP, alternating, medians of 3: 2 trainers on the one GPU (a time-shared test
  # arrangement, not a performance figure) and 1 trainer (the overlap comparison).
  if sel torch-lm-ratio; then
    if [ ! -f "$gpulib" ]; then not_run torch-lm-ratio not_built "$gpulib (needs NCCL)"
    elif ! have_torch; then not_run torch-lm-ratio absent "no python3 with torch"
    else
      bdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-lm-ratio.XXXXXX")
      step torch-lm-ratio 330 "$py" "$repo/bench/torch_overhead.py" --device cuda --amp bf16 \
        --python "$py" --lib "$gpulib" --reps 3 --max-seconds 290 --work "$bdir"
      rm -rf "$bdir"
    fi
  fi
  # Issue 21: the plane's pack and unpack(+scale) kernels against cudaMemcpyAsync D2D of the
  # same bytes, in one run (bench/pack_gpu_bench.c: buckets of 25 and 100 MiB of
  # transformer-shaped float32 and bfloat16 tensors, then the same with every tensor but the
  # first off 16-byte alignment; then overlap-1trainer's buckets, 4 MiB float32 tensors in
  # 25 MiB; descriptors in mapped host memory as the plane has them, and in device memory).
  # No MPI, no NCCL. Exit 77 without a usable device.
  if sel pack-gpu; then
    if [ ! -x "$build/bench/pack_gpu_bench" ]; then
      not_run pack-gpu not_built "$build/bench/pack_gpu_bench"
    else
      pack_cmd='"$0" --bucket-mib 25,100 --dtype f32,bf16 --skew-elems 0,1 --reps 50 && '
      pack_cmd+='"$0" --tensor-mib 4 --bucket-mib 25 --dtype f32 --reps 50'
      step pack-gpu 60 bash -c "$pack_cmd" "$build/bench/pack_gpu_bench"
    fi
  fi
  # Issue 21: where overlap-1trainer's allreduce time goes, before the plane is changed. The
  # same job with the trainer (world rank 1; the coordinator is world rank 0) under `nsys
  # profile --trace cuda,nvtx,osrt`, then nsys stats' kernel, CUDA API and memory-operation
  # summaries into the step's log (scripts/nsys-trainer.sh; the .nsys-rep stays in a temporary
  # directory, removed). Profiled timings are not the overlap figures.
  if sel nsys-overlap; then
    if [ ! -x "$bench" ]; then
      not_run nsys-overlap not_built "$bench (needs NCCL)"
    elif [ -z "$nsys" ]; then
      not_run nsys-overlap absent "nsys (Nsight Systems) not found"
    else
      step nsys-overlap 120 env FTRT_SPARES=0 TMPDIR="${TMPDIR:-/tmp}" \
        bash "$repo/scripts/nsys-trainer.sh" "$nsys" 1 --oversubscribe --bind-to none -np 2 -- \
        "$bench" --grad-mib 400 --steps 20
    fi
  fi
  # Issue 22's coordinator at scale on this machine's cores (no GPU involved): 16,384 and
  # 131,072 simulated ranks, 8 per host agent, relay groups on (the default at these sizes).
  if sel coord-scale; then
    step coord-scale 560 env TMPDIR="${TMPDIR:-/tmp}" python3 "$repo/bench/coord_scale.py" \
      --after "$build/bench/coord_load" --per-host 8 --hosts-only --kills 20 --silents 1 \
      --commits 3 --host-kills 1 --host-silents 1 16384 131072
  fi
else
  for s in $run_steps; do not_run "$s" not_run "no build"; done
fi
# --- What comes back ---------------------------------------------------------------------------
[ -f "$build/CMakeCache.txt" ] && cp "$build/CMakeCache.txt" "$logs/"
[ -f "$build/PREBUILT" ] && cp "$build/PREBUILT" "$logs/"
[ -f "$build/Testing/Temporary/LastTest.log" ] && cp "$build/Testing/Temporary/LastTest.log" "$logs/"
# The device jobs' reports and chaos verdicts (summary.json reads their failures).
for d in device_cuda chaos_cuda; do
  w=$build/tests/integration/$d
  [ -d "$w" ] || continue
  (cd "$w" && find . -name report.json -o -name verdict.json) | while read -r f; do
    mkdir -p "$logs/jobs/$d/$(dirname "$f")" && cp "$w/$f" "$logs/jobs/$d/$f"
  done
done
# On a machine with a GPU, a GPU test that skips is a failure of this run (the mpi-kit tests
# are CPU tests).
if [ "$gpus" -gt 0 ] && grep -qE 'Test +#[0-9]+: .*\*\*\*Skipped' \
    "$logs"/*-ctest-gpu.log "$logs"/*-device-gpu.log "$logs"/*-chaos-kill-gpu.log 2>/dev/null; then
  say "a GPU test skipped although nvidia-smi lists a GPU"
  failed=1
fi
for s in torch-gpu torch-ft-gpu torch-ft-sync-gpu torch-ft-join-gpu snapshot-gpu torch-lm-gpu \
    torch-lm-ratio pack-gpu; do
  if [ "$gpus" -gt 0 ] && awk -F'\t' -v s="$s" '$1 == s && $3 == "skipped" { f = 1 } END { exit !f }' \
      "$steps_tsv"; then
    say "$s skipped although nvidia-smi lists a GPU"
    failed=1
  fi
done
{
  for f in "$logs"/00-machine.log "$logs"/[0-9][0-9]-*.log; do
    [ -f "$f" ] || continue
    echo "=================== $(basename "$f")"
    head -c 4000000 "$f"
  done
} >"$out/run.log"
total=$(( $(date +%s) - t0 ))
# What a second call (--rest) would run: the steps this run left planned or out of time.
left=$(left_steps "$state")
tree=built
[ -f "$build/PREBUILT" ] && tree="prebuilt: $(sed '/^#/d' "$build/PREBUILT" | paste -sd';')"
if [ -n "$py" ]; then
  "$py" - "$steps_tsv" "$logs" "$out/summary.json" "$total" "$failed" "$gpus" \
    "${nccl_version:-}" "${nccl_from:-}" "${nccl_inc:-}" "${nccl_lib:-}" "$budget" "$left" \
    "$tree" <<'EOF'
import json, os, re, sys
tsv, logs, dest, total, failed, gpus, nv, nfrom, ninc, nlib, budget, left, tree = sys.argv[1:14]
steps = []
for line in open(tsv):
    name, rc, status, secs, log, cmd = line.rstrip("\n").split("\t", 5)
    steps.append({"name": name, "exit": int(rc), "status": status, "seconds": float(secs),
                  "log": log, "command": cmd})
def read(name):
    try:
        return open(os.path.join(logs, name), errors="replace").read()
    except OSError:
        return ""
machine, section = {}, None
for line in read("00-machine.log").splitlines():
    m = re.match(r"--- (.*)", line)
    if m:
        section = m.group(1); machine[section] = []
    elif section:
        machine[section].append(line)
    elif ": " in line:
        k, v = line.split(": ", 1); machine[k] = v
machine = {k: ("\n".join(v) if isinstance(v, list) else v) for k, v in machine.items()}
tests = []
for s in steps:
    if s["name"] in ("ctest-gpu", "device-gpu", "chaos-kill-gpu", "mpi-kit"):
        for m in re.finditer(r"Test +#\d+: (\S+) \.*\s*(?:\*\*\*)?(\w[\w ]*?)\s+([\d.]+) sec",
                             read(s["log"])):
            tests.append({"step": s["name"], "test": m.group(1), "result": m.group(2),
                          "seconds": float(m.group(3))})
jobs = []  # the device jobs on the GPU: outcome and, per failure, where the state came from
for root, _, files in sorted(os.walk(os.path.join(logs, "jobs"))):
    job = os.path.relpath(root, os.path.join(logs, "jobs"))
    if "report.json" in files:
        try:
            r = json.load(open(os.path.join(root, "report.json")))
        except (OSError, ValueError) as e:
            jobs.append({"job": job, "error": str(e)}); continue
        jobs.append({"job": job, "status": r.get("status"), "error": r.get("error"),
                     "steps": r.get("steps"), "wall_s": r.get("wall_s"),
                     "sdc_checks": (r.get("sdc") or {}).get("checks"),
                     "failures": [{k: f.get(k) for k in ("kind", "world_rank", "recovered",
                                   "state_from", "mttd_s", "mttr_s", "resume_step",
                                   "rework_steps")} for f in r.get("failures") or []]})
    if "verdict.json" in files:
        try:
            v = json.load(open(os.path.join(root, "verdict.json")))
            jobs.append({"job": job + " (ftrt-chaos verdict)", "ok": v.get("ok"),
                         "rows": v.get("rows")})
        except (OSError, ValueError) as e:
            jobs.append({"job": job + " (ftrt-chaos verdict)", "error": str(e)})
bench = []
for s in steps:
    if s["name"].startswith(("overlap", "torch-lm-")) or s["name"] in ("nccl-rebuild",
                                                                         "pack-gpu",
                                                                         "snapshot-gpu"):
        for line in read(s["log"]).splitlines():
            if line.startswith("RESULT "):
                r = {}  # key=value pairs; a bare word ("RESULT nccl_rebuild ...") is the bench
                for kv in line.split()[1:]:
                    k, eq, v = kv.partition("=")
                    if eq:
                        r[k] = v
                    else:
                        r.setdefault("bench", k)
                bench.append({"step": s["name"], **r})
json.dump({"ok": failed == "0", "seconds": int(total), "budget_seconds": int(budget),
           "gpus": int(gpus), "machine": machine, "tree": tree,
           "nccl": {"version": nv, "from": nfrom, "include": ninc, "library": nlib},
           "steps": steps, "left_for_rest": left.split(), "tests": tests,
           "device_jobs": jobs, "bench": bench},
          open(dest, "w"), indent=2)
EOF
else
  echo "python3 not found: no summary.json (see SUMMARY.txt)" >&2
fi
summary_txt "$( [ $failed = 0 ] && echo OK || echo FAILED ) after ${total}s, $gpus GPU(s), NCCL ${nccl_version:-none}, the tree ${tree%%:*}"
{
  if [ -n "$left" ]; then
    echo "  left for a second call: $left(bash scripts/gpu-run.sh --rest)"
  fi
  grep -h '^RESULT' "$logs"/*-overlap-*.log "$logs"/*-torch-lm-*.log "$logs"/*-nccl-rebuild.log \
    "$logs"/*-pack-gpu.log "$logs"/*-snapshot-gpu.log 2>/dev/null | sed 's/^/  /'
} >>"$out/SUMMARY.txt"
tar -czf "$out/logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"
rm -rf "$(dirname "$logs")"
cat "$out/SUMMARY.txt"
say "wrote $out/{summary.json,run.log,logs.tar.gz,SUMMARY.txt}"
exit $failed
