#!/usr/bin/env bash
# Fresh-machine check: a clean Debian 12 root (debootstrap --variant=minbase), into which the
# working tree's files are copied; inside it, scripts/ensure-deps.sh installs what the README's
# commands install, then ftrt is built and a test subset runs with CI=true, so that a test
# needing a package ensure-deps.sh does not install fails instead of skipping. Nothing
# installed by hand on this machine is visible in the chroot. Not run by CI (it downloads a
# Debian base system and PyTorch: ~10-20 minutes, ~2 GB of disk).
#
# Usage (root, on Debian or with debootstrap installed):
#   scripts/fresh-chroot-test.sh [--dir DIR] [--keep] [--tests REGEX] [--pytest]
#     --dir DIR      the chroot (default /var/tmp/ftrt-fresh-chroot; emptied first)
#     --keep         leave the chroot in place at the end (default: removed)
#     --tests REGEX  ctest -R REGEX (default: the dependency, version, type and packaging
#                    checks (python.wheel: `pip install .` from PyPI in a venv),
#                    the binding's pytest suite and one MPI job per kind of dependency)
#     --pytest       run tests/python as a whole too (python.pytest: minutes of MPI jobs)
# The base system tarball and the downloaded .deb files are cached in /var/cache/ftrt-chroot
# (set FTRT_CHROOT_CACHE): packages are still installed from scratch each time.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=/var/tmp/ftrt-fresh-chroot keep=0 pytest=0
tests='^(unit\.(python_deps|python_deps_selftest|python_types|version|errors|settings_table)|python\.(lookup|wheel)|mpi\.reference|chaos\.ledger)$'
bad() { echo "fresh-chroot-test: $* (see scripts/fresh-chroot-test.sh --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --dir|--tests) [ $# -ge 2 ] && [ -n "$2" ] || bad "$1 needs a value" ;;
  esac
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --tests) tests=$2; shift 2 ;;
    --pytest) pytest=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) bad "unknown argument $1" ;;
  esac
done
p=$dir
while [ ! -e "$p" ]; do p=$(dirname "$p"); done
[ -d "$p" ] || bad "--dir $dir: $p is not a directory"
[ "$(id -u)" -eq 0 ] || { echo "fresh-chroot-test: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
cache=${FTRT_CHROOT_CACHE:-/var/cache/ftrt-chroot}
mirror=http://deb.debian.org/debian
mkdir -p "$cache/archives/partial"

mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[$i]}" 2>/dev/null || umount -Rl "${mounts[$i]}" 2>/dev/null || true
  done
  if grep -q " $dir/" /proc/mounts; then
    echo "fresh-chroot-test: something is still mounted under $dir: not removing it" >&2
  elif [ "$keep" = 0 ] && [ -d "$dir" ]; then
    rm -rf --one-file-system "$dir" "$dir.debootstrap.log"
  fi
}
trap cleanup EXIT
mnt() { mount "$@"; mounts+=("${@: -1}"); }

t0=$(date +%s)
if grep -q " $dir/" /proc/mounts; then
  echo "fresh-chroot-test: something is mounted under $dir (an earlier run?): unmount it first" >&2
  exit 1
fi
rm -rf --one-file-system "$dir"
mkdir -p "$dir"
if [ ! -f "$cache/base.tgz" ]; then
  echo "== debootstrap bookworm (minbase) -> $cache/base.tgz"
  debootstrap --variant=minbase --make-tarball="$cache/base.tgz" bookworm "$dir.tmp" "$mirror" \
    >"$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log"; exit 1; }
  rm -rf --one-file-system "$dir.tmp"
fi
echo "== debootstrap bookworm (minbase) into $dir"
debootstrap --variant=minbase --unpack-tarball="$cache/base.tgz" bookworm "$dir" "$mirror" \
  >"$dir.debootstrap.log" 2>&1 || { tail -20 "$dir.debootstrap.log"; exit 1; }
cat >"$dir/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf /etc/hosts "$dir/etc/"
# Keep the downloaded .debs between runs (cache only: every package is installed again).
rm -f "$dir/etc/apt/apt.conf.d/docker-clean"
mnt --bind "$cache/archives" "$dir/var/cache/apt/archives"
mnt -t proc proc "$dir/proc"
# /sys and /dev (with /dev/shm, which Open MPI uses) of this machine; slaves, so that nothing
# mounted or unmounted under them in the chroot reaches this machine's.
mnt --rbind /sys "$dir/sys" && mount --make-rslave "$dir/sys"
mnt --rbind /dev "$dir/dev" && mount --make-rslave "$dir/dev"

echo "== copy of the working tree (tracked and untracked, not ignored) -> /src"
mkdir -p "$dir/src"
(cd "$src" && git ls-files -z -co --exclude-standard | xargs -0 tar -cf - --no-recursion) |
  tar -xf - -C "$dir/src"

run() { chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 CI=true OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        bash -c "cd /src && $1"; }

echo "== the packages a fresh Debian 12 has: $(run "dpkg-query -W -f='\${Package}\n' | wc -l")"
echo "== scripts/ensure-deps.sh (the README's set-up) inside the chroot"
run "bash scripts/ensure-deps.sh"
echo "== build (the README's configuration)"
run "cmake -S . -B build -DFTRT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build -j$(nproc) >build.log 2>&1 || { tail -30 build.log; exit 1; }"
echo "== ctest -R '$tests' with CI=true"
rc=0
run "cd build && ctest --output-on-failure -R '$tests'" || rc=1
if [ "$pytest" = 1 ]; then
  echo "== python.pytest with CI=true"
  run "cd build && ctest --output-on-failure -R '^python\.pytest$'" || rc=1
fi
echo "== fresh-chroot-test: $([ $rc = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - t0 )) s"
exit $rc
