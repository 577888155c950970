// Every verifier error of the sched dialect, one case each: the C++
// verifiers of dialects/sched/SchedOps.cpp, then the ODS constraints.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// sched.tensor
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'sched.tensor' op a grad tensor must name the parameter or group it belongs to with 'of'}}
sched.tensor @w.grad : tensor<4xf32> grad on device

// -----

sched.tensor @v : tensor<4xf32> param on device
// expected-error @+1 {{'sched.tensor' op a param tensor cannot be 'of' another symbol}}
sched.tensor @w : tensor<4xf32> param of @v on device

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'sched.tensor' op only param tensors have an initialization}}
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device init #model.init<zeros>

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'sched.tensor' op only param tensors have valid_rows}}
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device {valid_rows = 2 : i64}

// -----

// expected-error @+1 {{'sched.tensor' op valid_rows 5 must be from 1 to the first dimension, 4}}
sched.tensor @w : tensor<4x2xf32> param on device {valid_rows = 5 : i64}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
// expected-error @+1 {{'sched.tensor' op 'of' @w.grad must name a param tensor or a flat group}}
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w.grad on device

// -----

// expected-error @+1 {{'sched.tensor' op 'of' @nothing does not name a sched.tensor or sched.flat_group}}
sched.tensor @w.grad : tensor<4xf32> grad of @nothing on device

// -----

func.func private @f()
// expected-error @+1 {{'sched.tensor' op 'of' @f does not name a sched.tensor or sched.flat_group}}
sched.tensor @w.grad : tensor<4xf32> grad of @f on device

//===----------------------------------------------------------------------===//
// sched.flat_group
//===----------------------------------------------------------------------===//

// -----

sched.tensor @a : tensor<4xf32> param on device
// expected-error @+1 {{'sched.flat_group' op member @b does not name a sched.tensor}}
sched.flat_group @g [@a, @b] numel 8 padded 8

// -----

sched.tensor @a : tensor<4xf32> param on device
sched.tensor @a.grad : tensor<4xf32> grad of @a on device
// expected-error @+1 {{'sched.flat_group' op member @a.grad must be a param tensor, found a grad tensor}}
sched.flat_group @g [@a, @a.grad] numel 8 padded 8

// -----

module attributes {sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @b : tensor<3xf32> param on device
  // expected-error @+1 {{'sched.flat_group' op numel 8 is not the sum of its parameters' elements, 7}}
  sched.flat_group @g [@a, @b] numel 8 padded 8
}

// -----

// 7 elements on 2 ranks pad to a multiple of 4.
module attributes {sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @b : tensor<3xf32> param on device
  // expected-error @+1 {{'sched.flat_group' op padded 7 should be 8 (7 rounded up to a multiple of 2 x world size 2)}}
  sched.flat_group @g [@a, @b] numel 7 padded 7
}

//===----------------------------------------------------------------------===//
// sched.read
//===----------------------------------------------------------------------===//

// -----

