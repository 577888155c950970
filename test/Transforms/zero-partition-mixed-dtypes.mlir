// Parameters of different dtypes: stages 0 and 3 keep state per parameter
// and accept them; stages 1 and 2 flatten all parameters into one buffer of
// one dtype and reject them, naming the first parameter that differs.
// RUN: zeroc-opt %s --zero-partition="stage=0" | FileCheck %s --check-prefix=S0
// RUN: zeroc-opt %s --zero-partition="stage=3 world-size=2 persistence-threshold=0" | FileCheck %s --check-prefix=S3
// RUN: zeroc-opt %s --zero-partition="stage=1 world-size=2" -verify-diagnostics
// RUN: zeroc-opt %s --zero-partition="stage=2 world-size=2" -verify-diagnostics

// S0-LABEL: module @mixed
// S0-NEXT:  sched.tensor @h : tensor<8xf16> param on device
// S0-NEXT:  sched.tensor @h.grad : tensor<8xf16> grad of @h on device
// S0-NEXT:  sched.tensor @h.master : tensor<8xf32> master of @h on device
// S0-NEXT:  sched.tensor @h.exp_avg : tensor<8xf32> exp_avg of @h on device
// S0-NEXT:  sched.tensor @h.exp_avg_sq : tensor<8xf32> exp_avg_sq of @h on device
// S0-NEXT:  sched.tensor @s : tensor<8xf32> param on device
// S0-NEXT:  sched.tensor @s.grad : tensor<8xf32> grad of @s on device
// S0-NEXT:  sched.tensor @s.exp_avg : tensor<8xf32> exp_avg of @s on device
// S0-NEXT:  sched.tensor @s.exp_avg_sq : tensor<8xf32> exp_avg_sq of @s on device
// S0-NEXT:  sched.tensor @t : tensor<2xf16> param on device

// S3-LABEL: module @mixed
// S3-NEXT:  sched.tensor @h : tensor<8xf16> param sharded on device
// S3:       sched.tensor @s : tensor<8xf32> param sharded on device
// S3-NEXT:  sched.tensor @s.grad : tensor<8xf32> grad of @s sharded on device
// S3-NEXT:  sched.tensor @s.exp_avg : tensor<8xf32> exp_avg of @s sharded on device
module @mixed {
  model.param @h : tensor<8xf16> init <zeros>
  // expected-error-re @+1 {{stage {{[12]}} flattens all parameters into one group of one dtype, but @s is 'f32' and earlier parameters are 'f16'}}
  model.param @s : tensor<8xf32> init <zeros>
  model.param @t : tensor<2xf16> init <zeros>
}
