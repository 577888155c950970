// One schedule per invariant zero-verify-schedule proves, each broken once.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --allow-unregistered-dialect --zero-verify-schedule

// expected-error @+1 {{a schedule needs the functions @micro_step and @optimizer_step}}
module @no_optimizer_step attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  func.func @micro_step() {
    return
  }
}

//===----------------------------------------------------------------------===//
// One state of each role per parameter or group
//===----------------------------------------------------------------------===//

// -----

module @two_grads attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  // expected-error @+1 {{'sched.tensor' op is a second grad of @w, after @w.grad}}
  sched.tensor @w.grad2 : tensor<4xf32> grad of @w on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}

//===----------------------------------------------------------------------===//
// Nothing logical left
//===----------------------------------------------------------------------===//

// -----

module @param_ref attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() -> tensor<4xf32> {
    // expected-error @+1 {{'model.param_ref' op was not lowered to the schedule (run zero-insert-collectives)}}
    %w = model.param_ref @w : tensor<4xf32>
    return %w : tensor<4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @accumulate_grad attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step(%g: tensor<4xf32>) {
    // expected-error @+1 {{'model.accumulate_grad' op was not lowered to the schedule}}
    model.accumulate_grad @w, %g : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @optimizer_ops attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'model.clip_grad_norm' op was not lowered to the schedule}}
    model.clip_grad_norm {max_norm = 1.0 : f64}
    model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    return
  }
}

// -----

module @adam_update attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'model.adam_update' op was not lowered to the schedule}}
    model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    return
  }
}

// -----

module @unscale_grads attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'model.unscale_grads' op was not lowered to the schedule}}
    model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.0 : f64, static_loss_scale = 0.0 : f64}
    return
  }
}

//===----------------------------------------------------------------------===//
// One program order on every rank
//===----------------------------------------------------------------------===//

// -----

module @branch attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  // expected-error @+1 {{@micro_step must be a single block: branches could make ranks issue different collectives}}
  func.func @micro_step() {
    "test.br"()[^bb1] : () -> ()
  ^bb1:
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @region attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'test.if' op has regions: control flow inside a schedule could make ranks issue different collectives}}
    "test.if"() ({
      "test.yield"() : () -> ()
    }) : () -> ()
    return
  }
}

// -----

module @never_waited attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'sched.all_reduce_start' op must be waited on exactly once}}
    %r = sched.all_reduce_start [@w.grad]
    return
  }
}

// -----

// A token that escapes is not waited on in this program.
module @token_escapes attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() -> !sched.token {
    // expected-error @+1 {{'sched.all_reduce_start' op must be waited on exactly once}}
    %r = sched.all_reduce_start [@w.grad]
    return %r : !sched.token
  }
}

// -----

// Waiting twice is already invalid IR (the sched.wait verifier).
module @waited_twice attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    %r = sched.all_reduce_start [@w.grad]
    // expected-error @+1 {{'sched.wait' op token is waited on more than once}}
    sched.wait %r
    sched.wait %r
    return
  }
}

//===----------------------------------------------------------------------===//
// Gathered and fetched buffers: released once, not used after
//===----------------------------------------------------------------------===//

// -----

