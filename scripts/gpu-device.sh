#!/usr/bin/env bash
# Issue #17's GPU work on a lent GPU machine that has CUDA, cuBLAS, NCCL (as
# PyTorch's wheels or the toolkit) and PyTorch, but no MLIR, MPI, OpenBLAS or
# network. Two halves:
#
#   here (a full build in build/):   scripts/gpu-device.sh bundle
#     packs zerorun, libzerorun-cuda.so, the `gpu` test binaries, their
#     CTestTestfile.cmake files (paths rewritten to .gpu/build), the shared
#     libraries they need that such a machine lacks (OpenMPI, OpenBLAS, fmt,
#     ...) and bench/gpu_plans (bench/gpu_bench.py prepare) into .gpu/, which
#     git ignores; carry `.gpu`.
#   there:                           scripts/gpu-device.sh run [SECTION...]
#     SECTION: info ctest hostadam calibrate bench124 sanitize bench350
#     profile (default: all but profile, in that order); the log (run.log),
#     the measured cluster file and the benchmark's tables and JSON go to
#     $OUT (or .gpu/out). The bench sections run zerorun with its default
#     kernels and with another choice (BENCH_KERNELS, default
#     "default,unpadded-vocab"; bench/gpu_bench.py's
#     KERNELS, docs/gpu-kernels.md),
#     back to back; the ctest section runs their gpu tests; hostadam times
#     the host Adam's loops (zeroc-host-adam-bench) on GPT-2 124M's
#     124,439,808 elements; kernels (not in the default) runs only the
#     optimizer and clipping kernels' tests; attention only the attention
#     kernels' and the training steps'.
#
# Each section has its own time limit, so one hang does not take the rest.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/.gpu

