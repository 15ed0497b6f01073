# Run at build time (cmake -P) by strata_add_doctest_cases (strata_tests.cmake): lists the test
# cases of EXECUTABLE and writes OUTPUT, a CTest file with one test per case.
# Inputs: EXECUTABLE, PREFIX, LABEL, SKIP_RETURN_CODE, WORKDIR, OUTPUT; SOURCE_FILTER (optional):
# only the cases of the source files it matches (doctest's --source-file, e.g. "*/tests/stream/*":
# one area of an executable that holds several), listed and run with it. EXPECT_NONE with
# EXCLUDE_FILTER (every area's files): writes nothing, fails if any case is outside them.
set(source_filter "")
if(SOURCE_FILTER)
  set(source_filter "--source-file=${SOURCE_FILTER}")
endif()
if(EXCLUDE_FILTER)
  list(APPEND source_filter "--source-file-exclude=${EXCLUDE_FILTER}")
endif()
execute_process(COMMAND "${EXECUTABLE}" --list-test-cases ${source_filter}
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --list-test-cases failed (${result}):\n${listing}${errors}")
endif()
# Names may hold ';' (CMake's list separator) and '[' ']' (which group list elements): carried as
# placeholders until written out.
string(REPLACE ";" "@strata_semicolon@" listing "${listing}")
string(REPLACE "[" "@strata_lbracket@" listing "${listing}")
string(REPLACE "]" "@strata_rbracket@" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
set(count 0)
foreach(name IN LISTS lines)
  if(name STREQUAL "" OR name MATCHES "^@strata_lbracket@doctest@strata_rbracket@" OR name MATCHES "^=====")
    continue()
  endif()
  string(REPLACE "@strata_semicolon@" ";" name "${name}")
  string(REPLACE "@strata_lbracket@" "[" name "${name}")
  string(REPLACE "@strata_rbracket@" "]" name "${name}")
  if(name MATCHES "]==]")
    message(FATAL_ERROR "${EXECUTABLE}: test case name '${name}' contains ']==]'; rename it")
  endif()
  # doctest's --test-case filter: ',' separates filters and '\' escapes (so both are escaped);
  # '*' and '?' are wildcards that also match themselves. -cs: case-sensitive, the exact name.
  string(REPLACE "\\" "\\\\" filter "${name}")
  string(REPLACE "," "\\," filter "${filter}")
  set(labels "${LABEL}")
  string(TOLOWER "${name}" lower)
  if(lower MATCHES "cuda")
    list(APPEND labels gpu)
  endif()
  string(APPEND script
    "add_test([==[${PREFIX}: ${name}]==] \"${EXECUTABLE}\" ${source_filter} [==[--test-case=${filter}]==] --case-sensitive)\n"
    "set_tests_properties([==[${PREFIX}: ${name}]==] PROPERTIES SKIP_RETURN_CODE ${SKIP_RETURN_CODE}"
    " LABELS \"${labels}\" WORKING_DIRECTORY \"${WORKDIR}\")\n")
  math(EXPR count "${count} + 1")
endforeach()
if(EXPECT_NONE)  # EXCLUDE_FILTER names every area's files: a case outside them would run nowhere
  if(NOT count EQUAL 0)
    message(FATAL_ERROR "${EXECUTABLE}: ${count} test case(s) in no area's folder (${EXCLUDE_FILTER}):\n${listing}")
  endif()
  return()
endif()
if(count EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} lists no test cases:\n${listing}")
endif()
file(WRITE "${OUTPUT}" "${script}")
