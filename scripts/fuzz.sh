#!/usr/bin/env bash
# Runs amp's libFuzzer targets (tests/fuzz/fuzz_*.c) for a while each.
#   scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET] [TARGET...]
# BUILD_DIR holds the fuzz_* binaries (cmake -DAMP_FUZZ=ON with clang; `make fuzz`
# does both). Each target starts from its seed corpus in tests/fuzz/corpus/<name>/
# (copied, the seeds stay untouched) and a dictionary tests/fuzz/<name>.dict when
# there is one. New corpus entries stay in BUILD_DIR/fuzz-corpus/<name>/, crash
# inputs land in BUILD_DIR/fuzz-crashes/<name>/. Every crash should become a
# regression test: copy its input to tests/data/fuzz/<name>/ under a name not
# starting with crash-/leak-/timeout- (.gitignore drops those), e.g.
# tests/data/fuzz/<name>/regress-<what>, fix the bug; tests/test_fuzz_regress.c
# replays that folder in every build.
# Prints executions and crashes per target; exits 1 if any target crashed.
set -uo pipefail

build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]}
secs=${2:-60}
shift $(( $# >= 2 ? 2 : $# ))
root=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/fuzz_*.c; do
    n=$(basename "$f" .c); targets+=("${n#fuzz_}")
  done
fi

export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
summary=""
for t in "${targets[@]}"; do
  bin="$build/fuzz_$t"
  if [ ! -x "$bin" ]; then echo "fuzz.sh: $bin is missing (build with -DAMP_FUZZ=ON)" >&2; exit 2; fi
  corpus="$build/fuzz-corpus/$t"; crashes="$build/fuzz-crashes/$t"
  mkdir -p "$corpus" "$crashes"
  cp -n "$root"/tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  dict=()
  [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  log="$build/fuzz-$t.log"
  echo "== fuzz_$t: ${secs}s, corpus $corpus"
  "$bin" "$corpus" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
         -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+')
  ncrash=$(find "$crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  line=$(printf '%-14s %10s execs  coverage %5s  corpus %5s  crash inputs %s' "fuzz_$t" "${execs:-?}" "${cov:-?}" \
         "$(ls "$corpus" | wc -l)" "$ncrash")
  summary="$summary$line"$'\n'
  if [ $rc -ne 0 ] || [ "$ncrash" -gt 0 ]; then
    status=1
    echo "fuzz_$t: FAILED (exit $rc); see $log and $crashes" >&2
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 >&2
  fi
done
echo
echo "$summary"
exit $status
