//===- MpiTestMain.h - GoogleTest on every rank of an MPI job ---*- C++ -*-===//
//
// For test binaries started under mpirun: every rank runs every test; only
// rank 0 prints gtest's report, the others print their failures as
// "[rank N] file:line" lines; the exit code is non-zero on every rank when a
// test failed on any. MPI must be initialized.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TEST_RUNTIME_MPITESTMAIN_H
#define ZEROC_TEST_RUNTIME_MPITESTMAIN_H

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace zeroc::testing {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (result.failed())
      std::printf("[rank %d] %s:%d: failure\n%s\n", rank,
                  result.file_name() ? result.file_name() : "?",
                  result.line_number(), result.summary());
  }

private:
  int rank;
};

/// InitGoogleTest, RUN_ALL_TESTS on every rank, and the agreed exit code.
inline int runTestsOnEveryRank(int &argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    ::testing::TestEventListeners &listeners =
        ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0;
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && anyFailed && !failed)
    std::printf("a test failed on another rank (see [rank N] lines)\n");
  return anyFailed;
}

} // namespace zeroc::testing

#endif // ZEROC_TEST_RUNTIME_MPITESTMAIN_H
