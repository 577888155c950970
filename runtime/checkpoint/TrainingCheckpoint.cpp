//===- TrainingCheckpoint.cpp - Save and resume a training run ------------===//

#include "checkpoint/TrainingCheckpoint.h"

#include "zeroc/Checkpoint/Checkpoint.h"
#include "zeroc/Checkpoint/Consolidate.h"

namespace zeroc::runtime {

namespace {

/// Whether every rank succeeded: an all-reduce (max) of the failure flag.
bool allRanksOk(Communicator &comm, bool ok, const char *what) {
  if (comm.size() == 1)
    return ok;
  return comm.allReduceScalar(ok ? 0.0 : 1.0, ScalarOp::Max,
                              OpLabel{-1, what}) == 0.0;
}

Diagnostic error(const std::string &message) {
  return Diagnostic{"", 0, 0, message};
}

} // namespace

std::string stepTag(int64_t stepsDone) {
  return "step" + std::to_string(stepsDone);
}

Expected<Done> saveTrainingCheckpoint(Executor &e, Communicator &comm,
                                      const std::string &dir,
                                      int64_t stepsDone) {
  std::string tag = stepTag(stepsDone);
  TrainingState state = e.trainingState(stepsDone);
  auto rec =
      saveCheckpoint(dir, tag, e.plan(), comm.rank(), e.tensorData(), state);
  std::string mine = rec ? "" : rec.error().str();
  if (comm.size() > 1) {
    CommHandle h = comm.barrier(OpLabel{-1, "checkpoint barrier"});
    comm.wait(h);
  }
  if (!allRanksOk(comm, bool(rec), "checkpoint save")) {
    if (!mine.empty())
      return error("saving checkpoint " + tag + ": " + mine);
    return error("saving checkpoint " + tag +
                 ": another rank failed to write its shard; '" + dir +
                 "/latest' is unchanged");
  }
  std::string fin;
  if (comm.rank() == 0) {
    auto m = finalizeCheckpoint(dir, tag, e.plan(), state);
    if (!m)
      fin = m.error().str();
  }
  if (!allRanksOk(comm, fin.empty(), "checkpoint finalize"))
    return error("finalizing checkpoint " + tag + ": " +
                 (fin.empty() ? "rank 0 failed" : fin));
  return Done{};
}

Expected<Resumed> resumeTraining(Executor &e, Communicator &comm,
                                 const std::string &dir) {
  auto st = loadCheckpointInto(dir, kLatestTag, e.plan(), comm.rank(),
                               e.mutableTensorData());
  std::string mine;
  if (!st)
    mine = st.error().str();
  else if (auto ok = e.restoreTrainingState(*st); !ok)
    mine = ok.error().str();
  if (!allRanksOk(comm, mine.empty(), "checkpoint load"))
    return error(mine.empty() ? "another rank failed to load its shard" : mine);
  Resumed r;
  r.step = st->step;
  auto tag = resolveCheckpointTag(dir, kLatestTag);
  r.checkpoint = tag ? checkpointTagDir(dir, *tag) : dir;
  return r;
}

Expected<std::vector<std::string>> initFromSafetensors(Executor &e,
                                                       Communicator &comm,
                                                       const std::string &path,
                                                       std::string *naming) {
  auto names = loadSafetensorsInto(path, e.plan(), comm.rank(),
                                   e.mutableTensorData(), naming);
  std::string mine = names ? "" : names.error().str();
  if (!allRanksOk(comm, mine.empty(), "init-from load"))
    return error(mine.empty() ? "another rank failed" : mine);
  return std::move(*names);
}

} // namespace zeroc::runtime
