# The executor on the CUDA device against the CPU executor: whole training
# steps of checked-in tiny plans (no compiler needed on the GPU machine).
zeroc_gpu_test(ZerocCudaExecutorTests SOURCES CudaExecutorTest.cpp
               LIBS ZerocExec)
