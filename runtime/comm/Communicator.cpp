//===- Communicator.cpp - Waiting, timeouts, the one-rank backend ---------===//

#include "comm/Communicator.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

namespace zeroc::runtime {

//===----------------------------------------------------------------------===//
// Durations
//===----------------------------------------------------------------------===//

Expected<CommDuration> parseCommTimeout(std::string_view text) {
  auto bad = [&](const std::string &why) {
    return Diagnostic{"", 0, 0,
                      "--comm-timeout: " + why +
                          "; expected a positive duration such as 1800, 90s, "
                          "30m, 2h or 500ms, found '" +
                          std::string(text) + "'"};
  };
  std::string s(text);
  const char *begin = s.c_str();
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(begin, &end);
  if (end == begin || errno == ERANGE)
    return bad("not a number");
  std::string unit(end);
  double seconds;
  if (unit.empty() || unit == "s")
    seconds = value;
  else if (unit == "ms")
    seconds = value / 1000.0;
  else if (unit == "m" || unit == "min")
    seconds = value * 60.0;
  else if (unit == "h")
    seconds = value * 3600.0;
  else
    return bad("unknown unit '" + unit + "'");
  if (!std::isfinite(seconds) || seconds <= 0.0)
    return bad("not a positive, finite number of seconds");
  return CommDuration(seconds);
}

std::string formatDuration(CommDuration d) {
  double s = d.count();
  char buf[64];
  if (s >= 7200.0)
    std::snprintf(buf, sizeof buf, "%.3g h", s / 3600.0);
  else if (s >= 120.0)
    std::snprintf(buf, sizeof buf, "%.3g min", s / 60.0);
  else
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

//===----------------------------------------------------------------------===//
// Handles, test and wait
//===----------------------------------------------------------------------===//

CommHandle &CommHandle::operator=(CommHandle &&other) {
  if (this != &other) {
    CommHandle old(std::move(*this)); // Waits for a pending one.
    state = std::move(other.state);
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (!state)
    return;
  try {
    state->owner->wait(*this);
  } catch (...) {
    // A custom timeout handler returned; nothing more can be done here.
  }
}

CommDeadline CommHandle::started() const {
  return state ? state->started : CommDeadline();
}

bool Communicator::test(CommHandle &handle) {
  if (!handle.state)
    return true;
  if (handle.state->owner != this)
    throw std::logic_error("a collective handle was tested by a "
                           "communicator other than the one that started it");
  if (!handle.state->finished && !handle.state->test())
    return false;
  handle.state.reset();
  return true;
}

void Communicator::wait(CommHandle &handle) {
  if (handle.state)
    wait(handle,
         handle.state->started +
             std::chrono::duration_cast<CommClock::duration>(commTimeout));
}

void Communicator::wait(CommHandle &handle, CommDeadline deadline) {
  static const std::atomic<bool> never{false};
  waitUntil(handle, deadline, never);
}

bool Communicator::wait(CommHandle &handle, const std::atomic<bool> &cancel) {
  if (!handle.state)
    return true;
  return waitUntil(
      handle,
      handle.state->started +
          std::chrono::duration_cast<CommClock::duration>(commTimeout),
      cancel);
}

bool Communicator::waitUntil(CommHandle &handle, CommDeadline deadline,
                             const std::atomic<bool> &cancel) {
  for (int64_t polls = 0;; ++polls) {
    if (test(handle))
      return true;
    if (!pollAgain(*handle.state, polls, deadline, cancel))
      return false;
  }
}

bool Communicator::waitAll(std::vector<CommHandle> &handles,
                           const std::atomic<bool> &cancel) {
  auto deadlineOf = [&](const CommHandle &h) {
    return h.state->started +
           std::chrono::duration_cast<CommClock::duration>(commTimeout);
  };
  for (CommHandle &h : handles) {
    if (!h.state)
      continue;
    if (h.state->owner != this)
      throw std::logic_error("a collective handle was waited for by a "
                             "communicator other than the one that started "
                             "it");
    for (int64_t polls = 0; !h.state->arrived(); ++polls)
      if (!pollAgain(*h.state, polls, deadlineOf(h), cancel))
        return false;
  }
  for (CommHandle &h : handles)
    if (h.state && !waitUntil(h, deadlineOf(h), cancel))
      return false;
  return true;
}

bool Communicator::pollAgain(PendingCollective &p, int64_t polls,
                             CommDeadline deadline,
                             const std::atomic<bool> &cancel) {
  // Spin briefly (most collectives of a step are short), then back off so
  // that oversubscribed ranks and the other streams' threads get the cores.
  if (cancel.load(std::memory_order_relaxed))
    return false;
  CommDeadline now = CommClock::now();
  if (now >= deadline)
    timedOut(p, deadline);
  if (polls < 1000)
    return true;
  // A rank that failed on its own will never start this collective; it
  // said why (announceFailure).
  if (std::optional<std::string> failure = peerFailure())
    peerFailed(p, *failure);
  if (now - p.started < std::chrono::milliseconds(1))
    std::this_thread::yield();
  else if (now - p.started < std::chrono::milliseconds(100))
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  else
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  return true;
}

void Communicator::timedOut(const PendingCollective &p, CommDeadline deadline) {
  std::string message =
      "zerorun: rank " + std::to_string(rank()) + " of " +
      std::to_string(size()) + ": " + describeCollective(p) +
      " did not complete within " + formatDuration(deadline - p.started) +
      " (--comm-timeout); another rank skipped, reordered or is stuck "
      "before it; aborting every rank";
  if (timeoutHandler) {
    timeoutHandler(message);
    throw CommTimeoutError(message);
  }
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  abortAll(kCommTimeoutExitCode);
  std::_Exit(kCommTimeoutExitCode); // abortAll does not return.
}

void Communicator::peerFailed(const PendingCollective &p,
                              const std::string &failure) {
  std::string message = "zerorun: rank " + std::to_string(rank()) + " of " +
                        std::to_string(size()) + ": stopping: " + failure +
                        " (this rank was waiting in " + describeCollective(p) +
                        ")";
  if (timeoutHandler) {
    timeoutHandler(message);
    acknowledgePeerFailure();
    throw CommPeerFailedError(message);
  }
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  acknowledgePeerFailure();
  abortAll(kPeerFailedExitCode);
  std::_Exit(kPeerFailedExitCode); // abortAll does not return.
}

std::string describeCollective(const PendingCollective &p) {
  std::string text = p.collective;
  if (p.label.opIndex >= 0)
    text += " of plan op " + std::to_string(p.label.opIndex);
  if (!p.label.description.empty())
    text += " (" + p.label.description + ")";
  return text;
}

bool bytesOverlap(const void *a, size_t aBytes, const void *b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes && bBytes && x < y + bBytes && y < x + aBytes;
}

//===----------------------------------------------------------------------===//
// The public collectives: traffic counted once for every backend
//===----------------------------------------------------------------------===//

CommHandle Communicator::allGather(const void *send, int64_t sendCount,
                                   void *recv, DType dtype, OpLabel label) {
  CommHandle h = startAllGather(send, sendCount, recv, dtype, std::move(label));
  count(CollectiveKind::AllGather, sendCount * size(), dtype);
  return h;
}

CommHandle Communicator::allToAllV(const void *send,
                                   const std::vector<int64_t> &sendCounts,
                                   void *recv,
                                   const std::vector<int64_t> &recvCounts,
                                   DType dtype, OpLabel label) {
  auto [sent, received] =
      checkAllToAll(send, sendCounts, recv, recvCounts, dtype);
  (void)received;
  CommHandle h = startAllToAllV(send, sendCounts, recv, recvCounts, dtype,
                                std::move(label));
  countAllToAll(sendCounts, sent, dtype);
  return h;
}

CommHandle Communicator::allToAllHost(const int32_t *send, int32_t *recv,
                                      int64_t perRank, OpLabel label) {
  checkCount(perRank, "allToAllHost");
  std::vector<int64_t> counts(size_t(size()), perRank);
  int64_t sent = checkAllToAll(send, counts, recv, counts, DType::I32).first;
  CommHandle h = startAllToAllHost(send, recv, perRank, std::move(label));
  countAllToAll(counts, sent, DType::I32);
  return h;
}

CommHandle Communicator::startAllToAllHost(const int32_t *send, int32_t *recv,
                                           int64_t perRank, OpLabel label) {
  std::vector<int64_t> counts(size_t(size()), perRank);
  return startAllToAllV(send, counts, recv, counts, DType::I32,
                        std::move(label));
}

void Communicator::countAllToAll(const std::vector<int64_t> &sendCounts,
                                 int64_t sent, DType dtype) {
  // What left this rank: its whole buffer but its own block.
  double away = double(sent - sendCounts[size_t(rank())]);
  std::lock_guard<std::mutex> lock(trafficMutex);
  CommTraffic::Volume &v = counted.byKind[size_t(CollectiveKind::AllToAll)];
  v.collectives += 1;
  v.elements += sent;
  v.elementsPerRank += away;
  v.bytesPerRank += away * double(bytesPerElement(dtype));
}

CommHandle Communicator::reduceScatter(const void *send,
                                       const std::vector<int64_t> &recvCounts,
                                       void *recv, DType dtype, bool average,
                                       OpLabel label) {
  CommHandle h = startReduceScatter(send, recvCounts, recv, dtype, average,
                                    std::move(label));
  int64_t elements = 0;
  for (int64_t c : recvCounts)
    elements += c;
  count(CollectiveKind::ReduceScatter, elements, dtype);
  return h;
}

CommHandle Communicator::allReduce(void *buf, int64_t n, DType dtype,
                                   bool average, OpLabel label) {
  CommHandle h = startAllReduce(buf, n, dtype, average, std::move(label));
  count(CollectiveKind::AllReduce, n, dtype);
  return h;
}

CommHandle Communicator::broadcast(void *buf, int64_t n, DType dtype, int root,
                                   OpLabel label) {
  CommHandle h = startBroadcast(buf, n, dtype, root, std::move(label));
  std::lock_guard<std::mutex> lock(trafficMutex);
  counted.broadcast.collectives += 1;
  counted.broadcast.elements += n;
  return h;
}

CommHandle Communicator::barrier(OpLabel label) {
  CommHandle h = startBarrier(std::move(label));
  std::lock_guard<std::mutex> lock(trafficMutex);
  counted.barrier.collectives += 1;
  return h;
}

CommHandle Communicator::allReduceScalars(double *values, int64_t n,
                                          ScalarOp op, OpLabel label) {
  CommHandle h = startAllReduceScalars(values, n, op, std::move(label));
  std::lock_guard<std::mutex> lock(trafficMutex);
  counted.scalarAllReduce.collectives += 1;
  counted.scalarAllReduce.elements += n;
  return h;
}

void Communicator::count(CollectiveKind kind, int64_t elements, DType dtype) {
  double perRank = commElementsPerRank(kind, double(elements), size());
  std::lock_guard<std::mutex> lock(trafficMutex);
  CommTraffic::Volume &v = counted.byKind[size_t(kind)];
  v.collectives += 1;
  v.elements += elements;
  v.elementsPerRank += perRank;
  v.bytesPerRank += perRank * double(bytesPerElement(dtype));
}

CommTraffic Communicator::traffic() const {
  std::lock_guard<std::mutex> lock(trafficMutex);
  return counted;
}

CommTraffic::Volume CommTraffic::total() const {
  Volume t;
  for (const Volume &v : byKind) {
    t.collectives += v.collectives;
    t.elements += v.elements;
    t.elementsPerRank += v.elementsPerRank;
    t.bytesPerRank += v.bytesPerRank;
  }
  return t;
}

namespace {

/// Every volume of `a` and `b`, counter by counter, through `f`.
template <typename F>
CommTraffic combine(const CommTraffic &a, const CommTraffic &b, F f) {
  auto each = [&](const CommTraffic::Volume &x, const CommTraffic::Volume &y) {
    return CommTraffic::Volume{f(x.collectives, y.collectives),
                               f(x.elements, y.elements),
                               f(x.elementsPerRank, y.elementsPerRank),
                               f(x.bytesPerRank, y.bytesPerRank)};
  };
  CommTraffic d;
  for (size_t i = 0; i < a.byKind.size(); ++i)
    d.byKind[i] = each(a.byKind[i], b.byKind[i]);
  d.scalarAllReduce = each(a.scalarAllReduce, b.scalarAllReduce);
  d.broadcast = each(a.broadcast, b.broadcast);
  d.barrier = each(a.barrier, b.barrier);
  return d;
}

} // namespace

CommTraffic CommTraffic::since(const CommTraffic &earlier) const {
  return combine(*this, earlier, [](auto x, auto y) { return x - y; });
}

CommTraffic CommTraffic::plus(const CommTraffic &other) const {
  return combine(*this, other, [](auto x, auto y) { return x + y; });
}

double Communicator::allReduceScalar(double value, ScalarOp op, OpLabel label) {
  CommHandle h = allReduceScalars(&value, 1, op, std::move(label));
  wait(h);
  return value;
}

std::optional<std::string> checkSameOnEveryRank(Communicator &comm,
                                                uint32_t digest,
                                                const std::string &what) {
  if (comm.size() == 1)
    return std::nullopt;
  // A 32-bit digest is exact in a double; max and -max of -digest give the
  // range over ranks in one reduction.
  double range[2] = {double(digest), -double(digest)};
  CommHandle h = comm.allReduceScalars(range, 2, ScalarOp::Max,
                                       OpLabel{-1, "agree on " + what});
  comm.wait(h);
  if (range[0] == -range[1])
    return std::nullopt;
  char text[160];
  std::snprintf(text, sizeof text,
                " differs between ranks: CRC-32C 0x%08x on rank %d, from "
                "0x%08x to 0x%08x over the %d ranks",
                unsigned(digest), comm.rank(), unsigned(-range[1]),
                unsigned(range[0]), comm.size());
  return what + text +
         " (was it changed on disk while the ranks read it, or do the ranks "
         "see different files at that path?)";
}

std::vector<std::string> allGatherText(Communicator &comm,
                                       const std::string &mine,
                                       const std::string &what) {
  if (comm.size() == 1)
    return {mine};
  // Padded to the longest, in 4-byte words (the communicator moves typed
  // elements), at least one NUL after each.
  double longest = comm.allReduceScalar(double(mine.size()), ScalarOp::Max,
                                        OpLabel{-1, what + " size"});
  int64_t words = (int64_t(longest) + 4) / 4;
  std::vector<char> send(size_t(words) * 4, '\0');
  std::memcpy(send.data(), mine.data(), mine.size());
  std::vector<char> recv(send.size() * size_t(comm.size()));
  CommHandle h = comm.allGather(send.data(), words, recv.data(), DType::I32,
                                OpLabel{-1, what});
  comm.wait(h);
  std::vector<std::string> all;
  for (int r = 0; r < comm.size(); ++r) {
    const char *text = recv.data() + size_t(r) * send.size();
    all.emplace_back(text, strnlen(text, send.size()));
  }
  return all;
}

std::optional<std::vector<int64_t>>
exchangeExpertCounts(Communicator &comm, const std::vector<int64_t> &sent,
                     OpLabel label, const std::atomic<bool> &cancel) {
  int64_t n = comm.size();
  if (sent.empty() || int64_t(sent.size()) % n != 0)
    throw std::invalid_argument(
        "expert count exchange: " + std::to_string(sent.size()) +
        " experts do not split over " + std::to_string(n) + " ranks");
  int64_t local = int64_t(sent.size()) / n;
  std::vector<int32_t> send(sent.size()), recv(sent.size(), 0);
  for (size_t e = 0; e < sent.size(); ++e) {
    if (sent[e] < 0 || sent[e] > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument("expert count exchange: expert " +
                                  std::to_string(e) + "'s row count " +
                                  std::to_string(sent[e]) +
                                  " is negative or exceeds i32");
    send[e] = int32_t(sent[e]);
  }
  CommHandle h =
      comm.allToAllHost(send.data(), recv.data(), local, std::move(label));
  if (!comm.wait(h, cancel)) {
    h.abandon(); // The caller aborts; MPI cannot cancel it.
    new std::vector<int32_t>(std::move(recv)); // Kept alive for it.
    new std::vector<int32_t>(std::move(send));
    return std::nullopt;
  }
  return std::vector<int64_t>(recv.begin(), recv.end());
}

void Communicator::checkReducible(DType dtype,
                                  std::string_view collective) const {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
    throw std::invalid_argument(std::string(collective) + ": cannot reduce " +
                                std::string(dtypeName(dtype)) +
                                " buffers; expected f32, bf16 or f16");
}

void Communicator::checkCount(int64_t count, std::string_view what) const {
  if (count < 0)
    throw std::invalid_argument(std::string(what) + ": negative count " +
                                std::to_string(count));
}

void Communicator::checkRecvCounts(
    const std::vector<int64_t> &recvCounts) const {
  if (recvCounts.size() != size_t(size()))
    throw std::invalid_argument(
        "reduceScatter: " + std::to_string(recvCounts.size()) +
        " receive counts, expected one per rank (" + std::to_string(size()) +
        ")");
  for (int64_t c : recvCounts)
    checkCount(c, "reduceScatter");
}

std::pair<int64_t, int64_t> Communicator::checkAllToAll(
    const void *send, const std::vector<int64_t> &sendCounts, const void *recv,
    const std::vector<int64_t> &recvCounts, DType dtype) const {
  int64_t totals[2] = {0, 0};
  const std::vector<int64_t> *lists[2] = {&sendCounts, &recvCounts};
  for (int i = 0; i < 2; ++i) {
    if (lists[i]->size() != size_t(size()))
      throw std::invalid_argument(
          std::string("allToAllV: ") + std::to_string(lists[i]->size()) +
          (i ? " receive" : " send") + " counts, expected one per rank (" +
          std::to_string(size()) + ")");
    for (int64_t c : *lists[i]) {
      checkCount(c, "allToAllV");
      totals[i] += c;
    }
  }
  size_t elt = size_t(bytesPerElement(dtype));
  if (bytesOverlap(send, size_t(totals[0]) * elt, recv,
                   size_t(totals[1]) * elt))
    throw std::invalid_argument(
        "allToAllV: the send and receive buffers overlap");
  return {totals[0], totals[1]};
}

void Communicator::checkRoot(int root) const {
  if (root < 0 || root >= size())
    throw std::invalid_argument("broadcast: root " + std::to_string(root) +
                                " is not a rank of a world of " +
                                std::to_string(size()));
}

//===----------------------------------------------------------------------===//
// LocalCommunicator
//===----------------------------------------------------------------------===//

static void copyElements(const void *src, void *dst, int64_t count,
                         DType dtype) {
  if (src != dst && count > 0)
    std::memmove(dst, src, size_t(count * bytesPerElement(dtype)));
}

CommHandle LocalCommunicator::startAllGather(const void *send,
                                             int64_t sendCount, void *recv,
                                             DType dtype, OpLabel) {
  checkCount(sendCount, "allGather");
  copyElements(send, recv, sendCount, dtype);
  return {};
}

// With one rank the sum is the input and the average divides by 1: both are
// the identity, for 16-bit buffers too (an f32 round trip is exact).
CommHandle
LocalCommunicator::startReduceScatter(const void *send,
                                      const std::vector<int64_t> &recvCounts,
                                      void *recv, DType dtype, bool, OpLabel) {
  checkReducible(dtype, "reduceScatter");
  checkRecvCounts(recvCounts);
  copyElements(send, recv, recvCounts[0], dtype);
  return {};
}

// One rank sends its one block to itself.
CommHandle LocalCommunicator::startAllToAllV(
    const void *send, const std::vector<int64_t> &sendCounts, void *recv,
    const std::vector<int64_t> &recvCounts, DType dtype, OpLabel) {
  if (sendCounts[0] != recvCounts[0])
    throw std::invalid_argument(
        "allToAllV: one rank sends itself " + std::to_string(sendCounts[0]) +
        " elements but expects " + std::to_string(recvCounts[0]));
  copyElements(send, recv, sendCounts[0], dtype);
  return {};
}

CommHandle LocalCommunicator::startAllReduce(void *, int64_t count, DType dtype,
                                             bool, OpLabel) {
  checkReducible(dtype, "allReduce");
  checkCount(count, "allReduce");
  return {};
}

CommHandle LocalCommunicator::startBroadcast(void *, int64_t count, DType,
                                             int root, OpLabel) {
  checkCount(count, "broadcast");
  checkRoot(root);
  return {};
}

CommHandle LocalCommunicator::startBarrier(OpLabel) { return {}; }

CommHandle LocalCommunicator::startAllReduceScalars(double *, int64_t count,
                                                    ScalarOp, OpLabel) {
  checkCount(count, "allReduceScalars");
  return {};
}

std::unique_ptr<Communicator> LocalCommunicator::duplicate() const {
  auto copy = std::make_unique<LocalCommunicator>();
  inheritSettings(*copy);
  return copy;
}

std::unique_ptr<Communicator> LocalCommunicator::split(int color, int) const {
  if (color < 0)
    return nullptr;
  return duplicate();
}

void LocalCommunicator::abortAll(int exitCode) const {
  std::fflush(nullptr);
  std::_Exit(exitCode);
}

//===----------------------------------------------------------------------===//
// Layout helpers
//===----------------------------------------------------------------------===//

} // namespace zeroc::runtime