module @never_released attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() -> tensor<4xf32> {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<2xf32>
    // expected-error @+1 {{'sched.wait' op yields a sched.all_gather_start buffer that is never released}}
    %w = sched.wait %t : tensor<4xf32>
    %y = model.add %w, %w : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @fetch_never_released attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on host
  func.func @micro_step() {
    %f = sched.fetch_start [@w]
    // expected-error @+1 {{'sched.wait' op yields a sched.fetch_start buffer that is never released}}
    %s = sched.wait %f : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<2xf32>
    %w = sched.wait %t : tensor<4xf32>
    sched.release %w : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// One buffer of a fused gather is never released.
module @fused_half_released attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @v : tensor<4xf32> param sharded on device
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() {
    %sv = sched.read @v : tensor<2xf32>
    %sw = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %sv, %sw for [@v, @w] : tensor<2xf32>, tensor<2xf32>
    // expected-error @+1 {{never released}}
    %v, %w = sched.wait %t : tensor<4xf32>, tensor<4xf32>
    sched.release %v : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @released_twice attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<2xf32>
    %w = sched.wait %t : tensor<4xf32>
    sched.release %w : tensor<4xf32>
    // expected-error @+1 {{'sched.release' op releases a buffer twice}}
    sched.release %w : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @used_after_release attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() -> tensor<4xf32> {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<2xf32>
    %w = sched.wait %t : tensor<4xf32>
    sched.release %w : tensor<4xf32>
    // expected-error @+1 {{'model.add' op uses a buffer after its release}}
    %y = model.add %w, %w : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// Returning a released buffer is a use after release too.
module @returned_after_release attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() -> tensor<4xf32> {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<2xf32>
    %w = sched.wait %t : tensor<4xf32>
    sched.release %w : tensor<4xf32>
    // expected-error @+1 {{'func.return' op uses a buffer after its release}}
    return %w : tensor<4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// Only transient gathered or fetched buffers are released; a read is a view
// of persistent state.
module @release_read attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() {
    %w = sched.read @w : tensor<4xf32>
    // expected-error @+1 {{'sched.release' op releases a value that is not a gathered or fetched buffer}}
    sched.release %w : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

//===----------------------------------------------------------------------===//
// Streams: a value crosses streams only through a wait
//===----------------------------------------------------------------------===//

// -----

// The gather is waited on stream 1, but the compute on stream 0 reads it.
module @wrong_wait_stream attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() -> tensor<4xf32> {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] {stream = 1 : i64} : tensor<2xf32>
    %w = sched.wait %t {stream = 1 : i64} : tensor<4xf32>
    // expected-error @+1 {{'model.add' op on stream 0 reads a value produced on stream 1 without a wait on stream 0}}
    %y = model.add %w, %w : tensor<4xf32>
    sched.release %w {stream = 1 : i64} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @release_on_other_stream attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  func.func @micro_step() {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] {stream = 1 : i64} : tensor<2xf32>
    %w = sched.wait %t : tensor<4xf32>
    // expected-error @+1 {{'sched.release' op on stream 2 reads a value produced on stream 0 without a wait on stream 2}}
    sched.release %w {stream = 2 : i64} : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// A read on the gather stream feeding compute on stream 0.
module @read_on_other_stream attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() -> tensor<4xf32> {
    %w = sched.read @w {stream = 1 : i64} : tensor<4xf32>
    // expected-error @+1 {{'model.add' op on stream 0 reads a value produced on stream 1 without a wait on stream 0}}
    %y = model.add %w, %w : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

//===----------------------------------------------------------------------===//
// Nothing touches a tensor while a collective or copy on it is in flight
//===----------------------------------------------------------------------===//

// -----

module @read_while_reduced attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  func.func @micro_step(%g: tensor<4xf32>) {
    sched.accumulate %g into @w.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() -> tensor<4xf32> {
    %r = sched.all_reduce_start [@w.grad] {stream = 2 : i64}
    // expected-error @+1 {{'sched.read' op touches @w.grad while 'sched.all_reduce_start' on it is in flight}}
    %g = sched.read @w.grad : tensor<4xf32>
    sched.wait %r
    return %g : tensor<4xf32>
  }
}

// -----

// The optimizer updates a parameter that is still being gathered.
module @write_while_gathered attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
  sched.tensor @w.exp_avg : tensor<4xf32> exp_avg of @w sharded on device
  sched.tensor @w.exp_avg_sq : tensor<4xf32> exp_avg_sq of @w sharded on device
  func.func @micro_step(%g: tensor<4xf32>) {
    %r = sched.reduce_scatter_start %g into [@w.grad] at [0] : tensor<4xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    %s = sched.read @w : tensor<2xf32>
    %t = sched.all_gather_start %s for [@w] {stream = 1 : i64} : tensor<2xf32>
    // expected-error @+1 {{'sched.adam_update' op touches @w while 'sched.all_gather_start' on it is in flight}}
    sched.adam_update @w grad @w.grad exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    %w = sched.wait %t : tensor<4xf32>
    sched.release %w : tensor<4xf32>
    return
  }
}

// -----

// A copy reads its source: clipping (a write) may not run under it.
module @write_while_copied attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  sched.tensor @w.host : tensor<4xf32> master of @w on host
  func.func @micro_step(%g: tensor<4xf32>) {
    sched.accumulate %g into @w.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    %a = sched.all_reduce_start [@w.grad]
    sched.wait %a
    %c = sched.copy_start [@w.grad] to [@w.host] {stream = 3 : i64}
    // expected-error @+1 {{'sched.clip_grad_norm' op touches @w.grad while 'sched.copy_start' on it is in flight}}
    sched.clip_grad_norm [@w.grad] {max_norm = 1.0 : f64}
    sched.wait %c
    return
  }
}

// -----

// All-gathering the updated flat group writes its members: reading a member
// meanwhile is a race.
module @member_while_group_gathered attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<2xf32> param on device
  sched.tensor @b : tensor<2xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 4 padded 4
  sched.tensor @zero.flat0.grad : tensor<4xf32> grad of @zero.flat0 sharded on device
  func.func @micro_step(%ga: tensor<2xf32>, %gb: tensor<2xf32>) {
    %r = sched.reduce_scatter_start %ga, %gb into [@zero.flat0.grad, @zero.flat0.grad] at [0, 2] : tensor<2xf32>, tensor<2xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() -> tensor<2xf32> {
    %u = sched.all_gather_updates_start [@zero.flat0] {stream = 1 : i64}
    // expected-error @+1 {{'sched.read' op touches @b while 'sched.all_gather_updates_start' on it is in flight}}
    %b = sched.read @b : tensor<2xf32>
    sched.wait %u
    return %b : tensor<2xf32>
  }
}

// -----

// Two reductions into one gradient at once.
module @overlapping_reductions attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<2xf32> param on device
  sched.tensor @b : tensor<2xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 4 padded 4
  sched.tensor @zero.flat0.grad : tensor<4xf32> grad of @zero.flat0 sharded on device
  func.func @micro_step(%ga: tensor<2xf32>, %gb: tensor<2xf32>) {
    %r1 = sched.reduce_scatter_start %ga into [@zero.flat0.grad] at [0] {stream = 2 : i64} : tensor<2xf32>
    // expected-error @+1 {{'sched.reduce_scatter_start' op touches @zero.flat0.grad while 'sched.reduce_scatter_start' on it is in flight}}
    %r2 = sched.reduce_scatter_start %gb into [@zero.flat0.grad] at [2] {stream = 2 : i64} : tensor<2xf32>
    sched.wait %r1
    sched.wait %r2
    return
  }
  func.func @optimizer_step() {
    return
  }
}

//===----------------------------------------------------------------------===//
// Every gradient reduced exactly once per step
//===----------------------------------------------------------------------===//

// -----

module @reduced_twice attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
  // expected-error @+1 {{the gradient of @w is accumulated or reduced 2 times per micro-step, expected once}}
  func.func @micro_step(%g: tensor<4xf32>) {
    %r1 = sched.reduce_scatter_start %g into [@w.grad] at [0] : tensor<4xf32>
    sched.wait %r1
    %r2 = sched.reduce_scatter_start %g into [@w.grad] at [0] : tensor<4xf32>
    sched.wait %r2
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// @v's gradient is dropped.
module @never_reduced attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param sharded on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w sharded on device
  sched.tensor @v : tensor<4xf32> param sharded on device
  sched.tensor @v.grad : tensor<4xf32> grad of @v sharded on device
  // expected-error @+1 {{the gradient of @v is accumulated or reduced 0 times per micro-step, expected once}}
  func.func @micro_step(%g: tensor<4xf32>) {
    %r = sched.reduce_scatter_start %g into [@w.grad] at [0] : tensor<4xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @accumulated_twice attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  // expected-error @+1 {{the gradient of @w is accumulated or reduced 2 times per micro-step, expected once}}
  func.func @micro_step(%g: tensor<4xf32>) {
    sched.accumulate %g into @w.grad : tensor<4xf32>
    sched.accumulate %g into @w.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    %r = sched.all_reduce_start [@w.grad]
    sched.wait %r
    return
  }
}

// -----

// Accumulated locally and also reduced in the micro-step.
module @accumulated_and_reduced attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  // expected-error @+1 {{the gradient of @w is accumulated or reduced 2 times per micro-step, expected once}}
  func.func @micro_step(%g: tensor<4xf32>) {
    sched.accumulate %g into @w.grad : tensor<4xf32>
    %w = sched.read @w.grad : tensor<4xf32>
    %r = sched.reduce_scatter_start %w into [@w.grad] at [0] : tensor<4xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// Accumulated locally but never reduced at the boundary (stage 0 without
// its all-reduce): the error points at the accumulation.
module @boundary_missing attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  func.func @micro_step(%g: tensor<4xf32>) {
    // expected-error @+1 {{the gradient of @w is reduced 0 times per step, expected exactly once}}
    sched.accumulate %g into @w.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// Reduced in the micro-step and again at the boundary.
module @reduced_at_both attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<2xf32> param on device
  sched.tensor @b : tensor<2xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 4 padded 4
  sched.tensor @zero.flat0.grad : tensor<4xf32> grad of @zero.flat0 sharded on device
  // expected-error @+1 {{the gradient of @a is reduced 2 times per step, expected exactly once}}
  func.func @micro_step(%ga: tensor<2xf32>, %gb: tensor<2xf32>) {
    %r = sched.reduce_scatter_start %ga, %gb into [@zero.flat0.grad, @zero.flat0.grad] at [0, 2] : tensor<2xf32>, tensor<2xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    %g = sched.read @zero.flat0.grad : tensor<2xf32>
    %r = sched.reduce_scatter_start %g into [@zero.flat0.grad] at [0] : tensor<2xf32>
    sched.wait %r
    return
  }
}

// -----

// An offset inside @a's part of the flat gradient, not where a gradient
// starts.
module @misaligned attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<2xf32> param on device
  sched.tensor @b : tensor<2xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 4 padded 4
  sched.tensor @zero.flat0.grad : tensor<4xf32> grad of @zero.flat0 sharded on device
  func.func @micro_step(%ga: tensor<2xf32>, %gb: tensor<2xf32>) {
    // expected-error @+1 {{'sched.reduce_scatter_start' op writes @zero.flat0.grad at offset 1, where no parameter's gradient starts}}
    %r = sched.reduce_scatter_start %ga into [@zero.flat0.grad] at [1] : tensor<2xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    return
  }
}
