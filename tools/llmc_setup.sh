#!/usr/bin/env bash
# Builds llm.c's CPU trainer (train_gpt2.c, fp32, OpenMP) OUTSIDE this
# repository for `amp bench train --model gpt` (the GPT-2 124M comparison),
# with random weights and tokens in its file formats (tools/llmc_files.py).
# Nothing of llm.c is copied into amp.
#
#   tools/llmc_setup.sh SOURCE DIR
#   export AMP_LLMC_DIR=DIR        # make bench / amp bench train read it
#
# SOURCE: a checkout of https://github.com/karpathy/llm.c, or a bare git
# directory of one (exported with git archive). DIR must not be inside the
# amp tree. Flags: llm.c's own Makefile's (-Ofast -march=native -fopenmp -DOMP).
set -euo pipefail
src=${1:?usage: tools/llmc_setup.sh SOURCE DIR}
dir=${2:?usage: tools/llmc_setup.sh SOURCE DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case "$dir/" in "$here"/*) echo "llmc_setup: $dir is inside the amp tree; build llm.c elsewhere" >&2; exit 2 ;; esac
if [ -f "$src/train_gpt2.c" ]; then
  cp -r "$src/." "$dir/"
else
  git --git-dir="$src" archive HEAD | tar -x -C "$dir"
fi
cc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result "$dir/train_gpt2.c" -lm -o "$dir/train_gpt2"
/usr/bin/python3 "$here/tools/llmc_files.py" "$dir"
echo "llm.c built in $dir: export AMP_LLMC_DIR=$dir"
