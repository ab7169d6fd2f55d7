# Fails when docs/operators.md differs from `ferry ops --markdown` (regenerate with: make docs).
execute_process(COMMAND ${FERRY} ops --markdown OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferry ops --markdown failed (${rc})")
endif()
file(READ ${DOC} committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "docs/operators.md is out of date with the op registry; regenerate it: build/ferry ops --markdown > docs/operators.md")
endif()