func.func @f() {
  // expected-error @+1 {{'sched.read' op tensor @w does not name a sched.tensor}}
  %w = sched.read @w : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on host
func.func @f() {
  // expected-error @+1 {{'sched.read' op cannot read @w on the host: only device tensors are read in place (fetch or copy it first)}}
  %w = sched.read @w : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on nvme
func.func @f() {
  // expected-error @+1 {{'sched.read' op cannot read @w on the nvme}}
  %w = sched.read @w : tensor<4xf32>
  return
}

// -----

// A sharded tensor reads as this rank's 1-D shard: ceil(6 / 4) = 2.
module attributes {sched.world_size = 4 : i64} {
  sched.tensor @w : tensor<2x3xf32> param sharded on device
  func.func @f() {
    // expected-error @+1 {{'sched.read' op result type 'tensor<2x3xf32>' is not this rank's part of @w, 'tensor<2xf32>'}}
    %w = sched.read @w : tensor<2x3xf32>
    return
  }
}

// -----

sched.tensor @w : tensor<2x3xf32> param on device
func.func @f() {
  // expected-error @+1 {{'sched.read' op result type 'tensor<6xf32>' is not this rank's part of @w, 'tensor<2x3xf32>'}}
  %w = sched.read @w : tensor<6xf32>
  return
}

//===----------------------------------------------------------------------===//
// sched.accumulate
//===----------------------------------------------------------------------===//

// -----

func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.accumulate' op target @w.grad does not name a sched.tensor}}
  sched.accumulate %g into @w.grad : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.accumulate' op target @w must be a grad tensor, found a param tensor}}
  sched.accumulate %g into @w : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param sharded on device
sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.accumulate' op target @w.grad is sharded: reduce-scatter into it instead}}
  sched.accumulate %g into @w.grad : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xbf16> param on device
sched.tensor @w.grad : tensor<4xbf16> grad of @w on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.accumulate' op value element type 'f32' does not match @w.grad, 'bf16'}}
  sched.accumulate %g into @w.grad : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<8xf32> param on device
sched.tensor @w.grad : tensor<8xf32> grad of @w on device
func.func @f(%g: tensor<2x2xf32>) {
  // expected-error @+1 {{'sched.accumulate' op value of 4 elements at offset 5 does not fit in @w.grad (8 elements)}}
  sched.accumulate %g into @w.grad at 5 : tensor<2x2xf32>
  return
}

//===----------------------------------------------------------------------===//
// sched.zero_grads
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f() {
  // expected-error @+1 {{'sched.zero_grads' op tensor @w must be a grad tensor, found a param tensor}}
  sched.zero_grads [@w]
  return
}

//===----------------------------------------------------------------------===//
// sched.all_gather_start
//===----------------------------------------------------------------------===//

// -----

sched.tensor @v : tensor<4xf32> param sharded on device
sched.tensor @w : tensor<4xf32> param sharded on device
func.func @f(%s: tensor<4xf32>) {
  // expected-error @+1 {{'sched.all_gather_start' op has 1 shards for 2 parameters}}
  %t = sched.all_gather_start %s for [@v, @w] : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.all_gather_start' op gathers nothing}}
  %t = "sched.all_gather_start"() <{params = []}> : () -> !sched.token
  return
}

// -----

sched.tensor @w : tensor<4xf32> param sharded on device
sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
func.func @f(%s: tensor<4xf32>) {
  // expected-error @+1 {{'sched.all_gather_start' op parameter @w.grad must be a param tensor, found a grad tensor}}
  %t = sched.all_gather_start %s for [@w.grad] : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f(%s: tensor<4xf32>) {
  // expected-error @+1 {{'sched.all_gather_start' op parameter @w is replicated: there is nothing to gather}}
  %t = sched.all_gather_start %s for [@w] : tensor<4xf32>
  return
}

// -----

module attributes {sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @f(%s: tensor<4xf32>) {
    // expected-error @+1 {{'sched.all_gather_start' op shard of @w has type 'tensor<4xf32>', expected 'tensor<2xf32>'}}
    %t = sched.all_gather_start %s for [@w] : tensor<4xf32>
    return
  }
}

//===----------------------------------------------------------------------===//
// sched.reduce_scatter_start
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param sharded on device
sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.reduce_scatter_start' op has 1 gradients, 2 targets and 1 offsets; expected one of each per gradient}}
  %t = sched.reduce_scatter_start %g into [@w.grad, @w.grad] at [0] : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.reduce_scatter_start' op reduces nothing}}
  %t = "sched.reduce_scatter_start"() <{targets = [], offsets = array<i64>}> : () -> !sched.token
  return
}

// -----

sched.tensor @w : tensor<4xf32> param sharded on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.reduce_scatter_start' op target @w must be a grad tensor, found a param tensor}}
  %t = sched.reduce_scatter_start %g into [@w] at [0] : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.reduce_scatter_start' op target @w.grad is replicated: it is reduced in place, so the gradient must be a sched.read of it}}
  %t = sched.reduce_scatter_start %g into [@w.grad] at [0] : tensor<4xf32>
  return
}

// -----

// In place, but reading another tensor.
sched.tensor @v : tensor<4xf32> param on device
sched.tensor @v.grad : tensor<4xf32> grad of @v on device
sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
func.func @f() {
  %g = sched.read @v.grad : tensor<4xf32>
  // expected-error @+1 {{'sched.reduce_scatter_start' op target @w.grad is replicated}}
  %t = sched.reduce_scatter_start %g into [@w.grad] at [0] : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<8xf32> param sharded on device
sched.tensor @w.grad : tensor<8xf32> grad of @w sharded on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.reduce_scatter_start' op gradient of 4 elements at offset 6 does not fit in @w.grad (8 elements)}}
  %t = sched.reduce_scatter_start %g into [@w.grad] at [6] : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<8xf32> param sharded on device
sched.tensor @w.grad : tensor<8xf32> grad of @w sharded on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.reduce_scatter_start' op gradient of 4 elements at offset -1 does not fit in @w.grad (8 elements)}}
  %t = sched.reduce_scatter_start %g into [@w.grad] at [-1] : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// sched.all_reduce_start, sched.all_gather_updates_start
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.all_reduce_start' op tensor @w.exp_avg must be a grad tensor, found a exp_avg tensor}}
  %t = sched.all_reduce_start [@w.exp_avg]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
func.func @f() {
  // expected-error @+1 {{'sched.all_reduce_start' op @w.grad is sharded: reduce-scatter it instead}}
  %t = sched.all_reduce_start [@w.grad]
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.all_reduce_start' op reduces nothing}}
  %t = sched.all_reduce_start []
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.all_gather_updates_start' op gathers nothing}}
  %t = sched.all_gather_updates_start []
  return
}

// -----

sched.tensor @w : tensor<4xf32> param sharded on device
func.func @f() {
  // expected-error @+1 {{'sched.all_gather_updates_start' op target @w must be a flat group or a replicated param tensor}}
  %t = sched.all_gather_updates_start [@w]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.all_gather_updates_start' op target @w.grad must be a flat group or a replicated param tensor}}
  %t = sched.all_gather_updates_start [@w.grad]
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.all_gather_updates_start' op target @nothing must be a flat group or a replicated param tensor}}
  %t = sched.all_gather_updates_start [@nothing]
  return
}

//===----------------------------------------------------------------------===//
// sched.fetch_start, sched.copy_start
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param sharded on host
sched.tensor @w.master : tensor<4xf32> master of @w sharded on host
func.func @f() {
  // expected-error @+1 {{'sched.fetch_start' op tensor @w.master must be a param tensor, found a master tensor}}
  %t = sched.fetch_start [@w.master]
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.fetch_start' op fetches nothing}}
  %t = sched.fetch_start []
  return
}

// -----

sched.tensor @w : tensor<4xf32> param sharded on device
func.func @f() {
  // expected-error @+1 {{'sched.fetch_start' op @w is already on the device: read it instead}}
  %t = sched.fetch_start [@w]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.master : tensor<4xf32> master of @w on host
func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op needs one destination per source, found 2 sources and 1 destinations}}
  %t = sched.copy_start [@w, @w] to [@w.master]
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op needs one destination per source, found 0 sources and 0 destinations}}
  %t = sched.copy_start [] to []
  return
}

