// TensorProto -> Tensor (inline fields, raw_data, external data files) and the .pb files of the
// ONNX test data sets (TensorProto, SequenceProto, OptionalProto).
#include "onnx/tensor_proto.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "onnx/onnx_import.h"
// After onnx_pb.h (tensor_proto.h), which defines ONNX_API.
#include "onnx/onnx-data.pb.h"

namespace ferry {

bool parse_model_proto(google::protobuf::io::ZeroCopyInputStream* in, onnx::ModelProto* mp) {
  google::protobuf::io::CodedInputStream coded(in);
  coded.SetTotalBytesLimit(INT_MAX);
  coded.SetRecursionLimit(200);
  return mp->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}

bool parse_model_proto(const void* data, size_t size, onnx::ModelProto* mp) {
  if (size > static_cast<size_t>(INT_MAX)) return false;
  google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
  return parse_model_proto(&raw, mp);
}

namespace {

Status read_external(TensorSource& st, const onnx::TensorProto& tp, const std::string& what, DType dtype,
                     const std::vector<int64_t>& dims, int64_t nbytes, Tensor* out) {
  if (st.base_dir.empty())
    return invalid_model(what + ": uses external data, but the model was not loaded from a file");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    const std::string& k = kv.key();
    const std::string& v = kv.value();
    if (k == "location") {
      location = v;
    } else if (k == "offset" || k == "length") {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || x < 0)
        return invalid_model(what + ": external data " + k + " '" + v + "' is not a non-negative integer");
      (k == "offset" ? offset : length) = x;
    }
  }
  ASSIGN_OR_RETURN(std::string path, resolve_inside(st.base_dir, location, what));
  auto it = st.external_files.find(path);
  if (it == st.external_files.end()) {
    ASSIGN_OR_RETURN(FileBytes f, map_file(path, std::numeric_limits<int64_t>::max(), what + " external data"));
    it = st.external_files.emplace(path, f).first;
  }
  const FileBytes& f = it->second;
  if (length < 0) length = static_cast<int64_t>(f.size) - offset;
  if (offset > static_cast<int64_t>(f.size) || length > static_cast<int64_t>(f.size) - offset)
    return invalid_model(what + ": external data range [offset " + std::to_string(offset) + ", length " +
                         std::to_string(length) + "] runs past the end of '" + location + "' (" +
                         std::to_string(f.size) + " bytes)");
  if (length != nbytes)
    return invalid_model(what + ": external data holds " + std::to_string(length) + " bytes but shape " +
                         dims_to_string(dims) + " of " + dtype_name(dtype) + " needs " + std::to_string(nbytes));
  const uint8_t* p = f.data + offset;
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(std::max<int64_t>(dtype_size(dtype), 1)) == 0) {
    *out = Tensor::wrap(dtype, dims, f.owner, p);  // zero copy
  } else {
    ASSIGN_OR_RETURN(*out, Tensor::create(dtype, dims, what));
    if (nbytes) std::memcpy(out->mutable_raw(), p, static_cast<size_t>(nbytes));
  }
  return Status::ok();
}

template <typename Field, typename T>
Status copy_field(const Field& field, int64_t n, const std::string& what, const char* field_name, T* dst) {
  if (static_cast<int64_t>(field.size()) != n)
    return invalid_model(what + ": " + field_name + " holds " + std::to_string(field.size()) +
                         " values but the shape needs " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(field.Get(static_cast<int>(i)));
  return Status::ok();
}

// The values a TensorProto holds in the field its element type uses (raw_data counts in bytes
// and is checked by the caller), and that field's name.
std::pair<int64_t, const char*> stored_values(const onnx::TensorProto& tp, DType dtype) {
  switch (dtype) {
    case DType::kF32: return {tp.float_data_size(), "float_data"};
    case DType::kF64: return {tp.double_data_size(), "double_data"};
    case DType::kI64: return {tp.int64_data_size(), "int64_data"};
    case DType::kU64: case DType::kU32: return {tp.uint64_data_size(), "uint64_data"};
    case DType::kString: return {tp.string_data_size(), "string_data"};
    default: return {tp.int32_data_size(), "int32_data"};
  }
}

}  // namespace

