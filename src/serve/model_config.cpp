// config.pbtxt parsing, completion from the model and validation; see model_config.h.
#include "serve/model_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

namespace ferry::serve {
namespace {

// Collects the parser's errors and unknown-field warnings with file:line:column (1-based).
class ConfigErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit ConfigErrorCollector(const std::string& file) : file_(file) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (error_.empty()) error_ = where(line, column) + message;
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    warnings_.push_back(where(line, column) + message + " (ferry does not support this field and ignores it)");
  }
  std::string error_;
  std::vector<std::string> warnings_;

 private:
  std::string where(int line, int column) const {
    return file_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": ";
  }
  std::string file_;
};

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

template <typename Field>
std::vector<int64_t> to_vector(const Field& f) {
  return std::vector<int64_t>(f.begin(), f.end());
}

// The model's dims as config dims: symbolic / unknown -> -1.
std::vector<int64_t> model_dims(const ValueInfo& v) {
  std::vector<int64_t> out;
  if (v.type.shape)
    for (const Dim& d : v.type.shape->dims) out.push_back(d.is_known() ? d.value : -1);
  return out;
}

const ValueInfo* find_value(const std::vector<ValueInfo>& values, const std::string& name) {
  for (const ValueInfo& v : values)
    if (v.name == name) return &v;
  return nullptr;
}

// The products of a shape's sizes between its -1 (any size) dims, in order: [2,4,-1,6] -> {8, 6}.
// false when one overflows.
bool chunk_counts(const std::vector<int64_t>& shape, std::vector<int64_t>* out) {
  out->assign(1, 1);
  for (int64_t d : shape) {
    if (d == -1) {
      out->push_back(1);
    } else if (__builtin_mul_overflow(out->back(), d, &out->back())) {
      return false;
    }
  }
  return true;
}

std::string reshape_text(const std::vector<int64_t>& shape) { return "reshape { shape: " + dims_text(shape) + " }"; }

// A config `reshape` against its `dims`, as Triton checks it: sizes >= 1 or -1, the same elements
// (equal products between the -1 dims), an empty reshape only for dims of one element with a batch axis.
Status check_reshape(const std::string& what, const std::vector<int64_t>& dims, const std::vector<int64_t>& reshape,
                     int32_t max_batch) {
  const std::string both = "dims " + dims_text(dims) + " and " + reshape_text(reshape);
  if (reshape.empty() && max_batch == 0)
    return invalid_argument(what + ": " + reshape_text(reshape) + " with max_batch_size 0 would leave the tensor no elements; "
                            "an empty reshape is for a batching model (max_batch_size > 0, dims [1])");
  for (int64_t d : reshape)
    if (d < 1 && d != -1)
      return invalid_argument(what + ": " + reshape_text(reshape) + ": a reshape size is >= 1 or -1 (any)");
  std::vector<int64_t> a, b;
  if (!chunk_counts(dims, &a) || !chunk_counts(reshape, &b))
    return invalid_argument(what + ": " + both + ": too many elements");
  if (a == b || (reshape.empty() && a == std::vector<int64_t>{1})) return Status::ok();
  if (a.size() == 1 && b.size() == 1)
    return invalid_argument(what + ": " + both + " hold " + std::to_string(a[0]) + " and " + std::to_string(b[0]) +
                            " elements; a reshape keeps every element: give it " + std::to_string(a[0]) +
                            " elements, in the shape the model's tensor has");
  return invalid_argument(what + ": " + both + " do not hold the same elements: they need as many -1 (any size) dims, "
                          "with the same product of sizes between them");
}

