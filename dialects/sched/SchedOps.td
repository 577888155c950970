//===- SchedOps.td - Ops of the sched dialect ----------------*- tablegen -*-===//

#ifndef ZEROC_SCHED_OPS
#define ZEROC_SCHED_OPS

include "sched/SchedDialect.td"
include "sched/SchedInterfaces.td"
include "model/ModelInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Sched_Tensor : StaticShapeTensorOf<[F32, BF16, F16]>;
/// The stream an op runs on: compute unless zero-assign-streams moves it.
def Sched_OnStream
    : DefaultValuedAttr<Sched_Stream, "::zeroc::sched::Stream::Compute">;

/// The communicator group of a collective: the world unless it acts on
/// expert state (expert_data_parallel) or exchanges tokens
/// (expert_parallel).
def Sched_InGroup
    : DefaultValuedAttr<Sched_CommGroup, "::zeroc::sched::CommGroup::World">;

/// An op inside a schedule function: it runs on a stream.
class Sched_StreamOp<string mnemonic, list<Trait> traits = []>
    : Sched_Op<mnemonic, !listconcat(traits, [
        Sched_StreamOpInterface,
        HasParent<"::mlir::func::FuncOp">])>;

/// The start of an asynchronous operation.
class Sched_StartOp<string mnemonic, list<Trait> traits = []>
    : Sched_StreamOp<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<Sched_AsyncStartOpInterface,
                                  ["getCompletedTypes"]>,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let results = (outs Sched_TokenType:$token);
}

//===----------------------------------------------------------------------===//
// Persistent state
//===----------------------------------------------------------------------===//

