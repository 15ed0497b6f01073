# The library speaks in its own terms: no string literal in a header under strata/ names a
# command-line flag ("--seq-len"). An error's hint names the setting ("seq_len") and lists it in
# strata::error::settings(); a program maps that to its own flag. Run as a script:
#
#   cmake -DSTRATA_INCLUDE_DIR=<dir with strata/> -P cmake/check_hints.cmake
#
# Prints every literal that names a flag (file, line, the literal) and fails when there is one.
cmake_minimum_required(VERSION 3.25)
if(STRATA_INCLUDE_DIR)
  get_filename_component(STRATA_INCLUDE_DIR "${STRATA_INCLUDE_DIR}" ABSOLUTE)
endif()
if(NOT STRATA_INCLUDE_DIR)
  message(FATAL_ERROR "check_hints.cmake: pass -DSTRATA_INCLUDE_DIR=<the directory that holds strata/>")
endif()

file(GLOB_RECURSE headers RELATIVE "${STRATA_INCLUDE_DIR}" "${STRATA_INCLUDE_DIR}/strata/*.hpp"
     "${STRATA_INCLUDE_DIR}/strata/*.cuh")
if(NOT headers)
  message(FATAL_ERROR "check_hints.cmake: no headers under ${STRATA_INCLUDE_DIR}/strata")
endif()
set(found 0)
foreach(header IN LISTS headers)
  file(STRINGS "${STRATA_INCLUDE_DIR}/${header}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    string(REGEX REPLACE "^[ \t]*//.*" "" code "${line}")  # a comment line names what it likes
    if(NOT code MATCHES "--[a-z]")
      continue()
    endif()
    string(REGEX MATCHALL "\"([^\"\\\\]|\\\\.)*\"" literals "${code}")
    foreach(literal IN LISTS literals)
      if(literal MATCHES "(^|[^a-z0-9-])(--[a-z][a-z0-9-]*)")
        message(SEND_ERROR "${header}:${number}: a string names the flag '${CMAKE_MATCH_2}': ${literal}; name the "
                           "library setting instead and list it in the error's settings")
        math(EXPR found "${found} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()
list(LENGTH headers count)
if(found EQUAL 0)
  message(STATUS "check_hints.cmake: ${count} headers, no string names a command-line flag")
endif()
