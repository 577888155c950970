#!/usr/bin/env bash
# Configures (once) and builds zeroc in $BUILD_DIR (default: build/).
# Extra arguments are passed to ninja, e.g. `scripts/build.sh zeroc`;
# $ZEROC_CMAKE_ARGS, extra arguments to the first configure (scripts/test.sh
# --sanitize uses it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"

# Shell words, quotes respected: -DCMAKE_CXX_FLAGS='-fsanitize=thread -g'.
eval "extra=(${ZEROC_CMAKE_ARGS:-})"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
    "${extra[@]}" >/dev/null
fi
ninja -C "$build" "$@"
