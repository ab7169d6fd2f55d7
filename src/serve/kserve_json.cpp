// KServe v2 JSON decoding (simdjson's DOM for inference requests, rapidjson for the small ones) and
// the tensor checks HTTP and gRPC share; the encoding is in kserve_json_encode.cpp. See kserve_json.h.
#define RAPIDJSON_HAS_STDSTRING 1
#include "serve/kserve_json.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <optional>

namespace ferry::serve {

using rapidjson::Value;

namespace {

std::string dims_text(const std::vector<int64_t>& d) { return dims_to_string(d); }

std::string names_of(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (const TensorSpec& t : specs) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

const TensorSpec* find_spec(const std::vector<TensorSpec>& specs, std::string_view name) {
  for (const TensorSpec& t : specs)
    if (t.name == name) return &t;
  return nullptr;
}

// The shape a request must have: the batch axis (-1) first when the model batches.
std::vector<int64_t> full_dims(const TensorSpec& spec, int32_t max_batch) {
  std::vector<int64_t> d;
  if (max_batch > 0) d.push_back(-1);
  d.insert(d.end(), spec.dims.begin(), spec.dims.end());
  return d;
}

// A simdjson DOM value (an inference request's) with the rapidjson accessors the decoder reads, so
// that one decoder reads both: IsInt64 / IsUint64 as rapidjson's (an integer that fits).
class J {
 public:
  explicit J(simdjson::dom::element e) : e_(e) {}
  bool IsObject() const { return e_.is_object(); }
  bool IsArray() const { return e_.is_array(); }
  bool IsString() const { return e_.is_string(); }
  bool IsBool() const { return e_.is_bool(); }
  bool IsNumber() const { return e_.is_number(); }
  bool IsInt64() const { return e_.is_int64(); }
  bool IsUint64() const { return e_.is_uint64(); }
  int64_t GetInt64() const { return e_.get_int64().value_unsafe(); }
  uint64_t GetUint64() const { return e_.get_uint64().value_unsafe(); }
  double GetDouble() const { return e_.get_double().value_unsafe(); }
  bool GetBool() const { return e_.get_bool().value_unsafe(); }
  std::string_view GetString() const { return e_.get_string().value_unsafe(); }
  /// The array's elements (an empty range for a non-array).
  simdjson::dom::array GetArray() const {
    simdjson::dom::array a;
    if (e_.get_array().get(a)) return simdjson::dom::array();
    return a;
  }
  std::optional<J> member(const char* key) const {
    simdjson::dom::object o;
    if (e_.get_object().get(o)) return std::nullopt;
    simdjson::dom::element v;
    if (o.at_key(key).get(v)) return std::nullopt;
    return J(v);
  }
  /// As JSON text, for error messages.
  std::string text() const { return simdjson::to_string(e_); }

 private:
  simdjson::dom::element e_;
};

std::optional<J> member(const J& obj, const char* key) { return obj.member(key); }

std::string value_text(const J& v) { return v.text(); }
std::string_view str_of(const J& v) { return v.GetString(); }

template <typename V>
auto elements(const V& v) {
  return v.GetArray();
}

// Leaves of a (possibly nested) JSON array, depth-first; false when nesting exceeds kMaxRank.
template <typename V, typename F>
bool visit_leaves(const V& v, int depth, F&& f) {
  if (!v.IsArray()) {
    f(v);
    return true;
  }
  if (depth > kMaxRank) return false;
  for (const auto& e : elements(v))
    if (!visit_leaves(V(e), depth + 1, f)) return false;
  return true;
}

template <typename T, typename V>
bool integer_in_range(const V& v, T* out) {
  if constexpr (std::numeric_limits<T>::is_signed) {
    if (!v.IsInt64()) return false;
    const int64_t x = v.GetInt64();
    if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) || x > static_cast<int64_t>(std::numeric_limits<T>::max()))
      return false;
    *out = static_cast<T>(x);
  } else {
    if (!v.IsUint64()) return false;
    const uint64_t x = v.GetUint64();
    if (x > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    *out = static_cast<T>(x);
  }
  return true;
}

// Writes JSON values into `t` (already sized); the first value that does not fit the dtype fails.
template <typename V>
Status fill_from_json(const V& data, Tensor* t, const std::string& what) {
  int64_t i = 0;
  const DType dt = t->dtype();
  std::string bad;
  auto fail_at = [&](const V& v) {
    if (bad.empty()) {
      const std::string text = value_text(v);
      std::string shown(text, 0, std::min<size_t>(text.size(), 40));
      bad = what + ": value " + std::to_string(i) + " (" + shown + ") is not a " + kserve_dtype_name(dt) + " value";
    }
  };
  auto put = [&](const V& v) {
    if (!bad.empty()) return;
    char* base = static_cast<char*>(t->mutable_raw());
    switch (dt) {
      case DType::kF32:
        if (!v.IsNumber()) return fail_at(v);
        reinterpret_cast<float*>(base)[i] = static_cast<float>(v.GetDouble());
        break;
      case DType::kF64:
        if (!v.IsNumber()) return fail_at(v);
        reinterpret_cast<double*>(base)[i] = v.GetDouble();
        break;
      case DType::kF16:
        if (!v.IsNumber()) return fail_at(v);
        reinterpret_cast<uint16_t*>(base)[i] = f32_to_f16(static_cast<float>(v.GetDouble()));
        break;
      case DType::kBF16:
        if (!v.IsNumber()) return fail_at(v);
        reinterpret_cast<uint16_t*>(base)[i] = f32_to_bf16(static_cast<float>(v.GetDouble()));
        break;
      case DType::kBool:
        if (!v.IsBool()) return fail_at(v);
        reinterpret_cast<bool*>(base)[i] = v.GetBool();
        break;
      case DType::kString:
        if (!v.IsString()) return fail_at(v);
        t->mutable_strings()[static_cast<size_t>(i)].assign(str_of(v));
        break;
#define FERRY_INT_CASE(D, T) \
  case D:                    \
    if (!integer_in_range<T>(v, reinterpret_cast<T*>(base) + i)) return fail_at(v); \
    break;
        FERRY_INT_CASE(DType::kI8, int8_t)
        FERRY_INT_CASE(DType::kI16, int16_t)
        FERRY_INT_CASE(DType::kI32, int32_t)
        FERRY_INT_CASE(DType::kI64, int64_t)
        FERRY_INT_CASE(DType::kU8, uint8_t)
        FERRY_INT_CASE(DType::kU16, uint16_t)
        FERRY_INT_CASE(DType::kU32, uint32_t)
        FERRY_INT_CASE(DType::kU64, uint64_t)
#undef FERRY_INT_CASE
      default:
        bad = what + ": datatype " + kserve_dtype_name(dt) + " is not supported";
        return;
    }
    ++i;
  };
  visit_leaves(data, 0, put);
  if (!bad.empty()) return invalid_argument(bad);
  return Status::ok();
}

// `data` as a flat array of exactly `count` numbers into a FP32 / FP64 tensor; false for anything
// else (nested, another count, a value that is not a number), which the checked path then reports.
bool fill_flat_floats(const J& data, int64_t count, Tensor* t) {
  const simdjson::dom::array a = data.GetArray();
  if (static_cast<int64_t>(a.size()) != count) return false;
  const bool f32 = t->dtype() == DType::kF32;
  char* base = static_cast<char*>(t->mutable_raw());
  int64_t i = 0;
  for (simdjson::dom::element e : a) {
    double x;
    if (e.get_double().get(x)) return false;
    if (f32) reinterpret_cast<float*>(base)[i] = static_cast<float>(x);
    else reinterpret_cast<double*>(base)[i] = x;
    ++i;
  }
  return true;
}

// A tensor's shared-memory parameters (shared_memory_region / _offset / _byte_size) from its
// "parameters" object.
Status read_shm_params(const J& params, const std::string& what, ShmParams* out) {
  if (auto r = member(params, "shared_memory_region")) {
    if (!r->IsString()) return invalid_argument(what + ": parameter 'shared_memory_region' is not a string");
    out->region = std::string(r->GetString());
  }
  for (const auto& [key, field] : {std::pair{"shared_memory_offset", &out->offset}, std::pair{"shared_memory_byte_size", &out->byte_size}}) {
    if (auto v = member(params, key)) {
      if (!v->IsUint64()) return invalid_argument(what + ": parameter '" + key + "' is not a non-negative integer");
      *field = v->GetUint64();
    }
  }
  return Status::ok();
}

const Value* member(const Value& obj, const char* key) {
  if (!obj.IsObject()) return nullptr;
  auto it = obj.FindMember(key);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

}  // namespace

std::vector<int64_t> protocol_dims(const TensorSpec& spec, int32_t max_batch) { return full_dims(spec, max_batch); }

StatusOr<const TensorSpec*> check_input(const ModelSignature& sig, const std::string& input_name, std::string_view dt_name,
                                        const std::vector<int64_t>& dims, const TensorList& given, int64_t* batch,
                                        std::string* batch_from) {
  const std::string model = "model '" + sig.name + "'";
  const std::string what = "input '" + input_name + "'";
  const TensorSpec* spec = find_spec(sig.inputs, input_name);
  if (!spec)
    return invalid_argument("unexpected inference input '" + input_name + "' for " + model + "; its inputs are: " + names_of(sig.inputs));
  for (const auto& [n, t] : given)
    if (n == input_name) return invalid_argument(what + " is given twice");
  DType dt;
  if (!dtype_from_kserve(dt_name, &dt)) return invalid_argument(what + ": unknown datatype '" + std::string(dt_name) + "'");
  if (dt != spec->dtype)
    return invalid_argument(what + ": datatype " + std::string(dt_name) + " but " + model + " expects " + kserve_dtype_name(spec->dtype));
  const std::vector<int64_t> want = full_dims(*spec, sig.max_batch);
  bool shape_ok = dims.size() == want.size();
  for (size_t k = 0; shape_ok && k < dims.size(); ++k)
    if (want[k] >= 0 && dims[k] != want[k]) shape_ok = false;
  if (!shape_ok)
    return invalid_argument("unexpected shape for " + what + " of " + model + ": expected " + dims_text(want) + ", got " +
                            dims_text(dims) + (sig.max_batch > 0 ? " (the first dim is the batch, 1.." + std::to_string(sig.max_batch) + ")" : ""));
  if (sig.max_batch > 0) {
    if (dims[0] < 1 || dims[0] > sig.max_batch)
      return invalid_argument(what + ": batch size " + std::to_string(dims[0]) + " is outside 1.." + std::to_string(sig.max_batch) +
                              " (max_batch_size of " + model + ")");
    if (*batch >= 0 && dims[0] != *batch)
      return invalid_argument(what + " has batch size " + std::to_string(dims[0]) + " but input '" + *batch_from + "' has " +
                              std::to_string(*batch) + "; every input has the same batch size");
    *batch = dims[0];
    *batch_from = input_name;
  }
  return spec;
}

Status check_inputs_complete(const ModelSignature& sig, const TensorList& inputs) {
  for (const TensorSpec& s : sig.inputs) {
    bool given = false;
    for (const auto& [n, t] : inputs) given = given || n == s.name;
    if (!given)
      return invalid_argument("input '" + s.name + "' is missing: model '" + sig.name + "' expects " + std::to_string(sig.inputs.size()) +
                              " inputs (" + names_of(sig.inputs) + "), the request gives " + std::to_string(inputs.size()));
  }
  return Status::ok();
}

Status check_output_name(const ModelSignature& sig, const std::string& name) {
  if (!find_spec(sig.outputs, name))
    return invalid_argument("unexpected inference output '" + name + "' for model '" + sig.name + "'; its outputs are: " + names_of(sig.outputs));
  return Status::ok();
}

Status check_classification(const ModelSignature& sig, const std::string& name, int64_t classes) {
  const TensorSpec* spec = find_spec(sig.outputs, name);
  if (!spec) return check_output_name(sig, name);
  if (classes <= 0) return invalid_argument("output '" + name + "': parameter 'classification' is " + std::to_string(classes) +
                                            "; give the number of classes wanted, >= 1");
  if (spec->dtype == DType::kString || spec->dtype == DType::kBool)
    return invalid_argument("output '" + name + "' is " + kserve_dtype_name(spec->dtype) +
                            ": the classification extension needs a numeric output");
  return Status::ok();
}

const std::vector<std::string>* output_labels(const ModelSignature& sig, const std::string& name) {
  const TensorSpec* spec = find_spec(sig.outputs, name);
  return spec ? spec->labels.get() : nullptr;
}

StatusOr<Tensor> classify(const Tensor& t, int64_t classes, bool batched, const std::vector<std::string>* labels) {
  const std::vector<double> v = t.to_double_vector();
  const int64_t rows = batched && !t.dims().empty() ? t.dims()[0] : 1;
  const int64_t per_row = rows > 0 ? static_cast<int64_t>(v.size()) / rows : 0;
  const int64_t k = std::min(classes, per_row);
  std::vector<int64_t> dims = batched ? std::vector<int64_t>{rows, k} : std::vector<int64_t>{k};
  ASSIGN_OR_RETURN(Tensor out, Tensor::create(DType::kString, dims, "classification"));
  std::vector<int64_t> idx(static_cast<size_t>(per_row));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = v.data() + r * per_row;
    for (int64_t i = 0; i < per_row; ++i) idx[static_cast<size_t>(i)] = i;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [row](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = idx[static_cast<size_t>(j)];
      std::string& s = out.mutable_strings()[static_cast<size_t>(r * k + j)];
      s = std::to_string(static_cast<float>(row[i])) + ":" + std::to_string(i);
      if (labels && i < static_cast<int64_t>(labels->size()) && !(*labels)[static_cast<size_t>(i)].empty())
        s += ":" + (*labels)[static_cast<size_t>(i)];
    }
  }
  return out;
}

StatusOr<Tensor> copy_input_tensor(DType dtype, std::vector<int64_t> dims, const void* bytes, const std::string& what) {
  StatusOr<Tensor> t = Tensor::try_copy_of(dtype, std::move(dims), bytes);
  if (!t.is_ok()) return t.status().with_context(what);
  return t;
}

StatusOr<Tensor> decode_bytes_tensor(std::string_view raw, const std::vector<int64_t>& dims, const std::string& what) {
  ASSIGN_OR_RETURN(int64_t count, checked_element_count(dims, what));
  ASSIGN_OR_RETURN(Tensor t, Tensor::create(DType::kString, dims, what));
  std::vector<std::string>& out = t.mutable_strings();
  size_t pos = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (raw.size() - pos < 4)
      return invalid_argument(what + ": BYTES element " + std::to_string(i) + " of " + std::to_string(count) + " (shape " +
                              dims_text(dims) + ") has no 4-byte length: the " + std::to_string(raw.size()) +
                              " bytes end after " + std::to_string(i) + " elements");
    const auto* b = reinterpret_cast<const unsigned char*>(raw.data() + pos);
    const uint32_t len = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
    pos += 4;
    if (len > raw.size() - pos)
      return invalid_argument(what + ": BYTES element " + std::to_string(i) + " says " + std::to_string(len) + " bytes but only " +
                              std::to_string(raw.size() - pos) + " are left");
    out[static_cast<size_t>(i)].assign(raw.data() + pos, len);
    pos += len;
  }
  if (pos != raw.size())
    return invalid_argument(what + ": " + std::to_string(raw.size() - pos) + " bytes left over after the " + std::to_string(count) +
                            " BYTES elements of shape " + dims_text(dims) + " (each element: a 4-byte little-endian length, then its bytes)");
  return t;
}

