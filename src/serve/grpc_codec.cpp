// See grpc_codec.h.
#include "serve/grpc_codec.h"

#include <climits>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "serve/kserve_json.h"

namespace ferry::serve {

namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;

// The contents field a datatype's values travel in, for the error messages.
const char* contents_field(DType dt) {
  switch (dt) {
    case DType::kBool: return "bool_contents";
    case DType::kI8: case DType::kI16: case DType::kI32: return "int_contents";
    case DType::kI64: return "int64_contents";
    case DType::kU8: case DType::kU16: case DType::kU32: return "uint_contents";
    case DType::kU64: return "uint64_contents";
    case DType::kF32: return "fp32_contents";
    case DType::kF64: return "fp64_contents";
    case DType::kString: return "bytes_contents";
    default: return nullptr;
  }
}

template <typename Dst, typename Src>
Status copy_values(const google::protobuf::RepeatedField<Src>& src, Tensor* t, const std::string& what, int64_t count) {
  const DType dt = t->dtype();
  if (src.size() != count)
    return invalid_argument(what + ": " + std::to_string(src.size()) + " values given in contents." + contents_field(dt) + " but shape " +
                            dims_to_string(t->dims()) + " needs " + std::to_string(count));
  Dst* d = static_cast<Dst*>(t->mutable_raw());
  for (int64_t i = 0; i < count; ++i) {
    const Src v = src[static_cast<int>(i)];
    if constexpr (std::is_integral_v<Dst> && !std::is_same_v<Dst, bool>) {
      if (static_cast<Src>(static_cast<Dst>(v)) != v)
        return invalid_argument(what + ": value " + std::to_string(i) + " (" + std::to_string(v) + ") is not a " +
                                kserve_dtype_name(dt) + " value");
    }
    d[i] = static_cast<Dst>(v);
  }
  return Status::ok();
}

// The typed contents of one input into `t` (already sized): the field that matches the datatype,
// and no other.
Status fill_from_contents(const inference::InferTensorContents& c, Tensor* t, const std::string& what, int64_t count) {
  const DType dt = t->dtype();
  const char* field = contents_field(dt);
  if (!field) {
    return invalid_argument(what + ": " + kserve_dtype_name(dt) +
                            " values travel only in raw_input_contents (InferTensorContents has no field for them)");
  }
  const std::pair<const char*, int> sizes[] = {
      {"bool_contents", c.bool_contents_size()},   {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()}, {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()}, {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},   {"bytes_contents", c.bytes_contents_size()}};
  for (const auto& [name, n] : sizes)
    if (n > 0 && std::strcmp(name, field) != 0)
      return invalid_argument(what + ": contents." + name + " is set but " + kserve_dtype_name(dt) + " values go in contents." + field);
  switch (dt) {
    case DType::kBool: return copy_values<bool>(c.bool_contents(), t, what, count);
    case DType::kI8: return copy_values<int8_t>(c.int_contents(), t, what, count);
    case DType::kI16: return copy_values<int16_t>(c.int_contents(), t, what, count);
    case DType::kI32: return copy_values<int32_t>(c.int_contents(), t, what, count);
    case DType::kI64: return copy_values<int64_t>(c.int64_contents(), t, what, count);
    case DType::kU8: return copy_values<uint8_t>(c.uint_contents(), t, what, count);
    case DType::kU16: return copy_values<uint16_t>(c.uint_contents(), t, what, count);
    case DType::kU32: return copy_values<uint32_t>(c.uint_contents(), t, what, count);
    case DType::kU64: return copy_values<uint64_t>(c.uint64_contents(), t, what, count);
    case DType::kF32: return copy_values<float>(c.fp32_contents(), t, what, count);
    case DType::kF64: return copy_values<double>(c.fp64_contents(), t, what, count);
    case DType::kString:
      if (c.bytes_contents_size() != count)
        return invalid_argument(what + ": " + std::to_string(c.bytes_contents_size()) + " values given in contents.bytes_contents but shape " +
                                dims_to_string(t->dims()) + " needs " + std::to_string(count));
      for (int64_t i = 0; i < count; ++i) t->mutable_strings()[static_cast<size_t>(i)] = c.bytes_contents(static_cast<int>(i));
      return Status::ok();
    default: return invalid_argument(what + ": datatype " + kserve_dtype_name(dt) + " is not supported");
  }
}

// A tensor's shared-memory parameters (shared_memory_region: string; _offset, _byte_size: int64 or uint64).
Status read_shm_params(const google::protobuf::Map<std::string, inference::InferParameter>& params, const std::string& what, ShmParams* out) {
  for (const auto& [key, p] : params) {
    if (key == "shared_memory_region") {
      if (p.parameter_choice_case() != inference::InferParameter::kStringParam)
        return invalid_argument(what + ": parameter 'shared_memory_region' is not a string_param");
      out->region = p.string_param();
    } else if (key == "shared_memory_offset" || key == "shared_memory_byte_size") {
      std::optional<uint64_t>& field = key == "shared_memory_offset" ? out->offset : out->byte_size;
      if (p.parameter_choice_case() == inference::InferParameter::kInt64Param && p.int64_param() >= 0)
        field = static_cast<uint64_t>(p.int64_param());
      else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param)
        field = p.uint64_param();
      else
        return invalid_argument(what + ": parameter '" + key + "' is not a non-negative int64_param");
    }
  }
  return Status::ok();
}

