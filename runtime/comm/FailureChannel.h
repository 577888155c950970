//===- FailureChannel.h - A rank's own failure, told to the others -*- C++
//-*-===//
//
// A rank that fails on its own (an error no other rank sees: its NVMe swap
// file truncated) sends its message to every other rank before it aborts
// the job; each, waiting in a collective the failing rank will never start,
// receives it, prints it and answers (docs/zerorun.md, "When a rank fails").
// The channel is a duplicate of MPI_COMM_WORLD, one per process, used by
// every communicator whose ranks are the world's: MpiCommunicator and, when
// MPI bootstrapped it, NcclCommunicator. Every call is a no-op until open().
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_COMM_FAILURECHANNEL_H
#define ZEROC_RUNTIME_COMM_FAILURECHANNEL_H

#include "comm/Communicator.h"

#include <optional>
#include <string>

namespace zeroc::runtime {

class FailureChannel {
public:
  /// Opens the channel: collective over MPI_COMM_WORLD on each rank's first
  /// call (MPI initialized), nothing on later ones. Throws
  /// std::runtime_error if MPI cannot duplicate MPI_COMM_WORLD.
  static void open();
  /// Whether open() ran in this process.
  static bool isOpen();
  /// Sends `message` to every other world rank; returns once each answered
  /// or after `grace`, answering meanwhile the ranks that fail at the same
  /// time. Ranks are MPI_COMM_WORLD's.
  static void announce(const std::string &message, CommDuration grace);
  /// "rank R failed: MESSAGE" once another rank announced a failure, else
  /// empty. Never blocks.
  static std::optional<std::string> received();
  /// Answers every failure received so far.
  static void acknowledge();
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_COMM_FAILURECHANNEL_H
