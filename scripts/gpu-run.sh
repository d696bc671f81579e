#!/usr/bin/env bash
# Runs on the GPU machine, from a copy of the repository with the kit of scripts/gpu-kit.sh
# carried beside it (device `run`: command `bash scripts/gpu-run.sh`, carry ["gpukit"]; see
# docs/gpu.md): sources gpukit/env.sh, configures ftrt with CUDA (sm_90) and NCCL, builds it
# with every core, and runs the GPU unit tests, compute-sanitizer's memcheck on the kernel test
# and on a train_mlp_gpu job with its state in CUDA memory, the device-region jobs on the GPU
# (device_cuda.*: checkpoint, relaunch, spare, partner replica), a chaos kill of a trainer
# holding device state (chaos_cuda.kill-trainer-device: 4 trainers and a spare on the one GPU),
# ftrt.pytorch's GradAverager on a CUDA model (tests/python/gpu_torch_prog.py: hooks on
# autograd's device thread, 2 trainers sharing the one GPU), FaultTolerant killed (also with a
# joined spare), the stall of a device-state checkpoint (bench/dev_snapshot_bench), two MPI
# integration tests through tools/ftrt-run under the kit, and bench/overlap_gpu_bench
# under mpirun (one trainer; then two trainers sharing the one GPU, a test arrangement). Every
# step is bounded by `timeout` and by the run's budget; a failed step does not stop the next
# ones; the exit status is 1 if any step failed.
#
# Writes under $OUT (./gpu-out when OUT is unset), four files:
#   summary.json   the machine (nvidia-smi -L, driver, versions), what NCCL was found, each step's
#                  command, exit status, status and duration, every ctest's result, the device
#                  jobs' failures (state_from, MTTD, MTTR, rework) and the bench's RESULT lines
#   run.log        every step's output, one after another
#   logs.tar.gz    each step's log apart, NCCL's debug logs, CMakeCache.txt, ctest's LastTest.log
#   SUMMARY.txt    one line per step (also printed at the end)
#
# Usage: bash scripts/gpu-run.sh [--kit DIR (gpukit)] [--build DIR (build-gpu)]
#                                [--budget SECONDS (530)] [--arch SM (90)] [--only STEP,...]
#   --only: run these steps after configure and build (which always run: a reused build tree
#   makes them quick), e.g. a second call for the steps the first one had no time left for.
#   Steps: ctest-gpu memcheck device-gpu memcheck-device chaos-kill-gpu torch-gpu torch-ft-gpu
#   torch-ft-sync-gpu torch-ft-join-gpu snapshot-gpu torch-amp-gpu mpi-kit overlap-1trainer
#   overlap-2trainers-1gpu nccl-rebuild;
#   and, run only when --only names them, each set a call of its own with --budget 590:
#   torch-lm-gpu torch-lm-ratio (examples/train_lm.py on CUDA under bf16 autocast: the kill
#   test, and the step-time ratio against torch's NCCL DDP), coord-scale
#   (bench/coord_scale.py at 16,384 and 131,072 simulated ranks on the machine's cores),
#   nsys-overlap (the overlap-1trainer job with its trainer under Nsight Systems: nsys stats'
#   kernel, CUDA API and memory summaries in the step's log; "absent" without nsys),
#   overlap-1trainer-cta (overlap-1trainer with --cta-policy efficiency: FTRT_NCCL_CTA_POLICY),
#   overlap-1trainer-inplace (overlap-1trainer with --in-place: gradients as bucket views, no
#   pack / unpack kernels) and pack-gpu (bench/pack_gpu_bench: the plane's pack and unpack
#   kernels against cudaMemcpyAsync D2D of the same bytes, GB/s and ratios).
# NCCL: $NCCL_HOME if set, else the CUDA toolkit's, else PyTorch's wheel (site-packages/nvidia).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
kit=$repo/gpukit
build=$repo/build-gpu
budget=530
arch=90
only=
all_steps=" ctest-gpu memcheck device-gpu memcheck-device chaos-kill-gpu torch-gpu torch-ft-gpu
  torch-ft-sync-gpu torch-ft-join-gpu snapshot-gpu torch-amp-gpu mpi-kit overlap-1trainer
  overlap-2trainers-1gpu nccl-rebuild "
