//===- Passes.td - zeroc's lowering passes ----------------------*- tablegen -*-===//
//
// Every pass of the ZeRO pipeline, in pipeline order. Each is runnable alone
// in zeroc-opt and tested alone with lit; `zeroc` builds the pipeline from a
// DeepSpeed config.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TRANSFORMS_PASSES
#define ZEROC_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def ModelSpecialize : Pass<"model-specialize", "::mlir::ModuleOp"> {
  let summary = "Give the model the micro-batch and precision it trains with";
  let description = [{
    A model file describes an architecture and a sequence length; its batch
    dimension and element type are defaults. The DeepSpeed config decides
    both, as DeepSpeed decides them for a PyTorch module: the micro-batch
    (`train_micro_batch_size_per_gpu`, or what DeepSpeed's batch rules
    derive) and the training precision (`bf16` or `fp16` enabled: 16-bit
    weights and activations with f32 masters; neither: f32, the engine casts
    the module). This pass rewrites the forward function for them, before
    anything else of the pipeline looks at it:

    * `micro-batch`: the first dimension of the token arguments and of every
      value computed in the forward (their batch dimension), except the
      parameters (`model.param_ref`) and the 0-d loss;
    * `dtype`: the element type of every parameter, parameter reference and
      floating-point activation; the loss stays f32.

    A value that should carry the batch dimension but whose first dimension
    is not the model's batch is an error (the model is not batched the way
    the pass assumes), as is a micro-batch below 1. With neither option set
    the module is unchanged.

    ```mlir
    // model-specialize{micro-batch=4 dtype=bf16}
    func.func @forward(%ids: tensor<1x8xi32>, ...)      // before
    func.func @forward(%ids: tensor<4x8xi32>, ...)      // after
    model.param @w : tensor<64x64xf32> ...   ->   tensor<64x64xbf16>
    ```
  }];
  let dependentDialects = ["::zeroc::model::ModelDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"microBatch", "micro-batch", "int64_t", /*default=*/"0",
           "Sequences per micro-batch; 0 keeps the model's">,
    Option<"dtype", "dtype", "::zeroc::TrainingDType",
           /*default=*/"::zeroc::TrainingDType::Keep",
           "Element type of parameters and activations",
           [{::llvm::cl::values(
             clEnumValN(::zeroc::TrainingDType::Keep, "keep",
                        "the model's own"),
             clEnumValN(::zeroc::TrainingDType::F32, "f32", "fp32"),
             clEnumValN(::zeroc::TrainingDType::BF16, "bf16", "bf16"),
             clEnumValN(::zeroc::TrainingDType::F16, "f16", "fp16"))}]>,
  ];
}

