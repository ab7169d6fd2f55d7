// KServe v2 JSON encoding with rapidjson's writer: inference responses (JSON tensors and the binary
// tensor data extension), errors, server / model metadata, statistics and the repository index. The
// decoding (simdjson's DOM for inference requests, rapidjson for the small ones) and the tensor checks
// both protocols share are in kserve_json.cpp; see kserve_json.h.
#define RAPIDJSON_HAS_STDSTRING 1
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "serve/kserve_json.h"

namespace ferry::serve {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

namespace {

void write_float(Writer& w, double x, bool single) {
  if (!std::isfinite(x)) {
    const char* s = std::isnan(x) ? "NaN" : (x > 0 ? "Infinity" : "-Infinity");
    w.RawValue(s, std::strlen(s), rapidjson::kNumberType);
    return;
  }
  char buf[40];
  auto r = single ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(x)) : std::to_chars(buf, buf + sizeof(buf), x);
  w.RawValue(buf, static_cast<size_t>(r.ptr - buf), rapidjson::kNumberType);
}

void write_data(Writer& w, const Tensor& t) {
  const int64_t n = t.numel();
  w.StartArray();
  switch (t.dtype()) {
    case DType::kF32: for (int64_t i = 0; i < n; ++i) write_float(w, t.data<float>()[i], true); break;
    case DType::kF64: for (int64_t i = 0; i < n; ++i) write_float(w, t.data<double>()[i], false); break;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) write_float(w, f16_to_f32(t.data<uint16_t>()[i]), true); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) write_float(w, bf16_to_f32(t.data<uint16_t>()[i]), true); break;
    case DType::kBool: for (int64_t i = 0; i < n; ++i) w.Bool(t.data<bool>()[i]); break;
    case DType::kI8: for (int64_t i = 0; i < n; ++i) w.Int(t.data<int8_t>()[i]); break;
    case DType::kI16: for (int64_t i = 0; i < n; ++i) w.Int(t.data<int16_t>()[i]); break;
    case DType::kI32: for (int64_t i = 0; i < n; ++i) w.Int(t.data<int32_t>()[i]); break;
    case DType::kI64: for (int64_t i = 0; i < n; ++i) w.Int64(t.data<int64_t>()[i]); break;
    case DType::kU8: for (int64_t i = 0; i < n; ++i) w.Uint(t.data<uint8_t>()[i]); break;
    case DType::kU16: for (int64_t i = 0; i < n; ++i) w.Uint(t.data<uint16_t>()[i]); break;
    case DType::kU32: for (int64_t i = 0; i < n; ++i) w.Uint(t.data<uint32_t>()[i]); break;
    case DType::kU64: for (int64_t i = 0; i < n; ++i) w.Uint64(t.data<uint64_t>()[i]); break;
    case DType::kString:
      for (const std::string& x : t.strings()) w.String(x.data(), static_cast<rapidjson::SizeType>(x.size()));
      break;
    default: break;
  }
  w.EndArray();
}

void write_dims(Writer& w, const std::vector<int64_t>& dims) {
  w.StartArray();
  for (int64_t d : dims) w.Int64(d);
  w.EndArray();
}

void write_count_ns(Writer& w, const char* key, uint64_t count, uint64_t ns) {
  w.Key(key);
  w.StartObject();
  w.Key("count");
  w.Uint64(count);
  w.Key("ns");
  w.Uint64(ns);
  w.EndObject();
}

}  // namespace

