# The CUDA kernels (runtime/kernels/cuda), included by CMakeLists.txt here.

# Every CUDA kernel against the CPU kernel of the same name on random inputs
# (label `gpu`: each test skips where no CUDA GPU is usable).
zeroc_gpu_test(ZerocCudaKernelTests SOURCES CudaKernelTest.cpp
               LIBS ZerocCudaKernels)

# This needs no GPU and runs everywhere the backend builds (no `gpu` label):
# the CUDA kernels' argument checks against the CPU kernels' messages.
zeroc_runtime_test(ZerocCudaArgumentTests SOURCES CudaArgumentTest.cpp
                   LIBS ZerocCudaKernels)