// One config tensor against the model's: dtype, rank and every known dim. With a reshape, the
// reshape is the shape the model has (dims: what clients send or receive).
Status check_tensor(const std::string& where, const char* kind, const std::string& name, inference::DataType dt,
                    const std::vector<int64_t>& dims, const std::vector<int64_t>* reshape, const ValueInfo& model_value,
                    int32_t max_batch, bool gears) {
  const std::string what = where + ": " + kind + " '" + name + "'";
  const DType want = dtype_from_config(dt);
  if (want == DType::kUndefined)
    return invalid_argument(what + ": data_type " + inference::DataType_Name(dt) + " is not supported");
  if (model_value.type.dtype != DType::kUndefined && model_value.type.dtype != want)
    return invalid_argument(what + ": data_type " + inference::DataType_Name(dt) + " but the model's " + kind +
                            " is " + inference::DataType_Name(config_from_dtype(model_value.type.dtype)) +
                            "; write data_type: " + inference::DataType_Name(config_from_dtype(model_value.type.dtype)));
  for (int64_t d : dims)
    if (d < -1) return invalid_argument(what + ": dims " + dims_text(dims) + ": a dim is a size >= 0 or -1 (any)");
  if (reshape) RETURN_IF_ERROR(check_reshape(what, dims, *reshape, max_batch));
  if (!model_value.type.shape) return Status::ok();  // rank unknown: the run checks
  std::vector<int64_t> md = model_dims(model_value);
  if (max_batch > 0) {
    if (md.empty())
      return invalid_argument(what + ": max_batch_size is " + std::to_string(max_batch) +
                              " but the model's " + kind + " is a scalar (no batch axis); set max_batch_size: 0");
    if (md[0] >= 0 && !gears)
      return invalid_argument(what + ": max_batch_size is " + std::to_string(max_batch) + " but the model's " + kind +
                              " has a fixed first dimension " + std::to_string(md[0]) + " (shape " + dims_text(md) +
                              "), so the model does not batch; set max_batch_size: 0 and dims " + dims_text(md));
    md.erase(md.begin());
  }
  const std::vector<int64_t>& shape = reshape ? *reshape : dims;
  bool same = md.size() == shape.size();
  size_t differs = 0;
  for (size_t i = 0; same && i < md.size(); ++i)
    if (md[i] >= 0 && shape[i] >= 0 && md[i] != shape[i]) {
      same = false;
      differs = i;
    }
  if (same) return Status::ok();
  const std::string after = max_batch > 0 ? " after the batch axis" : "";
  if (reshape)
    return invalid_argument(what + ": " + reshape_text(*reshape) + " (dims " + dims_text(dims) + ") but the model's " + kind +
                            " has dims " + dims_text(md) + after + "; the reshape is the shape the model " +
                            (std::strcmp(kind, "input") == 0 ? "takes" : "produces") + ": write " + reshape_text(md) +
                            ", with dims of as many elements (what clients " +
                            (std::strcmp(kind, "input") == 0 ? "send" : "receive") + ")");
  if (md.size() != dims.size())
    return invalid_argument(what + ": dims " + dims_text(dims) + " have rank " + std::to_string(dims.size()) +
                            " but the model's " + kind + " has dims " + dims_text(md) +
                            (max_batch > 0 ? " after the batch axis (max_batch_size > 0: dims exclude the batch axis)" : "") +
                            "; a model that takes another shape than clients send needs reshape { shape: " + dims_text(md) + " }");
  return invalid_argument(what + ": dims " + dims_text(dims) + " but the model's " + kind + " has dims " + dims_text(md) +
                          " (dim " + std::to_string(differs) + " differs)");
}

// Protobuf's text parser skips an unknown field only when a list of messages is written with a
// colon (`model_warmup: [ {...} ]`); Triton's configs write `model_warmup [ {...} ]`. The colon is
// optional for known message fields, so writing it in (over the blank before '[' when there is
// one, keeping columns) changes nothing else. Strings and # comments are left alone.
std::string colon_before_message_lists(std::string_view text) {
  std::string out(text);
  const size_t n = out.size();
  size_t i = 0;
  auto ident_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; };
  std::vector<size_t> inserts;
  while (i < n) {
    const char c = out[i];
    if (c == '#') {
      while (i < n && out[i] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const char q = c;
      ++i;
      while (i < n && out[i] != q && out[i] != '\n') i += out[i] == '\\' ? 2 : 1;
      ++i;
      continue;
    }
    if (!ident_char(c)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < n && ident_char(out[end])) ++end;
    size_t j = end;
    while (j < n && (out[j] == ' ' || out[j] == '\t' || out[j] == '\r' || out[j] == '\n')) ++j;
    if (j < n && out[j] == '[') {
      size_t k = j + 1;
      while (k < n && (out[k] == ' ' || out[k] == '\t' || out[k] == '\r' || out[k] == '\n')) ++k;
      if (k < n && (out[k] == '{' || out[k] == '<')) {
        if (end < j && out[end] != '\n') out[end] = ':';
        else inserts.push_back(end);
      }
    }
    i = end;
  }
  for (auto it = inserts.rbegin(); it != inserts.rend(); ++it) out.insert(*it, 1, ':');
  return out;
}