EncodedResponse encode_infer_response(const ModelSignature& sig, const DecodedInfer& req, const TensorList& outputs) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  w.Key("model_name");
  w.String(sig.name);
  w.Key("model_version");
  w.String(std::to_string(sig.version));
  if (!req.request.id.empty()) {
    w.Key("id");
    w.String(req.request.id);
  }
  w.Key("outputs");
  w.StartArray();
  std::vector<const Tensor*> binary;
  std::deque<Tensor> classified;  // pointers into it stay valid as it grows
  for (const RequestedOutput& r : req.outputs) {
    const Tensor* t = nullptr;
    for (const auto& [n, x] : outputs)
      if (n == r.name) t = &x;
    if (!t) continue;
    if (r.classification > 0) {
      auto c = classify(*t, r.classification, sig.max_batch > 0, output_labels(sig, r.name));
      if (!c.is_ok()) continue;  // cannot fail: the strings tensor is no larger than the output
      classified.push_back(std::move(c).value());
      t = &classified.back();
    }
    w.StartObject();
    w.Key("name");
    w.String(r.name);
    w.Key("datatype");
    w.String(kserve_dtype_name(t->dtype()));
    w.Key("shape");
    write_dims(w, t->dims());
    if (r.shm) {  // written into the region (write_shm_outputs): where, not the data
      w.Key("parameters");
      w.StartObject();
      w.Key("shared_memory_region");
      w.String(r.shm->region->name());
      w.Key("shared_memory_byte_size");
      w.Uint64(r.shm->byte_size);
      if (r.shm->offset > 0) {
        w.Key("shared_memory_offset");
        w.Uint64(r.shm->offset);
      }
      w.EndObject();
    } else if (r.binary) {
      w.Key("parameters");
      w.StartObject();
      w.Key("binary_data_size");
      w.Int64(t->dtype() == DType::kString ? bytes_tensor_size(*t) : t->nbytes());
      w.EndObject();
      binary.push_back(t);
    } else {
      w.Key("data");
      write_data(w, *t);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  EncodedResponse out;
  if (binary.empty()) {
    out.body.assign(sb.GetString(), sb.GetSize());
    return out;
  }
  size_t total = sb.GetSize();
  for (const Tensor* t : binary) total += static_cast<size_t>(t->dtype() == DType::kString ? bytes_tensor_size(*t) : t->nbytes());
  out.body.reserve(total);
  out.body.assign(sb.GetString(), sb.GetSize());
  out.json_size = static_cast<int64_t>(sb.GetSize());
  for (const Tensor* t : binary) {
    if (t->dtype() == DType::kString) append_bytes_tensor(*t, &out.body);
    else out.body.append(static_cast<const char*>(t->raw()), static_cast<size_t>(t->nbytes()));
  }
  return out;
}

std::string error_json(std::string_view message) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  w.Key("error");
  w.String(message.data(), static_cast<rapidjson::SizeType>(message.size()));
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

std::string server_metadata_json(std::string_view version) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  w.Key("name");
  w.String("ferry");
  w.Key("version");
  w.String(version.data(), static_cast<rapidjson::SizeType>(version.size()));
  w.Key("extensions");
  w.StartArray();
  for (const char* e : {"binary_tensor_data", "classification", "model_repository", "model_configuration", "statistics", "parameters",
                        "system_shared_memory", "logging", "trace"})
    w.String(e);
  w.EndArray();
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

std::string model_metadata_json(const ModelSignature& model, const std::vector<int64_t>& versions) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  const int32_t mbs = model.max_batch;
  w.StartObject();
  w.Key("name");
  w.String(model.name);
  w.Key("versions");
  w.StartArray();
  for (int64_t v : versions) w.String(std::to_string(v));
  w.EndArray();
  w.Key("platform");
  w.String(model.platform);
  for (int k = 0; k < 2; ++k) {
    w.Key(k == 0 ? "inputs" : "outputs");
    w.StartArray();
    for (const TensorSpec& s : k == 0 ? model.inputs : model.outputs) {
      w.StartObject();
      w.Key("name");
      w.String(s.name);
      w.Key("datatype");
      w.String(kserve_dtype_name(s.dtype));
      w.Key("shape");
      write_dims(w, protocol_dims(s, mbs));
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

std::string model_stats_json(const std::vector<StatsView>& models) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  w.Key("model_stats");
  w.StartArray();
  for (const auto& m : models) {
    const ModelStats& s = *m.stats;
    auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    w.StartObject();
    w.Key("name");
    w.String(m.name);
    w.Key("version");
    w.String(std::to_string(m.version));
    w.Key("last_inference");
    w.Uint64(ld(s.last_inference_ms));
    w.Key("inference_count");
    w.Uint64(ld(s.inference_count));
    w.Key("execution_count");
    w.Uint64(ld(s.execution_count));
    w.Key("inference_stats");
    w.StartObject();
    const uint64_t ran = ld(s.queue_count);
    write_count_ns(w, "success", ld(s.success_count), ld(s.success_ns));
    write_count_ns(w, "fail", ld(s.fail_count), ld(s.fail_ns));
    write_count_ns(w, "queue", ran, ld(s.queue_ns));
    write_count_ns(w, "compute_input", ran, ld(s.compute_input_ns));
    write_count_ns(w, "compute_infer", ran, ld(s.compute_infer_ns));
    write_count_ns(w, "compute_output", ran, ld(s.compute_output_ns));
    write_count_ns(w, "cache_hit", 0, 0);
    write_count_ns(w, "cache_miss", 0, 0);
    w.EndObject();
    w.Key("batch_stats");
    w.StartArray();
    for (int64_t b = 1; b <= s.max_batch; ++b) {
      const uint64_t c = ld(s.batch_count[b]);
      if (c == 0) continue;
      w.StartObject();
      w.Key("batch_size");
      w.Int64(b);
      write_count_ns(w, "compute_infer", c, ld(s.batch_ns[b]));
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

std::string repository_index_json(const std::vector<IndexEntry>& entries) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartArray();
  for (const IndexEntry& e : entries) {
    w.StartObject();
    w.Key("name");
    w.String(e.name);
    if (!e.version.empty()) {
      w.Key("version");
      w.String(e.version);
    }
    w.Key("state");
    w.String(e.state);
    if (!e.reason.empty()) {
      w.Key("reason");
      w.String(e.reason);
    }
    w.EndObject();
  }
  w.EndArray();
  return std::string(sb.GetString(), sb.GetSize());
}

}  // namespace ferry::serve
