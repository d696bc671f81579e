#!/usr/bin/env bash
# Assembles, on this Debian 12 machine, what the GPU machine lacks to build and run ftrt: Open MPI
# 4.1 (the version every CPU figure of the README was measured with) with the shared libraries
# it loads, liburing, json-c, cmocka, ISA-L (erasure groups), zlib's headers and pkg-config, and
# the digits data set of examples/train_mlp (one file of Debian's python3-sklearn; env.sh sets
# DIGITS_DATA). The Debian packages are
# fetched with `apt-get download` (nothing is installed here), unpacked with `dpkg -x` into a
# git-ignored folder (gpukit/ at the repository root by default), pruned of documentation, man
# pages, static libraries and Fortran modules, and checked: every shared library that an ELF
# file of the kit needs is in the kit or is part of any glibc system (libc, libm, libgcc_s,
# libstdc++, ...). gpukit/env.sh, sourced on the GPU machine, points PATH, LD_LIBRARY_PATH,
# PKG_CONFIG_PATH, CMAKE_PREFIX_PATH, CPATH, LIBRARY_PATH and Open MPI (OPAL_PREFIX,
# PMIX_INSTALL_PREFIX) at wherever the kit lies then. scripts/gpu-run.sh uses it; docs/gpu.md
# says how.
#
# Usage: scripts/gpu-kit.sh [--out DIR (gpukit)] [--no-check]
#   --no-check: skip the last step (mpicc and `mpirun -np 2 hostname` from the kit, under
#   `env -i`, with the system's Open MPI out of the way).
# Fails (exit 1) when the kit, or the kit plus the repository's tracked files, exceeds 64 MiB:
# what travels to the GPU machine with the working tree is limited to 64 MiB in all.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/gpukit
check=1
bad() { echo "gpu-kit: $* (see scripts/gpu-kit.sh --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || bad "--out needs a value"; out=$2; shift 2 ;;
    --no-check) check=0; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) bad "unknown argument $1" ;;
  esac
done
p=$out
while [ ! -e "$p" ]; do p=$(dirname "$p"); done
[ -d "$p" ] || bad "--out $out: $p is not a directory"
limit=$((64 * 1024 * 1024))
ma=x86_64-linux-gnu
[ "$(dpkg --print-architecture)" = amd64 ] || { echo "gpu-kit: the GPU machine is x86-64: run this on an amd64 Debian" >&2; exit 1; }
for t in apt-get dpkg dpkg-deb readelf du; do
  command -v $t >/dev/null || { echo "gpu-kit: $t is missing (binutils for readelf)" >&2; exit 1; }
done

# Open MPI 4.1.4 and what its libraries, programs and MCA components load (readelf -d NEEDED,
# checked below), then ftrt's other build dependencies. Left out on purpose: compilers, perl
# (only the unused Fortran/Java wrappers and aggregate_profile need it), libltdl7 (Debian's Open
# MPI dlopens its components itself), hwloc's plugins, libevent's other parts.
pkgs=(
  libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
  libucx0 libfabric1 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1
  libnl-3-200 libnl-route-3-200 libnuma1 libmunge2
  liburing2 liburing-dev libjson-c5 libjson-c-dev libcmocka0 libcmocka-dev
  libisal2 libisal-dev
  zlib1g zlib1g-dev pkgconf pkgconf-bin libpkgconf3
  libudev1 libatomic1 libuuid1
)
# Base-system libraries that any CUDA/PyTorch image has, probably newer: kept in the kit only as
# a fallback, which env.sh puts on LD_LIBRARY_PATH for those the target's loader does not know.
fallback_sonames=(libz.so.1 libudev.so.1 libatomic.so.1 libuuid.so.1)
# NEEDED entries that glibc and GCC's runtime provide on every target.
system_sonames=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1
  libresolv.so.2 ld-linux-x86-64.so.2 libgcc_s.so.1 libstdc++.so.6 "

# A data file, not software: the UCI digits data set that examples/train_mlp reads (its default
# --data is Debian's python3-sklearn copy, which the GPU machine lacks): this one file of that
# package goes to data/digits.csv.gz, and env.sh points DIGITS_DATA at it.
data_pkg=python3-sklearn
data_file=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "gpu-kit: downloading ${#pkgs[@]} Debian packages (apt-get download, nothing installed)"
if ! (cd "$tmp" && apt-get download -q=2 "${pkgs[@]}" 2>"$tmp/err"); then
  echo "gpu-kit: apt-get download failed ($(grep -m1 -E '^E:' "$tmp/err" || true)); apt-get update, then again"
  apt-get update -qq
  (cd "$tmp" && apt-get download -q=2 "${pkgs[@]}") 2> >(grep -v '^W: Download is performed unsandboxed' >&2)
