// Every error of the sched dialect's attribute verifier
// (SchedDialect::verifyOperationAttribute): the module's facts, the memory
// plan's attributes, and attributes the dialect does not declare.
// Each case declares a sched.tensor, so that parsing loads the dialect
// whose verifier is under test.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// sched.world_size, sched.stage
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'builtin.module' op attribute 'sched.world_size' must be an i64 integer, found "two"}}
module attributes {sched.world_size = "two"} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

// expected-error @+1 {{'builtin.module' op attribute 'sched.world_size' must be an i64 integer, found 2 : i32}}
module attributes {sched.world_size = 2 : i32} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

// expected-error @+1 {{'builtin.module' op attribute 'sched.world_size' must be at least 1, found 0}}
module attributes {sched.world_size = 0 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

// expected-error @+1 {{'builtin.module' op attribute 'sched.stage' must be in [0, 3], found 4}}
module attributes {sched.stage = 4 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

// expected-error @+1 {{'builtin.module' op attribute 'sched.stage' must be in [0, 3], found -1}}
module attributes {sched.stage = -1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

// expected-error @+1 {{'builtin.module' op attribute 'sched.expert_parallel_size' must be at least 1, found 0}}
module attributes {sched.expert_parallel_size = 0 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.expert_parallel_size' belongs on the schedule's module}}
func.func @f() attributes {sched.expert_parallel_size = 2 : i64} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.world_size' belongs on the schedule's module}}
func.func @micro_step() attributes {sched.world_size = 2 : i64} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.stage' belongs on the schedule's module}}
func.func @micro_step() attributes {sched.stage = 2 : i64} {
  return
}

//===----------------------------------------------------------------------===//
// The memory plan on a phase function
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.memory' belongs on a phase function (@micro_step or @optimizer_step)}}
func.func @helper() attributes {sched.memory = {activations = 0 : i64, arena_bytes = 0 : i64, gather_buffers = 0 : i64, peak_live_bytes = 0 : i64, peak_op = 0 : i64, reduce_buckets = 0 : i64, workspace = 0 : i64}} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.memory' must be a dictionary, found 7 : i64}}
func.func @micro_step() attributes {sched.memory = 7 : i64} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.memory' has an unknown key 'arena'}}
func.func @micro_step() attributes {sched.memory = {arena = 0 : i64}} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.memory' key 'arena_bytes' must be a non-negative integer, found -256 : i64}}
func.func @micro_step() attributes {sched.memory = {activations = 0 : i64, arena_bytes = -256 : i64, gather_buffers = 0 : i64, peak_live_bytes = 0 : i64, peak_op = 0 : i64, reduce_buckets = 0 : i64, workspace = 0 : i64}} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.memory' lacks the key 'peak_op'}}
func.func @micro_step() attributes {sched.memory = {activations = 0 : i64, arena_bytes = 0 : i64, gather_buffers = 0 : i64, peak_live_bytes = 0 : i64, reduce_buckets = 0 : i64, workspace = 0 : i64}} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.arg_offsets' belongs on a phase function (@micro_step or @optimizer_step)}}
func.func @helper(%x: tensor<4xf32>) attributes {sched.arg_offsets = array<i64: 0>} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.arg_offsets' must be an array<i64>, found [0]}}
func.func @micro_step(%x: tensor<4xf32>) attributes {sched.arg_offsets = [0]} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.arg_offsets' has 2 entries, expected one per argument (1)}}
func.func @micro_step(%x: tensor<4xf32>) attributes {sched.arg_offsets = array<i64: 0, 256>} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.arg_offsets' holds -2, below -1}}
func.func @micro_step(%x: tensor<4xf32>) attributes {sched.arg_offsets = array<i64: -2>} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.live_bytes' holds -16, below 0}}
func.func @optimizer_step() attributes {sched.live_bytes = array<i64: 0, -16>} {
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
// expected-error @+1 {{'func.func' op attribute 'sched.live_bytes' belongs on a phase function (@micro_step or @optimizer_step)}}
func.func @helper() attributes {sched.live_bytes = array<i64: 0>} {
  return
}

//===----------------------------------------------------------------------===//
// The memory plan on ops
//===----------------------------------------------------------------------===//

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @micro_step(%x: tensor<4xf32>) {
  // expected-error @+1 {{'model.gelu' op attribute 'sched.offsets' has 2 entries, expected one per result (1)}}
  %y = model.gelu %x {sched.offsets = array<i64: 0, 256>} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @micro_step(%x: tensor<4xf32>) {
  // expected-error @+1 {{'model.gelu' op attribute 'sched.offsets' holds -5, below -1}}
  %y = model.gelu %x {sched.offsets = array<i64: -5>} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @micro_step(%x: tensor<4xf32>) {
  // expected-error @+1 {{'model.gelu' op attribute 'sched.after' holds -1, below 0}}
  %y = model.gelu %x {sched.after = array<i64: -1>} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @micro_step(%x: tensor<4xf32>) {
  // expected-error @+1 {{'model.gelu' op attribute 'sched.saved_offset' must be at least 0, found -256}}
  %y = model.gelu %x {sched.saved_offset = -256 : i64} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @micro_step(%x: tensor<4xf32>) {
  // expected-error @+1 {{'model.gelu' op attribute 'sched.workspace_bytes' must be an i64 integer, found 1.000000e+00 : f32}}
  %y = model.gelu %x {sched.workspace_bytes = 1.0 : f32} : tensor<4xf32>
  return
}

// -----

sched.tensor @w : tensor<4xf32> param on device
func.func @micro_step(%x: tensor<4xf32>) {
  // expected-error @+1 {{'model.gelu' op attribute 'sched.workspace_offset' must be at least 0, found -1}}
  %y = model.gelu %x {sched.workspace_offset = -1 : i64} : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Attributes the dialect does not declare
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{'builtin.module' op has an unknown sched attribute 'sched.worldsize'}}
module attributes {sched.worldsize = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
}
