#!/usr/bin/env bash
# The first run on a machine with an NVIDIA GPU (issue 17): build amp with
# the CUDA backend required, show the device, run the CUDA tests (they
# compare every CUDA entry with the CPU backend: every test_cuda_* program), then
# the whole suite.
#
# Usage: scripts/gpu_check.sh [BUILD_DIR]      (default build-gpu)
#   AMP_GPU_DEPS=DIR   .deb files to unpack first (dpkg -x) when the machine
#                      lacks amp's build dependencies (no apt, no network):
#                      make them here with scripts/gpu_check.sh --pack DIR
#   JOBS=N             build and test parallelism (default nproc)
#   AMP_CUDA_ARCHITECTURES="80;90"  (default "90": the H100s it runs on; one
#                      architecture compiles in half the time)
#   AMP_GPU_SUITE=0    stop after the CUDA tests (the whole suite needs the
#                      datasets scripts/deps.sh downloads)
# Writes the log to BUILD_DIR/gpu_check.log as well as stdout. Exits
# nonzero when the build fails, no GPU is usable, or a test fails.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
pkgs="libcmocka0 libcmocka-dev libcjson1 libcjson-dev zlib1g zlib1g-dev pkgconf pkgconf-bin libpkgconf3 pkg-config"

if [ "${1:-}" = "--pack" ]; then
  # on a Debian machine with network: download the build dependencies amp's
  # build needs beyond a compiler, CMake and nvcc
  dir="${2:?usage: scripts/gpu_check.sh --pack DIR}"
  mkdir -p "$dir"
  (cd "$dir" && apt-get download $pkgs)
  ls -l "$dir"
  exit 0
fi

build="${1:-build-gpu}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$here/$build"
exec > >(tee "$here/$build/gpu_check.log") 2>&1
cd "$here"

echo "== machine"; date -u; uname -a
command -v nvidia-smi > /dev/null && nvidia-smi || echo "nvidia-smi: not found"
command -v nvcc > /dev/null || { echo "gpu_check: nvcc is not on PATH"; exit 1; }
nvcc --version | tail -2

cmake_extra=()
if [ -n "${AMP_GPU_DEPS:-}" ]; then
  root="$here/$build/deps-root"
  mkdir -p "$root"
  for deb in "$AMP_GPU_DEPS"/*.deb; do dpkg -x "$deb" "$root"; done
  # absolute links (zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.x)
  # point into the root instead, so they do not depend on the host's version
  while IFS= read -r l; do
    t="$(readlink "$l")"
    case "$t" in /*) [ -e "$root$t" ] && ln -sfn "$root$t" "$l" ;; esac
  done < <(find "$root" -type l)
  multi="$root/usr/lib/x86_64-linux-gnu"
  # the unpacked packages' .pc files say prefix=/usr: the sysroot maps it
  export PKG_CONFIG_PATH="$multi/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PKG_CONFIG_SYSROOT_DIR="$root"
  # pkg-config itself, where the machine has none (CMake's FindPkgConfig needs it)
  command -v pkg-config > /dev/null || export PATH="$PATH:$root/usr/bin"
  export LD_LIBRARY_PATH="$multi:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_extra+=("-DCMAKE_PREFIX_PATH=$root/usr" "-DCMAKE_LIBRARY_PATH=$multi" "-DCMAKE_INCLUDE_PATH=$root/usr/include")
fi

# -DAMP_CUDA=ON explicitly: AUTO would build it here too (nvcc and a GPU), but
# a GPU the configure did not see would give a CPU-only amp; with ON the build
# is the CUDA one wherever nvcc is, and the check below says when no GPU is usable
echo "== configure (AMP_CUDA=ON)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DAMP_CUDA=ON \
  -DAMP_CUDA_ARCHITECTURES="${AMP_CUDA_ARCHITECTURES:-90}" "${cmake_extra[@]}" | grep -E "amp:|CUDA|Error" || true
echo "== build"
cmake --build "$build" -j "$jobs" 2>&1 | grep -E " error|warning:|Error [0-9]|Built target amp$" || true
[ -x "$build/amp" ] || { echo "gpu_check: the build failed (see above)"; exit 1; }

echo "== the CUDA tests"
# every test_cuda_* program and test_device, each to its end (one run shows every failure)
set +e
(cd "$build" && ctest -R '^test_(cuda_|device$|op_cases$|backend_families$)' --output-on-failure -j 4 --timeout "${AMP_GPU_TEST_TIMEOUT:-300}") |
  tee "$build/gpu_tests.log"
rc=${PIPESTATUS[0]}
set -e
grep -qE "test_cuda_kernels .*Skipped" "$build/gpu_tests.log" &&
  { echo "gpu_check: no usable GPU (the CUDA tests were skipped)"; exit 1; }
[ $rc = 0 ] || exit $rc

[ "${AMP_GPU_SUITE:-1}" = 0 ] && { echo "gpu_check: CUDA tests passed (the suite was not asked for)"; exit 0; }
echo "== the whole suite"
(cd "$build" && ctest --output-on-failure -j "$jobs")
echo "gpu_check: done"
