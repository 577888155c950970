//===- FailureChannel.cpp - A rank's own failure, told to the others ------===//

#include "comm/FailureChannel.h"

#include <mpi.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace zeroc::runtime {

namespace {

/// A rank that fails on its own sends its message to every other rank
/// (kFailureTag); each, waiting in a collective the failing rank will never
/// start, receives it, prints it and answers (kAcknowledgeTag) before it
/// ends. Process-wide: one per job, whichever communicator waits.
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mutex;
  /// The first failure received: "rank R failed: MESSAGE".
  std::optional<std::string> received;
  /// Ranks whose failure was received and not yet acknowledged.
  std::vector<int> toAcknowledge;
  /// This rank's own announced message (MPI reads it until the send
  /// completes, which may be never: the job is aborted first).
  std::string sent;
};

constexpr int kFailureTag = 0x2eed;
constexpr int kAcknowledgeTag = 0x2eee;

Channel &channel() {
  static Channel instance;
  return instance;
}

/// Receives every failure message that has arrived. Caller holds the mutex.
void receiveFailures(Channel &c) {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kFailureTag, c.comm, &arrived, &status) !=
            MPI_SUCCESS ||
        !arrived)
      return;
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string text(size_t(std::max(length, 0)), '\0');
    MPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, kFailureTag,
             c.comm, MPI_STATUS_IGNORE);
    if (!c.received)
      c.received =
          "rank " + std::to_string(status.MPI_SOURCE) + " failed: " + text;
    c.toAcknowledge.push_back(status.MPI_SOURCE);
  }
}

/// Answers every received failure. Caller holds the mutex.
void acknowledgeFailures(Channel &c) {
  for (int source : c.toAcknowledge) {
    static const char ack = 1;
    MPI_Request request;
    if (MPI_Isend(&ack, 1, MPI_CHAR, source, kAcknowledgeTag, c.comm,
                  &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  c.toAcknowledge.clear();
}

} // namespace

void FailureChannel::announce(const std::string &message, CommDuration grace) {
  Channel &c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.comm == MPI_COMM_NULL)
    return;
  int me = 0, n = 1;
  MPI_Comm_rank(c.comm, &me);
  MPI_Comm_size(c.comm, &n);
  c.sent = message;
  std::vector<MPI_Request> sends, acks;
  std::vector<char> answers(size_t(n), 0);
  for (int r = 0; r < n; ++r) {
    if (r == me)
      continue;
    sends.emplace_back();
    if (MPI_Isend(c.sent.data(), int(c.sent.size()), MPI_CHAR, r, kFailureTag,
                  c.comm, &sends.back()) != MPI_SUCCESS)
      sends.pop_back();
    acks.emplace_back();
    if (MPI_Irecv(&answers[size_t(r)], 1, MPI_CHAR, r, kAcknowledgeTag, c.comm,
                  &acks.back()) != MPI_SUCCESS)
      acks.pop_back();
  }
  CommDeadline deadline =
      CommClock::now() + std::chrono::duration_cast<CommClock::duration>(grace);
  while (CommClock::now() < deadline) {
    int done = 0;
    if (MPI_Testall(int(acks.size()), acks.data(), &done,
                    MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        done)
      break;
    // Ranks failing at the same time wait here too: answer theirs.
    receiveFailures(c);
    acknowledgeFailures(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // The job is about to be aborted: requests still pending are left so.
}

std::optional<std::string> FailureChannel::received() {
  Channel &c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.comm == MPI_COMM_NULL)
    return std::nullopt;
  receiveFailures(c);
  return c.received;
}

void FailureChannel::acknowledge() {
  Channel &c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.comm == MPI_COMM_NULL)
    return;
  acknowledgeFailures(c);
}

void FailureChannel::open() {
  Channel &c = channel();
  // Every rank's first call makes it: MPI_Comm_dup is collective.
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.comm != MPI_COMM_NULL)
    return;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c.comm) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Comm_dup(MPI_COMM_WORLD) failed");
  MPI_Comm_set_errhandler(c.comm, MPI_ERRORS_RETURN);
}

bool FailureChannel::isOpen() {
  Channel &c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.comm != MPI_COMM_NULL;
}

} // namespace zeroc::runtime