def Sched_TensorOp : Sched_Op<"tensor", [Symbol, HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<Model_ParameterOpInterface>]> {
  let summary = "Persistent per-rank state";
  let description = [{
    A tensor that lives across the whole training step: a parameter, a
    gradient accumulator, or an optimizer state (f32 master copy, Adam's
    `exp_avg` and `exp_avg_sq`). `type` is the full logical tensor. A
    `sharded` tensor is split across ranks as zeroc/Support/ShardLayout.h
    says: each rank holds `ceil(numel / world_size)` elements, the last
    shards padded; otherwise every rank holds all of it. `of` names the
    parameter or flat group the state belongs to. `init` is a parameter's
    initialization, `valid_rows` its model.param's (a padded table: the rows
    past it are padding).

    An `expert` tensor is a mixture-of-experts layer's expert parameter (or
    its state) under expert parallelism: `type` is this rank's experts, its
    expert-parallel slice (`num_experts / ep` of them), and `sharded` splits
    it over the expert-data-parallel group (`world / ep` ranks) instead of
    the world, as DeepSpeed's ZeRO does with its MoE parameter groups.

    ```mlir
    sched.tensor @h.0.attn.q_proj.weight : tensor<768x768xbf16> param sharded on device init <normal(0.02)>
    sched.tensor @h.0.attn.q_proj.weight.exp_avg : tensor<768x768xf32> exp_avg of @h.0.attn.q_proj.weight sharded on host
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Sched_Tensor>:$type,
                       Sched_Role:$role,
                       OptionalAttr<FlatSymbolRefAttr>:$of,
                       UnitAttr:$sharded,
                       Sched_Placement:$placement,
                       OptionalAttr<AnyAttr>:$init,
                       UnitAttr:$expert,
                       OptionalAttr<I64Attr>:$valid_rows);
  let assemblyFormat = [{
    $sym_name `:` $type $role (`of` $of^)? (`expert` $expert^)?
    (`sharded` $sharded^)? `on` $placement (`init` $init^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    int64_t getNumElements() { return getTensorType().getNumElements(); }
    /// The ranks a sharded tensor is split over: the world, or for an
    /// `expert` tensor the expert-data-parallel group.
    int64_t getShardGroupSize(int64_t worldSize);
    /// Elements each rank stores, padding included.
    int64_t getLocalNumElements(int64_t worldSize);
    /// The type of a rank's part: the full type, or a 1-D shard.
    ::mlir::RankedTensorType getLocalType(int64_t worldSize);
  }];
}

def Sched_FlatGroupOp : Sched_Op<"flat_group", [Symbol,
    HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Parameters flattened into one partitioned buffer (stages 1-2)";
  let description = [{
    Stages 1 and 2 concatenate parameters, in order, into one flat buffer of
    `padded` elements (their sum rounded up to a multiple of 2 x world
    size); rank r owns elements `[r * padded / N, (r + 1) * padded / N)`.
    Gradient partitions and optimizer states of the group are `sched.tensor`s
    of `padded` elements `of` the group.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       FlatSymbolRefArrayAttr:$params,
                       ConfinedAttr<I64Attr, [IntPositive]>:$numel,
                       ConfinedAttr<I64Attr, [IntPositive]>:$padded);
  let assemblyFormat = [{
    $sym_name $params `numel` $numel `padded` $padded attr-dict
  }];
}

//===----------------------------------------------------------------------===//
// Reading and updating persistent state
//===----------------------------------------------------------------------===//

def Sched_ReadOp : Sched_StreamOp<"read", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead]>]> {
  let summary = "This rank's part of a persistent device tensor";
  let description = [{
    A view of a device-resident `sched.tensor`: the whole tensor when it is
    replicated, this rank's 1-D shard when it is sharded. No copy is made.
  }];
  let arguments = (ins FlatSymbolRefAttr:$tensor, Sched_OnStream:$stream);
  let results = (outs Sched_Tensor:$result);
  let assemblyFormat = "$tensor attr-dict `:` type($result)";
}

def Sched_AccumulateOp : Sched_StreamOp<"accumulate", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Add a gradient into a replicated accumulator";
  let description = [{
    `tensor[offset : offset + numel(value)] += value`, flattened: a
    parameter's own accumulator (offset 0) or its place in the flat
    gradient buffer of stage 1.
  }];
  let arguments = (ins Sched_Tensor:$value, FlatSymbolRefAttr:$tensor,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$offset,
                       Sched_OnStream:$stream);
  let assemblyFormat = [{
    $value `into` $tensor (`at` $offset^)? attr-dict `:` type($value)
  }];
}

def Sched_ReleaseOp : Sched_StreamOp<"release", [MemoryEffects<[MemFree]>]> {
  let summary = "Free gathered parameters";
  let description = [{
    Ends the life of transient buffers (gathered parameters), as DeepSpeed
    releases a parameter after its last use in a module. The schedule
    verifier checks every gathered buffer is released exactly once and never
    used afterwards.
  }];
  let arguments = (ins Variadic<Sched_Tensor>:$values, Sched_OnStream:$stream);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

def Sched_ZeroGradsOp : Sched_StreamOp<"zero_grads", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemWrite]>]> {
  let summary = "Clear gradient accumulators after the optimizer step";
  let arguments = (ins FlatSymbolRefArrayAttr:$tensors, Sched_OnStream:$stream);
  let assemblyFormat = "$tensors attr-dict";
}

//===----------------------------------------------------------------------===//
// Asynchronous collectives and copies
//===----------------------------------------------------------------------===//

def Sched_AllGatherStartOp : Sched_StartOp<"all_gather_start", [
    DeclareOpInterfaceMethods<Sched_CollectiveOpInterface>]> {
  let summary = "Gather sharded parameters for compute";
  let description = [{
    Every rank contributes its shard (`shards`, one per parameter in
    `params`); the matching `sched.wait` yields the full parameters, each a
    new transient buffer that a `sched.release` must free.
  }];
  let arguments = (ins Variadic<Sched_Tensor>:$shards,
                       FlatSymbolRefArrayAttr:$params, Sched_OnStream:$stream,
                       Sched_InGroup:$group);
  let assemblyFormat = [{
    $shards `for` $params (`over` $group^)? attr-dict `:` type($shards)
  }];
  let hasVerifier = 1;
}

def Sched_ReduceScatterStartOp : Sched_StartOp<"reduce_scatter_start", [
    DeclareOpInterfaceMethods<Sched_CollectiveOpInterface>,
    DeclareOpInterfaceMethods<Sched_WorkspaceOpInterface>]> {
  let summary = "Average gradients across ranks into their owners' shards";
  let description = [{
    Each input gradient is averaged across ranks; every rank adds the part it
    owns into `targets[i]` (a sharded gradient tensor) starting at element
    `offsets[i]` of the target's full index space (0 for a parameter's own
    gradient shard, the parameter's offset for a flat group's partition).
    The inputs may be reused once the wait completes.

    A replicated target is reduced in place: the input is a `sched.read` of
    that same target (stage 1's flat gradient buffer), and afterwards only
    the elements this rank owns hold the average.

    With `all_reduce` (DeepSpeed's `reduce_scatter: false`) the reduction is
    an all-reduce: every rank receives the whole average and keeps its part,
    at twice the communication.
  }];
  let arguments = (ins Variadic<Sched_Tensor>:$grads,
                       FlatSymbolRefArrayAttr:$targets,
                       DenseI64ArrayAttr:$offsets, UnitAttr:$all_reduce,
                       Sched_OnStream:$stream,
                       Sched_InGroup:$group);
  let assemblyFormat = [{
    $grads `into` $targets `at` $offsets (`over` $group^)? attr-dict
    `:` type($grads)
  }];
  let hasVerifier = 1;
}

def Sched_AllReduceStartOp : Sched_StartOp<"all_reduce_start", [
    DeclareOpInterfaceMethods<Sched_CollectiveOpInterface>]> {
  let summary = "Average replicated gradient accumulators in place";
  let arguments = (ins FlatSymbolRefArrayAttr:$tensors, Sched_OnStream:$stream,
                       Sched_InGroup:$group);
  let assemblyFormat = "$tensors (`over` $group^)? attr-dict";
  let hasVerifier = 1;
}

def Sched_AllGatherUpdatesStartOp : Sched_StartOp<"all_gather_updates_start", [
    DeclareOpInterfaceMethods<Sched_CollectiveOpInterface>,
    DeclareOpInterfaceMethods<Sched_WorkspaceOpInterface>]> {
  let summary = "Share updated parameters from the ranks that own them";
  let description = [{
    After the optimizer updated the part of each replicated parameter this
    rank owns (its flat-group partition in stages 1-2, its shard of a
    persistent parameter in stage 3), all-gather the parts in place so every
    rank holds the updated whole. `targets` are flat groups or replicated
    parameters.
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$targets, Sched_OnStream:$stream,
                       Sched_InGroup:$group);
  let assemblyFormat = "$targets (`over` $group^)? attr-dict";
  let hasVerifier = 1;
}

def Sched_AllToAllStartOp : Sched_StartOp<"all_to_all_start", [
    DeclareOpInterfaceMethods<Sched_CollectiveOpInterface>]> {
  let summary = "Expert parallelism's token exchange over the expert-parallel "
                "group";
  let description = [{
    Each rank of the expert-parallel group sends the rows of `send` to the
    ranks holding their experts (`dispatch`) or back to the ranks their
    tokens came from (`combine`); the backward pass runs the two in reverse
    (`combine_grad`, then `dispatch_grad`). The counts come from the router
    at run time (dropless: `MPI_Alltoallv`, or NCCL send/recv in a group).
    The matching `sched.wait` yields the receive buffer, of type
    `recv_type`, planned for the received rows under the model's
    token-distribution assumption.

    `bytes` is what the busiest rank sends or receives under that
    assumption (uniform by default: `tokens x top_k x hidden x dtype`),
    `worst_bytes` the same when every token routes to the experts of one
    rank; the cost model prices `bytes` with nccl-tests' alltoall convention
    (`bytes x (n-1)/n` over the bus bandwidth).

    ```mlir
    %t = sched.all_to_all_start dispatch %rows over expert_parallel {bytes = 4096 : i64, worst_bytes = 8192 : i64} : tensor<16x64xf32> -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Sched_Tensor:$send, Sched_AllToAllPurpose:$purpose,
                       TypeAttrOf<Sched_Tensor>:$recv_type,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$bytes,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$worst_bytes,
                       Sched_OnStream:$stream, Sched_InGroup:$group);
  let assemblyFormat = [{
    $purpose $send (`over` $group^)? attr-dict `:` type($send) `->`
    $recv_type
  }];
  let hasVerifier = 1;
}

