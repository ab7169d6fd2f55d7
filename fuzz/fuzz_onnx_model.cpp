// libFuzzer target: ONNX model bytes -> import (validation, limits, shape inference) -> the
// optimization pipeline at level 2. Every input must end in a Status, never a crash, a hang or
// unbounded memory. Seeds: the conformance suite's and the zoo's models (fuzz/seed_corpus.sh).
#include <cstddef>
#include <cstdint>

#include "onnx/onnx_import.h"
#include "passes/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry::ImportOptions options;
  options.max_weight_bytes = int64_t(1) << 26;  // keep one input's memory bounded under ASan
  auto model = ferry::parse_onnx_model(data, size, "", "fuzz input", options);
  if (!model.is_ok()) return 0;
  std::shared_ptr<ferry::Model> copy = model.value()->clone();
  ferry::OptimizeOptions oo;
  oo.opt_level = 2;
  (void)ferry::optimize_model(copy.get(), oo);
  return 0;
}
