# zerorun's dynamic dependencies (objdump -p: NEEDED) name no CUDA, cuBLAS
# or NCCL library: those belong to libzerorun-cuda.so, opened only for
# --device cuda. cmake -DZERORUN=... -DOBJDUMP=... -P CheckNoCudaNeeded.cmake
if(NOT OBJDUMP)
  find_program(OBJDUMP objdump)
endif()
execute_process(COMMAND ${OBJDUMP} -p ${ZERORUN} OUTPUT_VARIABLE dump
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -p ${ZERORUN} failed (${rc})")
endif()
string(REGEX MATCHALL "NEEDED +[^\n]+" needed "${dump}")
if(NOT needed)
  message(FATAL_ERROR "no NEEDED entries in ${ZERORUN}: is it dynamic?")
endif()
foreach(entry ${needed})
  if(entry MATCHES "libcuda|libcudart|libcublas|libnccl|libcudnn")
    message(FATAL_ERROR "zerorun needs a CUDA library: ${entry}")
  endif()
endforeach()
message(STATUS "zerorun NEEDED: ${needed}")
