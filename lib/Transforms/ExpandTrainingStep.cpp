//===- ExpandTrainingStep.cpp - Forward graph to one training step --------===//
// (being written)
#include "zeroc/Transforms/Passes.h"

namespace zeroc {
#define GEN_PASS_DEF_EXPANDTRAININGSTEP
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

namespace {
struct ExpandTrainingStep
    : zeroc::impl::ExpandTrainingStepBase<ExpandTrainingStep> {
  using ExpandTrainingStepBase::ExpandTrainingStepBase;
  void runOnOperation() override { signalPassFailure(); }
};
} // namespace