StatusOr<Tensor> tensor_from_proto(TensorSource* st, const onnx::TensorProto& tp, const std::string& what_in,
                                   const std::string_view* raw_view) {
  const bool has_raw = raw_view || tp.has_raw_data();
  const std::string_view raw = raw_view ? *raw_view : std::string_view(tp.raw_data());
  const std::string what = what_in.empty() ? "tensor '" + tp.name() + "'" : what_in;
  DType dtype;
  if (!dtype_from_onnx(tp.data_type(), &dtype))
    return unsupported(what + ": element type " + std::to_string(tp.data_type()) +
                       " (ONNX TensorProto.DataType) is not supported; ferry supports f32, f16, bf16, f64, "
                       "(u)int8/16/32/64, bool, string");
  if (tp.has_segment()) return unsupported(what + ": segmented tensors are not supported");
  std::vector<int64_t> dims(tp.dims().begin(), tp.dims().end());
  ASSIGN_OR_RETURN(int64_t n, checked_element_count(dims, what));
  const int64_t nbytes = n * dtype_size(dtype);
  if (st) {
    st->weight_bytes += nbytes;
    if (st->weight_bytes > st->max_weight_bytes)
      return resource_exhausted(what + ": initializers exceed the weight limit of " +
                                std::to_string(st->max_weight_bytes) + " bytes");
  }
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    if (dtype == DType::kString) return invalid_model(what + ": string tensors cannot use external data");
    if (!st) return invalid_model(what + ": external data is not allowed here");
    Tensor t;
    RETURN_IF_ERROR(read_external(*st, tp, what, dtype, dims, nbytes, &t));
    return t;
  }
  // Check the data against the shape before allocating: a few bytes must not declare gigabytes.
  if (has_raw && dtype != DType::kString) {
    if (static_cast<int64_t>(raw.size()) != nbytes)
      return invalid_model(what + ": raw_data holds " + std::to_string(raw.size()) + " bytes but shape " +
                           dims_to_string(dims) + " of " + dtype_name(dtype) + " needs " + std::to_string(nbytes));
  } else if (auto [count, field] = stored_values(tp, dtype); count != n) {
    return invalid_model(what + ": " + field + " holds " + std::to_string(count) + " values but shape " +
                         dims_to_string(dims) + " needs " + std::to_string(n));
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::create(dtype, dims, what));
  if (dtype == DType::kString) {
    if (tp.string_data_size() != n)
      return invalid_model(what + ": string_data holds " + std::to_string(tp.string_data_size()) +
                           " strings but the shape needs " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) t.mutable_strings()[i] = tp.string_data(static_cast<int>(i));
    return t;
  }
  if (has_raw) {
    if (static_cast<int64_t>(raw.size()) != nbytes)
      return invalid_model(what + ": raw_data holds " + std::to_string(raw.size()) + " bytes but shape " +
                           dims_to_string(dims) + " of " + dtype_name(dtype) + " needs " + std::to_string(nbytes));
    if (nbytes) std::memcpy(t.mutable_raw(), raw.data(), static_cast<size_t>(nbytes));
    if (dtype == DType::kBool)  // normalise to 0/1 so bool reads are defined
      for (int64_t i = 0; i < n; ++i) t.mutable_data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
    return t;
  }
  switch (dtype) {
    case DType::kF32: RETURN_IF_ERROR(copy_field(tp.float_data(), n, what, "float_data", t.mutable_data<float>())); break;
    case DType::kF64: RETURN_IF_ERROR(copy_field(tp.double_data(), n, what, "double_data", t.mutable_data<double>())); break;
    case DType::kI64: RETURN_IF_ERROR(copy_field(tp.int64_data(), n, what, "int64_data", t.mutable_data<int64_t>())); break;
    case DType::kU64: RETURN_IF_ERROR(copy_field(tp.uint64_data(), n, what, "uint64_data", t.mutable_data<uint64_t>())); break;
    case DType::kU32: RETURN_IF_ERROR(copy_field(tp.uint64_data(), n, what, "uint64_data", t.mutable_data<uint32_t>())); break;
    case DType::kI32: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<int32_t>())); break;
    case DType::kI16: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<int16_t>())); break;
    case DType::kU16: case DType::kF16: case DType::kBF16:
      RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<uint16_t>())); break;
    case DType::kI8: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<int8_t>())); break;
    case DType::kU8: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<uint8_t>())); break;
    case DType::kBool: {
      if (tp.int32_data_size() != n)
        return invalid_model(what + ": int32_data holds " + std::to_string(tp.int32_data_size()) +
                             " values but the shape needs " + std::to_string(n));
      for (int64_t i = 0; i < n; ++i) t.mutable_data<bool>()[i] = tp.int32_data(static_cast<int>(i)) != 0;
      break;
    }
    default: return unsupported(what + ": element type not supported");
  }
  return t;
}

