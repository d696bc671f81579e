# Sourced (bash) by scripts/gpu-run.sh, scripts/gpu-prep.sh and scripts/gpu-sim.sh: what they
# share, as functions (sourcing it runs nothing). The GPU machine played on this one
# (gpu_bare_path, gpu_hide_system: gpu-sim.sh and gpu-prep.sh); where nvcc, compute-sanitizer
# and NCCL are (gpu_find_cuda, gpu_nccl_candidates); ftrt's CMake configuration for the GPU
# (gpu_cmake_cfg: gpu-prep.sh here, gpu-run.sh's fallback there); and the prebuilt tree that
# gpu-prep.sh makes here and gpu-run.sh runs there without configuring or compiling anything:
# its manifest (BUILD/PREBUILT), its pruning, the move of the absolute paths its text files hold
# to wherever the copy lies, and the check that every program and library of it loads there
# (docs/gpu.md).
# shellcheck shell=bash

# gpu_bare_path DIR: DIR (made) holds a link to each program of /usr/bin but ssh, rsh and
# pkg-config: the PATH of a GPU machine without them.
gpu_bare_path() {
  local f
  mkdir -p "$1"
  for f in /usr/bin/*; do
    case ${f##*/} in ssh|rsh|slogin|pkg-config|pkgconf|*-pkg-config|*-pkgconf) continue ;; esac
    ln -s "$f" "$1/"
  done
}

# gpu_hide_system WHEEL: run as root inside a private mount namespace (unshare -m), hides what
# the GPU machine lacks: the system's Open MPI, PMIx, json-c, liburing, cmocka and UCX (their
# programs replaced by one that fails, saying so; their libraries, headers and .pc files by
# empty files) and Debian's scikit-learn (examples/train_mlp's default data set); with WHEEL=1
# also the CUDA toolkit's nccl.h.
gpu_hide_system() {
  local ma=x86_64-linux-gnu empty fail d f
  empty=$(mktemp -d)
  fail=$(mktemp)
  # shellcheck disable=SC2016 # $0 is the stand-in's
  printf '#!/bin/sh\necho "the SYSTEM Open MPI was used: $0 (hidden, as the GPU machine lacks it)" >&2\nexit 97\n' >"$fail"
  chmod +x "$fail"
  for d in /usr/lib/$ma/openmpi /usr/lib/$ma/pmix2 /etc/openmpi /usr/share/openmpi \
           /usr/include/json-c /usr/include/liburing /usr/lib/$ma/ucx \
           /usr/lib/python3/dist-packages/sklearn; do
    [ -d "$d" ] && mount --bind "$empty" "$d"
  done
  for f in /usr/bin/opal_wrapper /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info; do
    [ -e "$f" ] && mount --bind "$fail" "$f"
  done
  for f in /usr/lib/$ma/libmpi.so.40.* /usr/lib/$ma/libopen-pal.so.40.* /usr/lib/$ma/libopen-rte.so.40.* \
           /usr/lib/$ma/libpmix.so.2.* /usr/lib/$ma/libjson-c.so.5.* /usr/lib/$ma/liburing.so.2.* \
           /usr/lib/$ma/libcmocka.so.0.* /usr/lib/$ma/libhwloc.so.15.* /usr/lib/$ma/libevent_core-2.1.so.7.* \
           /usr/lib/$ma/pkgconfig/json-c.pc /usr/lib/$ma/pkgconfig/liburing.pc /usr/lib/$ma/pkgconfig/cmocka.pc \
           /usr/lib/$ma/pkgconfig/ompi.pc /usr/lib/$ma/pkgconfig/ompi-c.pc /usr/include/liburing.h /usr/include/cmocka.h; do
    [ -e "$f" ] && mount --bind /dev/null "$f"
  done
  if [ "$1" = 1 ]; then
    for f in /usr/local/cuda/include/nccl.h /usr/local/include/nccl.h; do
      [ -e "$f" ] && mount --bind /dev/null "$f"
    done
  fi
  return 0
}

# gpu_find_cuda: sets nvcc and cuda_root (PATH, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda; nvcc's
# folder joins PATH), sanitizer (compute-sanitizer) and nsys (Nsight Systems: PATH, the
# toolkit's bin or nsight-systems-* folder, /opt/nvidia's), each empty where not found.
gpu_find_cuda() {
  local c
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
  nsys=$(command -v nsys || true)
  for c in "$cuda_root/bin/nsys" "$cuda_root"/nsight-systems-*/bin/nsys \
    /opt/nvidia/nsight-systems/*/bin/nsys; do
    [ -z "$nsys" ] && [ -n "$cuda_root" ] && [ -x "$c" ] && nsys=$c
  done
  return 0
}

# The first of its arguments that exists and is named libnccl.so or libnccl.so.2.
gpu_pick_nccl_lib() {
  local f
  for f in "$@"; do
    case ${f##*/} in libnccl.so|libnccl.so.2) [ -e "$f" ] && { echo "$f"; return; } ;; esac
  done
}