bundle() {
  set -e
  rm -rf "$G" && mkdir -p "$G/build/bin" "$G/build/lib" "$G/sys"
  local bins="zerorun ZerocCudaKernelTests ZerocCudaExecutorTests
              ZerocCudaArgumentTests ZerocNcclCommTests ZerocNcclCommMpiTests
              zeroc-host-adam-bench"
  for b in $bins; do cp "$ROOT/build/bin/$b" "$G/build/bin/"; done
  cp "$ROOT/build/lib/libzerorun-cuda.so" "$G/build/lib/"
  strip --strip-unneeded "$G"/build/bin/* "$G"/build/lib/*.so
  (cd "$ROOT/build" && find . -name CTestTestfile.cmake -o -name '*_include.cmake' \
     -o -name '*_tests.cmake') | while read -r f; do
    mkdir -p "$G/build/$(dirname "$f")"
    sed -e "s#$ROOT/build#$ROOT/.gpu/build#g" \
        -e 's#"[^"]*/python3"#"python3"#g' "$ROOT/build/$f" >"$G/build/$f"
  done
  # Everything the binaries load that is not glibc, the C++ runtime or a
  # CUDA library (those the GPU machine has, in matching versions).
  for f in "$G"/build/bin/* "$G"/build/lib/*.so; do ldd "$f"; done |
    awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
    while read -r l; do cp -L "$l" "$G/sys/"; done
  ls "$G/sys"
  # Compressed, to fit the 64 MiB a device call carries (OpenBLAS alone is
  # 35 MB); `run` unpacks them.
  tar -C "$G" -cJf "$G/sys.tar.xz" sys && rm -rf "$G/sys"
  tar -C "$ROOT" -cJf "$G/gpu_plans.tar.xz" bench/gpu_plans
  du -sh "$G" "$G"/*.tar.xz
}

# GPU_DEADLINE (seconds since the epoch), when set, bounds the whole run:
# a section starts only with 20 s left and gets what is left at most.
left() {
  if [ -z "${GPU_DEADLINE:-}" ]; then echo 100000; else
    echo $((GPU_DEADLINE - $(date +%s))); fi
}
deadline_ok() { [ "$(left)" -ge "$1" ]; }
limit() { # seconds: the smaller of the argument and what is left
  local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}

setup() {
  OUT=${OUT:-$G/out}
  mkdir -p "$OUT"
  [ -d "$G/sys" ] || tar -C "$G" -xJf "$G/sys.tar.xz"
  [ -d "$ROOT/bench/gpu_plans" ] || tar -C "$ROOT" -xJf "$G/gpu_plans.tar.xz"
  # The test binaries and the CTestTestfiles name this checkout by the path
  # it had where they were built.
  local built
  built=$(sed -n 's#.*"\(/[^"]*\)/\.gpu/build/bin/zerorun".*#\1#p' \
    "$G"/build/test/Runtime/CTestTestfile.cmake | head -1)
  if [ -n "$built" ] && [ "$built" != "$ROOT" ] && [ ! -e "$built" ]; then
    mkdir -p "$(dirname "$built")" && ln -s "$ROOT" "$built"
  fi
  local d dirs=""
  for n in libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudart.so.13; do
    d=$(find /usr/local/cuda/ /usr/lib /opt /usr/local/lib -name "$n" \
          2>/dev/null | head -1)
    d=${d:+$(dirname "$d")}
    case ":$dirs:" in *":$d:"*) ;; *) [ -n "$d" ] && dirs="$dirs:$d" ;; esac
  done
  export LD_LIBRARY_PATH="$G/sys$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$G/build/bin:/usr/local/cuda/bin:$PATH"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}

sec_info() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  ldd "$G/build/lib/libzerorun-cuda.so" | grep -E "not found|cublas|nccl|cudart"
  ldd "$G/build/bin/zerorun" | grep "not found"
  nproc; free -g | head -2
}

sec_ctest() {
  timeout "$(limit "${CTEST_LIMIT:-300}")" ctest --test-dir "$G/build" -L gpu -E 'comm_nccl_(np|timeout)' \
    --output-on-failure -j 4 --timeout "${CTEST_TIMEOUT:-240}" ${CTEST_ARGS:-}
}

sec_sanitize() { # the f32 plan (tiled attention) and the bf16 one (tensor cores)
  local plan t
  for plan in ${SANITIZE_PLANS:-tiny-gpt2-stage3-ws1 tiny-llama-bf16-stage2-offload-ws1}; do
    for t in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      deadline_ok 60 || { echo "sanitize $plan $t: skipped (deadline)"; continue; }
      echo "== compute-sanitizer --tool $t, $plan"
      timeout "$(limit 120)" compute-sanitizer --tool $t --error-exitcode 9 \
        "$G/build/bin/zerorun" "$ROOT/test/Runtime/Inputs/$plan.json" \
        --device cuda --synthetic --steps 2 2>&1 | grep -v "^=========     \|^=========         Host Frame"
      echo "exit ${PIPESTATUS[0]}"
    done
  done
}

sec_calibrate() {
  # Also the GEMMs and flash attention of GPT-2 124M's and 350M's plans on
  # their own shapes (stages share them): 350M's steps ran 5-9% over the
  # interpolation between the square classes; and Llama-3-8B's layer
  # shapes at sequence 8192, which the presets otherwise price from
  # GPT-2's classes (scripts/preset-calibration.py carries them).
  local shapes=() p
  for p in "$ROOT"/bench/gpu_plans/gpt2-{124m,350m}.s0{,.unpadded}.plan.json \
           "$ROOT"/bench/gpu_plans/llama-8b-shapes.plan.json; do
    [ -f "$p" ] && shapes+=(--shapes "$p")
  done
  timeout "$(limit 240)" "$G/build/bin/zerorun" --calibrate --device cuda \
    ${shapes[@]+"${shapes[@]}"} -o "$OUT/cluster-gpu.json"
  echo "exit $?"
  # The GPU's memory against PyTorch's figure for it (an independent
  # reader of the driver), and a runtime reserve of a plausible size.
  python3 - "$OUT/cluster-gpu.json" <<'PY' || echo "calibration memory check: FAILED"
import json, sys
c = json.load(open(sys.argv[1]))["gpu"]
gib = 2.0 ** 30
mem, reserve = c["usable_memory_gib"]["value"], c["runtime_reserve_gib"]["value"]
try:
    import torch
    total = torch.cuda.get_device_properties(0).total_memory / gib
except Exception as e:  # noqa: BLE001
    total = None
    print("calibration memory check: no torch (%s)" % e)
print("calibration memory: gpu.usable_memory_gib %.2f (torch %s), runtime_reserve_gib %.2f"
      % (mem, "%.2f" % total if total else "-", reserve))
assert total is None or abs(mem - total) <= 0.01 * total, (mem, total)
assert 0.1 <= reserve <= 8, reserve
print("calibration memory check: ok")
PY
}

sec_bench() { # models
  deadline_ok 90 || { echo "bench $1: skipped (deadline)"; return; }
  PYTHONUNBUFFERED=1 timeout "$(limit "${BENCH_TIMEOUT:-400}")" python3 \
    "$ROOT/bench/gpu_bench.py" run --zerorun "$G/build/bin/zerorun" \
    --models "$1" --steps "${BENCH_STEPS:-12}" --warmup 3 \
    --out "$OUT/RESULTS-$1.md" --json "$OUT/bench-$1.json" \
    --kernels "${BENCH_KERNELS:-default,unpadded-vocab}" ${BENCH_ARGS:-}
  echo "exit $?"
}

sec_hostadam() { # the host Adam's loops at 1, 2, 4, 8 and 16 threads
  timeout "$(limit 150)" "$G/build/bin/zeroc-host-adam-bench" \
    --elements 124439808 --threads "${HOSTADAM_THREADS:-1,2,4,8,16}" \
    --repeats "${HOSTADAM_REPEATS:-5}"
  echo "exit $?"
}

sec_profile() { # GPT-2 124M: the GPU's timeline (CUDA events per op), its
  # streams' overlap (bench/trace_overlap.py), the PCIe bytes against the
  # plan's; with PROFILE_SYNC=1 also each op alone (--profile-sync)
  local conf
  for conf in ${PROFILE_CONFIGS:-s0 s3 s2off}; do
    deadline_ok 40 || { echo "profile $conf: skipped (deadline)"; continue; }
    timeout "$(limit 120)" "$G/build/bin/zerorun" \
      "$ROOT/bench/gpu_plans/gpt2-124m.$conf.plan.json" --device cuda \
      --synthetic --steps 4 --plain --profile "$OUT/trace-124m-$conf.json"
    echo "exit $?"
    python3 "$ROOT/bench/trace_overlap.py" "$OUT/trace-124m-$conf.json"
    if [ "${PROFILE_SYNC:-0}" = 1 ] && deadline_ok 40; then
      timeout "$(limit 120)" "$G/build/bin/zerorun" \
        "$ROOT/bench/gpu_plans/gpt2-124m.$conf.plan.json" --device cuda \
        --synthetic --steps 4 --plain --profile-sync \
        --profile "$OUT/trace-124m-$conf-sync.json"
      echo "exit $?"
    fi
  done
}

run() {
  setup
  local s sections=${*:-info ctest hostadam calibrate bench124 sanitize bench350}
  for s in $sections; do
    echo "=========== $s ($(date -u +%T), $(left) s left)"
    deadline_ok 20 || { echo "skipped: deadline"; continue; }
    case $s in
    info) sec_info ;;
    ctest) sec_ctest ;;
    attention) CTEST_ARGS="-R CudaAttention|CudaExecutor|zerorun_gpu" sec_ctest ;;
    sanitize) sec_sanitize ;;
    profile) sec_profile ;;
    hostadam) sec_hostadam ;;
    kernels) CTEST_ARGS="-R CudaExecutorKernels|OnePass|Adam|SumOfSquares|CudaArguments" sec_ctest ;;
    calibrate) sec_calibrate ;;
    bench124) sec_bench gpt2-124m ;;
    bench350) sec_bench gpt2-350m ;;
    *) echo "unknown section $s" ;;
    esac 2>&1 | tee -a "$OUT/run.log"
  done
  echo "=========== done ($(date -u +%T))"
}

case ${1:-} in
bundle) bundle ;;
run) shift; run "$@" ;;
*) sed -n '2,24p' "$0"; exit 2 ;;
esac
