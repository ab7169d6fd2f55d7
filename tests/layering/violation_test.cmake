# `ctest -R layering`: the check fails on each kind of violation (run on a copy of src/ with one
# bad include or folder added at a time) and passes on the unchanged copy.
#   cmake -DCHECK=check_layering.cmake -DSRC=<src> -DDOC=<ARCHITECTURE.md> -DLINKS=<links> -DWORK=<dir> -P violation_test.cmake
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(COPY ${SRC}/ DESTINATION ${WORK}/src FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp" PATTERN "*.inc"
     PATTERN "*.cpp" PATTERN "*.cc" PATTERN "*.c" PATTERN "*.cu" PATTERN "*.cuh")

function(run_check links out_var rc_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DSRC=${WORK}/src -DDOC=${DOC} -DLINKS=${links} -P ${CHECK}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(${out_var} "${out}${err}" PARENT_SCOPE)
  set(${rc_var} ${rc} PARENT_SCOPE)
endfunction()

run_check(${LINKS} out rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the unchanged copy of src/ does not pass:\n${out}")
endif()

# name | file added | its text | what the failure must say
set(cases
  "upward|ir/zz_layering_case.h|#include \"runtime/executor.h\"|ir/zz_layering_case.h: #include \"runtime/executor.h\": ir/ may not use runtime/"
  "sideways|format/zz_layering_case.cpp|  #  include \"ops/registry.h\"  // spaced|format/zz_layering_case.cpp: #include \"ops/registry.h\": format/ may not use ops/"
  "private subfolder|runtime/zz_layering_case.cpp|#include \"backends/cpu/cpu_kernels.h\"|backends/cpu/ is private to backends/"
  "new folder|zz_layering_case/a.h|#include \"common/status.h\"|src/zz_layering_case/: not in ARCHITECTURE.md's layer table"
  "external library|runtime/zz_layering_case.cpp|#include <dnnl.hpp>|src/runtime/zz_layering_case.cpp: #include <dnnl.hpp> brings DNNL::dnnl's headers outside backends/cpu/"
  "external library through a header|backends/zz_layering_case.h|#include \"backends/cpu/dnnl_util.h\"|src/backends/zz_layering_case.h: #include \"backends/cpu/dnnl_util.h\" brings DNNL::dnnl's headers outside backends/cpu/")
foreach(c IN LISTS cases)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 name)
  list(GET parts 1 file)
  list(GET parts 2 text)
  list(GET parts 3 expect)
  file(WRITE ${WORK}/src/${file} "${text}\n")
  run_check(${LINKS} out rc)
  get_filename_component(dir ${file} DIRECTORY)
  if(dir STREQUAL "zz_layering_case")
    file(REMOVE_RECURSE ${WORK}/src/${dir})
  else()
    file(REMOVE ${WORK}/src/${file})
  endif()
  string(FIND "${out}" "${expect}" at)
  if(rc EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "${name} include: the check did not fail as it should (rc ${rc}; wanted '${expect}'):\n${out}")
  endif()
  message(STATUS "${name}: refused")
endforeach()

# The link graph: check/ includes onnx/; a ferry_check that does not link ferry_onnx must fail.
file(READ ${LINKS} links_text)
file(WRITE ${WORK}/links_without_onnx.cmake "${links_text}\nlist(REMOVE_ITEM FERRY_LINK_ferry_check ferry_onnx)\n")
run_check(${WORK}/links_without_onnx.cmake out rc)
string(FIND "${out}" "ferry_check does not link ferry_onnx" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "a missing link: the check did not fail as it should (rc ${rc}):\n${out}")
endif()
message(STATUS "missing link: refused")

# oneDNN linked PUBLIC by the cpu backend's library must fail.
file(WRITE ${WORK}/links_dnnl_public.cmake "${links_text}\nlist(APPEND FERRY_IFACE_ferry_backends DNNL::dnnl)\n")
run_check(${WORK}/links_dnnl_public.cmake out rc)
string(FIND "${out}" "ferry_backends links DNNL::dnnl PUBLIC" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "an external library linked PUBLIC: the check did not fail as it should (rc ${rc}):\n${out}")
endif()
message(STATUS "external library linked PUBLIC: refused")
file(REMOVE_RECURSE ${WORK})