def ExpandTrainingStep : Pass<"zero-expand-training-step", "::mlir::ModuleOp"> {
  let summary = "Expand the forward graph into one training step";
  let description = [{
    Replaces `func.func @forward` with the two phases of a training step, the
    way DeepSpeed's engine runs them:

    * `func.func @micro_step(%tokens, %targets) -> tensor<f32>`: the forward
      ops, then the backward ops of every forward op in reverse order (built
      through `DifferentiableOpInterface`), ending with one
      `model.accumulate_grad` per parameter. The runtime calls it
      `grad-accum` times per step. The backward seed
      (`model.backward_seed`) is `1 / grad-accum`, times the dynamic loss
      scale under fp16, so the accumulated gradient is the gradient of the
      mean loss over the global batch.
    * `func.func @optimizer_step()`: under fp16 loss scaling, unscale and
      check for overflow (`model.unscale_grads`); with a clipping norm,
      `model.clip_grad_norm`; then one `model.adam_update` per parameter
      (`no_bias_correction` on each with `bias-correction=false`, DeepSpeed's
      `bias_correction: false`: the step divides the raw moments).

    Gradients of a value used several times are summed; a tied parameter
    receives the sum of its uses' gradients.

    With `recompute=full` (activation checkpointing, DeepSpeed's
    `activation_checkpointing` with the Hugging Face Trainer's
    `gradient_checkpointing`), every transformer layer is a checkpointed
    segment; with `recompute-every=k`, only the layers whose index is a
    multiple of k are (layers 0, k, 2k, ...), and the others keep all they
    save. Forward ops are attributed to layers as `zeroc stats` does: a
    `model.param_ref` belongs to its parameter's layer (the name up to its
    first numeric component, `h.3`, `layers.3`), any other op to the latest
    layer among its operands', in parameter declaration order. A layer is
    checkpointed when its name is numbered; the embedding, the final norm,
    the head and the loss are not. Of a checkpointed layer only its inputs
    are kept for backward: the values defined outside the layer that its ops
    read (the residual stream entering it). Right before the layer's first
    backward op, its forward ops that reach the loss are emitted again, in
    program order, with their locations and a `model.recompute` attribute
    naming the layer (which also keeps CSE from merging them with the
    forward ops); every parameter they read gets a new `model.param_ref`,
    so stage 3 gathers it again for the recomputation. The layer's backward
    ops are built from the recomputed ops and read only the recomputation,
    the layer's inputs and gradients (checked; a violation is an internal
    error), so the forward values of the layer die in forward. Recomputed
    ops whose results the backward does not read (a layer's last projection
    and residual add) are dropped again. The step costs the recomputed ops'
    FLOPs more; gradients and their accumulation are unchanged.

    With `recompute=selective` (Megatron's selective recomputation), a
    checkpointed layer also keeps the outputs of the ops that report
    `isKeptBySelectiveRecompute` (the matrix products: `model.linear`, and
    `model.causal_attention` with the flash kernel) and recomputes only the
    others (norms, activations, element-wise products and sums, rotary, a
    materialised attention). A kept op is not run again: its backward is
    built from a temporary copy reading the recomputed operands, whose
    results are then replaced by the kept forward results, so the backward
    reads the kept outputs, the recomputation and the layer's inputs.
  }];
  let dependentDialects = ["::zeroc::model::ModelDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"gradAccum", "grad-accum", "int64_t", /*default=*/"1",
           "Micro-steps per optimizer step (gradient_accumulation_steps)">,
    Option<"lossScaling", "loss-scaling", "bool", /*default=*/"false",
           "fp16 loss scaling: seed backward with the loss scale and "
           "unscale before the optimizer">,
    Option<"staticLossScale", "loss-scale", "double", /*default=*/"0.0",
           "Static loss scale; 0 selects dynamic loss scaling">,
    Option<"initialScalePower", "initial-scale-power", "int64_t",
           /*default=*/"16", "Dynamic loss scaling starts at 2^power">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"1000", "Steps without overflow before the scale grows">,
    Option<"hysteresis", "hysteresis", "int64_t", /*default=*/"2",
           "Overflows tolerated before the scale shrinks">,
    Option<"minLossScale", "min-loss-scale", "double", /*default=*/"1.0",
           "Lower bound of the dynamic loss scale">,
    Option<"gradientClipping", "clip", "double", /*default=*/"0.0",
           "Global gradient-norm clipping; 0 disables it">,
    Option<"optimizer", "optimizer", "::zeroc::AdamMode",
           /*default=*/"::zeroc::AdamMode::AdamW",
           "adam (L2 weight decay added to the gradient), adamw "
           "(decoupled weight decay) or lamb (DeepSpeed's FusedLamb)",
           [{::llvm::cl::values(
             clEnumValN(::zeroc::AdamMode::Adam, "adam",
                        "L2 weight decay added to the gradient"),
             clEnumValN(::zeroc::AdamMode::AdamW, "adamw",
                        "decoupled weight decay"),
             clEnumValN(::zeroc::AdamMode::Lamb, "lamb",
                        "Adam's update scaled by the trust ratio"))}]>,
    Option<"lr", "lr", "double", /*default=*/"1.0e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1.0e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay">,
    Option<"maxCoeff", "max-coeff", "double", /*default=*/"10.0",
           "LAMB: upper bound of the trust ratio">,
    Option<"minCoeff", "min-coeff", "double", /*default=*/"0.01",
           "LAMB: lower bound of the trust ratio">,
    Option<"recompute", "recompute", "::zeroc::RecomputeMode",
           /*default=*/"::zeroc::RecomputeMode::None",
           "Activation recomputation of the checkpointed layers",
           [{::llvm::cl::values(
             clEnumValN(::zeroc::RecomputeMode::None, "none",
                        "keep every activation backward reads"),
             clEnumValN(::zeroc::RecomputeMode::Full, "full",
                        "keep only the layer's inputs and recompute all "
                        "its forward ops before its backward"),
             clEnumValN(::zeroc::RecomputeMode::Selective, "selective",
                        "keep the layer's inputs and its matrix products' "
                        "outputs; recompute the rest"))}]>,
    Option<"recomputeEvery", "recompute-every", "int64_t", /*default=*/"1",
           "Checkpoint the numbered layers whose index is a multiple of "
           "this (1: every layer)">,
    Option<"biasCorrection", "bias-correction", "bool", /*default=*/"true",
           "Adam and LAMB divide the moments by 1 - beta^t (DeepSpeed's "
           "bias_correction); false uses the raw moments">,
  ];
}