namespace {
StatusOr<Tensor> parse_tensor_pb_in(const void* data, size_t size, const std::string& base_dir, const std::string& what,
                                    std::string* name) {
  if (size > static_cast<size_t>(INT_MAX)) return invalid_argument(what + " is larger than 2 GiB, the limit of a TensorProto");
  onnx::TensorProto tp;
  google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  if (!tp.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return invalid_argument(what + " is not a valid ONNX TensorProto (.pb)");
  if (name) *name = tp.name();
  TensorSource st;
  st.base_dir = base_dir;
  ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(&st, tp, what));
  if (!st.external_files.empty()) t = t.clone();  // do not keep the mapping alive
  return t;
}
}  // namespace

StatusOr<Tensor> read_tensor_pb(const std::string& path, std::string* name) {
  ASSIGN_OR_RETURN(FileBytes f, map_file(path, INT_MAX, "tensor file"));
  return parse_tensor_pb_in(f.data, f.size, dir_name(path), "tensor file '" + path + "'", name);
}

StatusOr<Tensor> parse_tensor_pb(const void* data, size_t size, const std::string& what, std::string* name) {
  ASSIGN_OR_RETURN(Tensor t, parse_tensor_pb_in(data, size, "", what, name));
  return t.clone();  // own the bytes: `data` may go away
}

namespace {
StatusOr<Value> value_from_sequence(TensorSource* st, const onnx::SequenceProto& sp, const std::string& what) {
  if (sp.elem_type() != onnx::SequenceProto::TENSOR && sp.elem_type() != onnx::SequenceProto::UNDEFINED)
    return unsupported(what + ": only sequences of tensors are supported");
  std::vector<Tensor> items;
  for (const auto& tp : sp.tensor_values()) {
    ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(st, tp, what));
    items.push_back(std::move(t));
  }
  return Value::make_sequence(std::move(items));
}
}  // namespace

StatusOr<Value> read_value_pb(const std::string& path, ValueKind kind, std::string* name) {
  if (kind == ValueKind::kTensor) {
    ASSIGN_OR_RETURN(Tensor t, read_tensor_pb(path, name));
    return Value(std::move(t));
  }
  ASSIGN_OR_RETURN(FileBytes f, map_file(path, INT_MAX, "value file"));
  google::protobuf::io::ArrayInputStream raw(f.data, static_cast<int>(f.size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  const std::string what = "value file '" + path + "'";
  if (kind == ValueKind::kSequence) {
    onnx::SequenceProto sp;
    if (!sp.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
      return invalid_argument(what + " is not a valid ONNX SequenceProto");
    if (name) *name = sp.name();
    return value_from_sequence(nullptr, sp, what);
  }
  onnx::OptionalProto op;
  if (!op.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return invalid_argument(what + " is not a valid ONNX OptionalProto");
  if (name) *name = op.name();
  if (op.has_tensor_value()) {
    ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(nullptr, op.tensor_value(), what));
    Value v(std::move(t));
    v.kind = ValueKind::kOptionalTensor;
    return v;
  }
  if (op.has_sequence_value()) {
    ASSIGN_OR_RETURN(Value v, value_from_sequence(nullptr, op.sequence_value(), what));
    v.kind = ValueKind::kOptionalSequence;
    return v;
  }
  return Value::none(kind);
}

Status write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto tp;
  tp.set_name(name);
  tp.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) tp.add_dims(d);
  if (t.dtype() == DType::kString) {
    for (const std::string& s : t.strings()) tp.add_string_data(s);
  } else {
    tp.set_raw_data(std::string(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes())));
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !tp.SerializeToOstream(&out)) return invalid_argument("cannot write '" + path + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return invalid_argument("cannot write '" + path + "'");
  return Status::ok();
}

}  // namespace ferry