bool model_batches(const std::vector<ValueInfo>& inputs, const std::vector<ValueInfo>& outputs) {
  if (inputs.empty()) return false;
  for (const auto* list : {&inputs, &outputs})
    for (const ValueInfo& v : *list) {
      if (!v.type.shape || v.type.shape->dims.empty()) return false;
      if (v.type.shape->dims[0].is_known()) return false;
    }
  return true;
}

}  // namespace

StatusOr<ParsedConfig> parse_model_config(std::string_view text, const std::string& file) {
  ParsedConfig out;
  ConfigErrorCollector errors(file);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(true);
  parser.SetRecursionLimit(32);
  if (text.size() > (64u << 20)) return invalid_argument(file + ": " + std::to_string(text.size()) + " bytes; a config.pbtxt is at most 64 MB");
  const std::string normalized = colon_before_message_lists(text);
  google::protobuf::io::ArrayInputStream stream(normalized.data(), static_cast<int>(normalized.size()));
  if (!parser.Parse(&stream, &out.config))
    return invalid_argument(errors.error_.empty() ? file + ": not a valid model configuration" : errors.error_);
  out.warnings = std::move(errors.warnings_);
  return out;
}

DType dtype_from_config(inference::DataType t) {
  switch (t) {
    case inference::TYPE_BOOL: return DType::kBool;
    case inference::TYPE_UINT8: return DType::kU8;
    case inference::TYPE_UINT16: return DType::kU16;
    case inference::TYPE_UINT32: return DType::kU32;
    case inference::TYPE_UINT64: return DType::kU64;
    case inference::TYPE_INT8: return DType::kI8;
    case inference::TYPE_INT16: return DType::kI16;
    case inference::TYPE_INT32: return DType::kI32;
    case inference::TYPE_INT64: return DType::kI64;
    case inference::TYPE_FP16: return DType::kF16;
    case inference::TYPE_FP32: return DType::kF32;
    case inference::TYPE_FP64: return DType::kF64;
    case inference::TYPE_BF16: return DType::kBF16;
    case inference::TYPE_STRING: return DType::kString;
    default: return DType::kUndefined;
  }
}

inference::DataType config_from_dtype(DType t) {
  switch (t) {
    case DType::kBool: return inference::TYPE_BOOL;
    case DType::kU8: return inference::TYPE_UINT8;
    case DType::kU16: return inference::TYPE_UINT16;
    case DType::kU32: return inference::TYPE_UINT32;
    case DType::kU64: return inference::TYPE_UINT64;
    case DType::kI8: return inference::TYPE_INT8;
    case DType::kI16: return inference::TYPE_INT16;
    case DType::kI32: return inference::TYPE_INT32;
    case DType::kI64: return inference::TYPE_INT64;
    case DType::kF16: return inference::TYPE_FP16;
    case DType::kF32: return inference::TYPE_FP32;
    case DType::kF64: return inference::TYPE_FP64;
    case DType::kBF16: return inference::TYPE_BF16;
    case DType::kString: return inference::TYPE_STRING;
    default: return inference::TYPE_INVALID;
  }
}

namespace {
struct KserveName {
  const char* name;
  DType dtype;
};
constexpr KserveName kKserveNames[] = {
    {"BOOL", DType::kBool}, {"UINT8", DType::kU8},   {"UINT16", DType::kU16}, {"UINT32", DType::kU32},
    {"UINT64", DType::kU64}, {"INT8", DType::kI8},   {"INT16", DType::kI16},  {"INT32", DType::kI32},
    {"INT64", DType::kI64},  {"FP16", DType::kF16},  {"FP32", DType::kF32},   {"FP64", DType::kF64},
    {"BF16", DType::kBF16},  {"BYTES", DType::kString},
};
}  // namespace

const char* kserve_dtype_name(DType t) {
  for (const KserveName& k : kKserveNames)
    if (k.dtype == t) return k.name;
  return "INVALID";
}

bool dtype_from_kserve(std::string_view name, DType* out) {
  for (const KserveName& k : kKserveNames)
    if (name == k.name) {
      *out = k.dtype;
      return true;
    }
  return false;
}

