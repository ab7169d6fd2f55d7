// libFuzzer target: ONNX TensorProto (.pb) inputs as `ferry run` reads them.
#include <cstddef>
#include <cstdint>

#include "onnx/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)ferry::parse_tensor_pb(data, size, "fuzz input");
  return 0;
}