# gpu_nccl_candidates PY: every NCCL found (nccl.h and libnccl.so[.2] together), in the order
# of preference: $NCCL_HOME, the CUDA toolkit's (gpu_find_cuda first), then PyTorch's wheel
# (site-packages/nvidia of PY, when PY is given). Sets the arrays nccl_c_inc, nccl_c_lib and
# nccl_c_from (where it came from, in words).
gpu_nccl_candidates() {
  local py=$1 d inc lib sp h
  local -a libs
  nccl_c_inc=() nccl_c_lib=() nccl_c_from=()
  if [ -n "${NCCL_HOME:-}" ] && [ -f "$NCCL_HOME/include/nccl.h" ]; then
    lib=$(gpu_pick_nccl_lib "$NCCL_HOME"/lib*/libnccl.so*)
    [ -n "$lib" ] && { nccl_c_inc+=("$NCCL_HOME/include"); nccl_c_lib+=("$lib"); nccl_c_from+=("NCCL_HOME"); }
  fi
  if [ -n "$cuda_root" ]; then
    inc=
    for d in "$cuda_root/include" "$cuda_root/targets/x86_64-linux/include" /usr/include /usr/local/include; do
      [ -f "$d/nccl.h" ] && { inc=$d; break; }
    done
    lib=$(gpu_pick_nccl_lib "$cuda_root"/lib64/libnccl.so* "$cuda_root"/lib/libnccl.so* \
      "$cuda_root"/targets/x86_64-linux/lib/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so*)
    [ -n "$inc" ] && [ -n "$lib" ] && { nccl_c_inc+=("$inc"); nccl_c_lib+=("$lib"); nccl_c_from+=("the CUDA toolkit"); }
  fi
  [ -n "$py" ] || return 0
  for sp in $("$py" -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null); do
    [ -d "$sp/nvidia" ] || continue
    h=$(find "$sp/nvidia" -name nccl.h -path '*nccl*' 2>/dev/null | head -1)
    [ -n "$h" ] || continue
    mapfile -t libs < <(find "$sp/nvidia" -name 'libnccl.so*' 2>/dev/null | sort)
    lib=$(gpu_pick_nccl_lib "${libs[@]}")
    if [ -n "$lib" ]; then
      nccl_c_inc+=("$(dirname "$h")"); nccl_c_lib+=("$lib"); nccl_c_from+=("PyTorch's wheel ($sp/nvidia)")
      break
    fi
  done
  return 0
}

# gpu_nccl_version INCLUDE_DIR: NCCL's version from its nccl.h (2.28.9).
gpu_nccl_version() {
  awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$1/nccl.h"
}

