//===- zeroc.cpp - The zeroc driver
//----------------------------------------===//
//
// `zeroc gen` writes a model from a Hugging Face config or a preset;
// `zeroc stats` reports its size, FLOPs and activation memory. The driver
// only parses options and prints; the work is in lib/.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"
#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Models/ModelBuilder.h"
#include "zeroc/Models/ModelSpec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
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
                                        "1)"),
                               cl::value_desc("n"), cl::cat(zerocCategory));
cl::opt<std::string> genDType("dtype", cl::sub(genCmd),
                              cl::desc("Parameter and activation dtype: f32, "
                                       "bf16 or f16 (default: the config's "
                                       "torch_dtype, else f32)"),
                              cl::value_desc("type"), cl::cat(zerocCategory));
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

int error(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "zeroc") << message << "\n";
  return 1;
}

int error(const zeroc::Diagnostic &diag) {
  llvm::errs() << diag.str() << "\n";
  return 1;
}

void loadDialects(MLIRContext &context) {
  context.loadDialect<zeroc::model::ModelDialect, func::FuncDialect>();
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

  MLIRContext context;
  loadDialects(context);
  OwningOpRef<ModuleOp> module = zeroc::buildModel(context, *shaped);
  if (failed(verify(*module)))
    return error("internal error: the generated model does not verify");

  std::string message;
  auto output = openOutputFile(genOutput, &message);
  if (!output)
    return error(message);
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  if (!genQuiet)
    for (const std::string &note : notes)
      llvm::WithColor::note(llvm::errs(), "zeroc") << note << "\n";
  return 0;
}

/// Parses and verifies a model file, printing diagnostics with file:line:col.
OwningOpRef<ModuleOp> loadModel(MLIRContext &context, llvm::SourceMgr &sources,
                                const std::string &path) {
  std::string message;
  auto file = openInputFile(path, &message);
  if (!file) {
    error(message);
    return nullptr;
  }
  sources.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  return parseSourceFile<ModuleOp>(sources, &context);
}

int runStats() {
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
  if (statsJson)
    llvm::outs() << zeroc::toJson(*stats).dump(2) << "\n";
  else
    llvm::outs() << zeroc::formatModelStats(*stats);
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
  // libLLVM registers hundreds of backend options; show only ours.
  cl::HideUnrelatedOptions(zerocCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "zeroc: compiles a model graph and a DeepSpeed ZeRO config into an "
      "explicit per-rank schedule\n\n"
      "  zeroc gen   --preset gpt2 -o gpt2.mlir   write a model\n"
      "  zeroc stats gpt2.mlir [--json]         size, FLOPs, activations\n\n"
      "Run 'zeroc <subcommand> --help' for a subcommand's options.\n");
  if (genCmd)
    return runGen();
  if (statsCmd)
    return runStats();
  cl::PrintHelpMessage();
  return 1;
}