def ZeroPartition : Pass<"zero-partition", "::mlir::ModuleOp"> {
  let summary = "Declare every rank's persistent state with ZeRO shard layouts";
  let description = [{
    Turns each `model.param` into a `sched.tensor` and declares the gradient
    accumulators and optimizer states of the training step, with the layouts
    of the chosen ZeRO stage (zeroc/Support/ShardLayout.h), all on the
    device (`zero-offload` moves them):

    | stage | parameters | gradients | master, exp_avg, exp_avg_sq |
    | --- | --- | --- | --- |
    | 0 | replicated | replicated, per parameter | replicated, per parameter |
    | 1 | replicated | one replicated flat buffer | sharded flat group |
    | 2 | replicated | sharded flat group | sharded flat group |
    | 3 | sharded (replicated under the persistence threshold) | sharded | sharded |

    Stages 1 and 2 flatten the parameters into one `sched.flat_group`
    (DeepSpeed's single parameter group). A 16-bit parameter gets an f32
    master copy; an f32 parameter is its own master (docs/zero-pipeline.md).
    The module records `sched.world_size` and `sched.stage`, attributes the
    sched dialect declares and verifies. Uses of the parameters
    (`model.param_ref`, `model.accumulate_grad`, `model.adam_update`) keep
    naming them; `zero-insert-collectives` lowers them.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
  let options = [
    Option<"worldSize", "world-size", "int64_t", /*default=*/"1",
           "Data-parallel ranks">,
    Option<"stage", "stage", "int64_t", /*default=*/"0", "ZeRO stage, 0 to 3">,
    Option<"persistenceThreshold", "persistence-threshold", "int64_t",
           /*default=*/"100000",
           "Stage 3: parameters with at most this many elements stay "
           "replicated (stage3_param_persistence_threshold)">,
    Option<"expertParallelSize", "expert-parallel-size", "int64_t",
           /*default=*/"1",
           "Ranks each mixture-of-experts layer's experts are split over "
           "(DeepSpeed-MoE's ep_size); 1 for none">,
  ];
}

def ZeroInsertCollectives : Pass<"zero-insert-collectives", "::mlir::ModuleOp"> {
  let summary = "Lower parameter reads, gradient accumulation and the "
                "optimizer to explicit collectives";
  let description = [{
    After `zero-partition`, makes every rank's communication explicit:

    * a replicated parameter is read in place (`sched.read`); a sharded one
      (stage 3) is all-gathered before its first use in forward and again
      for the backward of the ops that used it, and released after the last
      use in each phase. Like DeepSpeed, which fetches a module's parameters
      for its backward, a parameter is gathered for backward even when
      backward does not read it (a bias, a position table): backward ops
      carry their forward op's location, which is how they are found. So
      stage 3 moves exactly 3 psi (n-1)/n elements per rank per step, the
      ZeRO paper's figure;
    * a gradient is accumulated locally (stages 0 and 1) or reduce-scattered
      into its owner's shard as soon as it is complete (stages 2 and 3);
    * at the accumulation boundary (`@optimizer_step`) stage 0 all-reduces
      the accumulated gradients and stage 1 reduce-scatters them, before
      loss unscaling and clipping; the optimizer updates this rank's part;
      stages 1 and 2 then all-gather the updated parameters, and stage 3 its
      replicated (persistent) parameters.

    Every collective is issued as a start and a wait right after it on the
    compute stream; `zero-bucket`, `zero-prefetch` and
    `zero-assign-streams` move them.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
  let options = [
    Option<"reduceScatter", "reduce-scatter", "bool", /*default=*/"true",
           "Stages 1-2: reduce gradients with reduce-scatter; false uses "
           "all-reduce (DeepSpeed's reduce_scatter)">,
  ];
}

def ZeroOffload : Pass<"zero-offload", "::mlir::ModuleOp"> {
  let summary = "Move optimizer states, and stage-3 parameters, to host or NVMe";
  let description = [{
    ZeRO-Offload and ZeRO-Infinity placement, DeepSpeed's `offload_optimizer`
    and `offload_param`:

    * `optimizer=cpu` places the gradient partitions, the master copies and
      the Adam moments on the host and runs `sched.adam_update` there: each
      rank's reduced gradient part crosses PCIe to the host, and the updated
      16-bit parameter part crosses back.
    * `optimizer=nvme` keeps the gradients and master copies on the host and
      the Adam moments in NVMe files, swapped through host buffers.
    * `param=cpu|nvme` (stage 3 only) places the sharded parameters there:
      each gather is preceded by a `sched.fetch_start` that copies the shard
      to the device, and the optimizer updates the host copy in place.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
  let options = [
    Option<"optimizer", "optimizer", "::zeroc::sched::Placement",
           /*default=*/"::zeroc::sched::Placement::Device",
           "Where optimizer states live: none (the device), cpu or nvme",
           [{::zeroc::offloadTargetValues()}]>,
    Option<"param", "param", "::zeroc::sched::Placement",
           /*default=*/"::zeroc::sched::Placement::Device",
           "Where stage-3 parameters live: none (the device), cpu or nvme",
           [{::zeroc::offloadTargetValues()}]>,
  ];
}

def ZeroBucket : Pass<"zero-bucket", "::mlir::ModuleOp"> {
  let summary = "Fuse adjacent collectives of one kind and dtype into buckets";
  let description = [{
    Coalesces consecutive collectives of one kind on tensors of one dtype,
    over one communicator group (expert state, over the expert-data-parallel
    group, never shares a bucket with other state), with no other
    collective between them, into one collective of at most
    the bucket size (elements, as DeepSpeed counts them): gradient
    reductions up to `reduce-bucket-size`, gathers up to
    `allgather-bucket-size`. A reduction is issued where the last gradient
    of its bucket is ready (the earlier gradients wait in the bucket); a
    gather is issued where the first parameter of its bucket is needed.
    Collectives are never reordered and never moved across an op that
    depends on them; a single collective larger than the bucket stays alone.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
  let options = [
    Option<"reduceBucketSize", "reduce-bucket-size", "int64_t",
           /*default=*/"500000000",
           "Elements per reduce-scatter or all-reduce bucket">,
    Option<"allgatherBucketSize", "allgather-bucket-size", "int64_t",
           /*default=*/"500000000", "Elements per all-gather bucket">,
  ];
}

def ZeroPrefetch : Pass<"zero-prefetch", "::mlir::ModuleOp"> {
  let summary = "Issue parameter gathers early, within the live-parameter budget";
  let description = [{
    Stage 3. First, a parameter released and gathered again within
    `max-reuse-distance` elements of other gathered parameters stays
    gathered (the release and the second gather are removed). Then each
    gather start is hoisted as early as possible (never above the previous
    gather start, so gathers keep their order) while at every point the
    elements being gathered stay within `prefetch-bucket-size` and the
    elements gathered and not yet released stay within `max-live-parameters`
    (DeepSpeed's stage3_prefetch_bucket_size and stage3_max_live_parameters).
    The wait stays where the parameter is first used.

    The pipeline runs the first step before `zero-bucket`
    (`hoist=false`), on one gather per parameter, and the second after it
    (`keep-reused=false`): a parameter fused into a bucket with others is
    not one to keep or drop alone, and DeepSpeed decides reuse per
    parameter (stage3_max_reuse_distance, counted in the parameters of the
    modules its trace visits next).
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
  let options = [
    Option<"prefetchBucketSize", "prefetch-bucket-size", "int64_t",
           /*default=*/"50000000", "Elements in flight in prefetched gathers">,
    Option<"maxLiveParameters", "max-live-parameters", "int64_t",
           /*default=*/"1000000000",
           "Elements of gathered parameters alive at once">,
    Option<"maxReuseDistance", "max-reuse-distance", "int64_t",
           /*default=*/"1000000000",
           "Keep a parameter gathered when it is reused within this many "
           "elements of other gathered parameters">,
    Option<"keepReused", "keep-reused", "bool", /*default=*/"true",
           "Do the first step: keep reused parameters gathered">,
    Option<"hoist", "hoist", "bool", /*default=*/"true",
           "Do the second step: hoist the gather starts">,
  ];
}

def ZeroAssignStreams : Pass<"zero-assign-streams", "::mlir::ModuleOp"> {
  let summary = "Put collectives and copies on their own streams";
  let description = [{
    With `overlap-comm`, gathers run on stream 1, gradient reductions on
    stream 2 and copies between device, host and NVMe on stream 3, while
    compute stays on stream 0; each wait stays on the stream that consumes
    the result. A gradient reduction's wait moves down to just before the
    next reduction starts (or the end of the function), so one bucket is
    reduced while the next is computed, DeepSpeed's double buffering.
    Without `overlap-comm` everything runs on stream 0, in program order.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
  let options = [
    Option<"overlapComm", "overlap-comm", "bool", /*default=*/"false",
           "Overlap communication with compute on separate streams">,
  ];
}

def ZeroVerifySchedule : Pass<"zero-verify-schedule", "::mlir::ModuleOp"> {
  let summary = "Prove the schedule's invariants";
  let description = [{
    Run on every plan zeroc writes. Fails with a diagnostic on the offending
    op unless:

    * nothing logical is left: no op with the model dialect's
      `MustLowerBeforePlan` trait remains (every parameter use, gradient
      accumulation and optimizer op has been lowered to sched ops), and
      each parameter or flat group has at most one state of each role;
    * every rank issues the same collectives in the same order: each phase
      is a single block with no rank-dependent control flow, and every
      asynchronous start is waited on exactly once, after it;
    * every gathered (or fetched) buffer is released exactly once and never
      used after its release;
    * every parameter's gradient is reduced exactly once per step: reduced
      in the micro-step, or accumulated locally in the micro-step and
      reduced once at the boundary;
    * nothing is read before the op producing it has completed: an op reads
      a value produced on another stream only through a wait on its own
      stream, and no op touches a persistent tensor while a collective or
      copy on it is in flight.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
}

def ZeroPlanMemory : Pass<"zero-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Liveness, arena offsets and the per-rank memory peak";
  let description = [{
    Plans every rank's transient device memory, one arena per phase, so the
    runtime allocates once. A buffer is an SSA tensor of a phase (views made
    by `sched.read` are not buffers): it lives from its defining op (for a
    gathered or fetched parameter, from the start of the collective that
    writes it) to its last use as MLIR's Liveness reports it, extended to
    the wait of any asynchronous op that reads it (a gradient in a reduce
    bucket). State an op keeps for backward that is not an SSA value
    (`SavesForBackwardOpInterface::getSavedInternalBytes`: normalization
    statistics, attention probabilities) is a buffer from the op to the last
    backward op carrying its location.

    Buffers get arena offsets from a first-fit allocator run over the
    schedule (at each op the dead buffers are freed and the new ones, largest
    first, take the smallest hole that holds them; 256-byte aligned), linear
    in the buffers; the arena's size is its high-water mark: `sched.offsets` on each op lists
    its results' offsets (-1 for views and tokens), `sched.arg_offsets` on
    the function its arguments', `sched.saved_offset` an op's internal
    state's. Each function gets `sched.memory`: the arena size, the peak of
    live bytes, the op where it occurs, and the live bytes there by
    category: activations, gather buffers, reduce buckets, workspace.
  }];
  let dependentDialects = ["::zeroc::sched::SchedDialect"];
}

#endif // ZEROC_TRANSFORMS_PASSES