int64_t bytes_tensor_size(const Tensor& t) {
  int64_t n = 0;
  for (const std::string& x : t.strings()) n += 4 + static_cast<int64_t>(x.size());
  return n;
}

void append_bytes_tensor(const Tensor& t, std::string* out) {
  for (const std::string& x : t.strings()) {
    const uint32_t len = static_cast<uint32_t>(x.size());
    const char b[4] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff), static_cast<char>((len >> 16) & 0xff),
                       static_cast<char>((len >> 24) & 0xff)};
    out->append(b, 4);
    out->append(x);
  }
}

StatusOr<DecodedInfer> decode_infer_request(std::string_view body, int64_t header_length, const ModelSignature& sig,
                                            const SharedMemoryRegistry* shm) {
  if (header_length > static_cast<int64_t>(body.size()))
    return invalid_argument("Inference-Header-Content-Length is " + std::to_string(header_length) + " but the body has only " +
                            std::to_string(body.size()) + " bytes");
  const std::string_view json = header_length >= 0 ? body.substr(0, static_cast<size_t>(header_length)) : body;
  const std::string_view binary = header_length >= 0 ? body.substr(static_cast<size_t>(header_length)) : std::string_view();
  // simdjson's DOM: 2-3x rapidjson's parse of a body of numbers (docs/serving.md). One parser per
  // thread, reused (it keeps its buffers), for bodies up to kReusedParserBytes; a larger body gets a
  // parser of its own, freed after, so that no thread keeps a large one.
  constexpr size_t kReusedParserBytes = size_t(256) << 10;
  thread_local simdjson::dom::parser reused;
  std::unique_ptr<simdjson::dom::parser> own;
  simdjson::dom::parser* parser = &reused;
  if (json.size() > kReusedParserBytes) parser = (own = std::make_unique<simdjson::dom::parser>()).get();
  simdjson::dom::element root;
  if (const auto err = parser->parse(json.data(), json.size()).get(root)) {
    // The message as before (rapidjson's, with the byte offset), on this error path only.
    rapidjson::Document check;
    check.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
    if (check.HasParseError())
      return invalid_argument("malformed JSON in the inference request at byte " + std::to_string(check.GetErrorOffset()) + ": " +
                              rapidjson::GetParseError_En(check.GetParseError()));
    return invalid_argument(std::string("malformed JSON in the inference request: ") + simdjson::error_message(err));
  }
  const J doc(root);
  if (!doc.IsObject()) return invalid_argument("the inference request is not a JSON object");
  DecodedInfer out;
  out.request.cancelled = std::make_shared<Cancellation>();
  if (auto id = member(doc, "id")) {
    if (!id->IsString()) return invalid_argument("request 'id' is not a string");
    out.request.id.assign(id->GetString());
  }
  bool binary_default = false;
  if (auto params = member(doc, "parameters")) {
    if (!params->IsObject()) return invalid_argument("request 'parameters' is not an object");
    if (auto b = member(*params, "binary_data_output")) {
      if (!b->IsBool()) return invalid_argument("parameter 'binary_data_output' is not a boolean");
      binary_default = b->GetBool();
    }
    if (auto t = member(*params, "timeout")) {
      if (!t->IsUint64()) return invalid_argument("parameter 'timeout' is not a non-negative integer (microseconds)");
      out.request.timeout_us = t->GetUint64();
    }
  }
  auto inputs = member(doc, "inputs");
  if (!inputs || !inputs->IsArray()) return invalid_argument("the inference request has no 'inputs' array");
  size_t binary_offset = 0;
  int64_t batch = -1;
  std::string batch_from;
  for (simdjson::dom::element in_e : inputs->GetArray()) {
    const J in(in_e);
    auto name = member(in, "name");
    if (!name || !name->IsString()) return invalid_argument("an input has no 'name' string");
    const std::string input_name(name->GetString());
    const std::string what = "input '" + input_name + "'";
    auto datatype = member(in, "datatype");
    if (!datatype || !datatype->IsString()) return invalid_argument(what + " has no 'datatype' string");
    const std::string dt_name(datatype->GetString());
    auto shape = member(in, "shape");
    if (!shape || !shape->IsArray()) return invalid_argument(what + " has no 'shape' array");
    std::vector<int64_t> dims;
    for (simdjson::dom::element d_e : shape->GetArray()) {
      const J d(d_e);
      if (!d.IsInt64() || d.GetInt64() < 0) return invalid_argument(what + ": shape entries are integers >= 0");
      if (dims.size() >= static_cast<size_t>(kMaxRank)) return invalid_argument(what + ": shape has more than 64 dims");
      dims.push_back(d.GetInt64());
    }
    ASSIGN_OR_RETURN(const TensorSpec* spec, check_input(sig, input_name, dt_name, dims, out.request.inputs, &batch, &batch_from));
    const DType dt = spec->dtype;
    ASSIGN_OR_RETURN(int64_t count, checked_element_count(dims, what));
    const int64_t nbytes = count * dtype_size(dt);
    auto params = member(in, "parameters");
    auto bsize = params ? member(*params, "binary_data_size") : std::nullopt;
    auto data = member(in, "data");
    ShmParams shm_params;
    if (params && params->IsObject()) RETURN_IF_ERROR(read_shm_params(*params, what, &shm_params));
    if (shm_params.any()) {  // the shared-memory extension: the bytes are in a registered region
      if (data || bsize) return invalid_argument(what + " has shared-memory parameters and also " + (data ? "'data'" : "'binary_data_size'") + "; give one");
      ASSIGN_OR_RETURN(std::optional<ShmSlice> slice, resolve_shm(shm, shm_params, what));
      ASSIGN_OR_RETURN(Tensor t, shm_input_tensor(*slice, dt, dims, what));
      out.request.inputs.emplace_back(input_name, std::move(t));
      continue;
    }
    if (bsize) {
      if (data) return invalid_argument(what + " has both 'data' and parameter 'binary_data_size'; give one");
      if (!bsize->IsUint64()) return invalid_argument(what + ": 'binary_data_size' is not a non-negative integer");
      if (header_length < 0)
        return invalid_argument(what + " has 'binary_data_size' but the request has no Inference-Header-Content-Length header");
      const uint64_t size = bsize->GetUint64();
      if (dt == DType::kString) {
        if (size > binary.size() - binary_offset)
          return invalid_argument(what + ": binary_data_size " + std::to_string(size) + " runs past the end of the body (" +
                                  std::to_string(binary.size() - binary_offset) + " bytes of binary data left)");
        ASSIGN_OR_RETURN(Tensor t, decode_bytes_tensor(binary.substr(binary_offset, size), dims, what));
        binary_offset += size;
        out.request.inputs.emplace_back(input_name, std::move(t));
        continue;
      }
      if (size != static_cast<uint64_t>(nbytes))
        return invalid_argument(what + ": binary_data_size " + std::to_string(size) + " but shape " + dims_text(dims) + " of " +
                                dt_name + " needs " + std::to_string(nbytes) + " bytes");
      if (size > binary.size() - binary_offset)
        return invalid_argument(what + ": binary_data_size " + std::to_string(size) + " runs past the end of the body (" +
                                std::to_string(binary.size() - binary_offset) + " bytes of binary data left)");
      ASSIGN_OR_RETURN(Tensor t, copy_input_tensor(dt, dims, binary.data() + binary_offset, what));
      binary_offset += size;
      out.request.inputs.emplace_back(input_name, std::move(t));
      continue;
    }
    if (!data) return invalid_argument(what + " has neither 'data' nor parameter 'binary_data_size'");
    if (!data->IsArray()) return invalid_argument(what + ": 'data' is not an array");
    if (dt == DType::kF32 || dt == DType::kF64) {  // the common case in one pass: a flat array of count numbers
      ASSIGN_OR_RETURN(Tensor t, Tensor::create(dt, dims, what));
      if (fill_flat_floats(*data, count, &t)) {
        out.request.inputs.emplace_back(input_name, std::move(t));
        continue;
      }
    }
    // Anything else (nested rows, other datatypes, a bad value) through the checked path.
    int64_t given = 0;
    if (!visit_leaves(*data, 0, [&](const J&) { ++given; }))
      return invalid_argument(what + ": 'data' is nested deeper than 64 levels");
    if (given != count)
      return invalid_argument(what + ": " + std::to_string(given) + " values given but shape " + dims_text(dims) + " needs " +
                              std::to_string(count));
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(dt, dims, what));
    RETURN_IF_ERROR(fill_from_json(*data, &t, what));
    out.request.inputs.emplace_back(input_name, std::move(t));
  }
  if (binary_offset != binary.size())
    return invalid_argument("the body has " + std::to_string(binary.size()) + " bytes of binary data after the JSON header but the inputs' "
                            "binary_data_size add up to " + std::to_string(binary_offset));
  RETURN_IF_ERROR(check_inputs_complete(sig, out.request.inputs));
  out.request.batch = batch > 0 ? batch : 1;
  if (auto outputs = member(doc, "outputs")) {
    if (!outputs->IsArray()) return invalid_argument("request 'outputs' is not an array");
    for (simdjson::dom::element o_e : outputs->GetArray()) {
      const J o(o_e);
      auto name = member(o, "name");
      if (!name || !name->IsString()) return invalid_argument("a requested output has no 'name' string");
      RequestedOutput r;
      r.name.assign(name->GetString());
      RETURN_IF_ERROR(check_output_name(sig, r.name));
      r.binary = binary_default;
      if (auto params = member(o, "parameters")) {
        if (!params->IsObject()) return invalid_argument("output '" + r.name + "': 'parameters' is not an object");
        if (auto b = member(*params, "binary_data")) {
          if (!b->IsBool()) return invalid_argument("output '" + r.name + "': 'binary_data' is not a boolean");
          r.binary = b->GetBool();
        }
        if (auto c = member(*params, "classification")) {
          if (!c->IsInt64()) return invalid_argument("output '" + r.name + "': parameter 'classification' is not an integer");
          RETURN_IF_ERROR(check_classification(sig, r.name, c->GetInt64()));
          r.classification = c->GetInt64();
        }
        ShmParams shm_params;
        RETURN_IF_ERROR(read_shm_params(*params, "output '" + r.name + "'", &shm_params));
        ASSIGN_OR_RETURN(r.shm, resolve_shm(shm, shm_params, "output '" + r.name + "'"));
        if (r.shm && member(*params, "binary_data") && r.binary)
          return invalid_argument("output '" + r.name + "' has shared-memory parameters and also 'binary_data': true; give one");
      }
      out.outputs.push_back(std::move(r));
    }
  }
  if (out.outputs.empty())
    for (const TensorSpec& s : sig.outputs) out.outputs.push_back({s.name, binary_default});
  RETURN_IF_ERROR(check_shm_outputs(sig, out.outputs, out.request.batch));
  return out;
}

StatusOr<bool> parse_index_request(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return false;
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject()) return invalid_argument("the repository index request is not a JSON object");
  const Value* ready = member(doc, "ready");
  if (!ready) return false;
  if (!ready->IsBool()) return invalid_argument("'ready' is not a boolean");
  return ready->GetBool();
}

Status check_load_request(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return Status::ok();
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject()) return invalid_argument("the repository load request is not a JSON object");
  const Value* params = member(doc, "parameters");
  if (!params) return Status::ok();
  if (!params->IsObject()) return invalid_argument("the repository load request's 'parameters' is not an object");
  if (params->MemberCount() == 0) return Status::ok();
  return invalid_argument("load parameters (such as '" + std::string(params->MemberBegin()->name.GetString()) +
                          "') are not supported by ferry: the model's config.pbtxt and files are read from the repository");
}

}  // namespace ferry::serve
