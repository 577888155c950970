#!/usr/bin/env bash
# Regenerates the plans checked in under test/Runtime/Inputs with zeroc, so
# that the runtime's tests run where no compiler is built (a GPU machine's
# runtime-only build: -DZEROC_BUILD_COMPILER=OFF). The ctest
# `checked_in_plans_current` runs this into a scratch directory and fails
# when a checked-in plan differs from what zeroc now writes.
#
#   scripts/gen-test-plans.sh [OUT_DIR]   (default: test/Runtime/Inputs)
#
# ZEROC (default build/bin/zeroc) is the compiler to use.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/test/Runtime/Inputs}"
zeroc="${ZEROC:-$root/build/bin/zeroc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/gpu-match"

# The executor's in-process plans (test/Runtime/ExecutorTest.cpp,
# test/Runtime/gpu/CudaExecutorTest.cpp): sequence 8, micro-batch 2,
# accumulation 2, small buckets so that every stream has work.
"$zeroc" gen --preset tiny-gpt2 --seq-len 8 --micro-batch 2 --quiet \
  -o "$work/gpt2.mlir"
cat >"$work/stage3.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
   "overlap_comm": true, "reduce_bucket_size": 3000,
   "stage3_prefetch_bucket_size": 3000}}
JSON
"$zeroc" "$work/gpt2.mlir" --config "$work/stage3.json" --world-size 1 \
  -o "$out/tiny-gpt2-stage3-ws1.json"

"$zeroc" gen --preset tiny-llama --seq-len 8 --micro-batch 2 --dtype bf16 \
  --quiet -o "$work/llama.mlir"
cat >"$work/stage2.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 2, "overlap_comm": true,
   "reduce_bucket_size": 3000, "offload_optimizer": {"device": "cpu"}}}
JSON
"$zeroc" "$work/llama.mlir" --config "$work/stage2.json" --world-size 1 \
  -o "$out/tiny-llama-bf16-stage2-offload-ws1.json"

# zerorun_e2e.py gpu-match: the same SPECs as its compiled variants.
e2e=("$root/test/Runtime/zerorun_e2e.py" --zeroc "$zeroc" --zerorun none
     --mpirun none --work "$work/e2e")
for c in "stage0_np1|0,1,1" "stage3_np1_bf16|3,1,1,dtype=bf16,persist=0" \
         "stage2_np1_offload|2,1,1,offload=cpu" \
         "stage3_np1_offload_all|3,1,1,offload=cpu,param_offload=cpu,persist=0" \
         "stage3_np1_llama|3,1,1,model=llama,persist=0" \
         "stage2_np1_bf16_padded|2,1,1,dtype=bf16,pad_vocab=100" \
         "mixtral_ep2_stage0_np2|0,2,1,model=mixtral,ep=2"; do
  python3 "${e2e[@]}" --out "$out/gpu-match/${c%%|*}.json" "emit-plan:${c#*|}"
done