fi

(cd "$tmp" && mkdir data && cd data && apt-get download -q=2 "$data_pkg" 2>/dev/null) || {
  apt-get update -qq
  (cd "$tmp/data" && apt-get download -q=2 "$data_pkg")
}

rm -rf "$out"
mkdir -p "$out/root" "$out/base/lib" "$out/pkgconf/bin" "$out/data"
data_deb=$(ls "$tmp"/data/"$data_pkg"_*.deb)
dpkg-deb --fsys-tarfile "$data_deb" | tar -xO "./$data_file" >"$out/data/digits.csv.gz"
gzip -t "$out/data/digits.csv.gz" ||
  { echo "gpu-kit: $data_file of $data_pkg is not a gzip file" >&2; exit 1; }
root=$out/root
: >"$out/PACKAGES"
for deb in "$tmp"/*.deb; do
  dpkg -x "$deb" "$root"
  dpkg-deb -f "$deb" Package Version | paste -sd' ' | sed 's/^Package: //; s/ Version: / /' >>"$out/PACKAGES"
done
debs_bytes=$(cat "$tmp"/*.deb | wc -c)
unpacked=$(du -sb "$root" | cut -f1)

# Prune what neither a build nor a run uses.
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" \
  "$root/usr/share/aclocal" "$root/usr/share/bug" "$root/usr/lib/$ma/fortran" \
  "$root/usr/share/pkgconfig/personality.d"
find "$root" \( -name '*.a' -o -name '*.la' -o -name '*.mod' -o -name '*.jar' \
  -o -name 'libmpi_java.so*' -o -name 'mpijavac*' \) -exec rm -rf {} +
rm -f "$root/usr/bin/aggregate_profile" "$root/usr/bin/profile2mat"   # perl scripts

# The links Debian's maintainer scripts make with update-alternatives.
for p in mpicc mpic++ mpicxx mpiCC mpirun mpiexec; do
  t=$p.openmpi
  case $p in mpicxx|mpiCC) t=mpic++.openmpi ;; esac
  [ -e "$root/usr/bin/$t" ] && ln -sfn "$t" "$root/usr/bin/$p"
done
ln -sfn openmpi/lib/libmpi.so "$root/usr/lib/$ma/libmpi.so"
ln -sfn ompi.pc "$root/usr/lib/$ma/pkgconfig/mpi.pc"
ln -sfn ompi-c.pc "$root/usr/lib/$ma/pkgconfig/mpi-c.pc"
mkdir -p "$root/usr/include/$ma"
ln -sfn ../../lib/$ma/openmpi/include "$root/usr/include/$ma/mpi"
psm=$(cd "$root" && ls usr/lib/libpsm1/libpsm_infinipath.so.1.* 2>/dev/null | head -1)
[ -n "$psm" ] && ln -sfn "../${psm#usr/lib/}" "$root/usr/lib/$ma/libpsm_infinipath.so.1"

# pkg-config goes on PATH only where the target has none (env.sh).
for f in pkgconf pkg-config $ma-pkg-config $ma-pkgconf; do
  [ -e "$root/usr/bin/$f" ] && mv "$root/usr/bin/$f" "$out/pkgconf/bin/"
done
ln -sfn pkgconf "$out/pkgconf/bin/pkg-config"

# The fallback libraries: moved out of the directories env.sh always puts on LD_LIBRARY_PATH.
for s in "${fallback_sonames[@]}"; do
  for d in "$root/lib/$ma" "$root/usr/lib/$ma"; do
    for f in "$d/$s" "$d/$s".*; do
      [ -e "$f" ] || [ -L "$f" ] || continue
      mv "$f" "$out/base/lib/"
    done
  done
done
printf '%s\n' "${fallback_sonames[@]}" >"$out/base/SONAMES"
# Absolute symlinks (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) become relative ones
# into the kit.
while IFS= read -r -d '' l; do
  t=$(readlink "$l")
  case $t in /*) ;; *) continue ;; esac
  if [ -e "$root$t" ]; then dest=$root$t
  elif [ -e "$out/base/lib/$(basename "$t")" ]; then dest=$out/base/lib/$(basename "$t")
  else echo "gpu-kit: dangling absolute link $l -> $t" >&2; exit 1
  fi
  ln -sfn "$(realpath --relative-to="$(dirname "$l")" "$dest")" "$l"
done < <(find "$root" -type l -print0)

# Every NEEDED library of every ELF file must be in the kit or in system_sonames.
declare -A have=()
while IFS= read -r -d '' f; do have[$(basename "$f")]=1; done \
  < <(find "$root" "$out/base/lib" \( -type f -o -type l \) -name '*.so*' -print0)
missing=0
while IFS= read -r -d '' f; do
  [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  for n in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case $system_sonames in *" $n "*) continue ;; esac
    [ -n "${have[$n]:-}" ] && continue
    echo "gpu-kit: ${f#"$out"/} needs $n, which is not in the kit" >&2
    missing=1
  done
done < <(find "$root" "$out/base/lib" "$out/pkgconf/bin" -type f -print0)
[ $missing = 0 ] || { echo "gpu-kit: add the packages that hold these libraries to pkgs" >&2; exit 1; }

cat >"$out/env.sh" <<'EOF'
# Generated by scripts/gpu-kit.sh: source it (bash) to build and run ftrt against the kit's
# Open MPI 4.1, liburing, json-c and cmocka, wherever the kit folder lies now.
_k=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_r=$_k/root
_ma=x86_64-linux-gnu
export FTRT_GPUKIT=$_k
# Open MPI finds its help files, components and wrapper data under OPAL_PREFIX. Debian built
# PMIx with absolute directories, so each is named (its components, help files); hwloc loads no
# plugins (Debian's build looks in /usr/lib/x86_64-linux-gnu/hwloc). Debian's MCA defaults (no
# UCX, OFI or openib) come from the kit's copy of /etc/openmpi/openmpi-mca-params.conf.
export OPAL_PREFIX=$_r/usr
_p=$_r/usr/lib/$_ma/pmix2
export PMIX_PREFIX=$_p PMIX_EXEC_PREFIX=$_p PMIX_LIBDIR=$_p/lib PMIX_PKGLIBDIR=$_p/lib/pmix \
  PMIX_DATAROOTDIR=$_p/share PMIX_DATADIR=$_p/share PMIX_PKGDATADIR=$_p/share/pmix
export HWLOC_PLUGINS_PATH=$_k/no-hwloc-plugins
export OMPI_MCA_mca_base_param_files=$_r/etc/openmpi/openmpi-mca-params.conf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# examples/train_mlp's data set (its default, Debian's python3-sklearn copy, is not there).
export DIGITS_DATA=${DIGITS_DATA:-$_k/data/digits.csv.gz}
# Without ssh or rsh, Open MPI's rsh launcher refuses even a one-node job: launch locally.
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
  export OMPI_MCA_plm=isolated
fi
export PATH=$_r/usr/bin${PATH:+:$PATH}
command -v pkg-config >/dev/null 2>&1 || export PATH=$PATH:$_k/pkgconf/bin
_ld=$_r/usr/lib/$_ma/openmpi/lib:$_r/usr/lib/$_ma:$_r/usr/lib/$_ma/pmix2/lib:$_r/lib/$_ma
# Base-system libraries (zlib, libudev, libatomic, libuuid) only where the target's loader has none.
rm -rf "$_k/base/active" && mkdir -p "$_k/base/active"
_ldc=$(command -v ldconfig || ls /sbin/ldconfig /usr/sbin/ldconfig 2>/dev/null | head -1 || true)
_ldp=$([ -z "$_ldc" ] || "$_ldc" -p 2>/dev/null || true)
while read -r _s; do
  _found=0
  if [ -n "$_ldc" ]; then
    grep -q "^[[:space:]]*$_s (.*x86-64" <<<"$_ldp" && _found=1
  else
    for _d in /lib/$_ma /usr/lib/$_ma /lib64 /usr/lib64; do [ -e "$_d/$_s" ] && _found=1; done
  fi
  [ $_found = 1 ] || ln -sfn "../lib/$_s" "$_k/base/active/$_s"
done <"$_k/base/SONAMES"
_ld=$_ld:$_k/base/active
export LD_LIBRARY_PATH=$_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The .pc files say prefix=/usr (cmocka.pc: -L/usr/lib/...): copies with the kit's path, made
# afresh at every source.
rm -rf "$_k/pkgconfig" && mkdir -p "$_k/pkgconfig"
for _f in "$_r"/usr/lib/$_ma/pkgconfig/*.pc "$_r"/usr/share/pkgconfig/*.pc; do
  [ -e "$_f" ] || continue
  sed -e "s|^\([A-Za-z_]*\)=/usr|\1=$_r/usr|" -e "s|-\([LI]\)/usr/|-\1$_r/usr/|g" \
    "$_f" >"$_k/pkgconfig/$(basename "$_f")"
done
export PKG_CONFIG_PATH=$_k/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CMAKE_PREFIX_PATH=$_r/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CPATH=$_r/usr/include${CPATH:+:$CPATH}
export LIBRARY_PATH=$_r/usr/lib/$_ma/openmpi/lib:$_r/usr/lib/$_ma${LIBRARY_PATH:+:$LIBRARY_PATH}
unset _k _r _p _ma _ld _ldc _ldp _s _f _d _found
EOF

{
  echo "ftrt GPU kit, made $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/gpu-kit.sh on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "Debian packages (name version), unpacked with dpkg -x into root/:"
  sed 's/^/  /' "$out/PACKAGES"
  echo "Data (DIGITS_DATA, train_mlp's data set): data/digits.csv.gz, /$data_file of" \
    "$(dpkg-deb -f "$data_deb" Package Version | paste -sd' ' |
       sed 's/^Package: //; s/ Version: / /')"
} >"$out/README"
rm -f "$out/PACKAGES"

size=$(du -sb "$out" | cut -f1)
tree=$(cd "$repo" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu-kit: ${#pkgs[@]} packages, $(mib "$debs_bytes") of .debs, $(mib "$unpacked") unpacked, $(mib "$size") after pruning: $out"
echo "gpu-kit: with the repository's tracked files ($(mib "$tree")): $(mib $((size + tree))) of the 64 MiB that may travel"
if [ "$size" -gt "$limit" ] || [ $((size + tree)) -gt "$limit" ]; then
  echo "gpu-kit: FAILED: over 64 MiB; prune more" >&2
  exit 1
fi
echo "size: $(mib "$size") (du -sb)" >>"$out/README"

if [ $check = 1 ]; then
  echo "gpu-kit: checking the kit under env -i (PATH=/usr/bin:/bin, no LD_LIBRARY_PATH)"
  env -i HOME="${HOME:-/root}" PATH=/usr/bin:/bin bash -c '
    set -e
    . "$1/env.sh"
    case $(command -v mpicc) in "$1"/*) ;; *) echo "mpicc is not the kit'"'"'s: $(command -v mpicc)" >&2; exit 1 ;; esac
    case $(command -v mpirun) in "$1"/*) ;; *) echo "mpirun is not the kit'"'"'s" >&2; exit 1 ;; esac
    echo "  mpicc: $(mpicc -showme)"
    mpirun --version | head -1 | sed "s/^/  /"
    echo "  pkg-config json-c liburing cmocka: $(pkg-config --cflags --libs json-c liburing cmocka)"
    gzip -dc "$DIGITS_DATA" | wc -l | sed "s|^|  DIGITS_DATA $DIGITS_DATA: |; s|\$| images|"
    echo "  mpirun -np 2 hostname:"
    mpirun --oversubscribe -np 2 hostname | sed "s/^/    /"
    # An MPI program built with the kit: no MPI library may come from outside the kit.
    cd "$2"
    cat >maps.c <<EOC
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char line[4096];
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strchr(line, 0x2f);
        if (p && strstr(p, ".so") && !strstr(p, "$1") &&
            (strstr(p, "mpi") || strstr(p, "open-") || strstr(p, "pmix") || strstr(p, "hwloc") ||
             strstr(p, "event") || strstr(p, "ucx") || strstr(p, "fabric")))
            bad = 1, printf("rank %d maps a library outside the kit: %s", rank, p);
    }
    MPI_Finalize();
    return bad;
}
EOC
    mpicc -o maps maps.c
    mpirun --oversubscribe -np 2 ./maps
    echo "  an MPI program built with the kit'"'"'s mpicc ran on 2 ranks, every MPI library from the kit"' \
    _ "$out" "$tmp"
fi
echo "gpu-kit: done; docs/gpu.md says how to use it"