void fill_duration(inference::StatisticDuration* d, uint64_t count, uint64_t ns) {
  d->set_count(count);
  d->set_ns(ns);
}

}  // namespace

StatusOr<GrpcDecoded> decode_request(const ModelInferRequest& r, const ModelSignature& sig, const SharedMemoryRegistry* shm) {
  GrpcDecoded out;
  out.request.id = r.id();
  for (const auto& [key, p] : r.parameters()) {
    if (key != "timeout") continue;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param && p.int64_param() >= 0)
      out.request.timeout_us = static_cast<uint64_t>(p.int64_param());
    else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param)
      out.request.timeout_us = p.uint64_param();
    else
      return invalid_argument("parameter 'timeout' is not a non-negative integer (microseconds)");
  }
  // raw_input_contents: one per input that is not in shared memory, in the order of 'inputs' (Triton's rule).
  std::vector<ShmParams> shm_params(static_cast<size_t>(r.inputs_size()));
  int in_request = 0;
  for (int i = 0; i < r.inputs_size(); ++i) {
    RETURN_IF_ERROR(read_shm_params(r.inputs(i).parameters(), "input '" + r.inputs(i).name() + "'", &shm_params[static_cast<size_t>(i)]));
    if (!shm_params[static_cast<size_t>(i)].any()) ++in_request;
  }
  const bool raw = r.raw_input_contents_size() > 0;
  if (raw && r.raw_input_contents_size() != in_request)
    return invalid_argument("the request has " + std::to_string(r.raw_input_contents_size()) + " raw_input_contents for " +
                            std::to_string(in_request) + " inputs" + (in_request < r.inputs_size() ? " not in shared memory" : "") +
                            "; give one per input, in the order of 'inputs'");
  int64_t batch = -1;
  std::string batch_from;
  int raw_index = 0;
  for (int i = 0; i < r.inputs_size(); ++i) {
    const auto& in = r.inputs(i);
    const std::string what = "input '" + in.name() + "'";
    if (in.shape_size() > kMaxRank) return invalid_argument(what + ": shape has more than 64 dims");
    std::vector<int64_t> dims;
    for (int64_t d : in.shape()) {
      if (d < 0) return invalid_argument(what + ": shape entries are integers >= 0");
      dims.push_back(d);
    }
    ASSIGN_OR_RETURN(const TensorSpec* spec, check_input(sig, in.name(), in.datatype(), dims, out.request.inputs, &batch, &batch_from));
    ASSIGN_OR_RETURN(int64_t count, checked_element_count(dims, what));
    const int64_t nbytes = count * dtype_size(spec->dtype);
    if (shm_params[static_cast<size_t>(i)].any()) {  // the shared-memory extension
      if (in.has_contents()) return invalid_argument(what + " has shared-memory parameters and also 'contents'; give one");
      ASSIGN_OR_RETURN(std::optional<ShmSlice> slice, resolve_shm(shm, shm_params[static_cast<size_t>(i)], what));
      ASSIGN_OR_RETURN(Tensor t, shm_input_tensor(*slice, spec->dtype, dims, what));
      out.request.inputs.emplace_back(in.name(), std::move(t));
      continue;
    }
    if (raw) {
      if (in.has_contents())
        return invalid_argument(what + " has 'contents' but the request uses raw_input_contents; give every input in one form");
      const int ri = raw_index++;
      const std::string& bytes = r.raw_input_contents(ri);
      if (spec->dtype == DType::kString) {  // 4-byte little-endian length + bytes per element, as Triton
        ASSIGN_OR_RETURN(Tensor t, decode_bytes_tensor(bytes, dims, what + " (raw_input_contents[" + std::to_string(ri) + "])"));
        out.request.inputs.emplace_back(in.name(), std::move(t));
        continue;
      }
      if (static_cast<int64_t>(bytes.size()) != nbytes)
        return invalid_argument(what + ": raw_input_contents[" + std::to_string(ri) + "] has " + std::to_string(bytes.size()) +
                                " bytes but shape " + dims_to_string(dims) + " of " + in.datatype() + " needs " + std::to_string(nbytes));
      ASSIGN_OR_RETURN(Tensor t, copy_input_tensor(spec->dtype, std::move(dims), bytes.data(), what));
      out.request.inputs.emplace_back(in.name(), std::move(t));
      continue;
    }
    if (!in.has_contents())
      return invalid_argument(what + " has no 'contents' and the request has no raw_input_contents");
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(spec->dtype, std::move(dims), what));
    RETURN_IF_ERROR(fill_from_contents(in.contents(), &t, what, count));
    out.request.inputs.emplace_back(in.name(), std::move(t));
  }
  RETURN_IF_ERROR(check_inputs_complete(sig, out.request.inputs));
  out.request.batch = batch > 0 ? batch : 1;
  for (const auto& o : r.outputs()) {
    RETURN_IF_ERROR(check_output_name(sig, o.name()));
    RequestedOutput req{o.name()};
    for (const auto& [key, p] : o.parameters()) {
      if (key != "classification") continue;
      if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) req.classification = p.int64_param();
      else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param && p.uint64_param() <= uint64_t(INT64_MAX))
        req.classification = static_cast<int64_t>(p.uint64_param());
      else return invalid_argument("output '" + o.name() + "': parameter 'classification' is not an integer");
      RETURN_IF_ERROR(check_classification(sig, o.name(), req.classification));
    }
    ShmParams sp;
    RETURN_IF_ERROR(read_shm_params(o.parameters(), "output '" + o.name() + "'", &sp));
    ASSIGN_OR_RETURN(req.shm, resolve_shm(shm, sp, "output '" + o.name() + "'"));
    out.outputs.push_back(std::move(req));
  }
  if (out.outputs.empty())
    for (const TensorSpec& s : sig.outputs) out.outputs.push_back({s.name});
  RETURN_IF_ERROR(check_shm_outputs(sig, out.outputs, out.request.batch));
  return out;
}

