#!/usr/bin/env bash
# Builds zeroc and runs its main job on a bundled example: GPT-2 (124M) from
# its Hugging Face config.json, compiled with a DeepSpeed ZeRO-3 config for 8
# ranks into a plan file, then inspected; then a tiny model trained by zerorun.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" zeroc zerorun >/dev/null

out="$build/demo"
mkdir -p "$out"
set -x
"$build/bin/zeroc" gen "$root/examples/configs/gpt2/config.json" \
  --seq-len 1024 --quiet -o "$out/gpt2.mlir"
"$build/bin/zeroc" stats "$out/gpt2.mlir"
# The DeepSpeed config decides micro-batch (4) and precision (bf16); the fit
# check covers every memory of the cluster.
"$build/bin/zeroc" "$out/gpt2.mlir" --config "$root/examples/ds_configs/zero3.json" \
  --world-size 8 --cluster h100-sxm-8 -o "$out/gpt2-zero3.plan.json"
"$build/bin/zeroc" inspect "$out/gpt2-zero3.plan.json" --cluster h100-sxm-8

# Then train a tiny model for real on one rank (mpirun -np N for more).
"$build/bin/zeroc" gen --preset tiny-gpt2 --seq-len 16 --micro-batch 2 --quiet \
  -o "$out/tiny.mlir"
"$build/bin/zeroc" "$out/tiny.mlir" --world-size 1 --quiet -o "$out/tiny.plan.json"
"$build/bin/zerorun" "$out/tiny.plan.json" --synthetic --steps 10
