# Extracts the tutorial's code from docs/layers.md into a C++ source that
# tests/layers/tutorial_test.cpp includes, so the document and the test cannot drift apart.
#
#   cmake -DDOC=docs/layers.md -DOUT=layers_tutorial.inc -P extract_tutorial.cmake
#
# A ```cpp block of the document is taken when an HTML comment (invisible when rendered) stands
# on the line before it:
#   <!-- tutorial_test: append -->                          the block is appended to the source;
#   <!-- tutorial_test: in place of "TEXT" -->              the block replaces the line of the
#                                                           source so far that contains TEXT (step 2's
#                                                           members go into step 1's class).
# #line directives point compiler errors at the document's lines. Only string operations are used
# (C++ is full of the semicolons that CMake lists split on).
cmake_minimum_required(VERSION 3.25)

if(NOT DOC OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DDOC=<layers.md> -DOUT=<generated source> -P extract_tutorial.cmake")
endif()

file(READ "${DOC}" text)
set(marker "\n<!-- tutorial_test:")  # at the start of a line: not a mention in the prose
set(out "// Generated from ${DOC} by tests/layers/extract_tutorial.cmake: edit the document, not this file.\n")
set(consumed 0)   # characters of the document before `rest`
set(rest "${text}")
set(blocks 0)

# Sets `${var}` to the number of newlines in `str`.
function(count_newlines str var)
  string(REGEX REPLACE "[^\n]" "" newlines "${str}")
  string(LENGTH "${newlines}" n)
  set(${var} ${n} PARENT_SCOPE)
endfunction()

while(TRUE)
  string(FIND "${rest}" "${marker}" at)
  if(at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${rest}" ${at} -1 rest)
  math(EXPR consumed "${consumed} + ${at}")

  # The directive, up to the end of the comment; the comment must be followed by ```cpp.
  string(FIND "${rest}" "-->" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "${DOC}: a '<!-- tutorial_test:' comment is not closed with -->")
  endif()
  string(LENGTH "${marker}" marker_length)
  math(EXPR directive_length "${close} - ${marker_length}")
  string(SUBSTRING "${rest}" ${marker_length} ${directive_length} directive)
  string(STRIP "${directive}" directive)
  math(EXPR after_comment "${close} + 3")
  string(SUBSTRING "${rest}" ${after_comment} -1 rest)
  math(EXPR consumed "${consumed} + ${after_comment}")
  if(NOT rest MATCHES "^[ \t]*\n```cpp[ \t]*\n")
    message(FATAL_ERROR "${DOC}: the comment '<!-- tutorial_test: ${directive} -->' must stand on the line "
                        "just before a ```cpp block")
  endif()
  string(LENGTH "${CMAKE_MATCH_0}" fence_length)
  string(SUBSTRING "${rest}" ${fence_length} -1 rest)
  math(EXPR consumed "${consumed} + ${fence_length}")

  # The block's first line in the document (1-based), and its text up to the closing fence.
  string(SUBSTRING "${text}" 0 ${consumed} before)
  count_newlines("${before}" first_line)
  math(EXPR first_line "${first_line} + 1")
  string(FIND "${rest}" "\n```" end)
  if(end EQUAL -1)
    message(FATAL_ERROR "${DOC}:${first_line}: the ```cpp block is not closed")
  endif()
  string(SUBSTRING "${rest}" 0 ${end} block)
  string(SUBSTRING "${rest}" ${end} -1 rest)
  math(EXPR consumed "${consumed} + ${end}")
  set(block "#line ${first_line} \"${DOC}\"\n${block}\n")

  if(directive STREQUAL "append")
    string(APPEND out "${block}")
  elseif(directive MATCHES "^in place of \"(.+)\"$")
    set(needle "${CMAKE_MATCH_1}")
    string(FIND "${out}" "${needle}" hit)
    if(hit EQUAL -1)
      message(FATAL_ERROR "${DOC}:${first_line}: no earlier tutorial block has a line with \"${needle}\"")
    endif()
    # The line holding the needle: [line_begin, line_end).
    string(SUBSTRING "${out}" 0 ${hit} head)
    string(FIND "${head}" "\n" line_begin REVERSE)
    math(EXPR line_begin "${line_begin} + 1")
    string(SUBSTRING "${out}" ${hit} -1 tail)
    string(FIND "${tail}" "\n" line_end)
    math(EXPR line_end "${hit} + ${line_end} + 1")
    # Its line in the document, from the last #line before it, for the lines that follow the splice.
    string(SUBSTRING "${out}" 0 ${line_begin} head)
    string(FIND "${head}" "#line " last_line REVERSE)
    string(SUBSTRING "${head}" ${last_line} -1 since)
    string(REGEX MATCH "^#line ([0-9]+)" ignored "${since}")
    count_newlines("${since}" lines_since)
    math(EXPR resume_line "${CMAKE_MATCH_1} + ${lines_since}")
    string(SUBSTRING "${out}" 0 ${line_begin} head)
    string(SUBSTRING "${out}" ${line_end} -1 tail)
    set(out "${head}${block}#line ${resume_line} \"${DOC}\"\n${tail}")
  else()
    message(FATAL_ERROR "${DOC}:${first_line}: unknown directive '${directive}' (append, or in place of \"TEXT\")")
  endif()
  math(EXPR blocks "${blocks} + 1")
endwhile()

if(blocks EQUAL 0)
  message(FATAL_ERROR "${DOC}: no ```cpp block is marked <!-- tutorial_test: ... -->")
endif()
# Replaced only when it changes, so that an edit elsewhere in the document recompiles nothing.
file(WRITE "${OUT}.new" "${out}")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.new")