void complete_backend_fields(inference::ModelConfig* c, const std::string& model_file, bool compiled) {
  if (c->backend().empty()) {
    if (c->platform() == "onnxruntime_onnx") c->set_backend("onnxruntime");
    else if (c->platform() == "ferry") c->set_backend("ferry");
    else c->set_backend(compiled ? "ferry" : "onnxruntime");
  }
  if (c->backend() == "onnxruntime" && c->platform().empty()) c->set_platform("onnxruntime_onnx");
  if (c->default_model_filename().empty()) c->set_default_model_filename(model_file);
}

Status complete_and_validate(inference::ModelConfig* c, const std::vector<ValueInfo>& model_inputs,
                             const std::vector<ValueInfo>& model_outputs, const std::vector<int64_t>& gears,
                             const std::string& where, std::vector<std::string>* warnings, bool auto_complete) {
  const std::string& platform = c->platform();
  const std::string& backend = c->backend();
  if (!platform.empty() && platform != "onnxruntime_onnx" && platform != "ferry")
    return unsupported(where + ": platform '" + platform +
                       "' is not supported: ferry serves ONNX models (platform: \"onnxruntime_onnx\", model.onnx) and "
                       ".ferry files (backend: \"ferry\", model.ferry)");
  if (!backend.empty() && backend != "onnxruntime" && backend != "ferry")
    return unsupported(where + ": backend '" + backend +
                       "' is not supported: ferry serves backend \"onnxruntime\" (model.onnx) and \"ferry\" (model.ferry)");
  if (c->max_batch_size() < 0)
    return invalid_argument(where + ": max_batch_size is " + std::to_string(c->max_batch_size()) + "; it is >= 0 (0: no batching)");
  const bool batches = !gears.empty() || model_batches(model_inputs, model_outputs);
  const int64_t max_gear = gears.empty() ? 0 : *std::max_element(gears.begin(), gears.end());
  if (!auto_complete && (c->input_size() == 0 || c->output_size() == 0))
    return invalid_argument(where + ": lists no " + (c->input_size() == 0 ? "inputs" : "outputs") +
                            " and --disable-auto-complete-config (or --strict-model-config true) asks the config for every "
                            "input and output; list them (`GET /v2/models/M/config` of a server without the flag shows them)");
  // Completion (Triton's auto-complete): a config that lists no tensors gets the model's.
  if (c->input_size() == 0 && c->output_size() == 0 && c->max_batch_size() == 0 && batches) {
    c->set_max_batch_size(max_gear > 0 ? static_cast<int32_t>(max_gear) : kDefaultMaxBatchSize);
    if (!c->has_dynamic_batching()) c->mutable_dynamic_batching();
  }
  const int32_t mbs = c->max_batch_size();
  if (max_gear > 0 && mbs > max_gear)
    return invalid_argument(where + ": max_batch_size " + std::to_string(mbs) + " exceeds the largest batch gear " +
                            std::to_string(max_gear) + " the model was compiled for; lower it or recompile with --batch-gears");
  if (c->input_size() == 0)
    for (const ValueInfo& v : model_inputs) {
      auto* in = c->add_input();
      in->set_name(v.name);
      in->set_data_type(config_from_dtype(v.type.dtype));
      std::vector<int64_t> d = model_dims(v);
      if (mbs > 0 && !d.empty()) d.erase(d.begin());
      for (int64_t x : d) in->add_dims(x);
    }
  if (c->output_size() == 0)
    for (const ValueInfo& v : model_outputs) {
      auto* out = c->add_output();
      out->set_name(v.name);
      out->set_data_type(config_from_dtype(v.type.dtype));
      std::vector<int64_t> d = model_dims(v);
      if (mbs > 0 && !d.empty()) d.erase(d.begin());
      for (int64_t x : d) out->add_dims(x);
    }
  // Validation against the model.
  std::vector<std::string> seen;
  for (const auto& in : c->input()) {
    if (std::find(seen.begin(), seen.end(), in.name()) != seen.end())
      return invalid_argument(where + ": input '" + in.name() + "' is listed twice");
    seen.push_back(in.name());
    const ValueInfo* mv = find_value(model_inputs, in.name());
    if (!mv) {
      std::string names;
      for (const ValueInfo& v : model_inputs) {
        if (!names.empty()) names += ", ";
        names += v.name;
      }
      return invalid_argument(where + ": input '" + in.name() + "' is not an input of the model (its inputs: " + names + ")");
    }
    if ((in.format() == inference::ModelInput::FORMAT_NCHW || in.format() == inference::ModelInput::FORMAT_NHWC) && in.dims_size() != 3)
      return invalid_argument(where + ": input '" + in.name() + "': format " + inference::ModelInput::Format_Name(in.format()) +
                              " needs 3 dims (an image without the batch axis), not dims " + dims_text(to_vector(in.dims())) +
                              "; write format: FORMAT_NONE or 3 dims");
    const std::vector<int64_t> reshape = to_vector(in.reshape().shape());
    RETURN_IF_ERROR(check_tensor(where, "input", in.name(), in.data_type(), to_vector(in.dims()), in.has_reshape() ? &reshape : nullptr,
                                 *mv, mbs, !gears.empty()));
  }
  for (const ValueInfo& v : model_inputs)
    if (std::find(seen.begin(), seen.end(), v.name) == seen.end())
      return invalid_argument(where + ": the model's input '" + v.name + "' is not listed in the config; add an input { name: \"" +
                              v.name + "\" ... } (every input must be fed)");
  seen.clear();
  for (const auto& out : c->output()) {
    if (std::find(seen.begin(), seen.end(), out.name()) != seen.end())
      return invalid_argument(where + ": output '" + out.name() + "' is listed twice");
    seen.push_back(out.name());
    const ValueInfo* mv = find_value(model_outputs, out.name());
    if (!mv) {
      std::string names;
      for (const ValueInfo& v : model_outputs) {
        if (!names.empty()) names += ", ";
        names += v.name;
      }
      return invalid_argument(where + ": output '" + out.name() + "' is not an output of the model (its outputs: " + names + ")");
    }
    const std::vector<int64_t> reshape = to_vector(out.reshape().shape());
    RETURN_IF_ERROR(check_tensor(where, "output", out.name(), out.data_type(), to_vector(out.dims()), out.has_reshape() ? &reshape : nullptr,
                                 *mv, mbs, !gears.empty()));
  }
  if (c->has_dynamic_batching()) {
    const auto& db = c->dynamic_batching();
    if (mbs == 0)
      warnings->push_back(where + ": dynamic_batching has no effect with max_batch_size 0 (requests run one by one)");
    for (int32_t p : db.preferred_batch_size())
      if (p < 1 || (mbs > 0 && p > mbs))
        return invalid_argument(where + ": dynamic_batching.preferred_batch_size " + std::to_string(p) +
                                " is outside 1.." + std::to_string(mbs) + " (max_batch_size)");
    if (db.default_queue_policy().timeout_action() == inference::ModelQueuePolicy::DELAY)
      warnings->push_back(where + ": default_queue_policy.timeout_action DELAY is not supported; timed-out requests are rejected");
  }
  for (auto& g : *c->mutable_instance_group()) {
    if (g.count() < 0) return invalid_argument(where + ": instance_group count " + std::to_string(g.count()) + " is negative");
    if (g.count() == 0) g.set_count(1);
    if (g.kind() == inference::ModelInstanceGroup::KIND_GPU || g.gpus_size() > 0)
      warnings->push_back(where + ": instance_group kind KIND_GPU / gpus: ferry runs every instance on the device given to `ferry serve --device`");
  }
  if (c->instance_group_size() == 0) {
    auto* g = c->add_instance_group();
    g->set_count(1);
    g->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  }
  for (const auto& [key, value] : c->parameters()) {
    if (key == "threads") {
      const std::string& s = value.string_value();
      if (s.empty() || s.size() > 4 || !std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) || std::stoi(s) < 1)
        return invalid_argument(where + ": parameters \"threads\" is '" + s + "'; it is a positive number of threads per instance");
    } else if (key != "precision") {  // checked when the model loads (ServedModel::load)
      warnings->push_back(where + ": parameters \"" + key + "\" is not a ferry setting and is ignored (ferry reads: threads, precision)");
    }
  }
  return Status::ok();
}

