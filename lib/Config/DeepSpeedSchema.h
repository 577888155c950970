//===- DeepSpeedSchema.h - The keys of each DeepSpeed config block -*- C++ -*-//
//
// One table per config block naming its JSON keys, the struct member each
// scalar key lands in, and its bounds. The reader, the writer and operator==
// all walk these tables, so a key is added in one place. Private to
// lib/Config.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_LIB_CONFIG_DEEPSPEEDSCHEMA_H
#define ZEROC_LIB_CONFIG_DEEPSPEEDSCHEMA_H

#include "zeroc/Config/DeepSpeedConfig.h"

#include <limits>
#include <string>
#include <vector>

namespace zeroc::detail {

constexpr int64_t kNoMinimum = std::numeric_limits<int64_t>::min();

// `core` keys define the schedule and have long been in DeepSpeed; the
// writer always writes them, and other keys only when they differ from the
// default, so that an older DeepSpeed takes the file too.

template <typename S> struct BoolField {
  const char *key;   ///< The name DeepSpeed documents, written back out.
  const char *alias; ///< The other name DeepSpeed accepts, or nullptr.
  bool S::*member;
  bool core = false;
};

template <typename S> struct IntField {
  const char *key;
  const char *alias;
  int64_t S::*member;
  int64_t min; ///< 0 where DeepSpeed says ge=0; kNoMinimum where unbounded.
  bool core = false;
};

template <typename S> struct RealField {
  const char *key;
  const char *alias;
  double S::*member;
  double min;
  double max;
  bool core = false;
};

/// The scalar keys of one block, plus the keys its reader handles by hand.
template <typename S> struct BlockSchema {
  std::vector<BoolField<S>> bools;
  std::vector<IntField<S>> ints;
  std::vector<RealField<S>> reals;
  std::vector<std::string> otherKeys;

  /// Calls `fn` on every field of the three tables.
  template <typename Fn> void forEachField(Fn &&fn) const {
    for (const auto &f : bools)
      fn(f);
    for (const auto &f : ints)
      fn(f);
    for (const auto &f : reals)
      fn(f);
  }

  /// Every key the block accepts, aliases included.
  std::vector<std::string> keys() const {
    std::vector<std::string> all(otherKeys);
    forEachField([&](const auto &f) {
      all.push_back(f.key);
      if (f.alias)
        all.push_back(f.alias);
    });
    return all;
  }

  /// Whether every scalar member in the tables is equal.
  bool sameScalars(const S &a, const S &b) const {
    bool same = true;
    forEachField(
        [&](const auto &f) { same = same && a.*f.member == b.*f.member; });
    return same;
  }
};

/// DeepSpeedZeroConfig (zero/config.py). `otherKeys` holds stage,
/// overlap_comm, the sub-blocks and the deprecated keys.
const BlockSchema<ZeroConfig> &zeroSchema();
/// DeepSpeedZeroOffloadParamConfig; `otherKeys`: device, nvme_path.
const BlockSchema<OffloadConfig> &offloadParamSchema();
/// DeepSpeedZeroOffloadOptimizerConfig; `otherKeys`: device, nvme_path.
const BlockSchema<OffloadConfig> &offloadOptimizerSchema();
/// DeepSpeedFP16Config; `otherKeys`: enabled.
const BlockSchema<LossScaleConfig> &fp16Schema();
/// DeepSpeedBF16Config; `otherKeys`: enabled.
const BlockSchema<Bf16Config> &bf16Schema();
/// DeepSpeedActivationCheckpointingConfig; `otherKeys`: number_checkpoints.
const BlockSchema<ActivationCheckpointingConfig> &
activationCheckpointingSchema();
/// get_aio_config (swap_tensor/aio_config.py).
const BlockSchema<AioConfig> &aioSchema();

/// The keys of `zero_optimization.zenflow` (ZenFlowConfig) and
/// `zero_optimization.leaf_module` (DeepSpeedZeroLeafModuleConfig).
const std::vector<std::string> &zenflowKeys();
const std::vector<std::string> &leafModuleKeys();

/// Top-level keys zeroc reads.
const std::vector<std::string> &modelledTopLevelKeys();
/// Top-level keys DeepSpeed reads that do not change the schedule.
const std::vector<std::string> &ignoredTopLevelKeys();

/// Adam / AdamW `optimizer.params` that zeroc reads, and those it accepts
/// but ignores (they reach torch.optim or DeepSpeed's fused / CPU Adam and
/// change neither the math zeroc models nor the schedule).
const std::vector<std::string> &adamParamKeys();
const std::vector<std::string> &ignoredAdamParamKeys();
/// The `optimizer.params` keys DeepSpeed's constructor for `type` takes
/// ("Adam"/"AdamW": adamParamKeys()).
const std::vector<std::string> &optimizerParamKeys(const std::string &type);

} // namespace zeroc::detail

#endif // ZEROC_LIB_CONFIG_DEEPSPEEDSCHEMA_H