// -----

// One error per op, for the first name that is missing.
func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op source @a does not name a sched.tensor}}
  %t = sched.copy_start [@a] to [@b]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op destination @nothing does not name a sched.tensor}}
  %t = sched.copy_start [@w] to [@nothing]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.master : tensor<8xf32> master of @w on host
func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op cannot copy @w to @w.master: their shapes or layouts differ}}
  %t = sched.copy_start [@w] to [@w.master]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.master : tensor<4xf32> master of @w sharded on host
func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op cannot copy @w to @w.master: their shapes or layouts differ}}
  %t = sched.copy_start [@w] to [@w.master]
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on host
sched.tensor @w.master : tensor<4xf32> master of @w on host
func.func @f() {
  // expected-error @+1 {{'sched.copy_start' op @w and @w.master are both on the host}}
  %t = sched.copy_start [@w] to [@w.master]
  return
}

//===----------------------------------------------------------------------===//
// sched.wait
//===----------------------------------------------------------------------===//

// -----

func.func @f(%t: !sched.token) {
  // expected-error @+1 {{'sched.wait' op token must come from an asynchronous start op}}
  sched.wait %t
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
func.func @f() {
  %t = sched.all_reduce_start [@w.grad]
  // expected-error @+1 {{'sched.wait' op token is waited on more than once}}
  sched.wait %t
  sched.wait %t
  return
}

// -----

module attributes {sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<2x2xf32> param sharded on device
  func.func @f(%s: tensor<2xf32>) {
    %t = sched.all_gather_start %s for [@w] : tensor<2xf32>
    // expected-error @+1 {{'sched.wait' op yields 1 values of types ('tensor<4xf32>') but 'sched.all_gather_start' completes with ('tensor<2x2xf32>')}}
    %w = sched.wait %t : tensor<4xf32>
    return
  }
}

// -----

// A fetch yields the shard, not the full tensor.
module attributes {sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<2x2xf32> param sharded on host
  func.func @f() {
    %t = sched.fetch_start [@w]
    // expected-error @+1 {{'sched.wait' op yields 1 values of types ('tensor<2x2xf32>') but 'sched.fetch_start' completes with ('tensor<2xf32>')}}
    %w = sched.wait %t : tensor<2x2xf32>
    return
  }
}

// -----

// In-place collectives complete with nothing.
sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
func.func @f() {
  %t = sched.all_reduce_start [@w.grad]
  // expected-error @+1 {{'sched.wait' op yields 1 values of types ('tensor<4xf32>') but 'sched.all_reduce_start' completes with ()}}
  %g = sched.wait %t : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f() {
  // expected-error @+1 {{'sched.unscale_grads' op gradient @w must be a grad tensor, found a param tensor}}
  sched.unscale_grads [@w] {static_loss_scale = 0.0, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.clip_grad_norm' op gradient @w.grad does not name a sched.tensor}}
  sched.clip_grad_norm [@w.grad] {max_norm = 1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'sched.clip_grad_norm' op max_norm must be positive, found 0}}
  sched.clip_grad_norm [] {max_norm = 0.0 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op @w.grad must name a param tensor or a flat group}}
  sched.adam_update @w.grad grad @w.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op exp_avg @w.exp_avg_sq must be a exp_avg tensor, found a exp_avg_sq tensor}}
  sched.adam_update @w grad @w.grad exp_avg @w.exp_avg_sq exp_avg_sq @w.exp_avg on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

