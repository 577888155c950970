#!/usr/bin/env bash
# Builds zeroc and runs the whole test suite: lit (IR and command-line tests)
# and ctest (GoogleTest units). Ends with each runner's summary and a total.
#
#   scripts/test.sh [--sanitize=address|thread|openmp] [CTEST_REGEX]
#
# --sanitize=address builds in build-asan/ with AddressSanitizer and
# UndefinedBehaviorSanitizer (g++; any report fails the test), and
# --sanitize=thread in build-tsan/ with ThreadSanitizer, for the executor's
# stream workers, the communicator's progress thread and the checkpoint
# writer. --sanitize=openmp builds the runtime alone in build-archer/ with
# clang-19, LLVM's libomp and TSan, and runs its tests with Archer
# (libarcher), which gives TSan the OpenMP regions' barriers: races inside
# our OpenMP kernels, which the g++ TSan build cannot see (libgomp is not
# instrumented), are reported (no lit: there is no compiler in that build).
# Suppressions are in scripts/sanitizers/, third-party code only,
# each with its reason. CTEST_REGEX limits ctest to the tests it matches
# (lit still runs whole).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sanitize=""
regex=""
for arg in "$@"; do
  case "$arg" in
  --sanitize=address | --sanitize=thread | --sanitize=openmp) sanitize="${arg#--sanitize=}" ;;
  --sanitize=*)
    echo "test.sh: --sanitize takes address, thread or openmp, found '${arg#--sanitize=}'" >&2
    exit 2
    ;;
  -*)
    echo "usage: scripts/test.sh [--sanitize=address|thread|openmp] [CTEST_REGEX]" >&2
    exit 2
    ;;
  *) regex="$arg" ;;
  esac
done
supp="$root/scripts/sanitizers"
case "$sanitize" in
address)
  build="${BUILD_DIR:-$root/build-asan}"
  flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1"
  export ZEROC_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEROC_ENABLE_CUDA=OFF -DCMAKE_CXX_FLAGS='$flags' -DCMAKE_C_FLAGS='$flags' -DCMAKE_EXE_LINKER_FLAGS='$flags' -DCMAKE_SHARED_LINKER_FLAGS='$flags'"
  # fast_unwind_on_malloc=0: Open MPI's libraries have no frame pointers;
  # the fast unwinder stops at their first frame ("<unknown module>"), and
  # the suppressions of lsan.supp, which name them, cannot match.
  # allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons its slabs by
  # hand when its header is compiled with ASan (ours, inlined) and
  # unpoisons them only in code that was (not Debian's prebuilt
  # libLLVM/libMLIR), so MLIR's first type registration is a false
  # use-after-poison; ASan's own checks stay on, the allocator's manual
  # marks are ignored.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:fast_unwind_on_malloc=0:allow_user_poisoning=0}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-suppressions=$supp/ubsan.supp:print_stacktrace=1:halt_on_error=1}"
  ;;
thread)
  build="${BUILD_DIR:-$root/build-tsan}"
  flags="-fsanitize=thread -fno-omit-frame-pointer -g1"
  export ZEROC_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEROC_ENABLE_CUDA=OFF -DCMAKE_CXX_FLAGS='$flags' -DCMAKE_C_FLAGS='$flags' -DCMAKE_EXE_LINKER_FLAGS='$flags' -DCMAKE_SHARED_LINKER_FLAGS='$flags'"
  # libgomp is not instrumented: the fork and join of our OpenMP regions
  # are told to TSan by hand (runtime/kernels/cpu/OmpEdges.h), and
  # tsan-libgomp.supp covers what libgomp itself reads (a region's shared
  # variables, before any of our code runs in the pool thread).
  # history_size=7 (4M accesses a thread, the most) keeps both stacks of a
  # report restorable (docs/fuzzing.md).
  mkdir -p "$build"
  cat "$supp/tsan.supp" "$supp/tsan-libgomp.supp" >"$build/tsan.supp"
  export TSAN_OPTIONS="${TSAN_OPTIONS:-suppressions=$build/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=7}"
  # OpenBLAS's own threads are not instrumented: one thread, no false races.
  export OPENBLAS_NUM_THREADS=1
  ;;
openmp)
  build="${BUILD_DIR:-$root/build-archer}"
  archer=/usr/lib/llvm-19/lib/libarcher.so
  if ! command -v clang++-19 >/dev/null || [ ! -f "$archer" ] ||
    [ ! -f /usr/lib/llvm-19/lib/libomp.so ]; then
    echo "test.sh: --sanitize=openmp needs clang-19, libomp-19-dev and $archer (scripts/setup.sh --fuzz installs them)" >&2
    exit 2
  fi
  flags="-fsanitize=thread -fno-omit-frame-pointer -g1"
  export ZEROC_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEROC_ENABLE_CUDA=OFF -DZEROC_BUILD_COMPILER=OFF -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_CXX_FLAGS='$flags' -DCMAKE_C_FLAGS='$flags' -DCMAKE_EXE_LINKER_FLAGS='$flags' -DCMAKE_SHARED_LINKER_FLAGS='$flags'"
  # Archer is an OMPT tool: libomp loads it and it tells TSan about every
  # barrier, task and lock of the OpenMP runtime (libgomp stays unsuppressed:
  # nothing here uses it).
  export OMP_TOOL_LIBRARIES="$archer"
  export ARCHER_OPTIONS="${ARCHER_OPTIONS:-verbose=1}"
  mkdir -p "$build"
  cp "$supp/tsan.supp" "$build/tsan.supp"
  export TSAN_OPTIONS="${TSAN_OPTIONS:-suppressions=$build/tsan.supp:halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1}"
  export OPENBLAS_NUM_THREADS=1
  ;;
*)
  build="${BUILD_DIR:-$root/build}"
  ;;
esac
export BUILD_DIR="$build"

"$root/scripts/build.sh" || exit 1

results=("$build/ctest-results.xml")
if [ "$sanitize" = openmp ]; then
  echo "== lit: not run (build-archer/ is the runtime alone, without zeroc)"
  lit_rc=0
else
  echo "== lit"
  python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv \
    --xunit-xml-output "$build/lit-results.xml" "$build/test"
  lit_rc=$?
  results=("$build/lit-results.xml" "${results[@]}")
fi

echo "== ctest"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" ${regex:+-R "$regex"} \
  --output-junit "$build/ctest-results.xml"
ctest_rc=$?

python3 - "${results[@]}" <<'PY'
import sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        failed += 1
        continue
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
PY

[ $lit_rc -eq 0 ] && [ $ctest_rc -eq 0 ]
