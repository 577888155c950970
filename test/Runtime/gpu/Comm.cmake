# NcclCommunicator (runtime/comm/NcclCommunicator.h).

# World size 1, no MPI launch: identities, dtypes, groups, streams, stream
# waits, scalars, the timeout report and the default abort. Each test skips
# where no CUDA GPU is usable; two also run without one (the dtype table and
# the error without a GPU).
zeroc_gpu_test(ZerocNcclCommTests SOURCES NcclCommTest.cpp LIBS ZerocNcclComm)

# Several ranks under mpirun, one GPU each: every rank runs every test. With
# fewer GPUs on a node than ranks there, all ranks print "SKIPPED: ..." and
# exit with 77, which ctest reports as skipped.
add_executable(ZerocNcclCommMpiTests NcclCommMpiTest.cpp)
target_link_libraries(ZerocNcclCommMpiTests PRIVATE ZerocNcclComm GTest::gtest)
foreach(np 2 4)
  add_test(NAME comm_nccl_np${np}
           COMMAND ${ZEROC_MPIRUN} -np ${np}
                   $<TARGET_FILE:ZerocNcclCommMpiTests>)
  set_tests_properties(comm_nccl_np${np} PROPERTIES TIMEOUT 300 LABELS gpu
    SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED: ")
endforeach()
# Rank 1 skips a collective: rank 0 prints one line, aborts NCCL and the job.
add_test(NAME comm_nccl_timeout_np2
         COMMAND ${ZEROC_MPIRUN} -np 2 $<TARGET_FILE:ZerocNcclCommMpiTests>
                 --timeout-scenario)
set_tests_properties(comm_nccl_timeout_np2 PROPERTIES TIMEOUT 120 LABELS gpu
  SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED: "
  PASS_REGULAR_EXPRESSION
    "zerorun: rank 0 of 2: all_reduce of plan op 42 \\(skipped by rank 1\\) did not complete within 0.5 s \\(--comm-timeout\\)"
  FAIL_REGULAR_EXPRESSION "was not aborted|wait returned")
