#!/usr/bin/env bash
# Installs the Debian packages ftrt needs when any is missing (as root, with apt-get), and
# says what to run otherwise. Run by examples/demo.sh and tests/run.sh (the README's two
# commands), so it must name everything they, the tests, the benches of the README and the
# plot script need: tools/check-python-deps (ctest unit.python_deps) checks every Python import
# of the tree and every package the tests name against this list and its dependencies.
# `scripts/ensure-deps.sh --list` prints the list and installs nothing.
set -euo pipefail
# build; MPI; io_uring; unit tests; checkpoints; the report; Python: the demo's data set
# (python3-sklearn), the tests, the PyTorch binding (python3-torchvision: resnet18 in
# tests/python/test_mpi_resnet.py and test_flops.py), the OpenMetrics check, the plot
# (ftrt.analysis.plot), `python3 -m venv` + `pip install .` (python3-venv, python3-pip; ctest
# python.wheel), the type checker (mypy: ctest unit.python_types); fio: bench/ftrt-bench-ckpt;
# Slurm 22.05 and munge: the Slurm cluster of ctests slurm.* (tests/harness/ftrt_slurm.py), with
# libpmix-dev, whose libpmix.so Slurm's mpi/pmix plugin opens (docs/slurm.md); ISA-L
# (libisal-dev: the erasure code, optional in the build, required by the tests).
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin liburing-dev libcmocka-dev
      zlib1g-dev libjson-c-dev libisal-dev python3 python3-sklearn python3-pytest python3-numpy
      python3-torch python3-torchvision python3-prometheus-client python3-matplotlib
      python3-pip python3-venv mypy
      fio slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libpmix-dev)
# Packages whose maintainer scripts start a daemon (invoke-rc.d) and enable it at boot: the tests
# start their own, with their own configuration and key, so none of these runs otherwise.
daemons=(munge slurmctld slurmd)
case ${1:-} in
  --list) printf '%s\n' "${pkgs[@]}"; exit 0 ;;
  -h|--help) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 0 ;;
  "") ;;
  *) echo "ensure-deps: unknown argument $1 (see scripts/ensure-deps.sh --help)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "ftrt: installing missing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # No daemon starts during the installation: a policy that denies every start (invoke-rc.d
    # and deb-systemd-invoke ask /usr/sbin/policy-rc.d first) unless the machine has its own.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\n# ftrt scripts/ensure-deps.sh: no daemon starts while it installs\nexit 101\n' \
        > "$policy"
      chmod 755 "$policy"
      trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    for d in "${daemons[@]}"; do  # nor at the next boot, if installed now
      case " ${missing[*]} " in
        *" $d "*) deb-systemd-helper disable "$d.service" >/dev/null 2>&1 || true
                  update-rc.d "$d" disable >/dev/null 2>&1 || true ;;
      esac
    done
  else
    echo "ftrt: missing Debian packages: ${missing[*]}" >&2
    echo "      run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
