#!/usr/bin/env bash
# Installs the Debian packages amp needs that are not installed yet.
# Usage: scripts/deps.sh GROUP...   (groups: build test run bench fuzz)
# Checks first and does nothing when all is present; runs `apt-get update`
# only when something must be installed. Needs root only to install.
set -euo pipefail

pkgs_build="cmake make gcc libc6-dev pkg-config zlib1g-dev libcjson-dev"
pkgs_test="libcmocka-dev dataset-fashion-mnist"
pkgs_run="dataset-fashion-mnist"
pkgs_bench="libopenblas-dev"
pkgs_fuzz="clang libclang-rt-14-dev libomp-dev"

want=""
for g in "$@"; do
  v="pkgs_$g"
  if [ -z "${!v+x}" ]; then echo "deps.sh: unknown group '$g'" >&2; exit 2; fi
  want="$want ${!v}"
done

missing=""
for p in $want; do
  case " $missing " in *" $p "*) continue;; esac
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *"install ok installed"*) ;; *) missing="$missing $p";; esac
done

[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "deps.sh: missing Debian packages:$missing" >&2
  echo "deps.sh: run as root (or: sudo apt-get install$missing)" >&2
  exit 1
fi
echo "deps.sh: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing < /dev/null
