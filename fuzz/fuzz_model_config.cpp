// libFuzzer target: config.pbtxt (protobuf text format, Triton's model_config.proto) parsed,
// completed and validated against a fixed model signature.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = ferry::serve::parse_model_config(std::string_view(reinterpret_cast<const char*>(data), size), "config.pbtxt");
  if (!parsed.is_ok()) return 0;
  using ferry::Dim;
  using ferry::DType;
  ferry::ValueInfo x{"x", {DType::kF32, ferry::Shape({Dim::symbolic("N"), Dim(4)})}};
  ferry::ValueInfo y{"y", {DType::kF32, ferry::Shape({Dim::symbolic("N"), Dim(4)})}};
  std::vector<std::string> warnings;
  auto config = parsed.value().config;
  (void)ferry::serve::complete_and_validate(&config, {x}, {y}, {}, "m", &warnings);
  auto geared = parsed.value().config;
  (void)ferry::serve::complete_and_validate(&geared, {x}, {y}, {1, 4}, "m", &warnings);
  (void)ferry::serve::config_to_json(config);
  return 0;
}
