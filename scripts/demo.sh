#!/usr/bin/env bash
# Builds zeroc and runs it on a bundled example: GPT-2 (124M) from its
# Hugging Face config.json, written as a model-dialect graph and summarized.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" zeroc >/dev/null

out="$build/demo"
mkdir -p "$out"
set -x
"$build/bin/zeroc" gen "$root/examples/configs/gpt2/config.json" \
  --seq-len 1024 --micro-batch 8 --dtype bf16 -o "$out/gpt2.mlir"
"$build/bin/zeroc" stats "$out/gpt2.mlir"
