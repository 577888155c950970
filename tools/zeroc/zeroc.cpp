//===- zeroc.cpp - The zeroc driver ---------------------------------------===//
//
// `zeroc MODEL.mlir --config DS.json --world-size N -o PLAN.json` compiles a
// plan; `zeroc gen` writes a model from a Hugging Face config or a preset;
// `zeroc stats` reports a model's size, FLOPs and activation memory;
// `zeroc inspect` summarizes a plan. The driver only parses options and
// prints; the work is in lib/.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Advise/Advise.h"
#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Checkpoint/Consolidate.h"
#include "zeroc/Checkpoint/HFCheckpoint.h"
#include "zeroc/Config/Cluster.h"
#include "zeroc/Cost/FitCheck.h"
#include "zeroc/Cost/ScheduleViews.h"
#include "zeroc/Cost/Simulator.h"
#include "zeroc/Cost/TraceCompare.h"
#include "zeroc/Cost/WhatIf.h"
#include "zeroc/Models/ModelBuilder.h"
#include "zeroc/Models/ModelSpec.h"
#include "zeroc/Pipeline/Pipeline.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Support/Format.h"
#include "zeroc/Support/Limits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory zerocCategory("zeroc options");

//===----------------------------------------------------------------------===//
// zeroc gen
//===----------------------------------------------------------------------===//

cl::SubCommand genCmd("gen", "Write a model.mlir from a Hugging Face "
                             "config.json or a preset");
cl::opt<std::string> genConfig(cl::Positional, cl::sub(genCmd),
                               cl::desc("[config.json]"), cl::init(""));
cl::opt<std::string> genPreset("preset", cl::sub(genCmd),
                               cl::desc("Use a preset shape instead of a "
                                        "config.json"),
                               cl::value_desc("name"), cl::cat(zerocCategory));
