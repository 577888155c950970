// zero-offload param=cpu|nvme (ZeRO-Infinity, stage 3): the sharded
// parameters move off the device and every gather of one first fetches this
// rank's shard into a device buffer, released once the gather completed.
// Replicated (persistent) parameters stay on the device and are read in
// place.
// RUN: zeroc-opt %s --zero-offload=param=cpu | FileCheck %s --check-prefixes=CHECK,CPU
// RUN: zeroc-opt %s --zero-offload=param=nvme | FileCheck %s --check-prefixes=CHECK,NVME
// RUN: zeroc-opt %s --zero-offload="param=nvme optimizer=cpu" | FileCheck %s --check-prefixes=CHECK,BOTH
// The result is valid IR.
// RUN: zeroc-opt %s --zero-offload=param=cpu | zeroc-opt -verify-diagnostics > /dev/null

// CHECK-LABEL: module @stage3
// CPU-NEXT:    sched.tensor @w : tensor<4x4xbf16> param sharded on host
// NVME-NEXT:   sched.tensor @w : tensor<4x4xbf16> param sharded on nvme
// BOTH-NEXT:   sched.tensor @w : tensor<4x4xbf16> param sharded on nvme
// Parameter offload alone leaves the optimizer state where it was.
// CPU-NEXT:    sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on device
// CPU-NEXT:    sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on device
// BOTH-NEXT:   sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on host
// BOTH-NEXT:   sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on host
// CPU:         sched.tensor @v : tensor<8xbf16> param sharded on host
// NVME:        sched.tensor @v : tensor<8xbf16> param sharded on nvme
// CHECK:       sched.tensor @b : tensor<4xbf16> param on device

// CHECK-LABEL: func.func @micro_step
// CHECK-NEXT:    %[[F:.*]] = sched.fetch_start [@w]
// CHECK-NEXT:    %[[S:.*]] = sched.wait %[[F]] : tensor<8xbf16>
// CHECK-NEXT:    %[[T:.*]] = sched.all_gather_start %[[S]] for [@w] : tensor<8xbf16>
// CHECK-NEXT:    %[[W:.*]] = sched.wait %[[T]] : tensor<4x4xbf16>
// CHECK-NEXT:    sched.release %[[S]] : tensor<8xbf16>
// CHECK-NEXT:    %[[B:.*]] = sched.read @b : tensor<4xbf16>
// CHECK-NEXT:    model.linear %{{.*}}, %[[W]], %[[B]]
// CHECK-NEXT:    sched.release %[[W]] : tensor<4x4xbf16>
// The backward gather fetches again.
// CHECK-NEXT:    %[[F2:.*]] = sched.fetch_start [@w]
// CHECK-NEXT:    %[[S2:.*]] = sched.wait %[[F2]] : tensor<8xbf16>
// CHECK-NEXT:    %[[T2:.*]] = sched.all_gather_start %[[S2]] for [@w] : tensor<8xbf16>
// CHECK-NEXT:    %[[W2:.*]] = sched.wait %[[T2]] : tensor<4x4xbf16>
// CHECK-NEXT:    sched.release %[[S2]] : tensor<8xbf16>
// CHECK-NEXT:    model.linear_grad_input %{{.*}}, %[[W2]]
// CHECK-NEXT:    sched.release %[[W2]] : tensor<4x4xbf16>
// A gather of two parameters (as zero-bucket leaves it) fetches each shard.
// CHECK-NEXT:    %[[FW:.*]] = sched.fetch_start [@w]
// CHECK-NEXT:    %[[SW:.*]] = sched.wait %[[FW]] : tensor<8xbf16>
// CHECK-NEXT:    %[[FV:.*]] = sched.fetch_start [@v]
// CHECK-NEXT:    %[[SV:.*]] = sched.wait %[[FV]] : tensor<4xbf16>
// CHECK-NEXT:    %[[T3:.*]] = sched.all_gather_start %[[SW]], %[[SV]] for [@w, @v]
// CHECK-NEXT:    %[[WV:.*]]:2 = sched.wait %[[T3]] : tensor<4x4xbf16>, tensor<8xbf16>
// CHECK-DAG:     sched.release %[[SW]] : tensor<8xbf16>
// CHECK-DAG:     sched.release %[[SV]] : tensor<4xbf16>
// CHECK:         sched.release %[[WV]]#0, %[[WV]]#1
// CHECK-NEXT:    return

// The optimizer step is not touched by parameter offload.
// CHECK-LABEL: func.func @optimizer_step
// CPU-NEXT:      sched.adam_update @w {{.*}} on device
// BOTH-NEXT:     sched.adam_update @w {{.*}} on host
// CHECK-NOT:     fetch_start
module @stage3 attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4x4xbf16> param sharded on device
  sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on device
  sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on device
  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w sharded on device
  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w sharded on device
  sched.tensor @v : tensor<8xbf16> param sharded on device
  sched.tensor @b : tensor<4xbf16> param on device
  func.func @micro_step(%x: tensor<1x2x4xbf16>, %dy: tensor<1x2x4xbf16>) -> tensor<1x2x4xbf16> {
    %s = sched.read @w : tensor<8xbf16>
    %t = sched.all_gather_start %s for [@w] : tensor<8xbf16>
    %w = sched.wait %t : tensor<4x4xbf16>
    %b = sched.read @b : tensor<4xbf16>
    %y = model.linear %x, %w, %b : (tensor<1x2x4xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x2x4xbf16>
    sched.release %w : tensor<4x4xbf16>
    %s2 = sched.read @w : tensor<8xbf16>
    %t2 = sched.all_gather_start %s2 for [@w] : tensor<8xbf16>
    %w2 = sched.wait %t2 : tensor<4x4xbf16>
    %dx = model.linear_grad_input %dy, %w2 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    sched.release %w2 : tensor<4x4xbf16>
    %sw = sched.read @w : tensor<8xbf16>
    %sv = sched.read @v : tensor<4xbf16>
    %t3 = sched.all_gather_start %sw, %sv for [@w, @v] : tensor<8xbf16>, tensor<4xbf16>
    %w3, %v3 = sched.wait %t3 : tensor<4x4xbf16>, tensor<8xbf16>
    sched.release %w3, %v3 : tensor<4x4xbf16>, tensor<8xbf16>
    return %dx : tensor<1x2x4xbf16>
  }
  func.func @optimizer_step() {
    sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    return
  }
}
