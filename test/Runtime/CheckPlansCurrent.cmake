# ctest checked_in_plans_current: regenerates the checked-in plans with
# scripts/gen-test-plans.sh into OUT and compares each with its checked-in
# copy under SOURCE/test/Runtime/Inputs.
file(REMOVE_RECURSE ${OUT})
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ZEROC=${ZEROC}
          ${SOURCE}/scripts/gen-test-plans.sh ${OUT}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "scripts/gen-test-plans.sh failed (${rc})")
endif()
file(GLOB_RECURSE regenerated RELATIVE ${OUT} ${OUT}/*.json)
set(stale "")
foreach(plan ${regenerated})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/${plan}
            ${SOURCE}/test/Runtime/Inputs/${plan}
    RESULT_VARIABLE differs)
  if(NOT differs EQUAL 0)
    list(APPEND stale ${plan})
  endif()
endforeach()
if(stale)
  message(FATAL_ERROR "checked-in plans differ from what zeroc writes now: "
                      "${stale}; run scripts/gen-test-plans.sh")
endif()
list(LENGTH regenerated n)
message(STATUS "${n} checked-in plans are current")