std::vector<TensorSpec> input_specs(const inference::ModelConfig& config) {
  std::vector<TensorSpec> out;
  for (const auto& in : config.input()) out.push_back({in.name(), dtype_from_config(in.data_type()), to_vector(in.dims())});
  return out;
}

std::vector<TensorSpec> output_specs(const inference::ModelConfig& config) {
  std::vector<TensorSpec> out;
  for (const auto& o : config.output()) out.push_back({o.name(), dtype_from_config(o.data_type()), to_vector(o.dims())});
  return out;
}

std::vector<TensorReshape> input_reshapes(const inference::ModelConfig& config) {
  std::vector<TensorReshape> out;
  for (const auto& in : config.input())
    if (in.has_reshape()) out.push_back({in.name(), to_vector(in.dims()), to_vector(in.reshape().shape())});
  return out;
}

std::vector<TensorReshape> output_reshapes(const inference::ModelConfig& config) {
  std::vector<TensorReshape> out;
  for (const auto& o : config.output())
    if (o.has_reshape()) out.push_back({o.name(), to_vector(o.reshape().shape()), to_vector(o.dims())});
  return out;
}

StatusOr<std::vector<int64_t>> reshape_dims(const std::vector<int64_t>& shape, const std::vector<int64_t>& from,
                                            const std::vector<int64_t>& to) {
  std::vector<int64_t> any;  // shape's sizes at from's -1 dims
  if (shape.size() == from.size())
    for (size_t i = 0; i < from.size(); ++i)
      if (from[i] == -1) any.push_back(shape[i]);
  std::vector<int64_t> out = to;
  size_t k = 0;
  for (int64_t& d : out)
    if (d == -1) {
      if (k >= any.size()) return invalid_argument("dims " + dims_text(shape) + " do not match " + dims_text(from));
      d = any[k++];
    }
  int64_t a = 1, b = 1;
  for (int64_t d : shape) a *= d;
  for (int64_t d : out) b *= d;
  if (a != b) return invalid_argument("dims " + dims_text(shape) + " hold " + std::to_string(a) + " elements, not the " +
                                      std::to_string(b) + " of " + dims_text(out));
  return out;
}

