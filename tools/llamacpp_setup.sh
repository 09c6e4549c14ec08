#!/usr/bin/env bash
# Builds llama.cpp's benchmark tools OUTSIDE this repository for `amp bench
# infer --peers` (prefill and decode tokens/s beside amp's on the same GGUF
# file): llama-bench, llama-perplexity and llama-tokenize from the llama.cpp
# vendored in PyPI's llama-cpp-python 0.3.36 source distribution (pinned,
# SHA-256 checked). Nothing of llama.cpp is copied into amp.
#
#   tools/llamacpp_setup.sh DIR
#   export AMP_LLAMACPP_DIR=DIR/bin   # make bench / amp bench infer --peers read it
#
# DIR must not be inside the amp tree. Flags: llama.cpp's CMake defaults for a
# release build on this CPU (-DGGML_NATIVE=ON: every instruction set the CPU
# has, as amp's own dispatch uses), without libcurl (-DLLAMA_CURL=OFF).
# Needs python3 with pip, cmake, a C and C++ compiler (and 2-10 min of CPU).
# LLAMACPP_SDIST=FILE uses a copy of the source distribution already at hand
# (still SHA-256 checked) instead of pip download.
set -euo pipefail
dir=${1:?usage: tools/llamacpp_setup.sh DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
version=0.3.36
sdist=llama_cpp_python-$version.tar.gz
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case "$dir/" in "$here"/*) echo "llamacpp_setup: $dir is inside the amp tree; build llama.cpp elsewhere" >&2; exit 2 ;; esac
py=${PYTHON:-python3}
if [ -n "${LLAMACPP_SDIST:-}" ]; then
  cp "$LLAMACPP_SDIST" "$dir/$sdist"
elif [ ! -f "$dir/$sdist" ]; then
  echo "llamacpp_setup: fetching $sdist from PyPI"
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
    -d "$dir" "llama-cpp-python==$version" < /dev/null
fi
echo "$sha256  $dir/$sdist" | sha256sum -c --quiet - || {
  echo "llamacpp_setup: $sdist does not have the expected SHA-256 $sha256" >&2; exit 1; }
rm -rf "$dir/src"
mkdir -p "$dir/src"
tar -xzf "$dir/$sdist" -C "$dir/src" --strip-components=1
src="$dir/src/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "llamacpp_setup: no vendor/llama.cpp in $sdist" >&2; exit 1; }
cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$dir/bin" \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$dir/bin" > "$dir/configure.log"
cmake --build "$dir/build" -j "${JOBS:-$(nproc)}" --target llama-bench llama-perplexity llama-tokenize
"$dir/bin/llama-bench" --help > /dev/null
echo "llama.cpp built in $dir/bin: export AMP_LLAMACPP_DIR=$dir/bin"
