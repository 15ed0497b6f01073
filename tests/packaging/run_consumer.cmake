# The packaging as a user meets it, invoked by CTest with cmake -P:
#  1. the README's install lines (the install preset: headers and package files alone) into a
#     fresh prefix, in seconds, with nvcc on PATH when this machine has it;
#  2. the README's consumer project (its CMakeLists.txt and main.cpp, taken from README.md: the
#     blocks after "<!-- packaging_test: FILE -->") against that install with the CUDA toolkit out
#     of reach (no nvcc on PATH, CUDAToolkit_ROOT pointing nowhere): it configures, builds and runs;
#  3. find_package(strata COMPONENTS cuda): strata::cuda where the install has it and the toolkit
#     is in reach (with every kernel unit of src/cuda/ installed), one clear error where it is not;
#  4. tests/packaging/consumer with add_subdirectory, and an install of this build tree.
foreach(var STRATA_SOURCE_DIR STRATA_BINARY_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake needs -D${var}=...")
  endif()
endforeach()

# run(<command...>): fails the test when the command fails; the output is printed either way
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
# refused(<expected text> <command...>): the command must fail and say <expected text>
function(refused expected)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "succeeded, but should have failed with '${expected}': ${ARGN}\n${out}\n${err}")
  endif()
  string(FIND "${out}${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "failed without saying '${expected}': ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "refused as expected ('${expected}')")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

# 1. the README: cmake --preset install && cmake --install build/install --prefix PREFIX (here
#    into WORK_DIR, not the source tree's build/)
string(TIMESTAMP started "%s")
execute_process(COMMAND ${CMAKE_COMMAND} --preset install -B ${WORK_DIR}/build-install
                        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
                WORKING_DIRECTORY ${STRATA_SOURCE_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --preset install failed (${rc}):\n${out}\n${err}")
endif()
run(${CMAKE_COMMAND} --install ${WORK_DIR}/build-install --prefix ${prefix})
string(TIMESTAMP finished "%s")
math(EXPR took "${finished} - ${started}")
message(STATUS "the install preset configured and installed in ${took} s")
file(GLOB_RECURSE compiled ${WORK_DIR}/build-install/*.o ${WORK_DIR}/build-install/*.a)
list(FILTER compiled EXCLUDE REGEX "/CMakeFiles/")  # CMake's own compiler checks
if(compiled)
  message(FATAL_ERROR "the install preset compiled something: ${compiled}")
endif()
if(EXISTS ${prefix}/bin)
  message(FATAL_ERROR "the install preset installed programs: ${prefix}/bin")
endif()
set(install_has_cuda FALSE)
if(EXISTS ${prefix}/lib/cmake/strata/strataCudaTargets.cmake)
  set(install_has_cuda TRUE)
endif()
message(STATUS "the install has strata::cuda: ${install_has_cuda}")

# 2. the CUDA toolkit out of reach: PATH without any folder that holds nvcc, no CUDA_PATH,
#    CUDAToolkit_ROOT pointing nowhere, and (as CMake's default paths such as /usr/local/bin may
#    still hold an nvcc) find_package(CUDAToolkit) switched off
set(path_without_cuda "")
string(REPLACE ":" ";" path_dirs "$ENV{PATH}")
foreach(dir IN LISTS path_dirs)
  if(NOT EXISTS ${dir}/nvcc)
    list(APPEND path_without_cuda ${dir})
  endif()
endforeach()
string(REPLACE ";" ":" path_without_cuda "${path_without_cuda}")
set(no_cuda ${CMAKE_COMMAND} -E env --unset=CUDA_PATH --unset=CUDAToolkit_ROOT --unset=CUDACXX
            "PATH=${path_without_cuda}")
set(no_cuda_root -DCUDAToolkit_ROOT=${WORK_DIR}/no-cuda-here -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)

file(READ ${STRATA_SOURCE_DIR}/README.md readme)
foreach(file CMakeLists.txt main.cpp)
  set(marker "<!-- packaging_test: ${file} -->\n```")
  string(FIND "${readme}" "${marker}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md has no '<!-- packaging_test: ${file} -->' before a fenced block")
  endif()
  string(SUBSTRING "${readme}" ${at} -1 block)
  foreach(line comment fence)  # the code starts after the comment's line and the fence's
    string(FIND "${block}" "\n" newline)
    math(EXPR newline "${newline} + 1")
    string(SUBSTRING "${block}" ${newline} -1 block)
  endforeach()
  string(FIND "${block}" "```" code_end)
  string(SUBSTRING "${block}" 0 ${code_end} block)
  file(WRITE ${WORK_DIR}/readme-app/${file} "${block}")
endforeach()
set(build ${WORK_DIR}/build-package)
run(${no_cuda} ${CMAKE_COMMAND} -S ${WORK_DIR}/readme-app -B ${build}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} ${no_cuda_root})
run(${no_cuda} ${CMAKE_COMMAND} --build ${build})
run(${build}/app)

# 3. the cuda component (configure only)
set(component ${STRATA_SOURCE_DIR}/tests/packaging/cuda_component)
if(install_has_cuda)
  refused("the CUDA toolkit was not found"
          ${no_cuda} ${CMAKE_COMMAND} -S ${component} -B ${WORK_DIR}/build-cuda-unreachable
          -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} ${no_cuda_root})
  file(GLOB cuda_units RELATIVE ${STRATA_SOURCE_DIR}/src/cuda ${STRATA_SOURCE_DIR}/src/cuda/*.cu)
  string(REPLACE ";" "," cuda_units "${cuda_units}")  # one argument through run()
  run(${CMAKE_COMMAND} -S ${component} -B ${WORK_DIR}/build-cuda
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} -DSTRATA_CUDA_UNITS=${cuda_units})
else()
  refused("installed without its CUDA backend"
          ${CMAKE_COMMAND} -S ${component} -B ${WORK_DIR}/build-cuda-absent
          -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
endif()

# 4. add_subdirectory, and an install of this build tree (whichever of its targets were built)
set(build ${WORK_DIR}/build-subdirectory)
run(${CMAKE_COMMAND} -S ${STRATA_SOURCE_DIR}/tests/packaging/consumer -B ${build}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release
    -DCONSUMER_MODE=subdirectory -DSTRATA_SOURCE_DIR=${STRATA_SOURCE_DIR} -DSTRATA_ENABLE_CUDA=OFF)
run(${CMAKE_COMMAND} --build ${build})
run(${build}/consumer)
run(${CMAKE_COMMAND} --install ${STRATA_BINARY_DIR} --prefix ${WORK_DIR}/prefix-build-tree)
