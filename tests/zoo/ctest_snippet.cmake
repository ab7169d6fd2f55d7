# Model zoo: ferry vs PyTorch on real architectures (tests/zoo/README.md).
#
# include()d from tests/CMakeLists.txt (after FERRY_PYTHON is set):
#     include(${CMAKE_CURRENT_SOURCE_DIR}/zoo/ctest_snippet.cmake)
# Needs the `ferry` target.  Labels: every test has "zoo"; the cases whose generation is
# slow (ViT-B/16, the BERT encoder, ConvNeXt-T: about 6 of the zoo's CPU-minutes) also have
# "zoo_slow" and their own generation fixture, so `ctest -L zoo -LE zoo_slow` skips their
# export.  All of them run in `make test`.

if(NOT DEFINED FERRY_PYTHON)
  set(FERRY_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with numpy, onnx and torch (Debian's)")
endif()
# Where generated models go; the sanitizer build points this at the main build's folder so
# the zoo is exported once.
set(FERRY_ZOO_DIR ${CMAKE_BINARY_DIR}/zoo_models CACHE PATH "Folder of generated zoo models")
set(FERRY_ZOO_SRC ${CMAKE_CURRENT_LIST_DIR})

# Must equal `gen_zoo.py --list-cases` (the test zoo_case_list_current checks it).
set(FERRY_ZOO_CASES
    resnet50_op13 resnet50_op17 mobilenet_v2_op13 mobilenet_v2_op17
    mobilenet_v3_large_op13 mobilenet_v3_large_op17 efficientnet_b0_op13 efficientnet_b0_op17
    vit_b_16_op13 vit_b_16_op17 bert_encoder_op13 bert_encoder_op17
    bert_small_dynamic_op17_b1_s128 bert_small_dynamic_op17_b3_s64 bert_small_dynamic_op17_b4_s37
    bilstm_op13 bilstm_op17 gru_op13 gru_op17
    unet_op13 unet_op17 unet_dynbatch_op17_b1 unet_dynbatch_op17_b3 unet_dynbatch_op17_b8
    fpn_det_op13 fpn_det_op17
    fpn_det_dynamic_op17_b1_192x256 fpn_det_dynamic_op17_b3_128x160 fpn_det_dynamic_op17_b2_320x224
    resnet18_dynbatch_op13_b1 resnet18_dynbatch_op13_b3 resnet18_dynbatch_op13_b8
    densenet121_op13 densenet121_op17 squeezenet1_1_op13 squeezenet1_1_op17
    shufflenet_v2_x1_0_op13 shufflenet_v2_x1_0_op17 convnext_tiny_op13 convnext_tiny_op17)
# The exports tagged "slow" in gen_zoo.py (`gen_zoo.py --list-cases --tags slow`).
set(FERRY_ZOO_SLOW_CASES
    vit_b_16_op13 vit_b_16_op17 bert_encoder_op13 bert_encoder_op17 convnext_tiny_op13 convnext_tiny_op17)

string(REPLACE ";" "," _ferry_zoo_cases_csv "${FERRY_ZOO_CASES}")
add_test(NAME zoo_case_list_current
         COMMAND ${FERRY_PYTHON} ${FERRY_ZOO_SRC}/gen_zoo.py --check-cases ${_ferry_zoo_cases_csv})
set_tests_properties(zoo_case_list_current PROPERTIES LABELS "zoo" TIMEOUT 120)

# Generation (incremental: a rerun skips complete cases).  About 5 CPU-minutes and
# 1.7 GB for the whole zoo; the fast part is about 2 CPU-minutes.
add_test(NAME zoo_generate
         COMMAND ${FERRY_PYTHON} ${FERRY_ZOO_SRC}/gen_zoo.py --out ${FERRY_ZOO_DIR} --threads 2 --exclude-tags slow)
set_tests_properties(zoo_generate PROPERTIES FIXTURES_SETUP zoo_models LABELS "zoo" TIMEOUT 1800)
add_test(NAME zoo_generate_slow
         COMMAND ${FERRY_PYTHON} ${FERRY_ZOO_SRC}/gen_zoo.py --out ${FERRY_ZOO_DIR} --threads 2 --tags slow)
set_tests_properties(zoo_generate_slow PROPERTIES FIXTURES_SETUP zoo_models_slow LABELS "zoo;zoo_slow"
                     TIMEOUT 2400)

# One test per case: ferry run + the fidelity criteria (cosine >= 1-1e-9, max abs err <= 1e-4 max|ref|),
# on the optimized backend at its default -O2 (fusions, NHWC layout, oneDNN kernels) — the same
# criteria the reference backend meets (docs/fidelity.md).
foreach(case IN LISTS FERRY_ZOO_CASES)
  add_test(NAME zoo_${case}
           COMMAND ${FERRY_ZOO_SRC}/run_fidelity.sh $<TARGET_FILE:ferry> ${FERRY_ZOO_DIR} ${case} --device cpu)
  if(case IN_LIST FERRY_ZOO_SLOW_CASES)
    set_tests_properties(zoo_${case} PROPERTIES FIXTURES_REQUIRED zoo_models_slow LABELS "zoo;zoo_slow"
                         TIMEOUT 900 ENVIRONMENT "PYTHON=${FERRY_PYTHON}")
  else()
    set_tests_properties(zoo_${case} PROPERTIES FIXTURES_REQUIRED zoo_models LABELS "zoo"
                         TIMEOUT 600 ENVIRONMENT "PYTHON=${FERRY_PYTHON}")
  endif()
endforeach()

# A static 1x3x224x224 model fed 1x3x256x256 fails (exit 2) naming the input and both shapes;
# dynamic-batch models run at batch sizes never exported (5, 12) and match the references.
add_test(NAME zoo_input_shapes
         COMMAND ${FERRY_PYTHON} ${FERRY_ZOO_SRC}/check_input_shapes.py $<TARGET_FILE:ferry> ${FERRY_ZOO_DIR})
set_tests_properties(zoo_input_shapes PROPERTIES FIXTURES_REQUIRED zoo_models LABELS "zoo" TIMEOUT 600)

# A small, fast subset also runs in the sanitizer build (`make test-asan` selects label "asan").
foreach(case squeezenet1_1_op13 mobilenet_v2_op17 gru_op13 resnet18_dynbatch_op13_b3 fpn_det_op17
             bert_small_dynamic_op17_b4_s37 unet_dynbatch_op17_b1)
  set_property(TEST zoo_${case} APPEND PROPERTY LABELS asan)
endforeach()
