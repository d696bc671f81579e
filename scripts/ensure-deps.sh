#!/usr/bin/env bash
# Installs the Debian packages ftrt needs when any is missing (as root, with apt-get), and
# says what to run otherwise. Sourced or run by examples/demo.sh and tests/run.sh.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin liburing-dev libcmocka-dev
      zlib1g-dev libjson-c-dev python3 python3-sklearn python3-pytest python3-numpy
      python3-torch python3-prometheus-client python3-matplotlib fio)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "ftrt: installing missing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "ftrt: missing Debian packages: ${missing[*]}" >&2
    echo "      run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
