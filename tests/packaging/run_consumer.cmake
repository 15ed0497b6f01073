# Builds tests/packaging/consumer twice: against an installed strata (find_package) and with
# add_subdirectory, then runs both programs. Invoked by CTest with cmake -P.
foreach(var STRATA_SOURCE_DIR STRATA_BINARY_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake needs -D${var}=...")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${STRATA_BINARY_DIR} --prefix ${prefix})

foreach(mode package subdirectory)
  set(build ${WORK_DIR}/build-${mode})
  run(${CMAKE_COMMAND} -S ${STRATA_SOURCE_DIR}/tests/packaging/consumer -B ${build}
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release
      -DCONSUMER_MODE=${mode} -DCMAKE_PREFIX_PATH=${prefix} -DSTRATA_SOURCE_DIR=${STRATA_SOURCE_DIR}
      -DSTRATA_ENABLE_CUDA=OFF)
  run(${CMAKE_COMMAND} --build ${build})
  run(${build}/consumer)
endforeach()
