#!/usr/bin/env bash
# Builds zeroc's fuzz targets (test/fuzz/, docs/fuzzing.md) with clang-19,
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/,
# and runs each for SECONDS (default 60). The working corpus grows in
# build-fuzz/corpus/TARGET (seeded from test/fuzz/corpus/TARGET and
# test/fuzz/regressions/TARGET); what a run finds (crash-*, leak-*,
# timeout-*, oom-*) lands in build-fuzz/findings/TARGET/. A summary line per
# target gives its executions and findings; the exit status is non-zero
# when any target found something.
#
#   bench/fuzz.sh [SECONDS] [TARGET...]      (SECONDS 0: build only)
#
# Needs clang-19 and libclang-rt-19-dev (scripts/setup.sh --fuzz installs
# them). Timings and execution counts depend on the machine: they belong
# here, not in the tests.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
shift || true
build="${ZEROC_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${ZEROC_FUZZ_JOBS:-2}"

for tool in clang-19 clang++-19; do
  if ! command -v "$tool" >/dev/null; then
    echo "fuzz.sh: $tool not found; run scripts/setup.sh --fuzz" >&2
    exit 1
  fi
done

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
san="$san -fno-omit-frame-pointer -gline-tables-only"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DCMAKE_C_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_CXX_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" \
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
  -DZEROC_FUZZ=ON -DZEROC_ENABLE_CUDA=OFF "${launcher[@]}" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2
  exit 1
}
nice ninja -C "$build" -j"$jobs" -l 3 zeroc-fuzzers
[ "$seconds" = 0 ] && exit 0

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$build"/bin/zeroc-fuzz-*; do
    case "$f" in *-replay-*) continue ;; esac
    targets+=("${f##*/zeroc-fuzz-}")
  done
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
summary=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  seeds=("$root/test/fuzz/corpus/$t")
  [ -d "$root/test/fuzz/regressions/$t" ] && seeds+=("$root/test/fuzz/regressions/$t")
  log="$build/fuzz-$t.log"
  echo "fuzz.sh: $t for ${seconds}s (log: $log)" >&2
  set +e
  # -timeout: an input that runs 10 s is a hang; -rss_limit_mb: one that
  # needs 2 GiB is a finding too (a hostile file must not make a reader
  # allocate what it claims).
  nice "$build/bin/zeroc-fuzz-$t" "$corpus" "${seeds[@]}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=262144 -print_final_stats=1 \
    -artifact_prefix="$findings/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  found=$(find "$findings" -type f | wc -l)
  summary+=("$(printf '%-12s %8ss  %10s execs  %3d finding(s)  exit %d' "$t" "$seconds" "$execs" "$found" "$rc")")
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
  fi
done
printf '%s\n' "${summary[@]}"
exit $status
