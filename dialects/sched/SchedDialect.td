//===- SchedDialect.td - The sched dialect -------------------*- tablegen -*-===//
//
// What the machine does: one SPMD program that every rank runs on its own
// shards, with explicit collectives, copies and streams.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SCHED_DIALECT
#define ZEROC_SCHED_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let cppNamespace = "::zeroc::sched";
  let summary = "Explicit per-rank ZeRO schedules";
  let description = [{
    A `sched` module is the program every rank runs, SPMD, on its own
    shards. Persistent per-rank state (parameters, gradient accumulators,
    optimizer states) is declared with module-level `sched.tensor` symbols,
    each with a role, a layout (replicated, or sharded across ranks as
    DeepSpeed shards it) and a placement (device, host, NVMe). Two functions
    make up a step: `@micro_step`, run once per micro-batch, and
    `@optimizer_step`, run at the gradient-accumulation boundary.

    Transient tensors are SSA values; compute is done by `model` ops. Every
    collective and copy is asynchronous: a `*_start` op returns a
    `!sched.token` and `sched.wait` completes it on the stream that needs
    the data. Collectives stay in program order: no op in this dialect is
    `Pure`, so no generic pass can move or merge a collective behind the
    scheduler's back, and every rank issues the same collectives in the same
    order because there is only one program.

    Every op carries its stream (`Stream`): 0 computes, 1 gathers
    parameters, 2 reduces gradients, 3 copies between device, host and NVMe.
    The plan names the streams with the same enum.

    The module states the schedule's facts as attributes this dialect
    declares and verifies: `sched.world_size` (ranks, at least 1),
    `sched.stage` (the ZeRO stage, 0 to 3) and, with expert parallelism,
    `sched.expert_parallel_size` (DeepSpeed-MoE's `ep_size`: it divides the
    world size; 1 when absent).

    Collectives run among a communicator group (`CommGroup`): the world;
    the expert-parallel group (the `ep` consecutive ranks that split a
    mixture-of-experts layer's experts, DeepSpeed's `ep_size_N` groups),
    where tokens travel to their experts and back by all-to-all; or the
    expert-data-parallel group (the `world / ep` ranks, one per
    expert-parallel group, strided by `ep`, that hold the same experts),
    over which ZeRO shards and reduces the `expert` tensors. `zero-plan-memory` records the
    memory plan on the phase functions (`sched.memory`, `sched.arg_offsets`,
    `sched.live_bytes`) and their ops (`sched.offsets`, `sched.after`,
    `sched.saved_offset`, `sched.workspace_offset`,
    `sched.workspace_bytes`). Any other `sched.` attribute is an error.
  }];
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let discardableAttrs = (ins
    // The module's facts (zero-partition).
    "::mlir::IntegerAttr":$world_size,
    "::mlir::IntegerAttr":$stage,
    "::mlir::IntegerAttr":$expert_parallel_size,
    // The memory plan (zero-plan-memory): on phase functions,
    "::mlir::DictionaryAttr":$memory,
    "::mlir::DenseI64ArrayAttr":$arg_offsets,
    "::mlir::DenseI64ArrayAttr":$live_bytes,
    // and on their ops.
    "::mlir::DenseI64ArrayAttr":$offsets,
    "::mlir::DenseI64ArrayAttr":$after,
    "::mlir::IntegerAttr":$saved_offset,
    "::mlir::IntegerAttr":$workspace_offset,
    "::mlir::IntegerAttr":$workspace_bytes
  );
}

class Sched_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sched_Dialect, mnemonic, traits>;

def Sched_TokenType : TypeDef<Sched_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "Completion of an asynchronous collective or copy";
}

def Sched_Role : I32EnumAttr<"Role", "what a persistent tensor holds", [
    I32EnumAttrCase<"Param", 0, "param">,
    I32EnumAttrCase<"Grad", 1, "grad">,
    I32EnumAttrCase<"Master", 2, "master">,
    I32EnumAttrCase<"ExpAvg", 3, "exp_avg">,
    I32EnumAttrCase<"ExpAvgSq", 4, "exp_avg_sq">,
  ]> {
  let cppNamespace = "::zeroc::sched";
}

def Sched_Placement : I32EnumAttr<"Placement", "where a tensor lives", [
    I32EnumAttrCase<"Device", 0, "device">,
    I32EnumAttrCase<"Host", 1, "host">,
    I32EnumAttrCase<"NVMe", 2, "nvme">,
  ]> {
  let cppNamespace = "::zeroc::sched";
}

def Sched_Stream : I64EnumAttr<"Stream",
    "a stream: compute (0), gather (1), reduce (2) or copy (3)", [
    I64EnumAttrCase<"Compute", 0, "compute">,
    I64EnumAttrCase<"Gather", 1, "gather">,
    I64EnumAttrCase<"Reduce", 2, "reduce">,
    I64EnumAttrCase<"Copy", 3, "copy">,
  ]> {
  let cppNamespace = "::zeroc::sched";
}

def Sched_CommGroup : I32EnumAttr<"CommGroup",
    "the ranks a collective runs among", [
    I32EnumAttrCase<"World", 0, "world">,
    I32EnumAttrCase<"ExpertParallel", 1, "expert_parallel">,
    I32EnumAttrCase<"ExpertDataParallel", 2, "expert_data_parallel">,
  ]> {
  let cppNamespace = "::zeroc::sched";
}

def Sched_AllToAllPurpose : I32EnumAttr<"AllToAllPurpose",
    "what an expert-parallel all-to-all carries", [
    I32EnumAttrCase<"Dispatch", 0, "dispatch">,
    I32EnumAttrCase<"Combine", 1, "combine">,
    I32EnumAttrCase<"CombineGrad", 2, "combine_grad">,
    I32EnumAttrCase<"DispatchGrad", 3, "dispatch_grad">,
  ]> {
  let cppNamespace = "::zeroc::sched";
}

def Sched_Phase : I32EnumAttr<"Phase", "a function of the training step", [
    I32EnumAttrCase<"MicroStep", 0, "micro_step">,
    I32EnumAttrCase<"OptimizerStep", 1, "optimizer_step">,
  ]> {
  let cppNamespace = "::zeroc::sched";
}

#endif // ZEROC_SCHED_DIALECT
