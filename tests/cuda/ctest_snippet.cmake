# GPU-only tests (docs/cuda.md), include()d from tests/CMakeLists.txt after the conformance and
# zoo tests. Each runs through gpu_gate.sh: on a machine without a usable GPU it exits 77 and ctest
# reports it as skipped, with the reason in its output. The CUDA unit tests are gtest cases in
# ferry_unit_tests (tests/unit/test_cuda_*.cpp) that GTEST_SKIP without a GPU.

# The GPU benchmark's runner (bench/gpu_bench.py): times Executor::run on any device.
add_executable(ferry_device_bench ${CMAKE_CURRENT_LIST_DIR}/device_bench.cpp)
target_link_libraries(ferry_device_bench PRIVATE ferry_runtime ferry_onnx ferry_io Threads::Threads)

if(NOT FERRY_CUDA)
  return()
endif()
set(FERRY_GPU_GATE ${CMAKE_CURRENT_LIST_DIR}/gpu_gate.sh $<TARGET_FILE:ferry_cuda_probe>)

add_test(NAME cuda_device_present COMMAND ${FERRY_GPU_GATE} true)
set_tests_properties(cuda_device_present PROPERTIES LABELS "cuda" SKIP_RETURN_CODE 77 TIMEOUT 60)

# The ONNX node suite on the GPU (shares cpu-ref's exclusion list unless filters.jsonc has a "cuda" one).
add_test(NAME onnx_node_suite_cuda
         COMMAND ${FERRY_GPU_GATE} $<TARGET_FILE:ferry_node_tests> ${CMAKE_BINARY_DIR}/onnx_node_suite
                 ${CMAKE_CURRENT_SOURCE_DIR}/conformance/filters.jsonc --device cuda)
set_tests_properties(onnx_node_suite_cuda PROPERTIES FIXTURES_REQUIRED onnx_node_suite LABELS "conformance;cuda"
                     SKIP_RETURN_CODE 77 TIMEOUT 3600)

# Zoo cases on the GPU against PyTorch (the fidelity criteria of tests/zoo/README.md).
set(FERRY_CUDA_ZOO_CASES resnet50_op17 mobilenet_v2_op13 bert_small_dynamic_op17_b3_s64 unet_op17 fpn_det_op17
                         resnet18_dynbatch_op13_b8)
foreach(case IN LISTS FERRY_CUDA_ZOO_CASES)
  add_test(NAME zoo_cuda_${case}
           COMMAND ${FERRY_GPU_GATE} ${CMAKE_CURRENT_SOURCE_DIR}/zoo/run_fidelity.sh $<TARGET_FILE:ferry>
                   ${CMAKE_BINARY_DIR}/zoo_models --device cuda ${case})
  set_tests_properties(zoo_cuda_${case} PROPERTIES FIXTURES_REQUIRED zoo_models LABELS "zoo;cuda" SKIP_RETURN_CODE 77
                       TIMEOUT 600 ENVIRONMENT "PYTHON=${FERRY_PYTHON}")
endforeach()
