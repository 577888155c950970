# The executor on the CUDA device against the CPU executor: whole training
# steps of checked-in tiny plans (no compiler needed on the GPU machine).
# It links the CUDA backend's objects (those of libzerorun-cuda.so) instead
# of opening the library.
zeroc_gpu_test(ZerocCudaExecutorTests SOURCES CudaExecutorTest.cpp
               LIBS ZerocCudaDevice ZerocCudaKernels ZerocNcclComm ZerocExec)