void encode_response(const ModelSignature& sig, const std::string& id, const std::vector<RequestedOutput>& names, const TensorList& outputs,
                     ModelInferResponse* resp) {
  resp->set_model_name(sig.name);
  resp->set_model_version(std::to_string(sig.version));
  resp->set_id(id);
  for (const RequestedOutput& req : names) {
    const std::string& name = req.name;
    const Tensor* t = nullptr;
    for (const auto& [n, tensor] : outputs)
      if (n == name) t = &tensor;
    if (!t) continue;
    StatusOr<Tensor> classified = Tensor();
    if (req.classification > 0) {
      classified = classify(*t, req.classification, sig.max_batch > 0, output_labels(sig, name));
      if (!classified.is_ok()) continue;  // cannot fail: the strings tensor is no larger than the output
      t = &classified.value();
    }
    auto* o = resp->add_outputs();
    o->set_name(name);
    o->set_datatype(kserve_dtype_name(t->dtype()));
    for (int64_t d : t->dims()) o->add_shape(d);
    if (req.shm) {  // written into the region (write_shm_outputs): where, and an empty raw entry (raw_output_contents[i] is outputs[i]'s)
      auto& params = *o->mutable_parameters();
      params["shared_memory_region"].set_string_param(req.shm->region->name());
      params["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(req.shm->byte_size));
      if (req.shm->offset > 0) params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(req.shm->offset));
      resp->add_raw_output_contents();
    } else if (t->dtype() == DType::kString) {
      std::string* raw = resp->add_raw_output_contents();
      raw->reserve(static_cast<size_t>(bytes_tensor_size(*t)));
      append_bytes_tensor(*t, raw);
    } else {
      resp->add_raw_output_contents(static_cast<const char*>(t->raw()), static_cast<size_t>(t->nbytes()));
    }
  }
}

void fill_stats(const ServedModel& m, inference::ModelStatistics* out) {
  const ModelStats& s = m.stats();
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  out->set_name(m.name());
  out->set_version(std::to_string(m.version()));
  out->set_last_inference(ld(s.last_inference_ms));
  out->set_inference_count(ld(s.inference_count));
  out->set_execution_count(ld(s.execution_count));
  auto* is = out->mutable_inference_stats();
  const uint64_t ran = ld(s.queue_count);
  fill_duration(is->mutable_success(), ld(s.success_count), ld(s.success_ns));
  fill_duration(is->mutable_fail(), ld(s.fail_count), ld(s.fail_ns));
  fill_duration(is->mutable_queue(), ran, ld(s.queue_ns));
  fill_duration(is->mutable_compute_input(), ran, ld(s.compute_input_ns));
  fill_duration(is->mutable_compute_infer(), ran, ld(s.compute_infer_ns));
  fill_duration(is->mutable_compute_output(), ran, ld(s.compute_output_ns));
  is->mutable_cache_hit();
  is->mutable_cache_miss();
  for (int64_t b = 1; b <= s.max_batch; ++b) {
    const uint64_t c = ld(s.batch_count[b]);
    if (c == 0) continue;
    auto* bs = out->add_batch_stats();
    bs->set_batch_size(static_cast<uint64_t>(b));
    fill_duration(bs->mutable_compute_infer(), c, ld(s.batch_ns[b]));
  }
}

}  // namespace ferry::serve
