# `ferry quantize` through the CLI (tests/quant/check_quantize.py): generated small models quantized,
# the QDQ file's structure, int8 vs float outputs run by ferry, --keep-fp32, --target-cosine,
# ferry compare --ref-model, bad inputs. include()d from tests/CMakeLists.txt.
add_test(NAME quantize_cli
         COMMAND ${FERRY_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_quantize.py $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/quantize_check)
set_tests_properties(quantize_cli PROPERTIES LABELS "e2e;quant" TIMEOUT 120)
# --bias-correction on a tiny conv model whose int8 rounding shifts each channel's mean
# (tests/quant/check_bias_correction.py): the held-out cosine rises, the QDQ structure is the same.
add_test(NAME quantize_bias_correction
         COMMAND ${FERRY_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_bias_correction.py $<TARGET_FILE:ferry>
                 ${CMAKE_BINARY_DIR}/quantize_bias_check)
set_tests_properties(quantize_bias_correction PROPERTIES LABELS "e2e;quant" TIMEOUT 60)
# --weight-rounding gptq on a tiny model with correlated inputs (tests/quant/check_gptq.py): the
# held-out cosine rises, the QDQ structure is the same, only int8 weight values change.
add_test(NAME quantize_gptq
         COMMAND ${FERRY_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_gptq.py $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/quantize_gptq_check)
set_tests_properties(quantize_gptq PROPERTIES LABELS "e2e;quant" TIMEOUT 60)
# Never below plain MinMax (tests/quant/check_baseline.py): on a small SiLU + squeeze-excitation
# model, `ferry quantize` with no flags reaches the held-out cosine of bench/int8_baseline.py's plain
# MinMax file (uint8 Q/DQ on Conv/Gemm inputs only) on the same seeded data (ferry's reference kernels).
add_test(NAME quantize_plain_floor
         COMMAND ${FERRY_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_baseline.py $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/quantize_plain_floor)
set_tests_properties(quantize_plain_floor PROPERTIES LABELS "e2e;quant" TIMEOUT 120)
# --reduce-range (tests/quant/check_reduce_range.py): 7-bit weights ([-64, 64]) on the group-1 Conv and
# MatMul weights, the depthwise one 8-bit, --no-reduce-range 8-bit, the default's choice by its rule.
add_test(NAME quantize_reduce_range
         COMMAND ${FERRY_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_reduce_range.py $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/quantize_reduce_range)
set_tests_properties(quantize_reduce_range PROPERTIES LABELS "e2e;quant" TIMEOUT 60)
# The int8 cpu kernels against the reference kernels on a whole model (tests/quant/check_int8_cpu_exact.py):
# a small MobileNetV2 (stem, depthwise 3x3s of stride 1 and 2, expansions, projections, a residual Add)
# quantized by `ferry quantize` (the default and --no-plain-floor files), `ferry run -d cpu` at 1 and 2
# threads byte for byte `ferry run -d cpu-ref -O 2`.
add_test(NAME quantize_int8_cpu_exact
         COMMAND ${FERRY_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_int8_cpu_exact.py $<TARGET_FILE:ferry> ${CMAKE_BINARY_DIR}/quantize_int8_cpu_exact)
set_tests_properties(quantize_int8_cpu_exact PROPERTIES LABELS "e2e;quant" TIMEOUT 60)