def Sched_FetchStartOp : Sched_StartOp<"fetch_start"> {
  let summary = "Copy offloaded parameter shards to the device";
  let description = [{
    Stage-3 parameter offload: copies this rank's shard of each host or NVMe
    parameter into a new device buffer, yielded by the matching wait, to be
    all-gathered (and released with it).
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$tensors, Sched_OnStream:$stream);
  let assemblyFormat = "$tensors attr-dict";
  let hasVerifier = 1;
}

def Sched_CopyStartOp : Sched_StartOp<"copy_start"> {
  let summary = "Copy this rank's part of persistent tensors between placements";
  let description = [{
    Copies `sources[i]` to `destinations[i]` (device, host or NVMe), this
    rank's part of each, converting the dtype when they differ (the host
    optimizer's f32 master to the device's 16-bit parameters).
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$sources,
                       FlatSymbolRefArrayAttr:$destinations,
                       Sched_OnStream:$stream);
  let assemblyFormat = "$sources `to` $destinations attr-dict";
  let hasVerifier = 1;
}

def Sched_WaitOp : Sched_StreamOp<"wait", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Complete an asynchronous operation on a stream";
  let description = [{
    Blocks `stream` until the operation that produced `token` is complete
    and yields its results. A value produced on one stream is read on
    another only through a wait on the reading stream.
  }];
  let arguments = (ins Sched_TokenType:$token, Sched_OnStream:$stream);
  let results = (outs Variadic<Sched_Tensor>:$results);
  let assemblyFormat = "$token attr-dict (`:` type($results)^)?";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

def Sched_UnscaleGradsOp : Sched_StreamOp<"unscale_grads", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "fp16: unscale gradients, detect overflow across ranks";
  let description = [{
    Divides this rank's gradients by the loss scale and agrees across ranks
    (a one-element all-reduce) whether any was inf or NaN; on overflow the
    runtime skips the rest of the optimizer step and lowers the scale
    (DeepSpeed's dynamic loss scaling).
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$grads,
                       F64Attr:$static_loss_scale,
                       I64Attr:$initial_scale_power, I64Attr:$loss_scale_window,
                       I64Attr:$hysteresis, F64Attr:$min_loss_scale,
                       Sched_OnStream:$stream);
  let assemblyFormat = "$grads attr-dict";
}

def Sched_ClipGradNormOp : Sched_StreamOp<"clip_grad_norm", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Clip gradients by their global L2 norm";
  let description = [{
    Sums the squares of this rank's gradients (the owned part of sharded
    ones, each element once), all-reduces that scalar across ranks, and
    scales every gradient by `max_norm / max(norm, max_norm)`.

    Under expert parallelism every expert gradient element counts once too:
    a sharded `expert` gradient is owned within the expert-data-parallel
    group, so it joins the world sum like the others; a replicated one is
    the same across its expert-data-parallel group and differs across the
    expert-parallel group, so its squares are summed over the
    expert-parallel group (DeepSpeed's expert norm: the
    expert-data-parallel shard, then the expert-parallel group).
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$grads,
                       F64Attr:$max_norm,
                       Sched_OnStream:$stream);
  let assemblyFormat = "$grads attr-dict";
  let hasVerifier = 1;
}

def Sched_AdamUpdateOp : Sched_StreamOp<"adam_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<Sched_WorkspaceOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "One Adam, AdamW or LAMB step on this rank's part of the state";
  let description = [{
    Updates `param` (this rank's owned part) from `grad`, `exp_avg`,
    `exp_avg_sq` and, for 16-bit parameters, the f32 `master` copy, on the
    device or the host (ZeRO-Offload). `adamw` selects decoupled weight
    decay; `lamb`, `max_coeff` and `min_coeff` the LAMB step of
    `model.adam_update`; `no_bias_correction` its step on the raw moments.
    For a stage 1-2 flat group, `param` names the group and the states are
    the group's partitions.

    LAMB's trust ratio needs each parameter's whole weight and update norms:
    with sharded states every rank sums the squares over its part, per
    parameter, and the ranks all-reduce those sums (two numbers per
    parameter) inside the op.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grad,
                       OptionalAttr<FlatSymbolRefAttr>:$master,
                       FlatSymbolRefAttr:$exp_avg,
                       FlatSymbolRefAttr:$exp_avg_sq,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay, UnitAttr:$adamw,
                       UnitAttr:$lamb, OptionalAttr<F64Attr>:$max_coeff,
                       OptionalAttr<F64Attr>:$min_coeff,
                       UnitAttr:$no_bias_correction,
                       Sched_Placement:$on, Sched_OnStream:$stream);
  let assemblyFormat = [{
    $param `grad` $grad (`master` $master^)? `exp_avg` $exp_avg
    `exp_avg_sq` $exp_avg_sq `on` $on attr-dict
  }];
  let hasVerifier = 1;
}

#endif // ZEROC_SCHED_OPS