std::string config_to_json(const inference::ModelConfig& config) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(config, &out, opt);
  // Protobuf's JSON writes 64-bit integers as strings ("dims": ["4"]); Triton's config endpoint
  // writes numbers, and clients read them as numbers.
  rapidjson::Document doc;
  doc.Parse(out.data(), out.size());
  if (doc.HasParseError()) return out;
  auto to_number = [](rapidjson::Value& v) {
    if (!v.IsString()) return;
    const std::string t(v.GetString(), v.GetStringLength());
    if (t.empty() || t.size() > 19 || t.find_first_not_of("-0123456789") != std::string::npos) return;
    v.SetInt64(std::stoll(t));
  };
  // Only the 64-bit fields: names and string_values that look like numbers stay strings.
  std::function<void(rapidjson::Value&)> fix = [&](rapidjson::Value& v) {
    if (v.IsArray()) {
      for (auto& e : v.GetArray()) fix(e);
      return;
    }
    if (!v.IsObject()) return;
    for (auto& m : v.GetObject()) {
      const std::string key(m.name.GetString(), m.name.GetStringLength());
      if (key == "dims" || key == "shape" || key == "versions" || key == "max_queue_delay_microseconds" || key == "default_timeout_microseconds") {
        if (m.value.IsArray())
          for (auto& e : m.value.GetArray()) to_number(e);
        else
          to_number(m.value);
      } else {
        fix(m.value);
      }
    }
  };
  fix(doc);
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  doc.Accept(w);
  return std::string(sb.GetString(), sb.GetSize());
}

StatusOr<OutputLabels> read_output_labels(const inference::ModelConfig& config, const std::string& model_dir, const std::string& where) {
  namespace fs = std::filesystem;
  OutputLabels out;
  for (const auto& o : config.output()) {
    const std::string& file = o.label_filename();
    if (file.empty()) continue;
    const std::string what = where + ": output '" + o.name() + "': label_filename '" + file + "'";
    const fs::path rel = fs::path(file).lexically_normal();
    if (rel.is_absolute() || rel.empty() || *rel.begin() == "..")
      return invalid_argument(what + " must be a path inside the model directory " + model_dir);
    const fs::path path = fs::path(model_dir) / rel;
    std::error_code ec;
    errno = 0;
    std::ifstream in;
    if (!fs::is_directory(path, ec)) in.open(path, std::ios::binary);
    if (!in.is_open()) {
      const std::string why = fs::is_directory(path, ec) ? "it is a directory" : errno ? std::strerror(errno) : "it cannot be opened";
      return not_found(what + ": cannot read " + path.string() + " (" + why + "); the labels file (one label per line) goes in the model's directory");
    }
    auto labels = std::make_shared<std::vector<std::string>>();
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      labels->push_back(std::move(line));
    }
    out[o.name()] = std::move(labels);
  }
  return out;
}

}  // namespace ferry::serve
