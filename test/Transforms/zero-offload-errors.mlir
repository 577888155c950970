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

// DEVICE-COUNT-4: error: zero-offload: unknown optimizer device 'gpu', expected none, cpu or nvme
// PDEVICE-COUNT-4: error: zero-offload: unknown param device 'disk', expected none, cpu or nvme
// DeepSpeed spells the devices in lower case.
// CASE-COUNT-4: error: zero-offload: unknown optimizer device 'CPU', expected none, cpu or nvme

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
