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

    Streams are small integers carried by every op: 0 computes, 1 gathers
    parameters, 2 reduces gradients, 3 copies between device, host and NVMe.
  }];
  let useDefaultTypePrinterParser = 1;
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

#endif // ZEROC_SCHED_DIALECT
