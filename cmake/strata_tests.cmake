# How strata's doctest executables are built and registered with CTest (tests/, examples/).
#
# - The doctest main (tests/doctest_main.cpp) is compiled once, as the object library
#   strata_doctest_main, and linked into every test executable.
# - strata_add_doctest_cases(target LABEL area) registers each test case of `target` as its own
#   CTest test "<target>: <case name>": the executable lists its cases right after it is linked
#   (cmake/strata_discover_cases.cmake), and CTest runs one case per process. A case that skips
#   (support/skip.hpp: no GPU, no CUDA build, data missing) exits with 77, which SKIP_RETURN_CODE
#   makes CTest report as "Skipped" rather than "Passed". Cases whose names mention CUDA also get
#   the label "gpu" (ctest -L gpu on a machine with a GPU). `ctest -R <target>` still selects a
#   whole executable.
# - Unity build (STRATA_UNITY_TESTS, on by default): the .cpp files of one test executable are
#   compiled as one translation unit (up to 8 files per unit), so the trainers, models and ops
#   they all instantiate are compiled and optimized once per executable rather than once per file:
#   a third of the CPU time for tests/stream. Each test file therefore keeps its own names in a
#   namespace named after the file (`namespace streamed_test { ... }`, helpers and test cases
#   alike), so that two files' helpers can neither collide nor silently overload each other.
#   -DSTRATA_UNITY_TESTS=OFF compiles file by file (a rebuild after an edit compiles that file only).
# - strata_add_doctest_cases(target AREAS a b ...): one executable that holds the test files of
#   several areas (tests/CMakeLists.txt, STRATA_TEST_MERGED_AREAS), compiled as ONE unity unit, so
#   that the library code and the trainers and models those areas all use are generated and
#   optimized once, not once per area. Its cases are registered per area under the areas' own
#   names ("strata_test_stream: <case>", label "stream"), each run with doctest's --source-file
#   filter for its area's files, and the build directory gets a script strata_test_<area> per area
#   that runs the executable with that filter (so `strata_test_stream -tc=...` works as before).

find_package(doctest REQUIRED)
option(STRATA_UNITY_TESTS "Compile each test executable's .cpp files as one unit (unity build)" ON)

if(NOT TARGET strata_doctest_main)
  add_library(strata_doctest_main OBJECT ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp)
  target_include_directories(strata_doctest_main PUBLIC ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(strata_doctest_main PUBLIC doctest::doctest)
  target_compile_features(strata_doctest_main PUBLIC cxx_std_20)
endif()

function(strata_add_doctest_cases target)
  cmake_parse_arguments(arg "" "LABEL" "AREAS" ${ARGN})
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${STRATA_UNITY_TESTS} UNITY_BUILD_BATCH_SIZE 8)
  if(arg_AREAS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD_BATCH_SIZE 0)  # every file in one unit
  endif()
  # CUDA sources (tests/cuda/*.cu, the examples' kernel tests) stay one unit each: nvcc compiles
  # them, and they share helper names across files.
  get_target_property(sources ${target} SOURCES)
  foreach(source IN LISTS sources)
    if(source MATCHES "\\.cu$")
      set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
  # Only the libraries the executable calls: without a CUDA case, no cuBLAS to load (~0.3 s) in
  # each of its test processes (strata_cuda_ops in CMakeLists.txt).
  target_link_options(${target} PRIVATE LINKER:--as-needed)
  if(NOT arg_AREAS)
    strata_register_doctest_cases(${target} ${target} "${arg_LABEL}" "")
    return()
  endif()
  set(every_area "")
  foreach(area IN LISTS arg_AREAS)
    strata_area_source_filter(${area} filter)
    list(APPEND every_area "${filter}")
  endforeach()
  list(JOIN every_area "," every_area)
  add_custom_command(TARGET ${target} POST_BUILD  # no case outside the areas' folders (it would never run)
    COMMAND ${CMAKE_COMMAND} -DEXECUTABLE=$<TARGET_FILE:${target}> -DEXPECT_NONE=1 -DEXCLUDE_FILTER=${every_area}
            -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/strata_discover_cases.cmake
    VERBATIM)
  foreach(area IN LISTS arg_AREAS)
    strata_area_source_filter(${area} filter)
    strata_register_doctest_cases(${target} strata_test_${area} ${area} "${filter}")
    file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/strata_test_${area}
         CONTENT "#!/bin/sh\n# tests/${area}'s cases, in $<TARGET_FILE_NAME:${target}> (STRATA_TEST_MERGED_AREAS)\nexec \"$<TARGET_FILE:${target}>\" '--source-file=${filter}' \"$@\"\n"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  endforeach()
endfunction()

# The files whose test cases are tests/<area>'s (doctest's --source-file filter): the area's folder
# (examples/<area>/tests for the examples' llama and lora), and for layers docs/layers.md, whose
# tutorial code tests/layers/tutorial_test.cpp compiles with #line directives naming the document.
function(strata_area_source_filter area out)
  set(filter "*/tests/${area}/*")
  if(area STREQUAL "llama" OR area STREQUAL "lora")  # the examples' suites
    set(filter "*/examples/${area}/tests/*")
  endif()
  if(area STREQUAL "layers")
    string(APPEND filter ",*/docs/layers.md")
  endif()
  set(${out} "${filter}" PARENT_SCOPE)
endfunction()

# The CTest tests of `target`'s cases, named "<prefix>: <case>"; with a source filter, only the
# cases of the files it matches (doctest's --source-file), each run with it.
function(strata_register_doctest_cases target prefix label source_filter)
  set(ctest_file ${CMAKE_CURRENT_BINARY_DIR}/${prefix}_cases.cmake)
  # SKIP_RETURN_CODE 77: strata::test::skip_exit_code (tests/support/skip.hpp)
  add_custom_command(TARGET ${target} POST_BUILD
    BYPRODUCTS ${ctest_file}
    COMMAND ${CMAKE_COMMAND} -DEXECUTABLE=$<TARGET_FILE:${target}> -DPREFIX=${prefix} -DLABEL=${label}
            -DSOURCE_FILTER=${source_filter}
            -DSKIP_RETURN_CODE=77 -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR} -DOUTPUT=${ctest_file}
            -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/strata_discover_cases.cmake
    VERBATIM)
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${prefix}_include.cmake)
  file(WRITE ${include_file}
       "if(EXISTS \"${ctest_file}\")\n"
       "  include(\"${ctest_file}\")\n"
       "else()\n"
       "  add_test(${prefix}_NOT_BUILT ${prefix}_NOT_BUILT)\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
