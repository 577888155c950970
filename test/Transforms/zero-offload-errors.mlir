// Every combination zero-offload rejects, with the values in the message.
// RUN: not zeroc-opt %s -split-input-file --zero-offload=param=cpu 2>&1 | FileCheck %s --check-prefix=PARAM
// RUN: not zeroc-opt %s -split-input-file --zero-offload=param=nvme 2>&1 | FileCheck %s --check-prefix=PARAM
// RUN: not zeroc-opt %s -split-input-file --zero-offload=optimizer=cpu 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not zeroc-opt %s -split-input-file --zero-offload=optimizer=gpu 2>&1 | FileCheck %s --check-prefix=DEVICE
// RUN: not zeroc-opt %s -split-input-file --zero-offload=param=disk 2>&1 | FileCheck %s --check-prefix=PDEVICE
// RUN: not zeroc-opt %s -split-input-file --zero-offload=optimizer=CPU 2>&1 | FileCheck %s --check-prefix=CASE

// Parameter offload needs partitioned parameters (stage 3).
// PARAM: error: parameter offload needs ZeRO stage 3, found stage 0 (offload_param applies to partitioned parameters only)
// PARAM: error: parameter offload needs ZeRO stage 3, found stage 1
// PARAM: error: parameter offload needs ZeRO stage 3, found stage 2
// PARAM-NOT: error:
// PARAM: error: module has no sched.stage: run zero-partition first

// Optimizer offload needs partitioned optimizer state (stage 1 and up).
// OPT: error: optimizer offload needs ZeRO stage 1, 2 or 3, found stage 0
// OPT-NOT: error:
// OPT: error: module has no sched.stage: run zero-partition first

// The devices are enum options (none, cpu, nvme): a bad value is refused
// once, when the pipeline is parsed, before any pass runs.
// DEVICE: for the --optimizer option: Cannot find option named 'gpu'!
// DEVICE-NOT: error: {{.+}}
// PDEVICE: for the --param option: Cannot find option named 'disk'!
// PDEVICE-NOT: error: {{.+}}
// DeepSpeed spells the devices in lower case.
// CASE: for the --optimizer option: Cannot find option named 'CPU'!
// CASE-NOT: error: {{.+}}

module @stage0 attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

module @stage1 attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

module @stage2 attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

module @stage3 attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
}

// -----

module @unpartitioned {
  model.param @w : tensor<4xf32> init <zeros>
}
