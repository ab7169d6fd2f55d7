// libFuzzer target: the KServe v2 inference request decoder of `ferry serve` (JSON tensors, nested
// data, the binary tensor data extension, BYTES elements length-prefixed or as JSON strings)
// against fixed model signatures, the response encoder on what decodes, and the repository
// index / load request bodies.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/kserve_json.h"

namespace {

const ferry::serve::ModelSignature& signature() {
  static const ferry::serve::ModelSignature sig = [] {
    ferry::serve::ModelSignature s;
    s.name = "m";
    s.max_batch = 8;
    s.inputs = {{"x", ferry::DType::kF32, {4}}, {"ids", ferry::DType::kI64, {-1}}, {"mask", ferry::DType::kBool, {2, 2}},
                {"h", ferry::DType::kF16, {3}}, {"u", ferry::DType::kU8, {-1, 2}}};
    s.outputs = {{"y", ferry::DType::kF32, {4}}};
    return s;
  }();
  return sig;
}

// A model of one BYTES input and output (their elements are strings: another decoding path).
const ferry::serve::ModelSignature& bytes_signature() {
  static const ferry::serve::ModelSignature sig = [] {
    ferry::serve::ModelSignature s;
    s.name = "b";
    s.max_batch = 8;
    s.inputs = {{"s", ferry::DType::kString, {-1}}};
    s.outputs = {{"t", ferry::DType::kString, {-1}}};
    return s;
  }();
  return sig;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto all_json = ferry::serve::decode_infer_request(body, -1, signature());
  if (all_json.is_ok()) {
    ferry::serve::TensorList outs;
    for (const auto& [n, t] : all_json.value().request.inputs)
      if (n == "x") outs.emplace_back("y", t);
    (void)ferry::serve::encode_infer_response(signature(), all_json.value(), outs);
  }
  // The same bytes with a binary section: the JSON header ends at the first newline.
  const size_t nl = body.find('\n');
  if (nl != std::string_view::npos) (void)ferry::serve::decode_infer_request(body, static_cast<int64_t>(nl), signature());
  auto strings = ferry::serve::decode_infer_request(body, -1, bytes_signature());
  if (strings.is_ok()) {
    ferry::serve::TensorList outs;
    for (const auto& [n, t] : strings.value().request.inputs) outs.emplace_back("t", t);
    (void)ferry::serve::encode_infer_response(bytes_signature(), strings.value(), outs);
  }
  if (nl != std::string_view::npos) (void)ferry::serve::decode_infer_request(body, static_cast<int64_t>(nl), bytes_signature());
  (void)ferry::serve::parse_index_request(body);
  (void)ferry::serve::check_load_request(body);
  return 0;
}
