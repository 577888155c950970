#!/usr/bin/env bash
# Builds zeroc and runs its main job on a bundled example: GPT-2 (124M) from
# its Hugging Face config.json, compiled with a DeepSpeed ZeRO-3 config for 8
# ranks into a plan file, then inspected.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" zeroc >/dev/null

out="$build/demo"
mkdir -p "$out"
set -x
"$build/bin/zeroc" gen "$root/examples/configs/gpt2/config.json" \
  --seq-len 1024 --micro-batch 4 --dtype bf16 --quiet -o "$out/gpt2.mlir"
"$build/bin/zeroc" stats "$out/gpt2.mlir"
"$build/bin/zeroc" "$out/gpt2.mlir" --config "$root/examples/ds_configs/zero3.json" \
  --world-size 8 -o "$out/gpt2-zero3.plan.json"
"$build/bin/zeroc" inspect "$out/gpt2-zero3.plan.json"
