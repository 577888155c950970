//===- SchedInterfaces.td - Op interfaces of the sched dialect -*- tablegen -*-===//

#ifndef ZEROC_SCHED_INTERFACES
#define ZEROC_SCHED_INTERFACES

include "mlir/IR/OpBase.td"

def Sched_StreamOpInterface : OpInterface<"StreamOpInterface"> {
  let cppNamespace = "::zeroc::sched";
  let description = [{
    An op that runs on a stream: its `stream` attribute, a `Stream`, compute
    when absent. Ops of other dialects inside a schedule run on the compute
    stream.
  }];
  let methods = [
    InterfaceMethod<"The stream this op runs on.", "::zeroc::sched::Stream",
      "getStream">,
    InterfaceMethod<"Moves this op to another stream.", "void", "setStream",
      (ins "::zeroc::sched::Stream":$stream)>,
    InterfaceMethod<"The stream's index in the plan's list of streams.",
      "int64_t", "getStreamId", (ins), [{}], [{
        return static_cast<int64_t>($_op.getStream());
      }]>,
  ];
}

def Sched_AsyncStartOpInterface : OpInterface<"AsyncStartOpInterface"> {
  let cppNamespace = "::zeroc::sched";
  let description = [{
    The start of an asynchronous collective or copy. It returns a token that
    exactly one `sched.wait` completes; the wait's results, if any, are the
    values the operation produced.
  }];
  let methods = [
    InterfaceMethod<"The token this op returns.", "::mlir::Value", "getToken",
      (ins), [{ return $_op->getResult(0); }]>,
    InterfaceMethod<[{
        Types of the values the matching wait yields (none for in-place
        operations on persistent tensors).
      }],
      "::mlir::LogicalResult", "getCompletedTypes",
      (ins "::mlir::SymbolTableCollection &":$symbols,
           "::llvm::SmallVectorImpl<::mlir::Type> &":$types)>,
  ];
}

def Sched_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::zeroc::sched";
  let description = [{
    A collective among the ranks of its communicator group. It reports its
    kind, its group and the logical (unpadded) element count it acts on;
    communication volume follows from these through
    zeroc/Support/Collectives.h.
  }];
  let methods = [
    InterfaceMethod<"The communicator group it runs among.",
      "::zeroc::sched::CommGroup", "getGroup", (ins), [{
        return $_op.getGroup();
      }]>,
    InterfaceMethod<"The collective's kind.", "::zeroc::CollectiveKind",
      "getCollectiveKind">,
    InterfaceMethod<[{
        Elements of the full (unpadded) tensors this collective covers.
      }],
      "int64_t", "getLogicalElements",
      (ins "::mlir::SymbolTableCollection &":$symbols)>,
  ];
}

def Sched_WorkspaceOpInterface : OpInterface<"WorkspaceOpInterface"> {
  let cppNamespace = "::zeroc::sched";
  let description = [{
    An op that needs device scratch memory beside its operands while it runs
    (receive and padded send buffers of a reduce-scatter, the flat buffer of
    `all_gather_updates`, the 16-bit partition of an optimizer update). The
    parts and their order are defined once, MLIR-free, in
    zeroc/Support/Workspace.h; zero-plan-memory places the workspace in the
    phase's arena, live from the op to its wait (or at the op alone).
  }];
  let methods = [
    InterfaceMethod<[{
        Bytes of workspace the op needs (0 for none) at the module's world
        size.
      }],
      "int64_t", "getWorkspaceBytes",
      (ins "::mlir::SymbolTableCollection &":$symbols)>,
  ];
}

#endif // ZEROC_SCHED_INTERFACES