all_steps=${all_steps//$'\n'/}
# Steps run only when --only names them, each set a call of its own after the GPU steps: the
# real CUDA example (issue 21: the first call's 530 s hold no more), and CPU work that needs the
# GPU machine's 16 cores, not its GPU.
opt_steps=" torch-lm-gpu torch-lm-ratio coord-scale nsys-overlap overlap-1trainer-cta
  overlap-1trainer-inplace pack-gpu "
opt_steps=${opt_steps//$'\n'/}
bad() { echo "gpu-run: $* (see scripts/gpu-run.sh --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --kit|--build|--budget|--arch|--only) [ $# -ge 2 ] && [ -n "$2" ] || bad "$1 needs a value" ;;
  esac
  case $1 in
    --kit) [ -d "$2" ] || bad "--kit $2: no such directory"; kit=$(cd "$2" && pwd); shift 2 ;;
    --build) build=$2; shift 2 ;;
    --budget) [[ $2 =~ ^[0-9]+$ ]] || bad "--budget: expected seconds, got '$2'"
              budget=$2; shift 2 ;;
    --arch) [[ $2 =~ ^[0-9]+$ ]] || bad "--arch: expected a CUDA architecture (90), got '$2'"
            arch=$2; shift 2 ;;
    --only) for x in ${2//,/ }; do
              [[ $all_steps$opt_steps == *" $x "* ]] ||
                bad "--only: no step '$x' (steps:$all_steps$opt_steps)"
            done
            only=" ${2//,/ } "; shift 2 ;;
    -h|--help) sed -n '2,42p' "$0"; exit 0 ;;
    *) bad "unknown argument $1" ;;
  esac