sched.tensor @v : tensor<4xf32> param on device
sched.tensor @v.grad : tensor<4xf32> grad of @v on device
sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op grad @v.grad belongs to @v, not @w}}
  sched.adam_update @w grad @v.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xbf16> param on device
sched.tensor @w.grad : tensor<4xbf16> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op master @w.exp_avg must be a master tensor, found a exp_avg tensor}}
  sched.adam_update @w grad @w.grad master @w.exp_avg exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op lamb applies its own weight decay; adamw must not be set with it}}
  sched.adam_update @w grad @w.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw, lamb, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op lamb needs max_coeff and min_coeff}}
  sched.adam_update @w grad @w.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, lamb, min_coeff = 0.01 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op max_coeff and min_coeff need lamb}}
  sched.adam_update @w grad @w.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, min_coeff = 0.01 : f64}
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w on device
sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w on device
func.func @f() {
  // expected-error @+1 {{'sched.adam_update' op max_coeff must be >= min_coeff (0.5), found 0.1}}
  sched.adam_update @w grad @w.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, lamb, max_coeff = 0.1 : f64, min_coeff = 0.5 : f64}
  return
}

//===----------------------------------------------------------------------===//
// ODS constraints
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{'sched.tensor' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
sched.tensor @w : tensor<4xi32> param on device

// -----

// expected-error @+1 {{'sched.tensor' op attribute 'type' failed to satisfy constraint}}
sched.tensor @w : tensor<?xf32> param on device

// -----

// expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'role' [param, grad, master, exp_avg, exp_avg_sq]}}
sched.tensor @w : tensor<4xf32> weight on device

// -----

// expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'placement' [device, host, nvme]}}
sched.tensor @w : tensor<4xf32> param on disk

// -----

func.func @f() {
  // expected-error @+1 {{'sched.tensor' op expects parent op 'builtin.module'}}
  "sched.tensor"() <{placement = 0 : i32, role = 0 : i32, sym_name = "w", type = tensor<4xf32>}> : () -> ()
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'sched.read' op expects parent op 'func.func'}}
%w = sched.read @w : tensor<4xf32>

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f() {
  // expected-error @+1 {{'sched.read' op attribute 'stream' failed to satisfy constraint: a stream: compute (0), gather (1), reduce (2) or copy (3)}}
  %w = sched.read @w {stream = -1 : i64} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @f() {
  // expected-error @+1 {{'sched.read' op attribute 'stream' failed to satisfy constraint: a stream: compute (0), gather (1), reduce (2) or copy (3)}}
  %w = sched.read @w {stream = 4 : i64} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w on device
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'sched.accumulate' op attribute 'offset' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  sched.accumulate %g into @w.grad at -1 : tensor<4xf32>
  return
}

// -----

sched.tensor @a : tensor<4xf32> param on device
// expected-error @+1 {{'sched.flat_group' op attribute 'numel' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
sched.flat_group @g [@a] numel 0 padded 4

// -----

sched.tensor @w : tensor<4xf32> param on device
sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
func.func @f(%g: tensor<4xi32>) {
  // expected-error @+1 {{'sched.reduce_scatter_start' op operand #0 must be variadic of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4xi32>'}}
  %t = "sched.reduce_scatter_start"(%g) <{targets = [@w.grad], offsets = array<i64: 0>}> : (tensor<4xi32>) -> !sched.token
  return
}

// -----

func.func @f(%x: tensor<?xf32>) {
  // expected-error @+1 {{'sched.release' op operand #0 must be variadic of statically shaped tensor}}
  sched.release %x : tensor<?xf32>
  return
}

//===----------------------------------------------------------------------===//
// sched.all_to_all_start
//===----------------------------------------------------------------------===//

// -----

module attributes {sched.expert_parallel_size = 2 : i64, sched.world_size = 4 : i64} {
  func.func @f(%x: tensor<4x4xf32>) {
    // expected-error @+1 {{'sched.all_to_all_start' op exchanges tokens among the expert-parallel group, but names the world group}}
    %t = sched.all_to_all_start dispatch %x {bytes = 64 : i64, worst_bytes = 64 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    sched.wait %t : tensor<4x4xf32>
    return
  }
}

// -----

module attributes {sched.world_size = 4 : i64} {
  func.func @f(%x: tensor<4x4xf32>) {
    // expected-error @+1 {{'sched.all_to_all_start' op needs expert parallelism: the module's sched.expert_parallel_size must be at least 2, found 1}}
    %t = sched.all_to_all_start dispatch %x over expert_parallel {bytes = 64 : i64, worst_bytes = 64 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    sched.wait %t : tensor<4x4xf32>
    return
  }
}

// -----

module attributes {sched.expert_parallel_size = 2 : i64, sched.world_size = 4 : i64} {
  func.func @f(%x: tensor<4x4xf32>) {
    // expected-error @+1 {{'sched.all_to_all_start' op worst_bytes 32 is below the planned bytes 64: the worst case bounds every assumption}}
    %t = sched.all_to_all_start combine %x over expert_parallel {bytes = 64 : i64, worst_bytes = 32 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    sched.wait %t : tensor<4x4xf32>
    return
  }
}

// -----

module attributes {sched.expert_parallel_size = 2 : i64, sched.world_size = 4 : i64} {
  func.func @f(%x: tensor<4x4xf32>) {
    // expected-error @+1 {{'sched.all_to_all_start' op receives 'bf16' but sends 'f32'}}
    %t = sched.all_to_all_start combine %x over expert_parallel {bytes = 64 : i64, worst_bytes = 64 : i64} : tensor<4x4xf32> -> tensor<4x4xbf16>
    sched.wait %t : tensor<4x4xbf16>
    return
  }
}

// -----

// An expert flat group is split over the expert-data-parallel ranks (4 / 2
// = 2): padded to a multiple of 4, not of 8.
module attributes {sched.expert_parallel_size = 2 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<2x4xf32> param expert on device
  sched.tensor @f : tensor<3xf32> param expert on device
  // expected-error @+1 {{'sched.flat_group' op padded 16 should be 12 (11 rounded up to a multiple of 2 x expert-data-parallel size 2)}}
  sched.flat_group @g [@e, @f] numel 11 padded 16
}