# gpu_cmake_cfg REPO BUILD ARCH NVCC NCCL_INC NCCL_LIB: sets the arrays cfg (ftrt's configure
# command for the GPU machine: CUDA for sm_ARCH, NCCL's paths, the kit's mpicc and mpirun where
# they are on PATH, build-tree RPATHs relative to $ORIGIN so that the tree can move) and
# keep_going (cmake --build's arguments that show every compile error in one run).
# shellcheck disable=SC2034 # cfg and keep_going are the caller's
gpu_cmake_cfg() {
  local -a gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  keep_going=(-- -k); [ ${#gen[@]} -gt 0 ] && keep_going=(-- -k 0)
  cfg=(cmake -S "$1" -B "$2" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFTRT_WITH_CUDA=ON
       -DCMAKE_CUDA_ARCHITECTURES="$3" -DFTRT_WERROR=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON)
  [ -n "$4" ] && cfg+=(-DCMAKE_CUDA_COMPILER="$4")
  command -v mpicc >/dev/null &&
    cfg+=(-DMPI_C_COMPILER="$(command -v mpicc)" -DMPIEXEC_EXECUTABLE="$(command -v mpirun)")
  [ -n "$6" ] && cfg+=(-DFTRT_NCCL_INCLUDE_DIR="$5" -DFTRT_NCCL_LIBRARY="$6")
  return 0
}

# --- The prebuilt tree ---------------------------------------------------------------------------
# BUILD/PREBUILT, written by gpu-prep.sh: key=value lines. source_dir, build_dir, kit_dir and
# python3 are the paths that the tree's text files (CTestTestfile.cmake: tests' commands, their
# FTRT_MPIRUN, the Python that runs the integration tests) hold now; gpu_prebuilt_relocate
# rewrites them and these lines together. The ELF files hold no path that they use (their
# RPATHs are $ORIGIN-relative, and /usr/local/cuda's; the source paths in them are __FILE__'s).

# gpu_manifest_get FILE KEY: the value of KEY (empty if absent).
gpu_manifest_get() {
  sed -n "s/^$2=//p" "$1" | head -1
}

# gpu_manifest_set FILE KEY VALUE
gpu_manifest_set() {
  local tmp=$1.tmp
  awk -v k="$2" -v v="$3" 'BEGIN { FS = "=" } $1 == k { print k "=" v; done = 1; next } { print }
    END { if (!done) print k "=" v }' "$1" >"$tmp" && mv "$tmp" "$1"
}

# gpu_is_elf FILE
gpu_is_elf() {
  [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]
}

# gpu_elf_files BUILD: the ELF files of the tree, one a line (programs and shared libraries).
gpu_elf_files() {
  local f
  while IFS= read -r -d '' f; do
    gpu_is_elf "$f" && echo "$f"
  done < <(find "$1" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
}

# gpu_prebuilt_prune BUILD KEEP_DEBUG...: removes what running the tree does not use (objects,
# static archives, CMakeFiles/, the ninja files, cmake_install.cmake) and strips the debug
# information of its ELF files (their symbols stay) except the paths (relative to BUILD) named
# after it. Prints nothing.
gpu_prebuilt_prune() {
  local b=$1 f rel k keep
  shift
  find "$b" -depth -type d -name CMakeFiles -exec rm -rf {} +
  find "$b" -type f \( -name '*.o' -o -name '*.a' -o -name cmake_install.cmake \
    -o -name build.ninja -o -name .ninja_deps -o -name .ninja_log -o -name '*.ninja' \) -delete
  rm -rf "$b/Testing"
  while IFS= read -r f; do
    rel=${f#"$b"/}
    keep=0
    for k in "$@"; do
      # shellcheck disable=SC2254 # KEEP_DEBUG are patterns
      case $rel in $k) keep=1 ;; esac
    done
    [ $keep = 1 ] || strip --strip-debug "$f"
  done < <(gpu_elf_files "$b")
}

# gpu_sed_re PATH / gpu_sed_rep PATH: PATH escaped for a sed (BRE, '|' delimiter) pattern /
# replacement.
gpu_sed_re() { printf '%s' "$1" | sed -e 's/[]|\\$*.^[]/\\&/g'; }
gpu_sed_rep() { printf '%s' "$1" | sed -e 's/[|\\&]/\\&/g'; }

# gpu_prebuilt_relocate BUILD REPO KIT PY: where the tree's manifest says it lies elsewhere
# (its source_dir, build_dir, kit_dir), rewrites those paths in every text file of BUILD to
# REPO, BUILD and KIT, and its python3 to PY where that one is not there (the integration tests
# run under it); updates the manifest. Each old path is first replaced by a token and the
# tokens then by the new paths, so that a new path holding an old one is not rewritten twice;
# an old path matches only whole (followed by '/', a quote, a separator or the line's end).
# Prints a line per path moved and the number of files rewritten; returns 1 (saying why)
# where the manifest lacks a path.
gpu_prebuilt_relocate() {
  local b=$1 m=$1/PREBUILT key old new i
  local -a keys=(build_dir kit_dir source_dir python3) olds=() news=() expr=() pats=() files=()
  # The longest paths first (the build and the kit lie in the source folder).
  for key in "${keys[@]}"; do
    old=$(gpu_manifest_get "$m" "$key")
    [ -n "$old" ] || { echo "$m names no $key"; return 1; }
    case $key in
      build_dir) new=$b ;; kit_dir) new=$3 ;; source_dir) new=$2 ;;
      python3) new=$old; [ -x "$old" ] || [ -z "$4" ] || new=$4 ;;
    esac
    olds+=("$old"); news+=("$new")
  done
  for i in "${!keys[@]}"; do
    [ "${olds[$i]}" != "${news[$i]}" ] || continue
    expr+=(-e "s|$(gpu_sed_re "${olds[$i]}")\([^A-Za-z0-9._+-]\)|@ftrt-prebuilt-$i@\1|g"
           -e "s|$(gpu_sed_re "${olds[$i]}")\$|@ftrt-prebuilt-$i@|")
    pats+=(-e "${olds[$i]}")
  done
  [ ${#expr[@]} -gt 0 ] || return 0
  for i in "${!keys[@]}"; do
    [ "${olds[$i]}" = "${news[$i]}" ] ||
      expr+=(-e "s|@ftrt-prebuilt-$i@|$(gpu_sed_rep "${news[$i]}")|g")
  done
  mapfile -t files < <(grep -rlIF "${pats[@]}" "$b" 2>/dev/null | grep -v '/PREBUILT$')
  [ ${#files[@]} -eq 0 ] || sed -i "${expr[@]}" "${files[@]}" || return 1
  for i in "${!keys[@]}"; do
    [ "${olds[$i]}" = "${news[$i]}" ] && continue
    echo "moved ${keys[$i]} ${olds[$i]} -> ${news[$i]}"
    gpu_manifest_set "$m" "${keys[$i]}" "${news[$i]}"
  done
  echo "${#files[@]} text files rewritten (grep -rlI)"
}

# gpu_prebuilt_problems BUILD: what the loader cannot resolve in the tree's ELF files with the
# environment as it is (`ldd -r`: a library not found, an undefined symbol, such as a function
# of a newer NCCL than the one on LD_LIBRARY_PATH), one line per file and problem, relative to
# BUILD; nothing when all is well. Returns 2 where ldd is missing.
gpu_prebuilt_problems() {
  local f
  command -v ldd >/dev/null || return 2
  while IFS= read -r f; do
    ldd -r "$f" 2>&1 | grep -E 'not found|undefined symbol' | sort -u |
      sed "s|^[[:space:]]*|${f#"$1"/}: |"
  done < <(gpu_elf_files "$1")
  return 0
}