done
t0=$(date +%s)
deadline=$((t0 + budget))
out=${OUT:-$repo/gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
logs=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-run.XXXXXX")/logs
mkdir -p "$logs"
steps_tsv=$logs/steps.tsv
: >"$steps_tsv"
failed=0

say() { echo "gpu-run: $*"; }
# step NAME MAX_SECONDS CMD...: runs CMD under `timeout`, logging to $logs/NN-NAME.log;
# records name, rc, status (ok, failed, skipped: exit 77, timeout) and seconds.
n=0
step() {
  local name=$1 max=$2; shift 2
  if [[ $opt_steps == *" $name "* ]] && [[ $only != *" $name "* ]]; then
    return 1 # (opt-in: not even listed unless --only names it)
  fi
  if [ -n "$only" ] && [[ $all_steps == *" $name "* ]] && [[ $only != *" $name "* ]]; then
    not_run "$name" absent "not in --only"
    return 1
  fi
  n=$((n + 1))
  local log; log=$logs/$(printf '%02d' $n)-$name.log
  local now left t s e rc status
  local cmd="$*" # one line of steps.tsv: no tab or newline in the command's field
  cmd=${cmd//$'\t'/ }
  cmd=${cmd//$'\n'/ }
  now=$(date +%s)
  left=$((deadline - now - 15))
  if [ "$left" -lt 10 ]; then
    say "$name: skipped, the run's ${budget}s budget is spent"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" -1 no_time 0 "$(basename "$log")" "$cmd" >>"$steps_tsv"
    echo "not run: the budget was spent" >"$log"
    failed=1
    return 1
  fi
  t=$max
  [ "$left" -lt "$t" ] && t=$left
  say "$name (at most ${t}s): $*"
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
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$status" "$secs" "$(basename "$log")" "$cmd" >>"$steps_tsv"
  say "$name: $status (exit $rc, ${secs}s)"
  [ "$status" = ok ] || tail -n 15 "$log" | sed 's/^/    | /'
  [ $rc = 0 ]
}
# A step that could not even be tried (a missing kit, target or tool: a failure; a tool that is
# not there, or a step left out by --only: absent; no usable GPU: skipped).
not_run() {
  n=$((n + 1))
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" -1 "$2" 0 - "$3" >>"$steps_tsv"
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
nvcc=$(command -v nvcc || true)
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [ -z "$nvcc" ] && [ -n "$c" ] && [ -x "$c/bin/nvcc" ] && nvcc=$c/bin/nvcc
done
cuda_root=
if [ -n "$nvcc" ]; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  PATH=$PATH:$(dirname "$nvcc")
fi
sanitizer=$(command -v compute-sanitizer || true)
for c in "$cuda_root/bin/compute-sanitizer" "$cuda_root/compute-sanitizer/compute-sanitizer"; do
  [ -z "$sanitizer" ] && [ -n "$cuda_root" ] && [ -x "$c" ] && sanitizer=$c
done
# Nsight Systems (the nsys-overlap step): PATH, the toolkit's bin, its nsight-systems-* folder,
# /opt/nvidia's.
nsys=$(command -v nsys || true)
for c in "$cuda_root/bin/nsys" "$cuda_root"/nsight-systems-*/bin/nsys \
  /opt/nvidia/nsight-systems/*/bin/nsys; do
  [ -z "$nsys" ] && [ -n "$cuda_root" ] && [ -x "$c" ] && nsys=$c
done
py=$(command -v python3 || true)
# CMake and ninja come from pip on the GPU image: look beside python3 if they are not on PATH.
for t in cmake ninja; do
  command -v $t >/dev/null && continue
  for d in ${py:+"$(dirname "$py")"} /opt/torch/.venv/bin /usr/local/bin; do
    [ -x "$d/$t" ] && { PATH=$PATH:$d; break; }
  done
done

nccl_inc='' nccl_lib='' nccl_from=''
# The first of its arguments that exists and is named libnccl.so or libnccl.so.2.
pick_lib() {
  local f
  for f in "$@"; do
    case ${f##*/} in libnccl.so|libnccl.so.2) [ -e "$f" ] && { echo "$f"; return; } ;; esac
  done
}
if [ -n "${NCCL_HOME:-}" ] && [ -f "$NCCL_HOME/include/nccl.h" ]; then
  nccl_inc=$NCCL_HOME/include
  nccl_lib=$(pick_lib "$NCCL_HOME"/lib*/libnccl.so*)
  nccl_from="NCCL_HOME"
fi
if [ -z "$nccl_lib" ] && [ -n "$cuda_root" ]; then
  for d in "$cuda_root/include" "$cuda_root/targets/x86_64-linux/include" /usr/include /usr/local/include; do
    [ -f "$d/nccl.h" ] && { nccl_inc=$d; break; }
  done
  nccl_lib=$(pick_lib "$cuda_root"/lib64/libnccl.so* "$cuda_root"/lib/libnccl.so* \
    "$cuda_root"/targets/x86_64-linux/lib/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so*)
  if [ -n "$nccl_inc" ] && [ -n "$nccl_lib" ]; then nccl_from="the CUDA toolkit"; else nccl_inc='' nccl_lib=''; fi
fi
if [ -z "$nccl_lib" ] && [ -n "$py" ]; then
  for sp in $("$py" -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null); do
    [ -d "$sp/nvidia" ] || continue
    h=$(find "$sp/nvidia" -name nccl.h -path '*nccl*' 2>/dev/null | head -1)
    [ -n "$h" ] || continue
    nccl_inc=$(dirname "$h")
    mapfile -t libs < <(find "$sp/nvidia" -name 'libnccl.so*' 2>/dev/null | sort)
    nccl_lib=$(pick_lib "${libs[@]}")
    [ -n "$nccl_lib" ] && { nccl_from="PyTorch's wheel ($sp/nvidia)"; break; }
    nccl_inc=''
  done
fi
nccl_version=
if [ -n "$nccl_inc" ]; then
  nccl_version=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$nccl_inc/nccl.h")
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$nccl_lib")
  export LD_LIBRARY_PATH
fi
say "nvcc: ${nvcc:-none}; compute-sanitizer: ${sanitizer:-none}; nsys: ${nsys:-none}; python3: ${py:-none}"
say "NCCL: ${nccl_version:-not found} from ${nccl_from:-nowhere} (nccl.h in ${nccl_inc:-?}, library ${nccl_lib:-?})"
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

# --- Configure and build -----------------------------------------------------------------------
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
keep_going=(-- -k); [ ${#gen[@]} -gt 0 ] && keep_going=(-- -k 0) # every compile error in one run
cfg=(cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFTRT_WITH_CUDA=ON
     -DCMAKE_CUDA_ARCHITECTURES="$arch" -DFTRT_WERROR=OFF)
[ -n "$nvcc" ] && cfg+=(-DCMAKE_CUDA_COMPILER="$nvcc")
command -v mpicc >/dev/null && cfg+=(-DMPI_C_COMPILER="$(command -v mpicc)" -DMPIEXEC_EXECUTABLE="$(command -v mpirun)")
[ -n "$nccl_lib" ] && cfg+=(-DFTRT_NCCL_INCLUDE_DIR="$nccl_inc" -DFTRT_NCCL_LIBRARY="$nccl_lib")
built=0
if step configure 150 "${cfg[@]}"; then
  step build 300 cmake --build "$build" -j "$(nproc)" "${keep_going[@]}" && built=1
else
  not_run build not_run "configure failed"
fi
tbin=$build/tests
bench=$build/bench/overlap_gpu_bench
if [ $built = 1 ]; then
  grep -E 'ftrt: (CUDA|NCCL)' "$logs"/*-configure.log | sed 's/^.*ftrt:/gpu-run: cmake: ftrt:/'
  ldd "$build/libftrt.so" 2>/dev/null | grep -E 'libmpi|liburing|libjson' | sed 's/^[[:space:]]*/gpu-run: ldd libftrt.so: /'
fi

# --- GPU tests, sanitizer, device jobs, bench ------------------------------------------------
# ctest steps: the GPU units (label gpu, not mpi); the device-region jobs on the GPU
# (device_cuda.*); the chaos kill of a trainer with device state (chaos_cuda.*: 4 trainers and a
# spare time-sharing the one GPU); two CPU integration tests through tools/ftrt-run under the
# kit (mpi.reference, mpi.kill: train_mlp reads the kit's DIGITS_DATA).
ct=(ctest --test-dir "$build" --output-on-failure)
mlp_gpu=$build/examples/train_mlp_gpu
if [ $built = 1 ]; then
  step ctest-gpu 120 "${ct[@]}" -L gpu -LE mpi -V --timeout 100
  if [ ! -x "$tbin/test_kernels_gpu" ]; then
    not_run memcheck not_built "$tbin/test_kernels_gpu"
  elif [ -z "$sanitizer" ]; then
    not_run memcheck absent "compute-sanitizer not found"
  else
    step memcheck 150 "$sanitizer" --tool memcheck --error-exitcode 99 "$tbin/test_kernels_gpu"
  fi
  if [ ! -x "$mlp_gpu" ]; then
    for s in device-gpu memcheck-device chaos-kill-gpu; do
      not_run $s not_built "$mlp_gpu (needs NCCL)"
    done
  else
    step device-gpu 200 "${ct[@]}" -V -R '^device_cuda\.' --timeout 120
    # 1 coordinator + 2 trainers of train_mlp_gpu --device cuda, fault-free, every rank under
    # memcheck: the CUDA device backend's copies, CRC32C kernels and pinned staging (checkpoints
    # and fingerprints every 10 steps). Without a GPU, train_mlp_gpu exits 77 at once.
    if [ -z "$sanitizer" ]; then
      not_run memcheck-device absent "compute-sanitizer not found"
    elif "$mlp_gpu" --device cuda --check-device >"$logs/check-device.log" 2>&1; then
      mdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-memcheck.XXXXXX")
      step memcheck-device 120 env FTRT_SPARES=0 mpirun --oversubscribe --bind-to none -np 3 \
        "$sanitizer" --tool memcheck --error-exitcode 99 --print-limit 20 \
        "$mlp_gpu" --device cuda --steps 40 --ckpt-every 10 --ckpt-dir "$mdir/ckpt"
      rm -rf "$mdir"
    else
      not_run memcheck-device skipped "no usable CUDA device: $(tail -1 "$logs/check-device.log")"
    fi
    step chaos-kill-gpu 150 "${ct[@]}" -V -R '^chaos_cuda\.' --timeout 140
  fi
  # ftrt.pytorch on CUDA (issue 21): GradAverager's hooks on autograd's device thread post
  # through ftrt_gpu_bucketer_ready_from_any_thread; p.grad checked bit for bit against the
  # mean of both trainers' local gradients. 1 coordinator + 2 trainers on the one GPU, NCCL
  # over sockets as in overlap-2trainers-1gpu (a test arrangement). Exit 77: no CUDA in torch.
  if [ ! -f "$build/libftrt_gpu.so" ]; then
    not_run torch-gpu not_built "$build/libftrt_gpu.so (needs NCCL)"
  elif ! have_torch; then
    not_run torch-gpu absent "no python3 with torch"
  else
    tdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-torch.XXXXXX")
    step torch-gpu 150 env FTRT_LIB="$build/libftrt_gpu.so" FTRT_SPARES=0 FTRT_CKPT_DIR="$tdir" NCCL_NET=Socket \
      NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 \
      mpirun --oversubscribe --bind-to none -np 3 \
      bash -c 'export NCCL_HOSTID=ftrt-gpu-run-rank$OMPI_COMM_WORLD_RANK; exec "$@"' _ \
      "$py" "$repo/tests/python/gpu_torch_prog.py"
    rm -rf "$tdir"
  fi
  # ftrt.pytorch.FaultTolerant on a CUDA model (issue 21): 1 coordinator + 2 trainers + 1 hot
  # spare on the one GPU (NCCL over sockets, as above), twice: undisturbed, and with logical
  # rank 1 SIGKILLed from an autograd hook mid-backward; gradient norms read between backward()
  # and step() equal across the trainers at every step (p.grad the mean in stream order),
  # final parameters byte-identical. Exit 77: no CUDA in torch.
  ft_prog_step torch-ft-gpu
  # The same with the host synchronized with the stream between backward() and step() (a
  # user's loss.item()): the survivor blocks in .item() on NCCL collectives that wait for the
  # dead trainer until the agent thread aborts the communicator (comm/nccl_plane.c
  # "Interrupts"); it must return, recover and end byte-identical, without hanging.
  ft_prog_step torch-ft-sync-gpu --host-sync
  # The same kill with a joined spare (issue 35): the job (1 coordinator + 2 trainers, no spare)
  # under ftrt-run --joinable, a process joins it through ftrt-run --join (a second mpirun on
  # the one GPU), the victim dies mid-backward and the joiner takes its logical rank: its first
  # NCCL communicator is the recovery's, the unique id broadcast over the MPI communicator
  # that connect/accept made; byte-identical, both ftrt-runs exit 0. Open MPI 4.1 only.
  ft_prog_step torch-ft-join-gpu --join
  # What a checkpoint of device state blocks the trainer for (issue 38): 1 GiB of CUDA memory
  # in one REPLICATED | DEVICE region, ftrt_checkpoint()'s stall against cudaMemcpyAsync D2H of
  # the same bytes into pinned memory, in the same run (target <= 1.1x), then restored and
  # read back bit-exact (bench/dev_snapshot_bench.c; its RESULT line in the summary).
  if [ ! -x "$build/bench/dev_snapshot_bench" ]; then
    not_run snapshot-gpu not_built "$build/bench/dev_snapshot_bench"
  else
    sdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-snapshot.XXXXXX")
    step snapshot-gpu 120 mpirun --oversubscribe --bind-to none -np 2 \
      "$build/bench/dev_snapshot_bench" --dir "$sdir" --mib 1024 --reps 5
    rm -rf "$sdir"
  fi
  # Mixed precision on CUDA (issue 21): tests/python/test_mpi_bf16.py's CUDA cases, each an
  # undisturbed job and one with a trainer SIGKILLed (1 coordinator + 2 trainers + 1 spare on
  # the one GPU, NCCL over sockets): a bfloat16-body model (ncclBfloat16, the 16-bit unpack
  # kernels) and float16 autocast with torch.cuda.amp.GradScaler; every averaged gradient the
  # exact 2-trainer mean, final parameters byte-identical. Needs pytest beside torch.
  if [ ! -f "$build/libftrt_gpu.so" ]; then
    not_run torch-amp-gpu not_built "$build/libftrt_gpu.so (needs NCCL)"
  elif [ -z "$py" ] || ! timeout 120 "$py" -c 'import torch, pytest' >/dev/null 2>&1; then
    not_run torch-amp-gpu absent "no python3 with torch and pytest"
  elif [ "$gpus" -eq 0 ]; then
    not_run torch-amp-gpu skipped "nvidia-smi lists no GPU"
  else
    step torch-amp-gpu 300 env FTRT_LIB="$build/libftrt_gpu.so" FTRT_TEST_REQUIRE_GPU=1 \
      "$py" -m pytest -q -p no:cacheprovider -rs "$repo/tests/python/test_mpi_bf16.py" -k cuda
  fi
  # The real CUDA example (issue 21; only when --only names them): examples/train_lm.py
  # --device cuda --amp bf16 (a GPT-style character LM, about 10.7 M parameters) through
  # FaultTolerant. torch-lm-gpu: tests/python/gpu_lm_prog.py, 1 coordinator + 2 trainers + 1
  # hot spare on the one GPU (NCCL over sockets, a NCCL_HOSTID per rank), undisturbed and with
  # logical rank 1 SIGKILLed mid-backward: byte-identical, MTTD, MTTR and eMFU (the datasheet's
  # bf16 peak) in its RESULT line. torch-lm-ratio: bench/torch_overhead.py --device cuda, ftrt
  # against torch's NCCL DDP, alternating, medians of 3: 2 trainers on the one GPU (a
  # time-shared test arrangement, not a performance figure) and 1 trainer (the overlap
  # comparison). Exit 77: no CUDA in torch.
  for s in torch-lm-gpu torch-lm-ratio; do
    [[ $only == *" $s "* ]] || continue
    if [ ! -f "$build/libftrt_gpu.so" ]; then
      not_run $s not_built "$build/libftrt_gpu.so (needs NCCL)"
    elif ! have_torch; then
      not_run $s absent "no python3 with torch"
    elif [ $s = torch-lm-gpu ]; then
      step torch-lm-gpu 240 env FTRT_LIB="$build/libftrt_gpu.so" \
        "$py" "$repo/tests/python/gpu_lm_prog.py" --driver --device cuda --amp bf16
    else
      bdir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-lm-ratio.XXXXXX")
      step torch-lm-ratio 330 "$py" "$repo/bench/torch_overhead.py" --device cuda --amp bf16 \
        --python "$py" --lib "$build/libftrt_gpu.so" --reps 3 --max-seconds 290 --work "$bdir"
      rm -rf "$bdir"
    fi
  done
  step mpi-kit 120 "${ct[@]}" -R '^mpi\.(reference|kill)$' --timeout 100
  if [ ! -x "$bench" ]; then
    not_run overlap-1trainer not_built "$bench (needs NCCL)"
    not_run overlap-2trainers-1gpu not_built "$bench (needs NCCL)"
    for s in overlap-1trainer-cta overlap-1trainer-inplace; do
      [[ $only == *" $s "* ]] && not_run $s not_built "$bench (needs NCCL)"
    done
  else
    export FTRT_SPARES=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE=$logs/nccl.%h.%p.log
    mpi=(mpirun --oversubscribe --bind-to none)
    # 1 coordinator + 1 trainer: NCCL's one-rank communicator (the documented single-GPU run).
    step overlap-1trainer 90 "${mpi[@]}" -np 2 "$bench" --grad-mib 400 --steps 20
    # 1 coordinator + 2 trainers on the one GPU. NCCL refuses two ranks on one GPU of one host,
    # so each rank claims a host of its own (NCCL_HOSTID) and they talk over sockets on lo:
    # a test arrangement of the plane's two-trainer path, not a performance figure.
    step overlap-2trainers-1gpu 150 env NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 \
      NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 "${mpi[@]}" -np 3 \
      bash -c 'export NCCL_HOSTID=ftrt-gpu-run-rank$OMPI_COMM_WORLD_RANK; exec "$@"' _ \
      "$bench" --grad-mib 100 --steps 10
    # Issue 21 (only when --only names it): overlap-1trainer with the plane's communicator on
    # NCCL's efficiency CTA policy (the bench's --cta-policy: FTRT_NCCL_CTA_POLICY,
    # docs/collectives.md), for the
    # exposed-communication ratio against overlap-1trainer's in the same call.
    if [[ $only == *" overlap-1trainer-cta "* ]]; then
      step overlap-1trainer-cta 90 "${mpi[@]}" -np 2 "$bench" --grad-mib 400 --steps 20 \
        --cta-policy efficiency
    fi
    # Issue 21 (only when --only names it): overlap-1trainer with the gradients as bucket views
    # (the bench's --in-place: ftrt_bucket_config.in_place, each bucket one buffer, gradients at
    # their ftrt_bucketer_layout() offsets): the plane reduces them where they lie, with no pack
    # or unpack kernel (the bench fails if a byte was packed). The exposed ratio against
    # overlap-1trainer's in the same call says what the copies cost.
    if [[ $only == *" overlap-1trainer-inplace "* ]]; then
      step overlap-1trainer-inplace 90 "${mpi[@]}" -np 2 "$bench" --grad-mib 400 --steps 20 \
        --in-place
    fi
    unset FTRT_SPARES NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE
  fi
  # Issue 21 (only when --only names it): the plane's pack and unpack(+scale) kernels against
  # cudaMemcpyAsync D2D of the same bytes, in one run (bench/pack_gpu_bench.c: buckets of 25 and
  # 100 MiB of transformer-shaped float32 and bfloat16 tensors, then the same with every tensor
  # but the first off 16-byte alignment; then overlap-1trainer's buckets, 4 MiB float32
  # tensors in 25 MiB; descriptors in mapped host memory as the plane has them, and in device
  # memory). No MPI, no NCCL. Exit 77 without a usable device.
  if [[ $only == *" pack-gpu "* ]]; then
    if [ ! -x "$build/bench/pack_gpu_bench" ]; then
      not_run pack-gpu not_built "$build/bench/pack_gpu_bench"
    else
      pack_cmd='"$0" --bucket-mib 25,100 --dtype f32,bf16 --skew-elems 0,1 --reps 50 && '
      pack_cmd+='"$0" --tensor-mib 4 --bucket-mib 25 --dtype f32 --reps 50'
      step pack-gpu 60 bash -c "$pack_cmd" "$build/bench/pack_gpu_bench"
    fi
  fi
  # Issue 21 (only when --only names it): where overlap-1trainer's allreduce time goes, before
  # the plane is changed. The same job with the trainer (world rank 1; the coordinator is world
  # rank 0) under `nsys profile --trace cuda,nvtx,osrt`, then nsys stats' kernel, CUDA API and
  # memory-operation summaries into the step's log (scripts/nsys-trainer.sh; the .nsys-rep
  # stays in a temporary directory, removed). Profiled timings are not the overlap figures.
  if [[ $only == *" nsys-overlap "* ]]; then
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
  # The survivors' communicator without the dead rank: ncclCommShrink (NCCL_SHRINK_ABORT) of the
  # old one against today's full re-init, in the same run (bench/nccl_rebuild_bench.c: 4 ranks
  # on the one GPU, a host id each, sockets on lo; a test arrangement, so only the ratio says
  # something). Exit 77 where nccl.h has no ncclCommShrink.
  if [ ! -x "$build/bench/nccl_rebuild_bench" ]; then
    not_run nccl-rebuild not_built "$build/bench/nccl_rebuild_bench (needs NCCL)"
  else
    step nccl-rebuild 120 env NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 \
      NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 mpirun --oversubscribe --bind-to none -np 4 \
      bash -c 'export NCCL_HOSTID=ftrt-gpu-run-rank$OMPI_COMM_WORLD_RANK; exec "$@"' _ \
      "$build/bench/nccl_rebuild_bench" --rounds 5
  fi
  # Issue 22's coordinator at scale on this machine's cores (no GPU involved): 16,384 and
  # 131,072 simulated ranks, 8 per host agent, relay groups on (the default at these sizes).
  if [[ $only == *" coord-scale "* ]]; then
    step coord-scale 560 env TMPDIR="${TMPDIR:-/tmp}" python3 "$repo/bench/coord_scale.py" \
      --after "$build/bench/coord_load" --per-host 8 --hosts-only --kills 20 --silents 1 \
      --commits 3 --host-kills 1 --host-silents 1 16384 131072
  fi
else
  for s in $all_steps; do not_run $s not_run "no build"; done
fi

# --- What comes back ---------------------------------------------------------------------------
[ -f "$build/CMakeCache.txt" ] && cp "$build/CMakeCache.txt" "$logs/"
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
if [ -n "$py" ]; then
  "$py" - "$steps_tsv" "$logs" "$out/summary.json" "$total" "$failed" "$gpus" \
    "${nccl_version:-}" "${nccl_from:-}" "${nccl_inc:-}" "${nccl_lib:-}" "$budget" <<'EOF'
import json, os, re, sys
tsv, logs, dest, total, failed, gpus, nv, nfrom, ninc, nlib, budget = sys.argv[1:12]
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
           "gpus": int(gpus), "machine": machine,
           "nccl": {"version": nv, "from": nfrom, "include": ninc, "library": nlib},
           "steps": steps, "tests": tests, "device_jobs": jobs, "bench": bench},
          open(dest, "w"), indent=2)
EOF
else
  echo "python3 not found: no summary.json (see SUMMARY.txt)" >&2
fi
{
  echo "gpu-run: $( [ $failed = 0 ] && echo OK || echo FAILED ) after ${total}s, $gpus GPU(s), NCCL ${nccl_version:-none}"
  awk -F'\t' '{ printf "  %-24s %-9s exit %-4s %7ss\n", $1, $3, $2, $4 }' "$steps_tsv"
  grep -h '^RESULT' "$logs"/*-overlap-*.log "$logs"/*-torch-lm-*.log "$logs"/*-nccl-rebuild.log \
    "$logs"/*-pack-gpu.log "$logs"/*-snapshot-gpu.log 2>/dev/null | sed 's/^/  /'
} >"$out/SUMMARY.txt"
tar -czf "$out/logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"
rm -rf "$(dirname "$logs")"
cat "$out/SUMMARY.txt"
say "wrote $out/{summary.json,run.log,logs.tar.gz,SUMMARY.txt}"
exit $failed