cl::opt<int64_t> genSeqLen("seq-len", cl::sub(genCmd),
                           cl::desc("Sequence length (default: the model's "
                                    "maximum positions)"),
                           cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> genMicroBatch("micro-batch", cl::sub(genCmd),
                               cl::desc("Sequences per micro-batch (default: "
                                        "1); a default only: the DeepSpeed "
                                        "config decides when compiling"),
                               cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<std::string> genDType("dtype", cl::sub(genCmd),
                              cl::desc("Parameter and activation dtype: f32, "
                                       "bf16 or f16 (default: the config's "
                                       "torch_dtype, else f32); a default "
                                       "only: the DeepSpeed config's "
                                       "fp16/bf16 decide when compiling"),
                              cl::value_desc("type"), cl::cat(zerocCategory));
cl::opt<std::string> genAttentionKernel(
    "attention-kernel", cl::sub(genCmd),
    cl::desc("Attention kernel family: flash (the default; keeps the row "
             "log-sum-exp for backward) or materialized (keeps the softmax "
             "probabilities)"),
    cl::value_desc("kind"), cl::init("flash"), cl::cat(zerocCategory));
cl::opt<std::string> genExpertLoad(
    "expert-load", cl::sub(genCmd),
    cl::desc("Mixture of experts: the planning assumption on how tokens "
             "distribute over the experts: uniform (the default), worst "
             "(every token sends one slot to the same expert), or the busiest "
             "expert's share of the routed rows, 1/num_experts to 1/top_k. "
             "Memory does not depend on it (token-sorted dispatch); "
             "per-expert time and expert parallelism do"),
    cl::value_desc("uniform|worst|share"), cl::init("uniform"),
    cl::cat(zerocCategory));
cl::opt<std::string> genOutput("o", cl::sub(genCmd),
                               cl::desc("Output file (default: stdout)"),
                               cl::value_desc("file"), cl::init("-"),
                               cl::cat(zerocCategory));
cl::opt<bool> genQuiet("quiet", cl::sub(genCmd),
                       cl::desc("Do not print notes about defaults"),
                       cl::cat(zerocCategory));

//===----------------------------------------------------------------------===//
// zeroc stats
//===----------------------------------------------------------------------===//

cl::SubCommand statsCmd("stats", "Parameter count, FLOPs per token and "
                                 "activation memory of a model.mlir");
cl::opt<std::string> statsInput(cl::Positional, cl::sub(statsCmd),
                                cl::desc("<model.mlir>"), cl::Required);
cl::opt<bool> statsJson("json", cl::sub(statsCmd),
                        cl::desc("Print one JSON object instead of tables"),
                        cl::cat(zerocCategory));

//===----------------------------------------------------------------------===//
// zeroc MODEL.mlir --config DS.json --world-size N (no subcommand)
//===----------------------------------------------------------------------===//

cl::opt<std::string> compileInput(cl::Positional,
                                  cl::sub(cl::SubCommand::getTopLevel()),
                                  cl::desc("<model.mlir>"), cl::init(""));
cl::opt<std::string> compileConfig(
    "config", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("DeepSpeed config JSON (default: DeepSpeed's defaults, stage 0, "
             "with train_micro_batch_size_per_gpu \"auto\")"),
    cl::value_desc("ds_config.json"), cl::cat(zerocCategory));
cl::opt<int64_t> compileWorldSize("world-size",
                                  cl::sub(cl::SubCommand::getTopLevel()),
                                  cl::desc("Data-parallel ranks"),
                                  cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> compileMicroBatch(
    "micro-batch", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("Sequences per GPU per micro-step, where the config leaves "
             "train_micro_batch_size_per_gpu \"auto\" or out (the launcher's "
             "per-device batch, as the Hugging Face Trainer's "
             "--per_device_train_batch_size)"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> compileGradAccum(
    "grad-accum", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("Gradient accumulation steps, where the config leaves them "
             "\"auto\" or out"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> compileEpSize(
    "ep-size", cl::sub(cl::SubCommand::getTopLevel()), cl::sub(statsCmd),
    cl::desc("Expert-parallel size: ranks each mixture-of-experts layer's "
             "experts are split over (DeepSpeed's MoE(ep_size=...); the "
             "config's expert_parallel.autoep_size)"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> compileMoeExpertParallelSize(
    "moe-expert-parallel-size", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("Megatron-DeepSpeed's spelling of --ep-size"), cl::value_desc("n"),
    cl::cat(zerocCategory));
cl::opt<zeroc::RecomputeMode> compileRecompute(
    "recompute", cl::sub(cl::SubCommand::getTopLevel()), cl::sub(statsCmd),
    cl::desc("Activation recomputation (default: full when the config has "
             "activation_checkpointing, none otherwise; docs/ds-config.md)"),
    cl::values(clEnumValN(zeroc::RecomputeMode::None, "none",
                          "keep every activation backward reads"),
               clEnumValN(zeroc::RecomputeMode::Full, "full",
                          "keep each layer's inputs, recompute the layer "
                          "(activation checkpointing)"),
               clEnumValN(zeroc::RecomputeMode::Selective, "selective",
                          "keep each layer's inputs and matrix-product "
                          "outputs, recompute the element-wise ops and "
                          "norms (Megatron's selective)")),
    cl::cat(zerocCategory));
cl::opt<int64_t> compileRecomputeEvery(
    "recompute-every", cl::sub(cl::SubCommand::getTopLevel()),
    cl::sub(statsCmd),
    cl::desc("Recompute only the layers whose index is a multiple of k "
             "(layers 0, k, 2k, ...; default 1, every layer); needs "
             "--recompute full or selective"),
    cl::value_desc("k"), cl::cat(zerocCategory));
cl::opt<std::string> compileOutput("o", cl::sub(cl::SubCommand::getTopLevel()),
                                   cl::desc("Output file (default: stdout)"),
                                   cl::value_desc("plan.json"), cl::init("-"),
                                   cl::cat(zerocCategory));
enum class Emit { Plan, MLIR };
cl::opt<Emit> compileEmit(
    "emit", cl::sub(cl::SubCommand::getTopLevel()), cl::desc("What to write"),
    cl::values(clEnumValN(Emit::Plan, "plan", "the plan file (JSON)"),
               clEnumValN(Emit::MLIR, "mlir", "the final sched IR")),
    cl::init(Emit::Plan), cl::cat(zerocCategory));
cl::opt<bool> compileQuiet("quiet", cl::sub(cl::SubCommand::getTopLevel()),
                           cl::desc("Do not print notes about the config"),
                           cl::cat(zerocCategory));
cl::opt<std::string> compileCluster(
    "cluster", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("Refuse a plan whose memory peak exceeds this cluster's GPU "
             "memory: a cluster JSON file or a preset name"),
    cl::value_desc("cluster.json|preset"), cl::cat(zerocCategory));
cl::list<std::string> compileWhatIf(
    "what-if", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("Compare the compiled plan's step on --cluster with a scenario "
             "(repeatable) and print that report instead of the plan (-o "
             "FILE still writes the plan): nodes=-K (K nodes fewer: the plan "
             "recompiled for the smaller world, DeepSpeed's batch rule "
             "applied), or any scenario of `zeroc inspect --what-if`"),
    cl::value_desc("scenario"), cl::cat(zerocCategory));
cl::opt<bool> compileJson("json", cl::sub(cl::SubCommand::getTopLevel()),
                          cl::desc("With --what-if: print the report as one "
                                   "JSON object"),
                          cl::cat(zerocCategory));
cl::opt<bool> compileAllowOom(
    "allow-oom", cl::sub(cl::SubCommand::getTopLevel()),
    cl::desc("Write the plan even if it does not fit the --cluster"),
    cl::cat(zerocCategory));

//===----------------------------------------------------------------------===//
// zeroc consolidate
//===----------------------------------------------------------------------===//

cl::SubCommand
    consolidateCmd("consolidate",
                   "Write a sharded zerorun checkpoint as one safetensors file "
                   "of whole f32 parameters (DeepSpeed's zero_to_fp32)");
cl::opt<std::string> consolidateDir(cl::Positional, cl::sub(consolidateCmd),
                                    cl::desc("<checkpoint dir>"), cl::Required);
cl::opt<std::string> consolidateTag(
    "tag", cl::sub(consolidateCmd),
    cl::desc("Checkpoint tag (default: the one named by <dir>/latest)"),
    cl::value_desc("tag"), cl::init("latest"), cl::cat(zerocCategory));
cl::opt<std::string> consolidateOutput(
    "o", cl::sub(consolidateCmd), cl::Required,
    cl::desc("The safetensors file (--format zeroc) or the directory "
             "(--format hf)"),
    cl::value_desc("model.safetensors | dir"), cl::cat(zerocCategory));
enum class ConsolidateFormat { Zeroc, HF };
cl::opt<ConsolidateFormat> consolidateFormat(
    "format", cl::sub(consolidateCmd),
    cl::desc("What to write (default zeroc)"),
    cl::values(clEnumValN(ConsolidateFormat::Zeroc, "zeroc",
                          "one safetensors file, zeroc's names, f32"),
               clEnumValN(ConsolidateFormat::HF, "hf",
                          "a Hugging Face model directory: safetensors "
                          "under the architecture's names, sharded above "
                          "--max-shard-size, and config.json")),
    cl::init(ConsolidateFormat::Zeroc), cl::cat(zerocCategory));
cl::opt<std::string> consolidateDType(
    "dtype", cl::sub(consolidateCmd),
    cl::desc("--format hf: the dtype written, f32, bf16 or f16 (default: "
             "the training dtype)"),
    cl::value_desc("f32"), cl::cat(zerocCategory));
cl::opt<std::string> consolidateMaxShard(
    "max-shard-size", cl::sub(consolidateCmd),
    cl::desc("--format hf: the most bytes of one shard file's tensors, "
             "e.g. 5GB, 500MB, 2GiB or a byte count (default 5GB, as "
             "save_pretrained)"),
    cl::value_desc("size"), cl::cat(zerocCategory));

//===----------------------------------------------------------------------===//
// zeroc advise
//===----------------------------------------------------------------------===//

cl::SubCommand adviseCmd("advise",
                         "Which ZeRO stage, offload, recomputation, "
                         "micro-batch and bucket sizes suit a model on a "
                         "cluster");
cl::opt<std::string> adviseInput(cl::Positional, cl::sub(adviseCmd),
                                 cl::desc("<model.mlir>"), cl::Required);
cl::opt<std::string>
    adviseCluster("cluster", cl::sub(adviseCmd), cl::Required,
                  cl::desc("A cluster JSON file or a preset name"),
                  cl::value_desc("cluster.json|preset"),
                  cl::cat(zerocCategory));
cl::opt<std::string> adviseConfig(
    "config", cl::sub(adviseCmd),
    cl::desc("DeepSpeed config whose other settings every candidate keeps"),
    cl::value_desc("base.json"), cl::cat(zerocCategory));
cl::opt<int64_t> adviseWorldSize(
    "world-size", cl::sub(adviseCmd),
    cl::desc("Ranks to plan for (default: every GPU of the cluster)"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> adviseMicroBatch(
    "micro-batch", cl::sub(adviseCmd),
    cl::desc("The base's sequences per GPU per micro-step, where the config "
             "leaves train_micro_batch_size_per_gpu \"auto\" or out; with "
             "--grad-accum it fixes the global batch the search keeps"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> adviseGradAccum(
    "grad-accum", cl::sub(adviseCmd),
    cl::desc("The base's gradient accumulation steps, where the config "
             "leaves them \"auto\" or out"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<std::string>
    adviseOutput("o", cl::sub(adviseCmd),
                 cl::desc("Write the recommended DeepSpeed config here"),
                 cl::value_desc("ds_config.json"), cl::cat(zerocCategory));
cl::opt<bool> adviseJson("json", cl::sub(adviseCmd),
                         cl::desc("Print one JSON object instead of tables "
                                  "(every candidate)"),
                         cl::cat(zerocCategory));
cl::opt<std::string> adviseMargin(
    "margin", cl::sub(adviseCmd),
    cl::desc("Headroom a plan's peak must leave below the GPU budget: a "
             "share of the budget (5%, 0.05) or a size (2GiB, 512MiB); "
             "default 5%"),
    cl::value_desc("share|size"), cl::init("5%"), cl::cat(zerocCategory));
cl::opt<bool> adviseAll("all", cl::sub(adviseCmd),
                        cl::desc("Show every candidate in the table"),
                        cl::cat(zerocCategory));
cl::opt<bool> adviseRobust(
    "robust", cl::sub(adviseCmd),
    cl::desc("Rank by the worst of the healthy step, one rank 10% slower "
             "and the inter-node bandwidth halved (docs/advise.md)"),
    cl::cat(zerocCategory));
cl::opt<int64_t> adviseMaxMicroBatch(
    "max-micro-batch", cl::sub(adviseCmd),
    cl::desc("The largest micro-batch to try (powers of two up to it, and "
             "the base's own); default 16"),
    cl::value_desc("n"), cl::init(16), cl::cat(zerocCategory));

//===----------------------------------------------------------------------===//
// zeroc inspect
//===----------------------------------------------------------------------===//

cl::SubCommand inspectCmd("inspect", "Memory, communication and (with "
                                     "--cluster) step time of a plan file");
// Where a command takes a cluster: size a preset without editing its JSON.
cl::opt<int64_t> clusterNodes(
    "nodes", cl::sub(cl::SubCommand::getTopLevel()), cl::sub(adviseCmd),
    cl::sub(inspectCmd),
    cl::desc("With --cluster: the number of nodes (default: the cluster's)"),
    cl::value_desc("n"), cl::cat(zerocCategory));

// Where a command takes a model, a Hugging Face config.json does too.
cl::opt<int64_t> modelSeqLen(
    "seq-len", cl::sub(cl::SubCommand::getTopLevel()), cl::sub(statsCmd),
    cl::sub(adviseCmd),
    cl::desc("With a config.json for the model: the sequence length "
             "(default: the model's maximum positions)"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<int64_t> padVocab(
    "pad-vocab-to-multiple-of", cl::sub(genCmd),
    cl::sub(cl::SubCommand::getTopLevel()), cl::sub(statsCmd),
    cl::sub(adviseCmd),
    cl::desc("Round the vocabulary up to a multiple of n in the embedding "
             "and output tables and the logits (Megatron's "
             "make-vocab-size-divisible-by; 64 makes GPT-2's 50257 50304). "
             "The padding rows are zero and the loss ignores their logits: "
             "training is the unpadded model's, and the logits' rows are "
             "16-byte aligned for the GPU's matrix products. Hugging Face "
             "checkpoints keep the unpadded vocabulary (default: 1, none; "
             "outside gen, for a config.json model)"),
    cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<std::string> inspectInput(cl::Positional, cl::sub(inspectCmd),
                                  cl::desc("<plan.json>"), cl::Required);
cl::opt<bool> inspectAsJson("json", cl::sub(inspectCmd),
                            cl::desc("Print one JSON object instead of tables"),
                            cl::cat(zerocCategory));
cl::opt<std::string> inspectCluster(
    "cluster", cl::sub(inspectCmd),
    cl::desc("Predict the step time on a cluster: a cluster JSON file or a "
             "preset (h100-sxm-8, a100-80gb-8, a100-100gbe, h100-pcie-1)"),
    cl::value_desc("cluster.json|preset"), cl::cat(zerocCategory));
cl::opt<std::string> inspectTrace(
    "trace", cl::sub(inspectCmd),
    cl::desc("Write the simulated step as Chrome trace-event JSON (Perfetto, "
             "chrome://tracing; needs --cluster)"),
    cl::value_desc("out.json"), cl::cat(zerocCategory));
cl::opt<std::string> inspectSvg(
    "svg", cl::sub(inspectCmd),
    cl::desc("Draw memory over the schedule and the stream timeline of the "
             "simulated step (needs --cluster)"),
    cl::value_desc("out.svg"), cl::cat(zerocCategory));

cl::opt<std::string> inspectCompare(
    "compare", cl::sub(inspectCmd),
    cl::desc("Compare the simulated step with a run's trace from `zerorun "
             "--profile` (needs --cluster): per step, phase, op kind, stream "
             "and op; prints only the comparison"),
    cl::value_desc("trace.json"), cl::cat(zerocCategory));
cl::opt<std::string> inspectCombinedTrace(
    "combined-trace", cl::sub(inspectCmd),
    cl::desc("With --compare: write the predicted and the measured timeline "
             "(its median step) into one Chrome trace"),
    cl::value_desc("out.json"), cl::cat(zerocCategory));

cl::list<std::string> inspectWhatIf(
    "what-if", cl::sub(inspectCmd),
    cl::desc("Re-simulate the step under a scenario and compare it with the "
             "healthy one (needs --cluster; repeatable): straggler=F (one "
             "rank's compute F times slower), inter-node-bw=F, "
             "intra-node-bw=F (a link class's bandwidth times F), "
             "cluster=FILE|PRESET; prints only the what-if report (one node "
             "fewer, nodes=-K, recompiles: `zeroc MODEL.mlir ... --what-if "
             "nodes=-1`)"),
    cl::value_desc("scenario"), cl::cat(zerocCategory));
cl::opt<double> inspectWatchdog(
    "watchdog", cl::sub(inspectCmd),
    cl::desc("With --cluster: the collective timeout to check every "
             "collective against, in seconds, under the worst --what-if "
             "scenario (default 1800, NCCL's)"),
    cl::init(zeroc::kNcclWatchdogSeconds), cl::value_desc("seconds"),
    cl::cat(zerocCategory));
cl::opt<bool> inspectFailOnTimeout(
    "fail-on-timeout", cl::sub(inspectCmd),
    cl::desc("With --what-if or --watchdog: exit 1 when a collective would "
             "exceed the watchdog"),
    cl::cat(zerocCategory));

/// --cluster SPEC, with --nodes applied.
zeroc::Expected<zeroc::Cluster> loadClusterArg(const std::string &spec) {
  auto cluster = zeroc::loadCluster(spec);
  if (!cluster || !clusterNodes.getNumOccurrences())
    return cluster;
  return zeroc::withNodes(*cluster, clusterNodes);
}

int error(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "zeroc") << message << "\n";
  return 1;
}

int error(const zeroc::Diagnostic &diag) {
  llvm::errs() << diag.str() << "\n";
  return 1;
}

/// LLVM's parser lets a subcommand take the top level's options, so `zeroc
/// inspect plan.json --world-size 64` would parse and the subcommand would
/// ignore the flag: an answer for a job the user did not ask about. A
/// zeroc option given to a subcommand it is not registered for is an error
/// naming it (MLIR's own options, which every subcommand may take, are
/// not zeroc's). No UBSan vptr check here: the registry's options are
/// LLVM's objects, from Debian's libLLVM built without RTTI, whose dynamic
/// type the check cannot read (it reported every `getNumOccurrences` call
/// as a call on a non-Option).
__attribute__((no_sanitize("vptr"))) int
rejectCompileOptions(cl::SubCommand &sub,
                     const std::vector<const cl::Option *> &handled) {
  for (auto &[name, option] :
       cl::getRegisteredOptions(cl::SubCommand::getTopLevel())) {
    if (!option->getNumOccurrences() || option->Subs.contains(&sub) ||
        name.starts_with("mlir-") || llvm::is_contained(handled, option) ||
        !llvm::is_contained(option->Categories, &zerocCategory))
      continue;
    return error("--" + name.str() + " is not an option of 'zeroc " +
                 sub.getName().str() +
                 "' (it is one of compiling a plan: zeroc MODEL.mlir "
                 "--config DS.json --world-size N ...); see 'zeroc " +
                 sub.getName().str() + " --help'");
  }
  return 0;
}

void loadDialects(MLIRContext &context) {
  context.loadDialect<zeroc::model::ModelDialect, zeroc::sched::SchedDialect,
                      func::FuncDialect>();
}

/// --pad-vocab-to-multiple-of on a spec; the error, if any.
std::optional<std::string> applyPadVocab(zeroc::ModelSpec &spec) {
  if (!padVocab.getNumOccurrences())
    return std::nullopt;
  if (padVocab < 1 || padVocab > 65536)
    return "--pad-vocab-to-multiple-of must be from 1 to 65536, found " +
           std::to_string(padVocab);
  spec.padVocabMultiple = padVocab;
  return std::nullopt;
}

int runGen() {
  if (genConfig.empty() == genPreset.empty())
    return error("give either a config.json or --preset NAME (presets: " +
                 llvm::join(zeroc::presetNames(), ", ") + ")");
  std::vector<std::string> notes;
  std::optional<zeroc::ModelSpec> spec;
  if (!genPreset.empty()) {
    spec = zeroc::presetSpec(genPreset);
    if (!spec)
      return error("unknown preset '" + genPreset +
                   "'; presets: " + llvm::join(zeroc::presetNames(), ", "));
  } else {
    auto doc = zeroc::JsonDocument::load(genConfig);
    if (!doc)
      return error(doc.error());
    auto read = zeroc::readHFConfig(*doc, &notes);
    if (!read)
      return error(read.error());
    spec = *read;
  }

  std::optional<zeroc::DType> dtype;
  if (genDType.getNumOccurrences()) {
    dtype = zeroc::parseDType(genDType);
    if (!dtype || *dtype == zeroc::DType::I32)
      return error("--dtype must be f32, bf16 or f16, found '" + genDType +
                   "'");
  }
  auto shaped = zeroc::withBatchShape(
      *spec,
      genSeqLen.getNumOccurrences() ? std::optional<int64_t>(genSeqLen)
                                    : std::nullopt,
      genMicroBatch.getNumOccurrences() ? std::optional<int64_t>(genMicroBatch)
                                        : std::nullopt,
      dtype);
  if (!shaped)
    return error(shaped.error().message);
  std::optional<zeroc::AttentionKernel> kernel =
      zeroc::parseAttentionKernel(genAttentionKernel);
  if (!kernel)
    return error("--attention-kernel must be flash or materialized, found '" +
                 genAttentionKernel + "'");
  shaped->attentionKernel = *kernel;
  if (genExpertLoad.getNumOccurrences()) {
    if (!shaped->numExperts)
      return error("--expert-load applies to a mixture of experts; model_type "
                   "\"" +
                   std::string(zeroc::familyName(shaped->family)) +
                   "\" has none");
    double lo = 1.0 / double(shaped->numExperts);
    double hi = 1.0 / double(shaped->expertsPerToken);
    double share = 0;
    if (genExpertLoad == "uniform")
      share = 0;
    else if (genExpertLoad == "worst")
      share = hi;
    else if (!llvm::to_float(genExpertLoad, share) ||
             !(share >= lo * (1 - 1e-12) && share <= hi * (1 + 1e-12)))
      return error("--expert-load must be uniform, worst or a share from "
                   "1/num_experts (" +
                   std::to_string(lo) + ") to 1/top_k (" + std::to_string(hi) +
                   "), found '" + genExpertLoad + "'");
    shaped->maxExpertShare = share;
  }
  if (std::optional<std::string> bad = applyPadVocab(*shaped))
    return error(*bad);
  if (auto tooLarge = zeroc::checkModelScale(*shaped))
    return error(tooLarge->message);

  MLIRContext context;
  loadDialects(context);
  OwningOpRef<ModuleOp> module = zeroc::buildModel(context, *shaped);
  if (failed(verify(*module)))
    return error("internal error: the generated model does not verify");

  std::string message;
  auto output = openOutputFile(genOutput, &message);
  if (!output)
    return error(message);
  // With each op's location: the module path (`h.3.attn`) that plans carry
  // as `where` into inspect's tables and the traces.
  module->print(output->os(),
                OpPrintingFlags().enableDebugInfo(/*enable=*/true,
                                                  /*prettyForm=*/false));
  output->os() << "\n";
  output->keep();
  if (!genQuiet)
    for (const std::string &note : notes)
      llvm::WithColor::note(llvm::errs(), "zeroc") << note << "\n";
  return 0;
}

/// Parses and verifies a model file, printing diagnostics with file:line:col;
/// or, for a Hugging Face config.json, generates the model as `zeroc gen`
/// does, with --seq-len.
OwningOpRef<ModuleOp> loadModel(MLIRContext &context, llvm::SourceMgr &sources,
                                const std::string &path) {
  std::optional<int64_t> seqLen;
  if (modelSeqLen.getNumOccurrences())
    seqLen = modelSeqLen;
  if (llvm::StringRef(path).ends_with(".json")) {
    auto doc = zeroc::JsonDocument::load(path);
    if (!doc) {
      error(doc.error());
      return nullptr;
    }
    std::vector<std::string> notes;
    auto spec = zeroc::readHFConfig(*doc, &notes);
    if (!spec) {
      error(spec.error());
      return nullptr;
    }
    auto shaped =
        zeroc::withBatchShape(*spec, seqLen, std::nullopt, std::nullopt);
    if (!shaped) {
      error(path + ": " + shaped.error().message);
      return nullptr;
    }
    if (std::optional<std::string> bad = applyPadVocab(*shaped)) {
      error(*bad);
      return nullptr;
    }
    if (auto tooLarge = zeroc::checkModelScale(*shaped)) {
      error(path + ": " + tooLarge->message);
      return nullptr;
    }
    OwningOpRef<ModuleOp> module = zeroc::buildModel(context, *shaped);
    if (failed(verify(*module))) {
      error("internal error: the model generated from " + path +
            " does not verify");
      return nullptr;
    }
    return module;
  }
  if (padVocab.getNumOccurrences()) {
    error("--pad-vocab-to-multiple-of applies to a config.json; " + path +
          " is a model file and has its own tables (regenerate it with "
          "`zeroc gen --pad-vocab-to-multiple-of`)");
    return nullptr;
  }
  if (seqLen) {
    error("--seq-len applies to a config.json; " + path +
          " is a model file and has its own sequence length (regenerate it "
          "with `zeroc gen --seq-len`)");
    return nullptr;
  }
  std::string message;
  auto file = openInputFile(path, &message);
  if (!file) {
    error(message);
    return nullptr;
  }
  if (std::optional<zeroc::NestingError> deep =
          zeroc::checkModelNesting(file->getBuffer())) {
    error(path + ":" + std::to_string(deep->line) + ":" +
          std::to_string(deep->column) + ": " + deep->message);
    return nullptr;
  }
  sources.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  return parseSourceFile<ModuleOp>(sources, &context);
}

/// --recompute and --recompute-every: the policy they give (none when
/// --recompute is absent); false after reporting an error.
bool recomputeFlags(std::optional<zeroc::RecomputePolicy> &policy) {
  if (compileRecomputeEvery.getNumOccurrences() && compileRecomputeEvery < 1) {
    error("--recompute-every must be at least 1, found " +
          std::to_string(compileRecomputeEvery));
    return false;
  }
  if (compileRecomputeEvery.getNumOccurrences() &&
      (!compileRecompute.getNumOccurrences() ||
       compileRecompute == zeroc::RecomputeMode::None)) {
    error("--recompute-every needs --recompute full or selective: it says "
          "which layers those recompute");
    return false;
  }
  if (compileRecompute.getNumOccurrences())
    policy = zeroc::RecomputePolicy{compileRecompute,
                                    compileRecomputeEvery.getNumOccurrences()
                                        ? int64_t(compileRecomputeEvery)
                                        : int64_t(1)};
  return true;
}

int runStats() {
  std::optional<zeroc::RecomputePolicy> recompute;
  if (!recomputeFlags(recompute))
    return 1;
  MLIRContext context;
  loadDialects(context);
  llvm::SourceMgr sources;
  SourceMgrDiagnosticHandler handler(sources, &context);
  OwningOpRef<ModuleOp> module = loadModel(context, sources, statsInput);
  if (!module)
    return 1;
  FailureOr<zeroc::ModelStats> stats = zeroc::computeModelStats(*module);
  if (failed(stats))
    return 1;
  if (recompute &&
      failed(zeroc::applyRecomputation(*module, *recompute, *stats)))
    return 1;
  if (compileEpSize.getNumOccurrences()) {
    if (!stats->moe.layers)
      return error("--ep-size applies to a mixture of experts; the model is "
                   "dense (no model.moe_experts)");
    if (compileEpSize < 1 || stats->moe.experts % compileEpSize != 0)
      return error("--ep-size " + std::to_string(compileEpSize) +
                   " does not divide the model's " +
                   std::to_string(stats->moe.experts) +
                   " experts per layer: each rank holds num_experts / "
                   "ep_size of them");
    stats->moe.expertParallelSize = compileEpSize;
  }
  if (statsJson)
    llvm::outs() << zeroc::toJson(*stats).dump(2) << "\n";
  else
    llvm::outs() << zeroc::formatModelStats(*stats);
  return 0;
}

int writeText(const std::string &path, const std::string &text) {
  std::string message;
  auto output = openOutputFile(path, &message);
  if (!output)
    return error(message);
  output->os() << text;
  output->keep();
  return 0;
}

int runInspect() {
  zeroc::Expected<zeroc::Plan> plan = zeroc::loadPlan(inspectInput);
  if (!plan)
    return error(plan.error());
  zeroc::InspectOptions options;
  if (inspectCluster.empty() && (!inspectTrace.empty() || !inspectSvg.empty()))
    return error("--trace and --svg need --cluster: the timeline is "
                 "simulated on a cluster");
  if (inspectCluster.empty() && !inspectCompare.empty())
    return error("--compare needs --cluster: the measured step is compared "
                 "with the step simulated on a cluster");
  if (inspectCompare.empty() && !inspectCombinedTrace.empty())
    return error("--combined-trace needs --compare TRACE.json");
  bool whatIf = !inspectWhatIf.empty() || inspectWatchdog.getNumOccurrences() ||
                inspectFailOnTimeout;
  if (whatIf && inspectCluster.empty())
    return error("--what-if, --watchdog and --fail-on-timeout need --cluster: "
                 "the scenarios are simulated on a cluster");
  if (whatIf && !inspectCompare.empty())
    return error("--what-if and --compare print different reports: give one");
  if (whatIf) {
    auto cluster = loadClusterArg(inspectCluster);
    if (!cluster)
      return error(cluster.error());
    std::vector<zeroc::WhatIfScenario> scenarios;
    std::vector<std::optional<zeroc::Cluster>> clusters;
    for (const std::string &spec : inspectWhatIf) {
      auto scenario = zeroc::parseWhatIf(spec);
      if (!scenario)
        return error(scenario.error());
      std::optional<zeroc::Cluster> other;
      if (scenario->kind == zeroc::WhatIfScenario::Kind::Cluster) {
        auto loaded = loadClusterArg(scenario->clusterSpec);
        if (!loaded)
          return error("--what-if '" + spec + "': " + loaded.error().str());
        other = std::move(*loaded);
      }
      scenarios.push_back(std::move(*scenario));
      clusters.push_back(std::move(other));
    }
    auto report =
        zeroc::whatIf(*plan, *cluster, scenarios, clusters, inspectWatchdog);
    if (!report)
      return error(report.error());
    if (inspectAsJson)
      llvm::outs() << zeroc::whatIfJson(*report).dump(2) << "\n";
    else
      llvm::outs() << "what-if for " << inspectInput << "\n"
                   << zeroc::whatIfText(*report);
    if (inspectFailOnTimeout && report->exceedsWatchdog())
      return error(
          "--fail-on-timeout: " + report->worst.front().first.collective +
          " op " + std::to_string(report->worst.front().first.op) + " (" +
          report->worst.front().first.module +
          ") would exceed the watchdog under " + report->worst.front().second);
    return 0;
  }
  std::optional<nlohmann::json> fit;
  std::string fitText;
  if (!inspectCluster.empty()) {
    auto cluster = loadClusterArg(inspectCluster);
    if (!cluster)
      return error(cluster.error());
    // Every memory of the cluster (FitCheck.h): the node's host total too.
    zeroc::NodeMemory node = zeroc::nodeMemory(*plan, *cluster);
    std::optional<std::string> refusal =
        zeroc::checkClusterFit(*plan, *cluster);
    fit = nlohmann::json{{"gpu_budget_bytes", cluster->gpu.planBudgetBytes()},
                         {"ranks_per_node", node.ranksPerNode},
                         {"host_bytes_per_node", node.hostBytes},
                         {"host_reserve_bytes", cluster->host.reserveBytes},
                         {"host_memory_bytes", cluster->host.memoryBytes},
                         {"nvme_bytes_per_node", node.nvmeBytes},
                         {"fits", !refusal}};
    if (refusal)
      (*fit)["refusal"] = *refusal;
    fitText = "\nmemory per node on " + cluster->name + " (" +
              std::to_string(node.ranksPerNode) +
              " ranks)\n  host: " + zeroc::humanBytes(node.hostBytes) +
              " of the ranks + " +
              zeroc::humanBytes(cluster->host.reserveBytes) + " reserve, of " +
              zeroc::humanBytes(cluster->host.memoryBytes) +
              "\n  NVMe: " + zeroc::humanBytes(node.nvmeBytes) + "\n  fits: " +
              (refusal ? "no: " + refusal->substr(0, refusal->find('\n'))
                       : std::string("yes")) +
              "\n";
    auto step = zeroc::predictStep(*plan, *cluster);
    if (!step)
      return error(step.error());
    options.time = zeroc::stepTimeReport(*plan, *cluster, *step);
    if (!inspectTrace.empty())
      if (int rc =
              writeText(inspectTrace, zeroc::chromeTrace(*plan, *step).dump()))
        return rc;
    if (!inspectSvg.empty())
      if (int rc = writeText(inspectSvg, zeroc::scheduleSvg(*plan, *step)))
        return rc;
    if (!inspectCompare.empty()) {
      auto doc = zeroc::JsonDocument::load(inspectCompare);
      if (!doc)
        return error(doc.error());
      auto measured = zeroc::readMeasuredTrace(*doc, *plan);
      if (!measured)
        return error(measured.error());
      auto comparison = zeroc::compareTrace(*plan, *step, *measured);
      if (!comparison)
        return error(comparison.error());
      if (!inspectCombinedTrace.empty())
        if (int rc = writeText(
                inspectCombinedTrace,
                zeroc::combinedTrace(*plan, *step, doc->root(), *measured)
                    .dump()))
          return rc;
      if (inspectAsJson) {
        nlohmann::json out = zeroc::comparisonJson(*comparison);
        out["cluster"] = cluster->name;
        out["plan_fingerprint"] = measured->fingerprint;
        llvm::outs() << out.dump(2) << "\n";
      } else {
        llvm::outs() << "comparing " << inspectInput << " on " << cluster->name
                     << " with " << inspectCompare << "\n"
                     << zeroc::comparisonText(*comparison);
      }
      return 0;
    }
  }
  if (inspectAsJson) {
    nlohmann::json out = zeroc::inspectJson(*plan, options);
    if (fit)
      out["cluster_fit"] = *fit;
    llvm::outs() << out.dump(2) << "\n";
  } else {
    llvm::outs() << zeroc::inspectText(*plan, options) << fitText;
  }
  return 0;
}

int runAdvise() {
  MLIRContext context;
  loadDialects(context);
  llvm::SourceMgr sources;
  SourceMgrDiagnosticHandler handler(sources, &context);
  OwningOpRef<ModuleOp> module = loadModel(context, sources, adviseInput);
  if (!module)
    return 1;
  FailureOr<zeroc::ModelStats> stats = zeroc::computeModelStats(*module);
  if (failed(stats))
    return 1;
  auto cluster = loadClusterArg(adviseCluster);
  if (!cluster)
    return error(cluster.error());
  std::optional<zeroc::JsonDocument> base;
  if (!adviseConfig.empty()) {
    auto doc = zeroc::JsonDocument::load(adviseConfig);
    if (!doc)
      return error(doc.error());
    base = *doc;
  }
  if (adviseWorldSize.getNumOccurrences() &&
      (adviseWorldSize < 1 || adviseWorldSize > zeroc::limits::kMaxWorldSize))
    return error("--world-size must be 1 to " +
                 std::to_string(zeroc::limits::kMaxWorldSize) +
                 " (MPI and NCCL number ranks with 32-bit ints), found " +
                 std::to_string(adviseWorldSize));
  // The compile command's expert-parallel flags parse here too; advise
  // would drop them.
  for (auto *flag : {&compileEpSize, &compileMoeExpertParallelSize})
    if (flag->getNumOccurrences())
      return error("zeroc advise does not take --" + flag->ArgStr.str() +
                   ": give the expert-parallel size in --config "
                   "(expert_parallel.autoep_size)");
  if (adviseMaxMicroBatch < 1)
    return error("--max-micro-batch must be at least 1, found " +
                 std::to_string(adviseMaxMicroBatch));
  auto margin = zeroc::parseAdviseMargin(adviseMargin);
  if (!margin)
    return error(margin.error().message);
  zeroc::AdviseRequest request;
  request.margin = *margin;
  request.maxMicroBatch = adviseMaxMicroBatch;
  request.robust = adviseRobust;
  request.model = *module;
  request.stats = &*stats;
  request.baseConfig = base ? &*base : nullptr;
  request.cluster = &*cluster;
  request.worldSize = adviseWorldSize.getNumOccurrences() ? adviseWorldSize : 0;
  if (adviseGradAccum.getNumOccurrences())
    request.gradientAccumulation = adviseGradAccum;
  if (adviseMicroBatch.getNumOccurrences())
    request.microBatch = adviseMicroBatch;
  // Candidates that cannot be planned are reported in the table, not here.
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  auto result = zeroc::advise(request);
  if (!result)
    return error(result.error());
  if (adviseJson)
    llvm::outs() << zeroc::adviseJson(*result).dump(2) << "\n";
  else
    llvm::outs() << zeroc::adviseText(*result, adviseAll);
  if (!adviseOutput.empty()) {
    if (!result->best)
      return error("nothing fits " + result->cluster +
                   ": no config written to " + adviseOutput);
    std::string message;
    auto output = openOutputFile(adviseOutput, &message);
    if (!output)
      return error(message);
    const zeroc::AdviseCandidate &best = result->candidates[*result->best];
    output->os() << best.launchConfig.dump(2) << "\n";
    output->keep();
    if (!adviseJson) {
      llvm::outs() << "\nwrote " << adviseOutput << ", "
                   << (base ? "changed against " + adviseConfig
                            : std::string("from DeepSpeed's defaults"))
                   << ":\n"
                   << zeroc::configDiff(base ? base->root()
                                             : nlohmann::json::object(),
                                        best.launchConfig)
                   << zeroc::deepSpeedBucketNote(best.deepSpeedBuckets,
                                                 best.peakDeviceBytes,
                                                 result->fitBytes);
    }
  }
  return result->best ? 0 : 1;
}

/// "5GB", "500MB", "2GiB", "100KB", "123" -> bytes (the units of
/// save_pretrained's max_shard_size: powers of 1000, or 1024 with "i").
std::optional<uint64_t> parseByteSize(const std::string &text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit((unsigned char)text[digits]))
    ++digits;
  if (digits == 0 || digits > 15)
    return std::nullopt;
  uint64_t n = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  static const std::map<std::string, uint64_t> units = {
      {"", 1},          {"B", 1},           {"KB", 1000},
      {"MB", 1000000},  {"GB", 1000000000}, {"KiB", 1024},
      {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  auto it = units.find(unit);
  if (it == units.end())
    return std::nullopt;
  return n * it->second;
}

int runConsolidate() {
  if (consolidateFormat == ConsolidateFormat::Zeroc) {
    if (consolidateDType.getNumOccurrences() ||
        consolidateMaxShard.getNumOccurrences())
      return error(std::string(consolidateDType.getNumOccurrences()
                                   ? "--dtype"
                                   : "--max-shard-size") +
                   " applies to --format hf; --format zeroc writes f32 into "
                   "one file");
    auto result = zeroc::consolidateCheckpoint(consolidateDir, consolidateTag,
                                               consolidateOutput);
    if (!result)
      return error(result.error());
    llvm::outs() << "wrote " << consolidateOutput << ": "
                 << result->parameters.size() << " parameters of checkpoint "
                 << result->tag << " (step " << result->step << ")\n";
    return 0;
  }
  zeroc::HFExportOptions options;
  if (consolidateDType.getNumOccurrences()) {
    std::optional<zeroc::DType> dtype = zeroc::parseDType(consolidateDType);
    if (!dtype || *dtype == zeroc::DType::I32)
      return error("--dtype must be f32, bf16 or f16, found \"" +
                   consolidateDType + "\"");
    options.dtype = dtype;
  }
  if (consolidateMaxShard.getNumOccurrences()) {
    std::optional<uint64_t> bytes = parseByteSize(consolidateMaxShard);
    if (!bytes || *bytes == 0)
      return error("--max-shard-size: expected a positive size such as 5GB, "
                   "500MB, 2GiB or a byte count, found \"" +
                   consolidateMaxShard + "\"");
    options.maxShardBytes = *bytes;
  }
  auto result = zeroc::consolidateToHF(consolidateDir, consolidateTag,
                                       consolidateOutput, options);
  if (!result)
    return error(result.error());
  llvm::outs() << "wrote " << consolidateOutput << ": " << result->tensors
               << " Hugging Face tensors in " << result->shards
               << " safetensors file(s) and config.json, from checkpoint "
               << result->tag << " (step " << result->step << ")\n";
  return 0;
}

void note(const std::string &message) {
  if (!compileQuiet)
    llvm::WithColor::note(llvm::errs(), "zeroc") << message << "\n";
}

/// The plan written by -o FILE, refused as without --what-if when it does
/// not fit the cluster (unless --allow-oom).
int writePlanFile(const zeroc::Plan &plan, const zeroc::Cluster &cluster) {
  if (auto refusal = zeroc::checkClusterFit(plan, cluster)) {
    if (!compileAllowOom)
      return error(*refusal);
    llvm::WithColor::warning(llvm::errs(), "zeroc")
        << "writing a plan that does not fit (--allow-oom): "
        << refusal->substr(0, refusal->find('\n')) << "\n";
  }
  std::string message;
  auto output = openOutputFile(compileOutput, &message);
  if (!output)
    return error(message);
  output->os() << zeroc::toJson(plan).dump(1) << "\n";
  output->keep();
  return 0;
}

/// `zeroc MODEL --config DS --world-size N --cluster C --what-if ...`: the
/// compiled plan against its scenarios; nodes=-K recompiles `pristine` (the
/// model before the pipeline) for N - K x gpus_per_node ranks.
int runCompileWhatIf(const zeroc::Plan &plan, const zeroc::JsonDocument &doc,
                     const zeroc::DeepSpeedConfig &cfg,
                     const zeroc::ModelStats &stats,
                     const zeroc::LauncherArgs &launcher, ModuleOp pristine,
                     MLIRContext &context) {
  auto cluster = loadClusterArg(compileCluster);
  if (!cluster)
    return error(cluster.error());
  std::vector<zeroc::WhatIfScenario> scenarios;
  std::vector<std::optional<zeroc::Cluster>> clusters;
  std::vector<zeroc::Plan> recompiled;
  recompiled.reserve(compileWhatIf.size());
  std::vector<std::optional<size_t>> recompiledAt;
  for (const std::string &spec : compileWhatIf) {
    auto scenario = zeroc::parseWhatIf(spec);
    if (!scenario)
      return error(scenario.error());
    std::optional<zeroc::Cluster> other;
    std::optional<size_t> at;
    if (scenario->kind == zeroc::WhatIfScenario::Kind::Cluster) {
      auto loaded = loadClusterArg(scenario->clusterSpec);
      if (!loaded)
        return error("--what-if '" + spec + "': " + loaded.error().str());
      other = std::move(*loaded);
    } else if (scenario->kind == zeroc::WhatIfScenario::Kind::Nodes) {
      const int64_t world = plan.worldSize, perNode = cluster->gpusPerNode;
      const std::string where =
          "--what-if '" + spec + "': world size " + std::to_string(world);
      if (world % perNode != 0)
        return error(where + " is not a multiple of " + cluster->name + "'s " +
                     std::to_string(perNode) +
                     " GPUs per node: the ranks do not fill whole nodes, "
                     "so there is no node to take away");
      const int64_t nodes = world / perNode, lost = -scenario->nodes;
      if (nodes <= lost)
        return error(where + " is " + std::to_string(nodes) + " node" +
                     (nodes == 1 ? "" : "s") + " of " +
                     std::to_string(perNode) + " GPUs on " + cluster->name +
                     ": losing " + std::to_string(lost) + " leaves no rank");
      const int64_t smaller = world - lost * perNode;
      auto change = zeroc::changeWorld(doc, cfg, smaller, launcher);
      if (!change)
        return error("--what-if '" + spec + "': " + change.error().str());
      auto smallerCfg = zeroc::readConfigForModel(change->config, stats,
                                                  smaller, change->launcher);
      if (!smallerCfg)
        return error("--what-if '" + spec + "': " + smallerCfg.error().str());
      OwningOpRef<ModuleOp> copy = pristine.clone();
      PassManager pm(&context);
      if (failed(zeroc::runZeroPipeline(pm, *copy, *smallerCfg)))
        return error("--what-if '" + spec + "': compiling for " +
                     std::to_string(smaller) + " ranks failed (above)");
      FailureOr<zeroc::Plan> smallerPlan = zeroc::planOfSchedule(
          *copy, stats, *smallerCfg, std::string("zeroc ") + ZEROC_VERSION);
      if (failed(smallerPlan))
        return 1;
      scenario->notes = change->notes;
      at = recompiled.size();
      recompiled.push_back(std::move(*smallerPlan));
    }
    scenarios.push_back(std::move(*scenario));
    clusters.push_back(std::move(other));
    recompiledAt.push_back(at);
  }
  std::vector<const zeroc::Plan *> plans;
  for (const std::optional<size_t> &at : recompiledAt)
    plans.push_back(at ? &recompiled[*at] : nullptr);
  auto report = zeroc::whatIf(plan, *cluster, scenarios, clusters,
                              zeroc::kNcclWatchdogSeconds, plans);
  if (!report)
    return error(report.error());
  if (compileOutput != "-")
    if (int rc = writePlanFile(plan, *cluster))
      return rc;
  if (compileJson)
    llvm::outs() << zeroc::whatIfJson(*report).dump(2) << "\n";
  else
    llvm::outs() << "what-if for " << compileInput << " on "
                 << std::to_string(plan.worldSize) << " ranks\n"
                 << zeroc::whatIfText(*report);
  return 0;
}

int runCompile() {
  if (!compileWorldSize.getNumOccurrences())
    return error("--world-size is required: the number of data-parallel "
                 "ranks the plan is for");
  if (compileWorldSize < 1 || compileWorldSize > zeroc::limits::kMaxWorldSize)
    return error("--world-size must be 1 to " +
                 std::to_string(zeroc::limits::kMaxWorldSize) +
                 " (MPI and NCCL number ranks with 32-bit ints), found " +
                 std::to_string(compileWorldSize));
  if (compileMicroBatch.getNumOccurrences() && compileMicroBatch < 1)
    return error("--micro-batch must be at least 1, found " +
                 std::to_string(compileMicroBatch));
  if (compileGradAccum.getNumOccurrences() && compileGradAccum < 1)
    return error("--grad-accum must be at least 1, found " +
                 std::to_string(compileGradAccum));
  std::optional<zeroc::RecomputePolicy> recompute;
  if (!recomputeFlags(recompute))
    return 1;

  MLIRContext context;
  loadDialects(context);
  llvm::SourceMgr sources;
  SourceMgrDiagnosticHandler handler(sources, &context);
  OwningOpRef<ModuleOp> module = loadModel(context, sources, compileInput);
  if (!module)
    return 1;
  FailureOr<zeroc::ModelStats> stats = zeroc::computeModelStats(*module);
  if (failed(stats))
    return 1;

  auto doc = compileConfig.empty()
                 ? zeroc::JsonDocument::parse(
                       R"({"train_micro_batch_size_per_gpu": "auto"})",
                       "(default config)")
                 : zeroc::JsonDocument::load(compileConfig);
  if (!doc)
    return error(doc.error());
  zeroc::LauncherArgs launcher;
  if (compileMicroBatch.getNumOccurrences())
    launcher.microBatch = compileMicroBatch;
  if (compileGradAccum.getNumOccurrences())
    launcher.gradientAccumulation = compileGradAccum;
  if (compileEpSize.getNumOccurrences() &&
      compileMoeExpertParallelSize.getNumOccurrences() &&
      compileEpSize != compileMoeExpertParallelSize)
    return error("--ep-size " + std::to_string(compileEpSize) +
                 " and --moe-expert-parallel-size " +
                 std::to_string(compileMoeExpertParallelSize) +
                 " disagree; give one expert-parallel size");
  for (auto *flag : {&compileEpSize, &compileMoeExpertParallelSize})
    if (flag->getNumOccurrences()) {
      if (*flag < 1)
        return error("--" + flag->ArgStr.str() + " must be at least 1, found " +
                     std::to_string(*flag));
      launcher.expertParallelSize = int64_t(*flag);
      launcher.expertParallelFlag = "--" + flag->ArgStr.str();
    }
  launcher.recompute = recompute;
  auto cfg =
      zeroc::readConfigForModel(*doc, *stats, compileWorldSize, launcher);
  if (!cfg)
    return error(cfg.error());
  for (const std::string &n : cfg->notes)
    note(n);
  if (!cfg->ignoredKeys.empty())
    note("ignored (no effect on the schedule): " +
         llvm::join(cfg->ignoredKeys, ", "));

  const bool whatIf = !compileWhatIf.empty();
  if (whatIf && compileCluster.empty())
    return error("--what-if needs --cluster: the scenarios are simulated on "
                 "a cluster");
  if (whatIf && compileEmit == Emit::MLIR)
    return error("--what-if prints a report on the plan: not with --emit "
                 "mlir");
  if (compileJson && !whatIf)
    return error("--json prints the --what-if report: the plan itself is "
                 "JSON already");
  // The pipeline rewrites the module: a recompilation starts from a copy.
  OwningOpRef<ModuleOp> pristine;
  if (whatIf)
    pristine = module->clone();

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope root = timing.getRootScope();
  pm.enableTiming(root);
  if (failed(zeroc::runZeroPipeline(pm, *module, *cfg)))
    return 1;

  if (whatIf) {
    FailureOr<zeroc::Plan> plan = zeroc::planOfSchedule(
        *module, *stats, *cfg, std::string("zeroc ") + ZEROC_VERSION);
    if (failed(plan))
      return 1;
    return runCompileWhatIf(*plan, *doc, *cfg, *stats, launcher, *pristine,
                            context);
  }

  std::string message;
  auto output = openOutputFile(compileOutput, &message);
  if (!output)
    return error(message);
  if (compileEmit == Emit::MLIR) {
    module->print(output->os());
    output->os() << "\n";
  } else {
    FailureOr<zeroc::Plan> plan = zeroc::planOfSchedule(
        *module, *stats, *cfg, std::string("zeroc ") + ZEROC_VERSION);
    if (failed(plan))
      return 1;
    if (!compileCluster.empty()) {
      auto cluster = loadClusterArg(compileCluster);
      if (!cluster)
        return error(cluster.error());
      if (auto refusal = zeroc::checkClusterFit(*plan, *cluster)) {
        if (!compileAllowOom)
          return error(*refusal);
        llvm::WithColor::warning(llvm::errs(), "zeroc")
            << "writing a plan that does not fit (--allow-oom): "
            << refusal->substr(0, refusal->find('\n')) << "\n";
      }
    }
    output->os() << zeroc::toJson(*plan).dump(1) << "\n";
  }
  output->keep();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // cl keeps a StringRef to the description: the string must outlive parsing.
  static const std::string presetHelp =
      "Use a preset shape instead of a config.json: " +
      llvm::join(zeroc::presetNames(), ", ");
  genPreset.setDescription(presetHelp);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "zeroc " << ZEROC_VERSION << " (LLVM " << LLVM_VERSION_STRING
       << ")\n";
  });
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  registerAsmPrinterCLOptions();
  // libLLVM registers hundreds of backend options; show only ours and the
  // MLIR ones a compiler user needs.
  cl::HideUnrelatedOptions(zerocCategory);
  for (auto &[name, option] : cl::getRegisteredOptions())
    if (name == "mlir-print-ir-after-all" ||
        name == "mlir-print-ir-before-all" || name == "mlir-timing" ||
        name == "mlir-print-debuginfo") {
      option->setHiddenFlag(cl::NotHidden);
      option->addCategory(zerocCategory);
    }
  cl::ParseCommandLineOptions(
      argc, argv,
      "zeroc: compiles a model graph and a DeepSpeed ZeRO config into an "
      "explicit per-rank schedule\n\n"
      "  zeroc model.mlir --config ds.json --world-size N -o plan.json\n"
      "                                          compile a plan\n"
      "  zeroc gen   --preset gpt2 -o gpt2.mlir   write a model\n"
      "  zeroc stats gpt2.mlir [--json]         size, FLOPs, activations\n"
      "  zeroc inspect plan.json [--json]       memory, communication per "
      "rank\n"
      "  zeroc advise model.mlir --cluster C    which ZeRO setup to use\n"
      "  zeroc consolidate ckpt/ -o m.safetensors  whole f32 weights\n"
      "  zeroc consolidate ckpt/ --format hf -o out/  for transformers\n\n"
      "Run 'zeroc <subcommand> --help' for a subcommand's options.\n");
  for (cl::SubCommand *sub :
       {&genCmd, &statsCmd, &inspectCmd, &adviseCmd, &consolidateCmd})
    if (*sub)
      // advise refuses the expert-parallel flags itself, saying where the
      // size goes instead.
      if (int rc = rejectCompileOptions(
              *sub, sub == &adviseCmd
                        ? std::vector<
                              const cl::Option *>{&compileEpSize,
                                                  &compileMoeExpertParallelSize}
                        : std::vector<const cl::Option *>{}))
        return rc;
  if (genCmd)
    return runGen();
  if (statsCmd)
    return runStats();
  if (inspectCmd)
    return runInspect();
  if (adviseCmd)
    return runAdvise();
  if (consolidateCmd)
    return runConsolidate();
  if (!compileInput.empty())
    return runCompile();
  cl::PrintHelpMessage();
  return 1;
}
