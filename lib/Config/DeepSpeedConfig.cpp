//===- DeepSpeedConfig.cpp - Read and resolve a DeepSpeed config ----------===//
//
// Mirrors what DeepSpeed v0.19.5 does with a config dict (runtime/config.py,
// zero/config.py, zero/offload_config.py, precision_config.py) and what the
// Hugging Face Trainer does to "auto" values before DeepSpeed sees them
// (transformers/integrations/deepspeed.py, HfTrainerDeepSpeedConfig).
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedSchema.h"
#include "zeroc/Support/Limits.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <set>

using nlohmann::json;

namespace zeroc {

using namespace detail;

namespace {

/// What a value is, as a message says it: scalars verbatim, containers by
/// kind.
std::string describe(const json &v) {
  if (v.is_object() || v.is_array())
    return describeJsonType(v);
  return v.dump();
}

bool isAuto(const json &v) { return v.is_string() && v == "auto"; }

const json *member(const json &object, const std::string &key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string formatReal(double value) { return json(value).dump(); }

/// A default as a note shows it.
std::string showValue(bool value) { return value ? "true" : "false"; }
std::string showValue(int64_t value) { return std::to_string(value); }
std::string showValue(double value) { return formatReal(value); }

/// How a block treats a key it does not know.
enum class UnknownKeys {
  /// DeepSpeed's pydantic models (extra="forbid") reject it.
  Reject,
  /// DeepSpeed's plain dict readers never look at it; zeroc lists it as
  /// ignored unless it is within a typo of a known key.
  IgnoreUnlessTypo,
};

/// How a block treats "auto" in a key the Hugging Face Trainer leaves alone.
enum class AutoValues {
  /// DeepSpeedConfigModel drops "auto" entries, so the default applies.
  MeanDefault,
  /// Plain dict readers would use the string itself: an error.
  Reject,
};

/// closestMatch without its "ends with" rule when only that rule could have
/// matched: a key of one's own that happens to end like a DeepSpeed key
/// ("size") is no misspelling of it, and must not make a config an error.
std::optional<std::string> typoOf(const std::string &word,
                                  const std::vector<std::string> &known) {
  std::optional<std::string> match = closestMatch(word, known);
  size_t slack = std::max<size_t>(2, word.size() / 3);
  if (match && match->size() > word.size() + slack)
    return std::nullopt;
  return match;
}

class Reader {
public:
  Reader(const JsonDocument &doc, const ConfigContext &ctx)
      : doc(doc), ctx(ctx) {}

  Expected<DeepSpeedConfig> read();

private:
  //===--- Reporting ------------------------------------------------------===//

  /// Records an error and goes on: the reader reports every error of a
  /// config in one run. Always returns false so callers can
  /// `return fail(...)`.
  bool fail(const JsonPath &at, const std::string &message) {
    Diagnostic diag = doc.error(at.pointer(), message);
    for (const Diagnostic &seen : errors)
      if (seen.line == diag.line && seen.column == diag.column &&
          seen.message == diag.message)
        return false;
    errors.push_back(std::move(diag));
    return false;
  }
  /// A value for a message: numbers as the file spells them
  /// (18446744073709551615 stays that, not -1 or 1.8e19).
  std::string shown(const json &v, const JsonPath &at) const {
    if (v.is_number())
      if (std::optional<std::string> text = doc.spelling(at.pointer()))
        return *text;
    return describe(v);
  }
  void note(std::string line) { cfg.notes.push_back(std::move(line)); }
  void ignore(const JsonPath &at) { ignored.push_back(at); }

  //===--- Scalars --------------------------------------------------------===//

  bool readBool(const json &v, const JsonPath &at, bool &out);
  bool readInt(const json &v, const JsonPath &at, int64_t min, int64_t &out);
  bool readReal(const json &v, const JsonPath &at, double min, double max,
                double &out);
  bool expectObject(const json &v, const JsonPath &at);

  //===--- Keys -----------------------------------------------------------===//

  bool checkKeys(const json &object, const JsonPath &at,
                 const std::vector<std::string> &known, UnknownKeys policy);
  /// The value of a key DeepSpeed also accepts under `alias`; null when
  /// neither is given. Giving both is an error, as in DeepSpeed.
  const json *lookup(const json &object, const JsonPath &at, const char *key,
                     const char *alias, JsonPath &where);
  template <typename S>
  bool readField(const json &v, const JsonPath &at, const BoolField<S> &,
                 bool &out) {
    return readBool(v, at, out);
  }
  template <typename S>
  bool readField(const json &v, const JsonPath &at, const IntField<S> &f,
                 int64_t &out) {
    return readInt(v, at, f.min, out);
  }
  template <typename S>
  bool readField(const json &v, const JsonPath &at, const RealField<S> &f,
                 double &out) {
    return readReal(v, at, f.min, f.max, out);
  }
  /// Reads the fields of `schema` present in `object` into `out`.
  template <typename S>
  bool readScalars(const json &object, const JsonPath &at,
                   const BlockSchema<S> &schema, AutoValues autoValues, S &out,
                   const std::set<std::string> &skip = {});

  //===--- Blocks ---------------------------------------------------------===//

  bool readTopLevelKeys(const json &root);
  bool checkUnmodelled(const json &root);
  bool readZero(const json &root);
  bool readHiddenSizeAuto(const json &zero, const JsonPath &at, bool stageKnown,
                          std::set<std::string> &done);
  bool readDeprecatedZeroKeys(const json &zero, const JsonPath &at);
  bool readOffload(const json &zero, const JsonPath &at, const char *key,
                   const BlockSchema<OffloadConfig> &schema,
                   OffloadConfig &out);
  bool checkOffloadStages(const JsonPath &at);
  bool readZeroSubBlocks(const json &zero, const JsonPath &at);
  bool readPrecision(const json &root, bool stageKnown);
  bool readEnabled(const json &block, const JsonPath &at, Precision precision,
                   bool &enabled);
  template <typename S>
  bool readPrecisionBlock(const json &block, const JsonPath &at,
                          const BlockSchema<S> &schema, Precision precision,
                          bool &enabled, S &out);
  bool readOptimizer(const json &root);
  bool readOptimizerParams(const json &params, const JsonPath &at);
  bool readGradientClipping(const json &root);
  bool readActivationCheckpointing(const json &root);
  bool readAio(const json &root);
  bool readExpertParallel(const json &root);
  bool readBatch(const json &root);

  const JsonDocument &doc;
  const ConfigContext &ctx;
  DeepSpeedConfig cfg;
  std::vector<Diagnostic> errors;
  std::vector<JsonPath> ignored;
  /// Top-level keys that a misspelt key probably meant: checks that need
  /// their values are skipped, so a typo is reported once, not again as
  /// the missing setting's consequences.
  std::set<std::string> misspelt;
  /// Where each offload block came from: the block itself or the
  /// deprecated flag that stood for it.
  JsonPath offloadParamAt, offloadOptimizerAt;
  bool offloadOptimizerGiven = false;
};

//===----------------------------------------------------------------------===//
// Scalars
//===----------------------------------------------------------------------===//

bool Reader::readBool(const json &v, const JsonPath &at, bool &out) {
  if (v.is_boolean()) {
    out = v.get<bool>();
    return true;
  }
  // pydantic's lax mode takes 0 and 1 for booleans; so does zeroc.
  if ((v.is_number_integer() || v.is_number_unsigned()) && (v == 0 || v == 1)) {
    out = v == 1;
    return true;
  }
  return fail(at,
              at.quoted() + " must be true or false; found " + shown(v, at));
}

bool Reader::readInt(const json &v, const JsonPath &at, int64_t min,
                     int64_t &out) {
  std::string expected = min == 0   ? "a non-negative integer"
                         : min == 1 ? "a positive integer"
                                    : "an integer";
  // zeroc keeps counts in int64_t; pydantic's Python int has no bound.
  std::string tooLarge = at.quoted() + " must be " + expected +
                         " no larger than 2^63-1; found " + shown(v, at);
  int64_t value = 0;
  // nlohmann's is_number_integer() is true for unsigned values too; ask
  // about those first, or 2^64-1 reads as -1.
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() >
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fail(at, tooLarge);
    value = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    // DeepSpeed's own examples write sizes as 5e8, which JSON makes a float;
    // pydantic accepts floats without a fraction for integer fields.
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      return fail(at, at.quoted() + " must be " + expected + "; found " +
                          shown(v, at) + ", which has a fraction");
    if (std::fabs(d) >= 9.2e18)
      return fail(at, tooLarge);
    value = static_cast<int64_t>(d);
  } else {
    std::string hint =
        v.is_string() && !isAuto(v) ? " (write numbers without quotes)" : "";
    return fail(at, at.quoted() + " must be " + expected + "; found " +
                        describe(v) + hint);
  }
  if (value < min)
    return fail(at, at.quoted() + " must be " + expected + "; found " +
                        shown(v, at));
  out = value;
  return true;
}

bool Reader::readReal(const json &v, const JsonPath &at, double min, double max,
                      double &out) {
  std::string expected =
      std::isinf(max)
          ? (min == 0 ? "a non-negative number" : "a number")
          : "a number from " + formatReal(min) + " to " + formatReal(max);
  if (!v.is_number())
    return fail(at, at.quoted() + " must be " + expected + "; found " +
                        describe(v));
  double value = v.get<double>();
  if (!std::isfinite(value) || value < min || value > max)
    return fail(at, at.quoted() + " must be " + expected + "; found " +
                        shown(v, at));
  out = value;
  return true;
}

bool Reader::expectObject(const json &v, const JsonPath &at) {
  if (v.is_object())
    return true;
  return fail(at, at.quoted() + " must be an object; found " + describe(v));
}

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

bool Reader::checkKeys(const json &object, const JsonPath &at,
                       const std::vector<std::string> &known,
                       UnknownKeys policy) {
  bool ok = true;
  for (const auto &item : object.items()) {
    const std::string &key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end())
      continue;
    JsonPath where = at / key;
    std::optional<std::string> typo = typoOf(key, known);
    if (policy == UnknownKeys::Reject) {
      // DeepSpeedConfigModel.__init__ drops "auto" entries before pydantic
      // looks for extra keys, so DeepSpeed accepts an unknown key set to
      // "auto". zeroc does too, unless the key looks like a misspelling.
      if (isAuto(item.value()) && !typo) {
        ignore(where);
        note(where.quoted() + " is not a key of " + at.quoted() +
             "; DeepSpeed drops it because its value is \"auto\"");
        continue;
      }
      std::string message = "unknown key " + where.quoted();
      if (auto match = closestMatch(key, known))
        message += "; did you mean '" + *match + "'?";
      message += " (DeepSpeed rejects unknown keys in " + at.quoted() + ")";
      ok = fail(where, message);
      continue;
    }
    if (typo) {
      if (at.keys().empty())
        misspelt.insert(*typo);
      ok = fail(where, "unknown key " + where.quoted() + "; did you mean '" +
                           *typo + "'?");
      continue;
    }
    ignore(where);
    note(where.quoted() + " is not a key DeepSpeed reads; ignored");
  }
  return ok;
}

const json *Reader::lookup(const json &object, const JsonPath &at,
                           const char *key, const char *alias,
                           JsonPath &where) {
  const json *byKey = member(object, key);
  const json *byAlias = alias ? member(object, alias) : nullptr;
  if (byKey && byAlias) {
    fail(at / alias, (at / alias).quoted() + " and " + (at / key).quoted() +
                         " are the same setting; give only one (DeepSpeed "
                         "rejects both together)");
    return nullptr;
  }
  where = at / (byAlias ? alias : key);
  return byKey ? byKey : byAlias;
}

template <typename S>
bool Reader::readScalars(const json &object, const JsonPath &at,
                         const BlockSchema<S> &schema, AutoValues autoValues,
                         S &out, const std::set<std::string> &skip) {
  // "auto" in a key nobody resolves: the default stays, or it is an error.
  auto takeAuto = [&](const JsonPath &where, const std::string &fallback) {
    if (autoValues == AutoValues::Reject)
      return fail(where, where.quoted() + " does not take \"auto\" (neither "
                                          "DeepSpeed nor Hugging Face "
                                          "resolves it here)");
    note(where.dotted() + ": \"auto\" -> " + fallback +
         " (DeepSpeed drops \"auto\" and keeps its default)");
    return true;
  };
  // Each field is read on its own, so that every bad one is reported.
  bool ok = true;
  schema.forEachField([&](const auto &f) {
    JsonPath where;
    size_t errorsBefore = errors.size();
    const json *v = lookup(object, at, f.key, f.alias, where);
    if (errors.size() != errorsBefore)
      ok = false;
    if (!v || skip.count(f.key))
      return;
    bool fieldOk = isAuto(*v) ? takeAuto(where, showValue(out.*f.member))
                              : readField(*v, where, f, out.*f.member);
    ok = fieldOk && ok;
  });
  return ok;
}

//===----------------------------------------------------------------------===//
// Top level
//===----------------------------------------------------------------------===//

/// Spellings of the expert-parallel size that DeepSpeed does not read from
/// its config; readExpertParallel refuses them, saying where they belong.
static const char *const kForeignExpertParallelKeys[] = {
    "ep_size", "moe_expert_parallel_size", "expert_parallel_size"};

bool Reader::readTopLevelKeys(const json &root) {
  std::vector<std::string> known = modelledTopLevelKeys();
  known.insert(known.end(), std::begin(kForeignExpertParallelKeys),
               std::end(kForeignExpertParallelKeys));
  const std::vector<std::string> &ignorable = ignoredTopLevelKeys();
  known.insert(known.end(), ignorable.begin(), ignorable.end());
  for (const std::string &key : ignorable)
    if (root.contains(key))
      ignore(JsonPath() / key);
  // DeepSpeed reads `eigenvalue` inside `quantize_training`
  // (get_eigenvalue_config); its docs show the block at the top level,
  // where its code never looks.
  if (root.contains("eigenvalue")) {
    known.push_back("eigenvalue");
    ignore(JsonPath() / "eigenvalue");
    note("'eigenvalue' has no effect at the top level: DeepSpeed reads it "
         "inside 'quantize_training' (get_eigenvalue_config)");
  }
  bool ok = checkUnmodelled(root);
  // DeepSpeed reads the keys it knows and never looks at the others; zeroc
  // does the same unless the key looks like a misspelt DeepSpeed key.
  return checkKeys(root, JsonPath(), known, UnknownKeys::IgnoreUnlessTypo) &&
         ok;
}

/// Top-level blocks zeroc does not model. Those that change what each rank
/// holds, computes or sends when they are on (other parallel dimensions,
/// another gradient dtype, autocast, elastic batch sizes, the hybrid and
/// DeepCompile engines) are errors naming the key: a plan without them
/// would be a silent wrong answer. Those that act only through model code
/// built for them (sparse attention, layer drop, curriculum, compression,
/// pipeline modules) get a note saying what zeroc plans instead.
bool Reader::checkUnmodelled(const json &root) {
  bool ok = true;
  auto number = [&](const json &block, const char *key) -> double {
    const json *v = block.is_object() ? member(block, key) : nullptr;
    return v && v->is_number() ? v->get<double>() : 0.0;
  };
  auto enabled = [&](const json &block) {
    const json *v = block.is_object() ? member(block, "enabled") : nullptr;
    return v && v->is_boolean() && v->get<bool>();
  };
  auto refuse = [&](const JsonPath &at, const std::string &what) {
    ok = fail(at, at.quoted() + " " + what +
                      "; zeroc plans data parallelism alone over the world "
                      "size and would misstate memory, FLOPs or traffic, so "
                      "it refuses the key rather than drop it") &&
         ok;
  };
  if (const json *tp = member(root, "tensor_parallel"))
    for (const char *key : {"autotp_size", "tp_size"})
      if (number(*tp, key) > 1)
        refuse(JsonPath() / "tensor_parallel" / key,
               "splits the model over tensor-parallel ranks (ZeRO then runs "
               "over world size / " +
                   shown((*tp)[key], JsonPath() / "tensor_parallel" / key) +
                   ")");
  if (const json *sp = member(root, "sequence_parallel_size");
      sp && sp->is_number() && sp->get<double>() > 1)
    refuse(JsonPath() / "sequence_parallel_size",
           "splits each sequence over ranks (DeepSpeed divides the world "
           "size by it in the batch arithmetic)");
  if (const json *dp = member(root, "data_parallel_size");
      dp && dp->is_number() && dp->get<double>() != double(ctx.worldSize))
    refuse(JsonPath() / "data_parallel_size",
           "is " + shown(*dp, JsonPath() / "data_parallel_size") +
               ", not the world size " + std::to_string(ctx.worldSize));
  if (const json *types = member(root, "data_types"))
    if (const json *acc =
            types->is_object() ? member(*types, "grad_accum_dtype") : nullptr;
        acc && acc->is_string() && *acc != "bf16" && *acc != "fp16")
      ok = fail(JsonPath() / "data_types" / "grad_accum_dtype",
                "'data_types.grad_accum_dtype' " + describe(*acc) +
                    " keeps gradients in that dtype, which zeroc does not "
                    "model (it accumulates gradients in the training "
                    "dtype); remove the key to plan that") &&
           ok;
  for (const char *key : {"torch_autocast", "elasticity", "hybrid_engine"})
    if (const json *block = member(root, key); block && enabled(*block))
      ok = fail(JsonPath() / key / "enabled",
                (JsonPath() / key / "enabled").quoted() + " is true: " +
                    (std::string(key) == "torch_autocast"
                         ? "autocast computes in another precision than "
                           "the parameters', which zeroc does not model"
                     : std::string(key) == "elasticity"
                         ? "the batch size is chosen at launch, while "
                           "zeroc plans the config's fixed batch"
                         : "the hybrid engine's inference containers and "
                           "generation are not modelled") +
                    "; zeroc refuses it rather than plan something else") &&
           ok;
  if (const json *compile = member(root, "compile"))
    if (const json *dc =
            compile->is_object() ? member(*compile, "deepcompile") : nullptr;
        dc && dc->is_boolean() && dc->get<bool>())
      ok = fail(JsonPath() / "compile" / "deepcompile",
                "'compile.deepcompile' is true: DeepCompile reschedules "
                "ZeRO-3's gathers and releases, which zeroc does not model; "
                "zeroc refuses it rather than plan something else") &&
           ok;
  for (const char *key :
       {"sparse_attention", "progressive_layer_drop", "curriculum_learning",
        "compression_training", "weight_quantization", "quantize_training",
        "pipeline"})
    if (member(root, key))
      note("'" + std::string(key) +
           "' acts only through model code built for it (DeepSpeed's own "
           "modules); zeroc plans the model as its graph says");
  return ok;
}

Expected<DeepSpeedConfig> Reader::read() {
  const json &root = doc.root();
  if (!root.is_object())
    return doc.error("", "a DeepSpeed config must be a JSON object; found " +
                             describeJsonType(root));
  if (ctx.worldSize < 1 || ctx.worldSize > limits::kMaxWorldSize)
    errors.push_back(
        Diagnostic{doc.name(), 0, 0,
                   "the world size (--world-size) must be 1 to " +
                       std::to_string(limits::kMaxWorldSize) +
                       " (MPI and NCCL number ranks with 32-bit ints); found " +
                       std::to_string(ctx.worldSize)});
  cfg.worldSize = ctx.worldSize;
  // DeepSpeed loads its config with object_pairs_hook=
  // dict_raise_error_on_duplicate_keys: a repeated key is an error there,
  // where JSON parsers keep the last value.
  for (Diagnostic &d : doc.duplicateKeys()) {
    d.message += "; DeepSpeed refuses a config with duplicate keys "
                 "(dict_raise_error_on_duplicate_keys)";
    errors.push_back(std::move(d));
  }

  // The blocks are independent: each is read even when another failed, so
  // that one run reports every error. A check that needs a value an error
  // left unknown (the stage, a misspelt key's setting) is skipped instead
  // of reporting that error's consequences.
  readTopLevelKeys(root);
  bool stageKnown = readZero(root) && !misspelt.count("zero_optimization");
  readPrecision(root, stageKnown);
  readOptimizer(root);
  readGradientClipping(root);
  readActivationCheckpointing(root);
  if (ctx.recompute)
    cfg.recompute = *ctx.recompute;
  else if (cfg.activationCheckpointing.present)
    cfg.recompute = {RecomputeMode::Full, 1};
  readAio(root);
  readExpertParallel(root);
  bool batchKnown = ctx.worldSize >= 1;
  for (const char *key : {"train_batch_size", "train_micro_batch_size_per_gpu",
                          "gradient_accumulation_steps"})
    batchKnown = batchKnown && !misspelt.count(key);
  if (batchKnown)
    readBatch(root);
  if (!errors.empty()) {
    // In the order of the file, as a compiler reports them.
    std::stable_sort(errors.begin(), errors.end(),
                     [](const Diagnostic &a, const Diagnostic &b) {
                       return std::make_pair(a.line, a.column) <
                              std::make_pair(b.line, b.column);
                     });
    return Diagnostic::combine(std::move(errors));
  }

  // Report ignored keys in the order the file has them.
  auto position = [&](const JsonPath &at) {
    return doc.locate(at.pointer()).value_or(std::make_pair(0, 0));
  };
  std::stable_sort(ignored.begin(), ignored.end(),
                   [&](const JsonPath &a, const JsonPath &b) {
                     return position(a) < position(b);
                   });
  for (const JsonPath &at : ignored)
    cfg.ignoredKeys.push_back(at.dotted());
  return cfg;
}

//===----------------------------------------------------------------------===//
// zero_optimization
//===----------------------------------------------------------------------===//

bool Reader::readZero(const json &root) {
  JsonPath at = JsonPath() / "zero_optimization";
  const json *found = member(root, "zero_optimization");
  const json *allgatherSize = member(root, "allgather_size");
  if (found && found->is_boolean()) {
    // The pre-0.3 form, still read by read_zero_config_deprecated.
    cfg.zero = ZeroConfig::defaultsForStage(found->get<bool>() ? 1 : 0);
    note(at.dotted() + ": the boolean form is deprecated; read as stage " +
         std::to_string(cfg.zero.stage));
    if (cfg.zero.stage == 1 && allgatherSize &&
        !readInt(*allgatherSize, JsonPath() / "allgather_size", 0,
                 cfg.zero.allgatherBucketSize))
      return true; // The stage is known all the same.
    if (cfg.zero.stage == 1 && allgatherSize)
      note("allgather_size (deprecated) rewritten as "
           "zero_optimization.allgather_bucket_size = " +
           std::to_string(cfg.zero.allgatherBucketSize));
    else if (allgatherSize)
      ignore(JsonPath() / "allgather_size");
    return true;
  }
  if (allgatherSize)
    ignore(JsonPath() / "allgather_size");
  if (!found)
    return true;
  const json &zero = *found;
  if (!expectObject(zero, at))
    return false;
  // Every key is read even after an error; `ok` says whether the block, and
  // so the stage the checks below depend on, is as the user meant it.
  bool ok = checkKeys(zero, at, zeroSchema().keys(), UnknownKeys::Reject);

  bool stageKnown = true;
  if (const json *stage = member(zero, "stage")) {
    int64_t value = 0;
    if (isAuto(*stage))
      note(at.dotted() + ".stage: \"auto\" -> 0 (DeepSpeed drops \"auto\" "
                         "and keeps its default)");
    else if (!readInt(*stage, at / "stage", 0, value))
      stageKnown = false;
    if (stageKnown && value > 3)
      stageKnown = fail(at / "stage", (at / "stage").quoted() +
                                          " must be 0, 1, 2 or 3; found " +
                                          shown(*stage, at / "stage"));
    if (stageKnown)
      cfg.zero.stage = static_cast<int>(value);
  }
  ok = stageKnown && ok;

  std::set<std::string> done;
  ok = readHiddenSizeAuto(zero, at, stageKnown, done) && ok;
  ok = readScalars(zero, at, zeroSchema(), AutoValues::MeanDefault, cfg.zero,
                   done) &&
       ok;

  // DeepSpeed's default overlaps communication only for stage 3.
  cfg.zero.overlapComm = cfg.zero.stage == 3;
  if (const json *overlap = member(zero, "overlap_comm")) {
    if (isAuto(*overlap))
      note(at.dotted() + ".overlap_comm: \"auto\" -> " +
           (cfg.zero.overlapComm ? "true" : "false") +
           " (DeepSpeed drops \"auto\"; its default is true for stage 3 "
           "only)");
    else if (!readBool(*overlap, at / "overlap_comm", cfg.zero.overlapComm))
      ok = false;
  }

  offloadParamAt = at / "offload_param";
  offloadOptimizerAt = at / "offload_optimizer";
  ok = readOffload(zero, at, "offload_param", offloadParamSchema(),
                   cfg.zero.offloadParam) &&
       ok;
  ok = readOffload(zero, at, "offload_optimizer", offloadOptimizerSchema(),
                   cfg.zero.offloadOptimizer) &&
       ok;
  ok = readDeprecatedZeroKeys(zero, at) && ok;
  // The offload rules relate the stage to the offload blocks: only when
  // all of them are known.
  if (ok)
    ok = checkOffloadStages(at);
  ok = readZeroSubBlocks(zero, at) && ok;
  return ok;
}

/// The Hugging Face Trainer fills three bucket keys from the model's hidden
/// size (trainer_config_finalize); the two `stage3_` ones only for stage 3,
/// and only under those exact names. Elsewhere DeepSpeed drops the "auto"
/// and keeps its default, which readScalars does.
bool Reader::readHiddenSizeAuto(const json &zero, const JsonPath &at,
                                bool stageKnown, std::set<std::string> &done) {
  struct Rule {
    const char *key;
    int64_t ZeroConfig::*member;
    const char *formula;
    int64_t (*compute)(int64_t hidden);
    bool stage3Only;
  };
  const Rule rules[] = {
      {"reduce_bucket_size", &ZeroConfig::reduceBucketSize, "hidden_size^2",
       [](int64_t h) { return h * h; }, false},
      // The Trainer passes the float 0.9 * h * h; int() of it, computed in
      // the same order, is the whole number of elements it stands for.
      {"stage3_prefetch_bucket_size", &ZeroConfig::prefetchBucketSize,
       "0.9 x hidden_size^2",
       [](int64_t h) { return static_cast<int64_t>(0.9 * h * h); }, true},
      {"stage3_param_persistence_threshold",
       &ZeroConfig::paramPersistenceThreshold, "10 x hidden_size",
       [](int64_t h) { return 10 * h; }, true},
  };
  bool ok = true;
  for (const Rule &rule : rules) {
    const json *v = member(zero, rule.key);
    if (!v || !isAuto(*v) ||
        (rule.stage3Only && (!stageKnown || cfg.zero.stage != 3)))
      continue;
    JsonPath where = at / rule.key;
    int64_t h = ctx.hiddenSize;
    done.insert(rule.key);
    if (h < 1) {
      ok = fail(where, where.quoted() +
                           " is \"auto\", which Hugging Face "
                           "sets to " +
                           rule.formula +
                           ", but the model's hidden size is unknown");
      continue;
    }
    if (h > 1000000000) {
      ok = fail(where, where.quoted() + " is \"auto\" and the hidden size " +
                           std::to_string(h) + " is too large");
      continue;
    }
    int64_t value = rule.compute(h);
    cfg.zero.*rule.member = value;
    note(where.dotted() + ": \"auto\" -> " + std::to_string(value) + " (" +
         rule.formula + ", hidden_size " + std::to_string(h) + ")");
  }
  return ok;
}

bool Reader::readDeprecatedZeroKeys(const json &zero, const JsonPath &at) {
  // deprecated key -> the block it stands for (DeepSpeedZeroConfig's
  // new_param_fn: true means {"device": "cpu"}, false means no offload).
  struct OffloadFlag {
    const char *key;
    const char *replacement;
    OffloadConfig ZeroConfig::*block;
    JsonPath *origin;
  };
  const OffloadFlag flags[] = {
      {"cpu_offload", "offload_optimizer", &ZeroConfig::offloadOptimizer,
       &offloadOptimizerAt},
      {"cpu_offload_param", "offload_param", &ZeroConfig::offloadParam,
       &offloadParamAt},
  };
  bool ok = true;
  for (const OffloadFlag &flag : flags) {
    const json *v = member(zero, flag.key);
    if (!v || isAuto(*v))
      continue;
    JsonPath where = at / flag.key;
    if (zero.contains(flag.replacement)) {
      ok = fail(where, where.quoted() + " is deprecated and replaced by " +
                           (at / flag.replacement).quoted() +
                           "; give only the latter (DeepSpeed rejects "
                           "both together)");
      continue;
    }
    bool on = false;
    if (!v->is_null() && !readBool(*v, where, on)) {
      ok = false;
      continue;
    }
    if (on) {
      (cfg.zero.*flag.block).device = OffloadDevice::CPU;
      *flag.origin = where;
      if (flag.block == &ZeroConfig::offloadOptimizer)
        offloadOptimizerGiven = true;
    }
    note(where.dotted() + " (deprecated) rewritten as " +
         (at / flag.replacement).dotted() +
         (on ? " = {\"device\": \"cpu\"}" : " = none"));
  }

  const char *oldGather = "stage3_gather_fp16_weights_on_model_save";
  if (const json *v = member(zero, oldGather); v && !isAuto(*v)) {
    JsonPath where = at / oldGather;
    bool both = false;
    for (const char *replacement : {"stage3_gather_16bit_weights_on_model_save",
                                    "gather_16bit_weights_on_model_save"})
      if (!both && zero.contains(replacement))
        both = !fail(where, where.quoted() + " is deprecated and replaced by " +
                                (at / replacement).quoted() +
                                "; give only the latter (DeepSpeed rejects "
                                "both together)");
    if (both || !readBool(*v, where, cfg.zero.gather16bitWeightsOnModelSave))
      ok = false;
    else
      note(where.dotted() + " (deprecated) rewritten as " + at.dotted() +
           ".stage3_gather_16bit_weights_on_model_save = " +
           (cfg.zero.gather16bitWeightsOnModelSave ? "true" : "false"));
  }

  // Deprecated without a replacement DeepSpeed would set: a warning there.
  if (const json *v = member(zero, "cpu_offload_use_pin_memory")) {
    JsonPath where = at / "cpu_offload_use_pin_memory";
    bool unused = false;
    if (!isAuto(*v) && !v->is_null() && !readBool(*v, where, unused))
      return false;
    ignore(where);
    note(where.dotted() + " is deprecated and has no effect in DeepSpeed; "
                          "set pin_memory in offload_param or "
                          "offload_optimizer instead");
  }
  return ok;
}

bool Reader::readOffload(const json &zero, const JsonPath &zeroAt,
                         const char *key,
                         const BlockSchema<OffloadConfig> &schema,
                         OffloadConfig &out) {
  const json *v = member(zero, key);
  JsonPath at = zeroAt / key;
  if (!v || v->is_null())
    return true;
  if (isAuto(*v)) {
    note(at.dotted() + ": \"auto\" -> none (DeepSpeed drops \"auto\" and "
                       "keeps its default)");
    return true;
  }
  if (&out == &cfg.zero.offloadOptimizer)
    offloadOptimizerGiven = true;
  if (!expectObject(*v, at))
    return false;
  bool ok = checkKeys(*v, at, schema.keys(), UnknownKeys::Reject);

  if (const json *device = member(*v, "device"); device && !isAuto(*device)) {
    JsonPath where = at / "device";
    const std::vector<std::string> names = {"none", "cpu", "nvme"};
    auto it = device->is_string() ? std::find(names.begin(), names.end(),
                                              device->get<std::string>())
                                  : names.end();
    if (it == names.end()) {
      std::string message = where.quoted() +
                            " must be \"none\", \"cpu\" or \"nvme\"; found " +
                            describe(*device);
      if (device->is_string())
        if (auto match = closestMatch(device->get<std::string>(), names))
          message += "; did you mean \"" + *match + "\"?";
      ok = fail(where, message);
    } else {
      out.device = static_cast<OffloadDevice>(it - names.begin());
    }
  } else if (device) {
    note((at / "device").dotted() + ": \"auto\" -> none (DeepSpeed drops "
                                    "\"auto\" and keeps its default)");
  }

  if (const json *path = member(*v, "nvme_path");
      path && !path->is_null() && !isAuto(*path)) {
    if (!path->is_string())
      ok = fail(at / "nvme_path", (at / "nvme_path").quoted() +
                                      " must be a directory path; found " +
                                      describe(*path));
    else
      out.nvmePath = path->get<std::string>();
  }

  ok = readScalars(*v, at, schema, AutoValues::MeanDefault, out) && ok;

  if (ok && out.device == OffloadDevice::NVMe && out.nvmePath.empty())
    return fail(at / "device",
                (at / "device").quoted() +
                    " is \"nvme\" but no 'nvme_path' is given; NVMe offload "
                    "needs the directory on the NVMe device to swap to");
  return ok;
}

bool Reader::checkOffloadStages(const JsonPath &at) {
  ZeroConfig &z = cfg.zero;
  // DeepSpeedZeroConfig has no rule on offload_param and the stage; only
  // stage 3's optimizer (engine.py, _configure_zero_optimizer) is given
  // the block. Below stage 3 DeepSpeed validates it and offloads nothing.
  if (z.offloadParam.enabled() && z.stage < 3) {
    note(offloadParamAt.dotted() + " has no effect with ZeRO stage " +
         std::to_string(z.stage) +
         ": DeepSpeed offloads parameters only at stage 3; no parameter "
         "offload is planned");
    z.offloadParam = OffloadConfig::forParameters();
  }
  // Stricter than DeepSpeed's config, which accepts this: at stage 0 the
  // engine builds DeepSpeedCPUAdam (_configure_basic_optimizer) over
  // parameters no ZeRO optimizer moved to the CPU, and its step asserts
  // that they are there. zeroc says so before launch.
  bool ok = true;
  if (z.offloadOptimizer.enabled() && z.stage == 0)
    ok = fail(offloadOptimizerAt,
              offloadOptimizerAt.quoted() + " offloads optimizer states to " +
                  std::string(offloadDeviceName(z.offloadOptimizer.device)) +
                  ", which needs ZeRO stage 1, 2 or 3; " +
                  (at / "stage").quoted() + " is 0");
  // DeepSpeedZeroConfig.offload_ratio_check.
  if (offloadOptimizerGiven && z.offloadOptimizer.ratio < 1.0 && z.stage != 3)
    ok = fail(at / "offload_optimizer" / "ratio",
              (at / "offload_optimizer" / "ratio").quoted() + " is " +
                  formatReal(z.offloadOptimizer.ratio) +
                  ", but partial optimizer offload needs ZeRO stage 3; "
                  "stage is " +
                  std::to_string(z.stage));
  return ok;
}

bool Reader::readZeroSubBlocks(const json &zero, const JsonPath &at) {
  bool ok = true;
  if (const json *v = member(zero, "leaf_module"); v && !v->is_null()) {
    JsonPath where = at / "leaf_module";
    if (expectObject(*v, where)) {
      ok = checkKeys(*v, where, leafModuleKeys(), UnknownKeys::Reject);
      LeafModuleConfig &leaf = cfg.zero.leafModule;
      std::pair<const char *, std::vector<std::string> *> lists[] = {
          {"classes", &leaf.classes},
          {"names", &leaf.names},
          {"name_suffixes", &leaf.nameSuffixes}};
      for (auto &[key, list] : lists) {
        const json *entry = member(*v, key);
        if (!entry)
          continue;
        JsonPath listAt = where / key;
        // DeepSpeed takes a lone string as a one-element list and drops
        // repeats.
        std::vector<std::string> values;
        if (entry->is_string()) {
          values.push_back(entry->get<std::string>());
        } else if (entry->is_array()) {
          for (size_t i = 0; i < entry->size(); ++i) {
            const json &item = (*entry)[i];
            if (!item.is_string())
              ok = fail(listAt / std::to_string(i),
                        listAt.quoted() + " must list strings; found " +
                            shown(item, listAt / std::to_string(i)));
            else if (std::find(values.begin(), values.end(), item) ==
                     values.end())
              values.push_back(item.get<std::string>());
          }
        } else {
          ok = fail(listAt, listAt.quoted() +
                                " must be a string or a list of strings; "
                                "found " +
                                describe(*entry));
          continue;
        }
        *list = std::move(values);
      }
    } else {
      ok = false;
    }
  }
  if (const json *v = member(zero, "zenflow"); v && !v->is_null()) {
    JsonPath where = at / "zenflow";
    if (expectObject(*v, where) &&
        checkKeys(*v, where, zenflowKeys(), UnknownKeys::Reject))
      cfg.zero.zenflow = *v;
    else
      ok = false;
  }
  if (const json *v = member(zero, "zeropp_loco_param"); v && !v->is_null()) {
    if (expectObject(*v, at / "zeropp_loco_param"))
      cfg.zero.zeroppLocoParam = *v;
    else
      ok = false;
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// fp16 / bf16 / amp / communication_data_type
//===----------------------------------------------------------------------===//

/// `enabled` of fp16 or bf16. The Trainer sets an "auto" one from its
/// --fp16 / --bf16 flags; zeroc takes the model's dtype for them.
bool Reader::readEnabled(const json &block, const JsonPath &at,
                         Precision precision, bool &enabled) {
  const json *v = member(block, "enabled");
  if (!v)
    return true;
  JsonPath where = at / "enabled";
  if (!isAuto(*v))
    return readBool(*v, where, enabled);
  if (!ctx.modelPrecision)
    return fail(where, where.quoted() +
                           " is \"auto\", which follows the model's dtype, "
                           "but the model's dtype is unknown");
  enabled = *ctx.modelPrecision == precision;
  note(where.dotted() + ": \"auto\" -> " + (enabled ? "true" : "false") +
       " (the model's dtype is " +
       std::string(precisionName(*ctx.modelPrecision)) + ")");
  return true;
}

/// `fp16` or `bf16`: pydantic models with an `enabled` flag.
template <typename S>
bool Reader::readPrecisionBlock(const json &block, const JsonPath &at,
                                const BlockSchema<S> &schema,
                                Precision precision, bool &enabled, S &out) {
  if (!expectObject(block, at))
    return false;
  bool ok = checkKeys(block, at, schema.keys(), UnknownKeys::Reject);
  ok = readEnabled(block, at, precision, enabled) && ok;
  return readScalars(block, at, schema, AutoValues::MeanDefault, out) && ok;
}

/// `stageKnown`: the ZeRO stage was read without error, so the rules that
/// need a stage can be checked.
bool Reader::readPrecision(const json &root, bool stageKnown) {
  bool fp16 = false, bf16 = false;
  // Each block is read even when the other failed; the rules that relate
  // them are checked only when both were read.
  bool ok = !misspelt.count("fp16") && !misspelt.count("bf16");
  JsonPath fp16At = JsonPath() / "fp16";
  if (const json *block = member(root, "fp16");
      block && !readPrecisionBlock(*block, fp16At, fp16Schema(),
                                   Precision::FP16, fp16, cfg.lossScale))
    ok = false;

  // get_bfloat16_config: "bf16", else the old name "bfloat16".
  const json *block = member(root, "bf16");
  JsonPath bf16At = JsonPath() / "bf16";
  if (block && block->is_null())
    block = nullptr;
  if (const json *old = member(root, "bfloat16")) {
    if (block) {
      ignore(JsonPath() / "bfloat16");
      note("'bfloat16' is ignored because 'bf16' is given (DeepSpeed reads "
           "only 'bf16' then)");
    } else {
      block = old;
      bf16At = JsonPath() / "bfloat16";
      note("bfloat16 (old name) read as bf16");
    }
  }
  if (block && !readPrecisionBlock(*block, bf16At, bf16Schema(),
                                   Precision::BF16, bf16, cfg.bf16))
    ok = false;

  if (ok && fp16 && bf16)
    ok = fail(bf16At / "enabled", "fp16 and bf16 cannot both be enabled; " +
                                      (fp16At / "enabled").quoted() + " and " +
                                      (bf16At / "enabled").quoted() +
                                      " are both true");
  cfg.precision = fp16   ? Precision::FP16
                  : bf16 ? Precision::BF16
                         : Precision::FP32;
  if (cfg.precision == Precision::FP32 && ctx.modelPrecision &&
      *ctx.modelPrecision != Precision::FP32)
    note("the model's dtype is " +
         std::string(precisionName(*ctx.modelPrecision)) +
         " but neither fp16 nor bf16 is enabled: DeepSpeed trains in fp32");

  // DeepSpeedFP16Config._validate_dynamic_loss_scale_params.
  const LossScaleConfig &ls = cfg.lossScale;
  if (ok && fp16 && ls.dynamic()) {
    if (ls.lossScaleWindow <= 0)
      ok = fail(fp16At / "loss_scale_window",
                (fp16At / "loss_scale_window").quoted() +
                    " must be positive with dynamic loss scaling "
                    "(loss_scale 0); found " +
                    std::to_string(ls.lossScaleWindow));
    if (ls.minLossScale <= 0)
      ok = fail(fp16At / "min_loss_scale",
                (fp16At / "min_loss_scale").quoted() +
                    " must be positive with dynamic loss scaling "
                    "(loss_scale 0); found " +
                    std::to_string(ls.minLossScale));
  }
  // DeepSpeedConfig._do_error_check.
  struct NeedsZero {
    bool on;
    JsonPath at;
  };
  const NeedsZero needsZero[] = {
      {ls.fp16MasterWeightsAndGrads, fp16At / "fp16_master_weights_and_grads"},
      {cfg.bf16.bf16MasterWeightsAndGrads,
       bf16At / "bf16_master_weights_and_grads"},
      {cfg.bf16.bf16OptimizerStates, bf16At / "bf16_optimizer_states"},
  };
  for (const NeedsZero &n : needsZero)
    if (ok && stageKnown && n.on && cfg.zero.stage == 0)
      ok = fail(n.at, n.at.quoted() + " needs ZeRO stage 1, 2 or 3; "
                                      "'zero_optimization.stage' is 0");
  if (ok && cfg.bf16.bf16OptimizerStates && !cfg.bf16.bf16MasterWeightsAndGrads)
    ok = fail(bf16At / "bf16_optimizer_states",
              (bf16At / "bf16_optimizer_states").quoted() +
                  " needs 'bf16_master_weights_and_grads' to be true");

  // Apex AMP: the Trainer sets an "auto" amp.enabled to false unless asked
  // for the apex backend. zeroc does not model apex.
  if (const json *amp = member(root, "amp")) {
    JsonPath at = JsonPath() / "amp";
    bool on = false;
    if (!expectObject(*amp, at))
      ok = false;
    else if (const json *v = member(*amp, "enabled")) {
      if (isAuto(*v))
        note("amp.enabled: \"auto\" -> false (Hugging Face enables apex AMP "
             "only for --fp16_backend apex)");
      else if (!readBool(*v, at / "enabled", on))
        ok = false;
    }
    if (on)
      ok = fail(at / "enabled", "zeroc does not model apex AMP ('amp."
                                "enabled' is true); use 'fp16' or 'bf16'");
    else if (amp->is_object())
      ignore(at);
  }

  if (const json *v = member(root, "communication_data_type");
      v && !v->is_null()) {
    JsonPath at = JsonPath() / "communication_data_type";
    std::string name = v->is_string() ? v->get<std::string>() : "";
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (name == "fp32")
      cfg.communicationDataType = Precision::FP32;
    else if (name == "fp16")
      cfg.communicationDataType = Precision::FP16;
    else if (name == "bf16")
      cfg.communicationDataType = Precision::BF16;
    else
      ok = fail(at, at.quoted() +
                        " must be \"fp32\", \"fp16\" or \"bf16\"; found " +
                        describe(*v));
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// optimizer / gradient_clipping
//===----------------------------------------------------------------------===//

bool Reader::readOptimizer(const json &root) {
  JsonPath at = JsonPath() / "optimizer";
  const json *block = member(root, "optimizer");
  const json *type =
      block && block->is_object() ? member(*block, "type") : nullptr;
  // Read with the optimizer: it only matters for an optimizer that ZeRO has
  // not been tested with.
  JsonPath untestedAt = JsonPath() / "zero_allow_untested_optimizer";
  bool allowUntested = false;
  if (const json *v = member(root, "zero_allow_untested_optimizer"))
    if (!readBool(*v, untestedAt, allowUntested))
      return false;
  if (block && !expectObject(*block, at))
    return false;
  if (!type) {
    // No DeepSpeed optimizer: the client brings one, and the Trainer's
    // default is AdamW.
    note(std::string(block ? "'optimizer' has no 'type'" : "no 'optimizer'") +
         ": zeroc assumes AdamW (the Hugging Face Trainer's default) with "
         "DeepSpeed's Adam defaults");
    if (block && !checkKeys(*block, at, {"type", "params", "legacy_fusion"},
                            UnknownKeys::IgnoreUnlessTypo))
      return false;
    if (block)
      ignore(at);
    if (root.contains("zero_allow_untested_optimizer"))
      ignore(untestedAt);
    return true;
  }
  if (!checkKeys(*block, at, {"type", "params", "legacy_fusion"},
                 UnknownKeys::IgnoreUnlessTypo))
    return false;
  if (block->contains("legacy_fusion"))
    ignore(at / "legacy_fusion");

  JsonPath typeAt = at / "type";
  // DeepSpeed lower-cases the names of its own optimizers (config.py).
  std::string lower = type->is_string() ? type->get<std::string>() : "";
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char *, const char *> kTypes[] = {
      {"adam", "Adam"},
      {"adamw", "AdamW"},
      {"lamb", "Lamb"},
      {"onebitadam", "OneBitAdam"},
      {"zerooneadam", "ZeroOneAdam"},
      {"onebitlamb", "OneBitLamb"}};
  auto known = std::find_if(std::begin(kTypes), std::end(kTypes),
                            [&](const auto &t) { return lower == t.first; });
  if (known == std::end(kTypes))
    return fail(typeAt, "zeroc supports the optimizers \"Adam\", \"AdamW\", "
                        "\"Lamb\", \"OneBitAdam\", \"ZeroOneAdam\" and "
                        "\"OneBitLamb\"; " +
                            typeAt.quoted() + " is " + describe(*type));
  OptimizerConfig &opt = cfg.optimizer;
  opt.type = known->second;
  // The 1-bit family never corrects (readOptimizerParams).
  opt.biasCorrection = !opt.oneBit();
  int64_t stage = cfg.zero.stage;

  // DeepSpeed's own refusals, in its words (engine.py).
  if (opt.oneBit() && stage > 0) {
    const char *reason = opt.type == "OneBitAdam"    ? "1bit-Adam"
                         : opt.type == "ZeroOneAdam" ? "0/1 Adam"
                                                     : "1bit-Lamb";
    return fail(typeAt, typeAt.quoted() + " is \"" + opt.type +
                            "\" with ZeRO stage " + std::to_string(stage) +
                            "; DeepSpeed refuses it: \"" + reason +
                            " is not compatible with ZeRO\" "
                            "(_configure_basic_optimizer); use stage 0");
  }
  if (opt.lamb() && !cfg.lossScale.dynamic())
    return fail(typeAt, typeAt.quoted() + " is \"" + opt.type +
                            "\" with the static loss scale " +
                            formatReal(cfg.lossScale.lossScale) +
                            "; DeepSpeed refuses it: \"DeepSpeed " + lower +
                            " optimizer requires dynamic loss scaling\" "
                            "(_do_sanity_check)");
  // FusedLamb is not in ZERO_SUPPORTED_OPTIMIZERS (zero/utils.py).
  if (opt.type == "Lamb" && stage > 0 && !allowUntested)
    return fail(typeAt,
                typeAt.quoted() + " is \"Lamb\" with ZeRO stage " +
                    std::to_string(stage) +
                    "; DeepSpeed refuses it: \"You are using an untested "
                    "ZeRO Optimizer. Please add "
                    "<\"zero_allow_untested_optimizer\": true> in the "
                    "configuration file to use it.\"");
  if (root.contains("zero_allow_untested_optimizer") &&
      !(opt.type == "Lamb" && stage > 0))
    ignore(untestedAt);
  if (opt.type == "Lamb" && stage > 0)
    note("Lamb with ZeRO: DeepSpeed computes the trust ratio over each "
         "rank's flat partition; zeroc computes it per parameter, as "
         "without ZeRO (docs/ds-config.md)");

  if (const json *params = member(*block, "params");
      params && !params->is_null())
    return readOptimizerParams(*params, at / "params");
  return true;
}

/// The keyword arguments DeepSpeed passes to its optimizer's constructor
/// (engine.py, _configure_basic_optimizer); a key it does not take is a
/// TypeError there, so an error here.
bool Reader::readOptimizerParams(const json &params, const JsonPath &at) {
  OptimizerConfig &opt = cfg.optimizer;
  bool adam = opt.type == "Adam" || opt.type == "AdamW";
  if (!expectObject(params, at))
    return false;
  bool ok = true;
  // engine.py, _configure_basic_optimizer, raises ValueError for it.
  if (params.contains("max_grad_norm"))
    ok = fail(at / "max_grad_norm",
              (at / "max_grad_norm").quoted() +
                  " is not an optimizer parameter in DeepSpeed; use the "
                  "top-level 'gradient_clipping'");
  std::vector<std::string> known = optimizerParamKeys(opt.type);
  const std::vector<std::string> noneIgnored;
  const std::vector<std::string> &ignorable =
      adam ? ignoredAdamParamKeys() : noneIgnored;
  known.insert(known.end(), ignorable.begin(), ignorable.end());
  known.push_back("max_grad_norm"); // Reported above.
  ok = checkKeys(params, at, known, UnknownKeys::Reject) && ok;
  for (const std::string &key : ignorable)
    if (params.contains(key))
      ignore(at / key);
  // Keys of the 1-bit optimizers that tune their compression or their
  // transport, not the math or the volumes zeroc plans.
  for (const char *key :
       {"cuda_aware", "comm_backend_name", "var_update_scaler",
        "local_step_scaler", "local_step_clipper", "coeff_beta", "factor_max",
        "factor_min", "factor_threshold"})
    if (params.contains(key))
      ignore(at / key);

  // The Trainer fills these four from TrainingArguments; its defaults stand
  // in for the command line zeroc does not see.
  auto fromTrainer = [&](const char *key, const std::string &value) {
    note((at / key).dotted() + ": \"auto\" -> " + value +
         " (Hugging Face TrainingArguments default)");
  };
  auto readScalar = [&](const char *key, double &out, double trainerValue) {
    const json *v = member(params, key);
    if (!v)
      return true;
    if (isAuto(*v)) {
      out = trainerValue;
      fromTrainer(key, formatReal(trainerValue));
      return true;
    }
    return readReal(*v, at / key, 0.0, std::numeric_limits<double>::infinity(),
                    out);
  };
  ok = readScalar("lr", opt.lr, 5e-5) && ok;
  ok = readScalar("eps", opt.eps, 1e-8) && ok;

  bool weightDecayGiven = params.contains("weight_decay");
  ok = readScalar("weight_decay", opt.weightDecay, 0.0) && ok;

  if (const json *betas = member(params, "betas")) {
    JsonPath where = at / "betas";
    if (isAuto(*betas)) {
      opt.beta1 = 0.9;
      opt.beta2 = 0.999;
      fromTrainer("betas", "[0.9, 0.999]");
    } else {
      if (!betas->is_array() || betas->size() != 2) {
        ok = fail(where, where.quoted() +
                             " must be a list of two numbers, such as "
                             "[0.9, 0.999]; found " +
                             describe(*betas));
      } else {
        ok = readReal((*betas)[0], where / "0", 0.0, 1.0, opt.beta1) && ok;
        ok = readReal((*betas)[1], where / "1", 0.0, 1.0, opt.beta2) && ok;
      }
    }
  }

  for (auto [key, out] : {std::pair{"max_coeff", &opt.maxCoeff},
                          std::pair{"min_coeff", &opt.minCoeff}})
    if (const json *v = member(params, key))
      if (!readReal(*v, at / key, 0.0, std::numeric_limits<double>::infinity(),
                    *out))
        return false;
  if (opt.minCoeff > opt.maxCoeff)
    return fail(at / "min_coeff",
                (at / "min_coeff").quoted() + " (" + formatReal(opt.minCoeff) +
                    ") exceeds 'max_coeff' (" + formatReal(opt.maxCoeff) + ")");
  const char *freezeKey =
      opt.type == "ZeroOneAdam" ? "var_freeze_step" : "freeze_step";
  if (const json *v = member(params, freezeKey))
    if (!readInt(*v, at / freezeKey, 0, opt.freezeStep))
      return false;

  bool adamWMode = true; // ADAM_W_MODE_DEFAULT
  bool amsgrad = false, epsInsideSqrt = false;
  struct Flag {
    const char *key;
    bool *out;
  };
  for (const Flag &flag :
       {Flag{"bias_correction", &opt.biasCorrection},
        Flag{"adam_w_mode", &adamWMode}, Flag{"torch_adam", &opt.torchAdam},
        Flag{"amsgrad", &amsgrad}, Flag{"eps_inside_sqrt", &epsInsideSqrt}})
    if (const json *v = member(params, flag.key))
      ok = readBool(*v, at / flag.key, *flag.out) && ok;
  if (amsgrad)
    ok = fail(at / "amsgrad", "zeroc does not support AMSGrad ('" +
                                  (at / "amsgrad").dotted() +
                                  "' is true); neither does DeepSpeed's "
                                  "Fused" +
                                  (adam ? "Adam" : opt.type));
  if (epsInsideSqrt)
    ok = fail(at / "eps_inside_sqrt",
              "zeroc does not model eps inside the square root ('" +
                  (at / "eps_inside_sqrt").dotted() + "' is true)");
  JsonPath biasAt = at / "bias_correction";
  if (opt.oneBit()) {
    // OnebitAdam, ZeroOneAdam and OnebitLamb (deepspeed/runtime/fp16/onebit)
    // take bias_correction and never use it: every step, the warm-up's
    // included, divides the raw moments (exp_avg / (exp_avg_sq.sqrt() +
    // eps)).
    if (params.contains("bias_correction")) {
      ignore(biasAt);
      note(biasAt.dotted() + ": DeepSpeed's " + opt.type +
           " takes it but never corrects the moments' bias; zeroc plans "
           "the uncorrected step");
    }
    opt.biasCorrection = false; // Whatever the key said.
  } else if (!opt.biasCorrection && opt.torchAdam) {
    // torch.optim.Adam(W) has no such argument and always corrects.
    ok =
        fail(biasAt, biasAt.quoted() +
                         " is false with 'torch_adam'; DeepSpeed passes it "
                         "to torch.optim." +
                         (opt.type == "AdamW" || adamWMode ? "AdamW" : "Adam") +
                         ", which takes no 'bias_correction' (TypeError) and "
                         "always corrects the moments' bias");
  }
  // "AdamW" always decouples weight decay; "Adam" does unless adam_w_mode is
  // false.
  opt.adamWMode = opt.type == "AdamW" || adamWMode;
  // torch.optim.AdamW's own default weight decay.
  if (opt.torchAdam && opt.adamWMode && !weightDecayGiven)
    opt.weightDecay = 0.01;
  return ok;
}

bool Reader::readGradientClipping(const json &root) {
  JsonPath at = JsonPath() / "gradient_clipping";
  const json *v = member(root, "gradient_clipping");
  if (!v)
    return true;
  if (isAuto(*v)) {
    cfg.gradientClipping = 1.0;
    note("gradient_clipping: \"auto\" -> 1.0 (Hugging Face max_grad_norm "
         "default)");
    return true;
  }
  return readReal(*v, at, 0.0, std::numeric_limits<double>::infinity(),
                  cfg.gradientClipping);
}

//===----------------------------------------------------------------------===//
// activation_checkpointing / aio
//===----------------------------------------------------------------------===//

bool Reader::readActivationCheckpointing(const json &root) {
  JsonPath at = JsonPath() / "activation_checkpointing";
  const json *block = member(root, "activation_checkpointing");
  if (!block)
    return true;
  const auto &schema = activationCheckpointingSchema();
  if (!expectObject(*block, at))
    return false;
  bool ok = checkKeys(*block, at, schema.keys(), UnknownKeys::IgnoreUnlessTypo);
  ok = readScalars(*block, at, schema, AutoValues::Reject,
                   cfg.activationCheckpointing) &&
       ok;
  if (const json *v = member(*block, "number_checkpoints");
      v && !v->is_null()) {
    int64_t count = 0;
    if (readInt(*v, at / "number_checkpoints", 1, count))
      cfg.activationCheckpointing.numberCheckpoints = count;
    else
      ok = false;
  }
  cfg.activationCheckpointing.present = true;
  return ok;
}

bool Reader::readAio(const json &root) {
  JsonPath at = JsonPath() / "aio";
  const json *block = member(root, "aio");
  if (!block || block->is_null())
    return true;
  std::vector<std::string> known = aioSchema().keys();
  // Older DeepSpeed's name for intra_op_parallelism, still in Hugging Face's
  // NVMe examples; DeepSpeed now ignores it.
  known.push_back("thread_count");
  if (!expectObject(*block, at))
    return false;
  bool ok = checkKeys(*block, at, known, UnknownKeys::IgnoreUnlessTypo);
  ok = readScalars(*block, at, aioSchema(), AutoValues::Reject, cfg.aio) && ok;
  if (block->contains("thread_count")) {
    ignore(at / "thread_count");
    note("aio.thread_count is the old name of aio.intra_op_parallelism; "
         "DeepSpeed no longer reads it");
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// Expert parallelism
//===----------------------------------------------------------------------===//

/// DeepSpeed's AutoEP block, `"expert_parallel": {"enabled": true,
/// "autoep_size": N}` (deepspeed/module_inject/auto_ep_config.py, read with
/// dict.get: unknown keys are ignored), or the launcher's --ep-size (the
/// `ep_size` of DeepSpeed's deepspeed.moe.layer.MoE) / --moe-expert-
/// parallel-size (Megatron-DeepSpeed's argument). The size must divide the
/// world size (DeepSpeed's groups._create_expert_and_data_parallel) and the
/// experts per layer (each rank holds num_experts / ep_size of them).
bool Reader::readExpertParallel(const json &root) {
  bool ok = true;
  std::optional<int64_t> fromConfig;
  JsonPath at = JsonPath() / "expert_parallel";
  JsonPath sizeAt = at / "autoep_size";
  if (const json *block = member(root, "expert_parallel");
      block && !block->is_null()) {
    if (!expectObject(*block, at))
      return false;
    // Keys that find the MoE layers in a PyTorch module or pick its grouped
    // GEMM: zeroc takes the layers from the model file.
    static const std::vector<std::string> locating = {
        "preset_model",   "moe_layer_pattern", "expert_pattern",
        "router_pattern", "expert_w1",         "expert_w2",
        "expert_w3",      "num_experts_attr",  "top_k_attr",
        "use_grouped_mm", "grouped_mm_backend"};
    // Keys that override the model's routing: zeroc plans and runs the
    // model file's router, so any value other than "use the model's" is
    // refused.
    static const std::vector<std::string> routing = {"route_norm",
                                                     "route_scale",
                                                     "score_apply",
                                                     "num_expert_groups",
                                                     "num_limited_groups",
                                                     "score_func",
                                                     "top_k",
                                                     "load_balance_coeff",
                                                     "routed_scaling_factor",
                                                     "has_shared_experts",
                                                     "shared_experts_pattern"};
    std::vector<std::string> known = {"enabled", "autoep_size"};
    known.insert(known.end(), locating.begin(), locating.end());
    known.insert(known.end(), routing.begin(), routing.end());
    ok = checkKeys(*block, at, known, UnknownKeys::IgnoreUnlessTypo);
    bool on = false;
    if (const json *v = member(*block, "enabled"))
      ok = readBool(*v, at / "enabled", on) && ok;
    int64_t size = 1;
    if (const json *v = member(*block, "autoep_size"))
      ok = readInt(*v, sizeAt, 1, size) && ok;
    for (const std::string &key : locating)
      if (block->contains(key))
        ignore(at / key);
    for (const std::string &key : routing) {
      const json *v = member(*block, key.c_str());
      if (!v || v->is_null() || isAuto(*v))
        continue;
      ok = fail(at / key,
                (at / key).quoted() + " is " + shown(*v, at / key) +
                    ": it overrides the model's routing, while zeroc plans "
                    "and runs the model file's router; remove it (or set "
                    "it to null or \"auto\")") &&
           ok;
    }
    if (on) {
      fromConfig = size;
      if (!member(*block, "load_balance_coeff"))
        note("'expert_parallel.load_balance_coeff' is absent: AutoEP's "
             "default (1e-3) biases routing to balance the experts' load "
             "during training, which zeroc does not model (it plans with "
             "the token-distribution assumption of the model file)");
    } else if (block->contains("autoep_size")) {
      ignore(sizeAt);
      note("'expert_parallel.autoep_size' has no effect: "
           "'expert_parallel.enabled' is not true");
    }
  }
  // DeepSpeed reads neither spelling from its config: they are the MoE
  // layer's argument and Megatron-DeepSpeed's command-line flag. A config
  // that has them means expert parallelism that DeepSpeed would not apply.
  for (const char *key : kForeignExpertParallelKeys)
    if (root.contains(key))
      ok = fail(JsonPath() / key,
                (JsonPath() / key).quoted() +
                    " is not read from a DeepSpeed config (DeepSpeed takes "
                    "ep_size in deepspeed.moe.layer.MoE(ep_size=...), "
                    "Megatron-DeepSpeed as --moe-expert-parallel-size); "
                    "give zeroc --ep-size N, or write "
                    "\"expert_parallel\": {\"enabled\": true, "
                    "\"autoep_size\": N} (DeepSpeed's AutoEP)") &&
           ok;
  if (!ok)
    return false;

  ExpertParallelConfig &ep = cfg.expertParallel;
  if (ctx.expertParallelSize && fromConfig &&
      *ctx.expertParallelSize != *fromConfig)
    return fail(sizeAt, sizeAt.quoted() + " is " + std::to_string(*fromConfig) +
                            " but " + ctx.expertParallelFlag + " is " +
                            std::to_string(*ctx.expertParallelSize) +
                            "; give one expert-parallel size");
  if (ctx.expertParallelSize) {
    ep.size = *ctx.expertParallelSize;
    ep.source = ctx.expertParallelFlag;
  } else if (fromConfig) {
    ep.size = *fromConfig;
    ep.source = sizeAt.quoted();
  }
  if (ep.size == 1)
    return true;
  // Errors from the command line have no place in the file.
  auto error = [&](const std::string &message) {
    if (ctx.expertParallelSize)
      errors.push_back(Diagnostic{doc.name(), 0, 0, message});
    else
      fail(sizeAt, message);
    return false;
  };
  std::string named = ep.source + " " + std::to_string(ep.size);
  if (ep.size < 1)
    return error(ep.source + " must be at least 1; found " +
                 std::to_string(ep.size));
  if (ctx.numExperts == 0)
    return error(named + " asks for expert parallelism, but the model is "
                         "dense (no model.moe_experts): there are no experts "
                         "to split; remove it or plan a mixture of experts");
  if (ctx.worldSize >= 1 && ctx.worldSize % ep.size != 0)
    return error(named + " does not divide the world size " +
                 std::to_string(ctx.worldSize) +
                 ": the expert-parallel groups partition the ranks "
                 "(DeepSpeed's _create_expert_and_data_parallel)");
  if (ctx.numExperts % ep.size != 0)
    return error(named + " does not divide the model's " +
                 std::to_string(ctx.numExperts) +
                 " experts per layer (num_local_experts): each rank holds "
                 "num_experts / ep_size of them");
  return true;
}

//===----------------------------------------------------------------------===//
// The batch triple
//===----------------------------------------------------------------------===//

/// train_batch_size = train_micro_batch_size_per_gpu x
/// gradient_accumulation_steps x world size. The Trainer fills "auto" values
/// from its arguments (trainer_config_process); zeroc takes them from
/// --micro-batch and --grad-accum, the launcher's arguments, then derives
/// what is still missing as DeepSpeed does (_set_batch_related_parameters),
/// but insists on exact division. Only a micro batch that is "auto" and
/// that neither the command line nor DeepSpeed's rules decide takes the
/// model file's batch dimension, with a note saying so.
bool Reader::readBatch(const json &root) {
  struct Entry {
    explicit Entry(const char *key) : key(key), at(JsonPath() / key) {}
    const char *key;
    JsonPath at;
    std::optional<int64_t> value; ///< Given, filled in or derived.
    bool wasAuto = false;
  };
  Entry train("train_batch_size"), micro("train_micro_batch_size_per_gpu"),
      accumulation("gradient_accumulation_steps");
  // Each value and each agreement with the command line is checked on its
  // own, so that one run reports all of them; the derivation below needs
  // them all.
  bool ok = true;
  for (Entry *e : {&train, &micro, &accumulation}) {
    // DeepSpeed reads these with get_scalar_param: null is as good as absent.
    const json *v = member(root, e->key);
    if (!v || v->is_null())
      continue;
    if (isAuto(*v)) {
      e->wasAuto = true;
      continue;
    }
    int64_t value = 0;
    if (!readInt(*v, e->at, 1, value)) {
      ok = false;
      continue;
    }
    e->value = value;
  }
  const int64_t world = ctx.worldSize;
  const std::string worldText = "world size " + std::to_string(world);

  // Values the config gives must agree with the model and the command line,
  // as the Trainer insists (its "mismatch" check).
  struct Fact {
    Entry &entry;
    std::optional<int64_t> value;
    const char *source;
  };
  const Fact facts[] = {
      {micro, ctx.microBatch, "--micro-batch on the command line"},
      {accumulation, ctx.gradientAccumulation,
       "--grad-accum on the command line"},
  };
  for (const Fact &fact : facts) {
    if (fact.value && *fact.value < 1) {
      ok = fail(fact.entry.at, std::string(fact.source) +
                                   " must be at least 1; found " +
                                   std::to_string(*fact.value));
      continue;
    }
    if (fact.entry.value && fact.value && *fact.entry.value != *fact.value) {
      ok = fail(fact.entry.at,
                fact.entry.at.quoted() + " is " +
                    std::to_string(*fact.entry.value) + " but " + fact.source +
                    " is " + std::to_string(*fact.value) +
                    "; make them agree or set the key to \"auto\"");
      continue;
    }
    if (!fact.entry.value && fact.value) {
      fact.entry.value = fact.value;
      note(std::string(fact.entry.key) +
           (fact.entry.wasAuto ? ": \"auto\" -> " : " (absent) = ") +
           std::to_string(*fact.value) + " (" + fact.source + ")");
    }
  }
  if (!ok)
    return false;

  auto derived = [&](Entry &e, int64_t value, const std::string &how) {
    e.value = value;
    note(std::string(e.key) + (e.wasAuto ? ": \"auto\" -> " : " = ") +
         std::to_string(value) + ", derived: " + how);
  };
  auto divide = [&](Entry &e, int64_t dividend, int64_t divisor,
                    const std::string &how) {
    if (dividend % divisor != 0)
      return fail(train.at,
                  "the batch triple does not divide: " + train.at.quoted() +
                      " " + std::to_string(dividend) +
                      " is not a multiple of " + how +
                      (how.find(" x ") == std::string::npos
                           ? std::string()
                           : " = " + std::to_string(divisor)) +
                      ", so there is no whole " + e.key);
    derived(e, dividend / divisor,
            std::to_string(dividend) + " / (" + how + ")");
    return true;
  };

  std::string microText = "train_micro_batch_size_per_gpu";
  std::string accText = "gradient_accumulation_steps";
  // "auto" with nothing to derive it from: the Trainer would fill it from
  // --per_device_train_batch_size; zeroc's stand-in for that argument is
  // the batch the model file was generated with.
  if (micro.wasAuto && !micro.value && !train.value && ctx.modelBatch) {
    micro.value = ctx.modelBatch;
    note(std::string(micro.key) + ": \"auto\" -> " +
         std::to_string(*ctx.modelBatch) +
         " (the model file's batch dimension; pass --micro-batch for the "
         "launcher's per-device batch)");
  }
  if (train.value && micro.value && !accumulation.value) {
    if (!divide(accumulation, *train.value, *micro.value * world,
                microText + " " + std::to_string(*micro.value) + " x " +
                    worldText))
      return false;
  } else if (train.value && accumulation.value && !micro.value) {
    if (!divide(micro, *train.value, *accumulation.value * world,
                accText + " " + std::to_string(*accumulation.value) + " x " +
                    worldText))
      return false;
  } else if (train.value && !micro.value) {
    // DeepSpeed: one accumulation step, the rest per GPU.
    derived(accumulation, 1,
            "DeepSpeed's default when only train_batch_size "
            "is known");
    if (!divide(micro, *train.value, world, worldText))
      return false;
  } else if (micro.value && !train.value) {
    if (!accumulation.value)
      derived(accumulation, 1,
              "DeepSpeed's default when train_batch_size is not known");
    derived(train, *micro.value * *accumulation.value * world,
            microText + " " + std::to_string(*micro.value) + " x " + accText +
                " " + std::to_string(*accumulation.value) + " x " + worldText);
  } else if (!train.value && !micro.value) {
    return fail(micro.at, "either 'train_batch_size' or "
                          "'train_micro_batch_size_per_gpu' must be given "
                          "(DeepSpeed's _batch_assertion), or --micro-batch "
                          "on the command line");
  }

  if (*train.value != *micro.value * *accumulation.value * world)
    return fail(train.at,
                "inconsistent batch sizes: " + train.at.quoted() + " " +
                    std::to_string(*train.value) + " != " + microText + " " +
                    std::to_string(*micro.value) + " x " + accText + " " +
                    std::to_string(*accumulation.value) + " x " + worldText);
  cfg.trainBatchSize = *train.value;
  cfg.microBatchPerGpu = *micro.value;
  cfg.gradientAccumulationSteps = *accumulation.value;
  return true;
}

} // namespace

Expected<DeepSpeedConfig> readDeepSpeedConfig(const JsonDocument &doc,
                                              const ConfigContext &ctx) {
  // Nothing may escape as an exception; the checks above make nlohmann
  // throw nothing, and this is the guard should one be missed.
  try {
    return Reader(doc, ctx).read();
  } catch (const std::exception &e) {
    return Diagnostic{doc.name(), 0, 0,
                      std::string("internal error reading the DeepSpeed "
                                  "config: ") +
                          e.what()};
  }
}

Expected<DeepSpeedConfig> loadDeepSpeedConfig(const std::string &path,
                                              const ConfigContext &ctx) {
  Expected<JsonDocument> doc = JsonDocument::load(path);
  if (!doc)
    return doc.error();
  return readDeepSpeedConfig(*doc, ctx);
}

} // namespace zeroc
