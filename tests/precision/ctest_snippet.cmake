# Precision modes and `ferry compare` through the CLI (tests/precision/precision_cli_test.py).
# include()d at the end of tests/CMakeLists.txt (after the zoo snippet: uses FERRY_ZOO_DIR).
set(_ferry_precision_test ${CMAKE_CURRENT_LIST_DIR}/precision_cli_test.py)

# A model built to overflow in fp16 (x30000 before LayerNorm): the first diverging node is named,
# --fix writes a config that passes, and the config is applied and checked.
add_test(NAME precision_overflow_fix
         COMMAND ${FERRY_PYTHON} ${_ferry_precision_test} $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/precision_test overflow)
# The demo CNN: fp16 and bf16 against cpu-ref fp32, per layer, over 32 seeded inputs, HTML report.
add_test(NAME precision_demo_dataset
         COMMAND ${FERRY_PYTHON} ${_ferry_precision_test} $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/precision_test dataset
                 ${PROJECT_SOURCE_DIR}/demo/digits_cnn.onnx)
set_tests_properties(precision_overflow_fix precision_demo_dataset PROPERTIES LABELS "precision" TIMEOUT 300)
# A zoo classifier (SqueezeNet 1.1): the same over 32 seeded 224x224 inputs.
add_test(NAME precision_zoo_squeezenet
         COMMAND ${FERRY_PYTHON} ${_ferry_precision_test} $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/precision_test zoo
                 ${FERRY_ZOO_DIR}/squeezenet1_1_op13)
set_tests_properties(precision_zoo_squeezenet PROPERTIES FIXTURES_REQUIRED zoo_models LABELS "precision;zoo" TIMEOUT 900)
