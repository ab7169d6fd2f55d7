// Sequence and optional ops: SequenceConstruct, SequenceEmpty, SequenceAt, SequenceInsert,
// SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap, Optional,
// OptionalHasElement, OptionalGetElement. Values travel as ferry::Value (see ir/value.h); the shape
// rules describe a sequence by its element type with kind = kSequence.
#include <cstring>

#include "ops/op_util.h"

namespace ferry {
namespace {

// ---- helpers ------------------------------------------------------------------------------------

// Copies `count` elements from src[src_off..] to dst[dst_off..] (same dtype; strings included).
void copy_elems(const Tensor& src, int64_t src_off, Tensor* dst, int64_t dst_off, int64_t count) {
  if (count <= 0) return;
  if (src.dtype() == DType::kString) {
    for (int64_t i = 0; i < count; ++i) dst->mutable_strings()[dst_off + i] = src.strings()[src_off + i];
    return;
  }
  const int64_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst->mutable_raw()) + dst_off * es, static_cast<const char*>(src.raw()) + src_off * es,
              static_cast<size_t>(count * es));
}

int64_t prod(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < d.size(); ++i) p *= d[i];
  return p;
}

// The sequence held by input i, or an error naming the input.
StatusOr<const std::vector<Tensor>*> sequence_input(const KernelContext& ctx, int64_t i, const char* what) {
  if (!ctx.has_input(i)) return ctx.error(std::string(what) + " is missing");
  const Value& v = ctx.input_value(i);
  if (!v.is_sequence()) return ctx.error(std::string(what) + " must be a sequence, got " + v.describe());
  return &v.sequence;
}

// A tensor input of a sequence op, or an error when it is a sequence or an empty optional.
StatusOr<const Tensor*> tensor_input(const KernelContext& ctx, int64_t i, const char* what) {
  const Value& v = ctx.input_value(i);
  if (!v.is_tensor()) return ctx.error(std::string(what) + " must be a tensor, got " + v.describe());
  return &v.tensor;
}

// Reads a scalar int32/int64 position and maps it into [0, n) (or [0, n] when allow_end).
StatusOr<int64_t> read_position(const KernelContext& ctx, int64_t i, int64_t n, bool allow_end) {
  ASSIGN_OR_RETURN(const Tensor* p, tensor_input(ctx, i, "position"));
  if (p->dtype() != DType::kI32 && p->dtype() != DType::kI64)
    return ctx.error(std::string("position must be int32 or int64, got ") + dtype_name(p->dtype()));
  if (p->numel() != 1 || p->rank() > 1)
    return ctx.error("position must be a scalar, got shape " + dims_to_string(p->dims()));
  const int64_t pos = p->get_int64(0);
  const int64_t hi = allow_end ? n : n - 1;
  if (pos < -n || pos > hi)
    return ctx.error("position " + std::to_string(pos) + " is out of range [" + std::to_string(-n) + ", " +
                     std::to_string(hi) + "] for a sequence of " + std::to_string(n) + " tensors");
  return pos < 0 ? pos + n : pos;
}

// Checks a position input's type in a shape rule.
Status check_position_type(const InferContext& ctx, int64_t i) {
  if (!ctx.has_input(i)) return Status::ok();
  const TensorType& t = ctx.input_type(i);
  if (t.dtype != DType::kUndefined && t.dtype != DType::kI32 && t.dtype != DType::kI64)
    return ctx.error(std::string("position must be int32 or int64, got ") + dtype_name(t.dtype));
  if (t.shape && t.shape->rank() > 1)
    return ctx.error("position must be a scalar, got shape " + t.shape->to_string());
  return Status::ok();
}

// Union of two element shapes: dims that differ become unknown; different ranks give no shape.
std::optional<Shape> union_shape(const std::optional<Shape>& a, const std::optional<Shape>& b) {
  if (!a || !b || a->rank() != b->rank()) return std::nullopt;
  Shape s = *a;
  for (int64_t i = 0; i < s.rank(); ++i)
    if (!(s.dims[i] == b->dims[i])) s.dims[i] = Dim();
  return s;
}

TensorType seq_type(DType dt, std::optional<Shape> shape) {
  TensorType t{dt, std::move(shape)};
  t.kind = ValueKind::kSequence;
  return t;
}

bool kind_is_sequence(ValueKind k) { return k == ValueKind::kSequence || k == ValueKind::kOptionalSequence; }
bool kind_is_optional(ValueKind k) { return k == ValueKind::kOptionalTensor || k == ValueKind::kOptionalSequence; }

// ---- SequenceEmpty / SequenceConstruct / SequenceLength ------------------------------------------

StatusOr<DType> empty_dtype(const AttrReader& a) {
  const int64_t code = a.get_int("dtype", 1);
  DType dt;
  if (code < 0 || code > INT32_MAX || !dtype_from_onnx(static_cast<int32_t>(code), &dt) || dt == DType::kUndefined)
    return invalid_model(a.node().describe() + ": attribute 'dtype' = " + std::to_string(code) +
                         " is not a supported element type");
  return dt;
}

Status infer_sequence_empty(InferContext& ctx) {
  ASSIGN_OR_RETURN(DType dt, empty_dtype(ctx));
  ctx.set_output(0, seq_type(dt, std::nullopt));
  return Status::ok();
}

Status k_sequence_empty(KernelContext& ctx) {
  auto dt = empty_dtype(ctx);
  if (!dt.is_ok()) return ctx.error("attribute 'dtype' is not a supported element type");
  ctx.set_output_value(0, Value::make_sequence({}));
  return Status::ok();
}

Status infer_sequence_construct(InferContext& ctx) {
  DType dt = DType::kUndefined;
  std::optional<Shape> shape;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is empty");
    const TensorType& t = ctx.input_type(i);
    if (t.kind != ValueKind::kTensor) return ctx.error("input " + std::to_string(i) + " must be a tensor, got " + t.to_string());
    if (t.dtype != DType::kUndefined) {
      if (dt != DType::kUndefined && dt != t.dtype)
        return ctx.error(std::string("all inputs must have one element type; input 0 is ") + dtype_name(dt) + ", input " +
                         std::to_string(i) + " is " + dtype_name(t.dtype));
      dt = t.dtype;
    }
    shape = i == 0 ? t.shape : union_shape(shape, t.shape);
  }
  ctx.set_output(0, seq_type(dt, shape));
  return Status::ok();
}

Status k_sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is empty");
    ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, i, ("input " + std::to_string(i)).c_str()));
    if (!items.empty() && t->dtype() != items[0].dtype())
      return ctx.error(std::string("all inputs must have one element type; input 0 is ") + dtype_name(items[0].dtype()) +
                       ", input " + std::to_string(i) + " is " + dtype_name(t->dtype()));
    items.push_back(*t);
  }
  ctx.set_output_value(0, Value::make_sequence(std::move(items)));
  return Status::ok();
}

Status infer_sequence_length(InferContext& ctx) {
  ctx.set_output(0, TensorType{DType::kI64, Shape()});
  return Status::ok();
}

Status k_sequence_length(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const std::vector<Tensor>* seq, sequence_input(ctx, 0, "input_sequence"));
  ctx.set_output(0, Tensor::scalar<int64_t>(static_cast<int64_t>(seq->size())));
  return Status::ok();
}

// ---- SequenceAt / SequenceInsert / SequenceErase ------------------------------------------------

Status infer_sequence_at(InferContext& ctx) {
  RETURN_IF_ERROR(check_position_type(ctx, 1));
  const TensorType& s = ctx.input_type(0);
  ctx.set_output(0, TensorType{s.dtype, s.shape});
  return Status::ok();
}

Status k_sequence_at(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const std::vector<Tensor>* seq, sequence_input(ctx, 0, "input_sequence"));
  ASSIGN_OR_RETURN(int64_t pos, read_position(ctx, 1, static_cast<int64_t>(seq->size()), false));
  ctx.set_output(0, (*seq)[static_cast<size_t>(pos)]);
  return Status::ok();
}

Status infer_sequence_insert(InferContext& ctx) {
  RETURN_IF_ERROR(check_position_type(ctx, 2));
  const TensorType& s = ctx.input_type(0);
  const TensorType& t = ctx.input_type(1);
  if (kind_is_sequence(t.kind)) return ctx.error("tensor (input 1) must be a tensor, got " + t.to_string());
  if (s.dtype != DType::kUndefined && t.dtype != DType::kUndefined && s.dtype != t.dtype)
    return ctx.error(std::string("tensor is ") + dtype_name(t.dtype) + " but the sequence holds " + dtype_name(s.dtype));
  // An empty sequence (SequenceEmpty) has no element shape: the insert then fixes it.
  std::optional<Shape> shape = s.shape ? union_shape(s.shape, t.shape) : std::nullopt;
  ctx.set_output(0, seq_type(s.dtype != DType::kUndefined ? s.dtype : t.dtype, shape));
  return Status::ok();
}

Status k_sequence_insert(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const std::vector<Tensor>* seq, sequence_input(ctx, 0, "input_sequence"));
  ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, 1, "tensor"));
  if (!seq->empty() && (*seq)[0].dtype() != t->dtype())
    return ctx.error(std::string("tensor is ") + dtype_name(t->dtype()) + " but the sequence holds " +
                     dtype_name((*seq)[0].dtype()));
  const int64_t n = static_cast<int64_t>(seq->size());
  int64_t pos = n;
  if (ctx.has_input(2)) {
    ASSIGN_OR_RETURN(pos, read_position(ctx, 2, n, true));
  }
  std::vector<Tensor> out = *seq;
  out.insert(out.begin() + pos, *t);
  ctx.set_output_value(0, Value::make_sequence(std::move(out)));
  return Status::ok();
}

Status infer_sequence_erase(InferContext& ctx) {
  RETURN_IF_ERROR(check_position_type(ctx, 1));
  TensorType t = ctx.input_type(0);
  t.kind = ValueKind::kSequence;
  ctx.set_output(0, t);
  return Status::ok();
}

Status k_sequence_erase(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const std::vector<Tensor>* seq, sequence_input(ctx, 0, "input_sequence"));
  const int64_t n = static_cast<int64_t>(seq->size());
  if (n == 0) return ctx.error("cannot erase from an empty sequence");
  int64_t pos = n - 1;
  if (ctx.has_input(1)) {
    ASSIGN_OR_RETURN(pos, read_position(ctx, 1, n, false));
  }
  std::vector<Tensor> out = *seq;
  out.erase(out.begin() + pos);
  ctx.set_output_value(0, Value::make_sequence(std::move(out)));
  return Status::ok();
}

// ---- SplitToSequence ---------------------------------------------------------------------------

Status infer_split_to_sequence(InferContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (ctx.has_input(1)) {
    const TensorType& st = ctx.input_type(1);
    if (st.dtype != DType::kUndefined && st.dtype != DType::kI32 && st.dtype != DType::kI64)
      return ctx.error(std::string("split must be int32 or int64, got ") + dtype_name(st.dtype));
    if (st.shape && st.shape->rank() > 1) return ctx.error("split must be a scalar or 1-D, got shape " + st.shape->to_string());
  }
  if (!in.shape) {
    ctx.set_output(0, seq_type(in.dtype, std::nullopt));
    return Status::ok();
  }
  const int64_t r = in.shape->rank();
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, r))
    return ctx.error("axis " + std::to_string(axis) + " is out of range for input of rank " + std::to_string(r));
  const Dim& d = in.shape->dims[axis];
  Shape out = *in.shape;
  if (!ctx.has_input(1)) {
    if (ctx.get_int("keepdims", 1)) out.dims[axis] = Dim(1);
    else out.dims.erase(out.dims.begin() + axis);
    ctx.set_output(0, seq_type(in.dtype, out));
    return Status::ok();
  }
  Dim chunk;  // the common chunk length when every chunk is the same
  if (const Tensor* split = ctx.input_value(1)) {
    std::vector<int64_t> s = split->to_int64_vector();
    if (s.empty()) return ctx.error("split must not be empty");
    if (split->rank() == 0) {
      if (s[0] <= 0) return ctx.error("split must be positive, got " + std::to_string(s[0]));
      if (d.is_known() && d.value % s[0] == 0) chunk = Dim(s[0]);
    } else {
      int64_t sum = 0;
      for (int64_t v : s) {
        if (v < 0) return ctx.error("split values must be >= 0, got " + std::to_string(v));
        sum += v;
      }
      if (d.is_known() && sum != d.value)
        return ctx.error("split values sum to " + std::to_string(sum) + " but the input has " + std::to_string(d.value) +
                         " along axis " + std::to_string(axis));
      bool same = true;
      for (int64_t v : s) same &= v == s[0];
      if (same) chunk = Dim(s[0]);
    }
  }
  out.dims[axis] = chunk;
  ctx.set_output(0, seq_type(in.dtype, out));
  return Status::ok();
}

// The part [start, start + len) of t along axis.
Tensor slice_axis(const Tensor& t, int64_t axis, int64_t start, int64_t len) {
  std::vector<int64_t> dims = t.dims();
  const int64_t outer = prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  const int64_t n = dims[axis];
  dims[axis] = len;
  Tensor out = Tensor::allocate(t.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) copy_elems(t, (o * n + start) * inner, &out, o * len * inner, len * inner);
  return out;
}

Status k_split_to_sequence(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, in.rank()))
    return ctx.error("axis " + std::to_string(ctx.get_int("axis", 0)) + " is out of range for input of rank " +
                     std::to_string(in.rank()));
  const int64_t dim = in.dim(axis);
  std::vector<int64_t> lengths;
  bool squeeze = false;
  if (!ctx.has_input(1)) {
    lengths.assign(static_cast<size_t>(dim), 1);
    squeeze = ctx.get_int("keepdims", 1) == 0;
  } else {
    const Tensor& split = ctx.input(1);
    if (split.dtype() != DType::kI32 && split.dtype() != DType::kI64)
      return ctx.error(std::string("split must be int32 or int64, got ") + dtype_name(split.dtype()));
    if (split.rank() > 1) return ctx.error("split must be a scalar or 1-D, got shape " + dims_to_string(split.dims()));
    std::vector<int64_t> s = split.to_int64_vector();
    if (s.empty()) return ctx.error("split must not be empty");
    if (split.rank() == 0) {
      if (s[0] <= 0) return ctx.error("split must be positive, got " + std::to_string(s[0]));
      for (int64_t p = 0; p < dim; p += s[0]) lengths.push_back(std::min(s[0], dim - p));
    } else {
      int64_t sum = 0;
      for (int64_t v : s) {
        if (v < 0) return ctx.error("split values must be >= 0, got " + std::to_string(v));
        if (v > dim) return ctx.error("split value " + std::to_string(v) + " exceeds the axis length " + std::to_string(dim));
        sum += v;
      }
      if (sum != dim)
        return ctx.error("split values sum to " + std::to_string(sum) + " but the input has " + std::to_string(dim) +
                         " along axis " + std::to_string(axis));
      lengths = s;
    }
  }
  std::vector<Tensor> items;
  items.reserve(lengths.size());
  int64_t start = 0;
  for (int64_t len : lengths) {
    Tensor part = slice_axis(in, axis, start, len);
    if (squeeze) {
      std::vector<int64_t> d = part.dims();
      d.erase(d.begin() + axis);
      part = part.reshaped(d);
    }
    items.push_back(std::move(part));
    start += len;
  }
  ctx.set_output_value(0, Value::make_sequence(std::move(items)));
  return Status::ok();
}

// ---- ConcatFromSequence ------------------------------------------------------------------------

Status infer_concat_from_sequence(InferContext& ctx) {
  const TensorType& s = ctx.input_type(0);
  const int64_t new_axis = ctx.get_int("new_axis", 0);
  if (new_axis != 0 && new_axis != 1) return ctx.error("new_axis must be 0 or 1, got " + std::to_string(new_axis));
  if (!ctx.has("axis")) return ctx.error("attribute 'axis' is required");
  TensorType out{s.dtype, std::nullopt};
  if (s.shape) {
    const int64_t r = s.shape->rank();
    int64_t axis = ctx.get_int("axis", 0);
    if (!normalize_axis(&axis, r + new_axis))
      return ctx.error("axis " + std::to_string(ctx.get_int("axis", 0)) + " is out of range for " +
                       (new_axis ? "stacking" : "concatenating") + " tensors of rank " + std::to_string(r));
    Shape o = *s.shape;
    if (new_axis) o.dims.insert(o.dims.begin() + axis, Dim());
    else o.dims[axis] = Dim();  // the number of elements is not known before running
    out.shape = o;
  }
  ctx.set_output(0, out);
  return Status::ok();
}

Status k_concat_from_sequence(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const std::vector<Tensor>* seq, sequence_input(ctx, 0, "input_sequence"));
  const int64_t new_axis = ctx.get_int("new_axis", 0);
  if (new_axis != 0 && new_axis != 1) return ctx.error("new_axis must be 0 or 1, got " + std::to_string(new_axis));
  if (!ctx.has("axis")) return ctx.error("attribute 'axis' is required");
  if (seq->empty()) return ctx.error("input_sequence is empty; there is nothing to concatenate");
  const Tensor& first = (*seq)[0];
  const int64_t r = first.rank();
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, r + new_axis))
    return ctx.error("axis " + std::to_string(ctx.get_int("axis", 0)) + " is out of range for " +
                     (new_axis ? "stacking" : "concatenating") + " tensors of rank " + std::to_string(r));
  // With new_axis every item is viewed with a 1 inserted at `axis`; then it is a plain concat.
  std::vector<int64_t> out_dims = first.dims();
  if (new_axis) out_dims.insert(out_dims.begin() + axis, 0);
  else out_dims[axis] = 0;
  for (size_t k = 0; k < seq->size(); ++k) {
    const Tensor& t = (*seq)[k];
    if (t.dtype() != first.dtype())
      return ctx.error("sequence item " + std::to_string(k) + " is " + dtype_name(t.dtype()) + ", item 0 is " +
                       dtype_name(first.dtype()));
    bool ok = t.rank() == r;
    for (int64_t i = 0; ok && i < r; ++i)
      if ((new_axis || i != axis) && t.dim(i) != first.dim(i)) ok = false;
    if (!ok)
      return ctx.error("sequence item " + std::to_string(k) + " has shape " + dims_to_string(t.dims()) +
                       ", incompatible with item 0's " + dims_to_string(first.dims()) + " for axis " + std::to_string(axis));
    out_dims[axis] += new_axis ? 1 : t.dim(axis);
  }
  ASSIGN_OR_RETURN(Tensor* out, ctx.allocate_output(0, first.dtype(), out_dims));
  const int64_t outer = prod(out_dims, 0, static_cast<size_t>(axis));
  const int64_t out_row = prod(out_dims, static_cast<size_t>(axis), out_dims.size());
  int64_t col = 0;  // offset of this item's block within one output row
  for (const Tensor& t : *seq) {
    const int64_t block = outer ? t.numel() / outer : 0;  // elements of t per outer index
    for (int64_t o = 0; o < outer; ++o) copy_elems(t, o * block, out, o * out_row + col, block);
    col += block;
  }
  return Status::ok();
}

// ---- SequenceMap -------------------------------------------------------------------------------

TensorType body_output(const Graph& g, size_t i) {
  const TensorType* t = g.find_type(g.outputs[i].name);
  TensorType r = t ? *t : g.outputs[i].type;
  if (r.dtype == DType::kUndefined) r.dtype = g.outputs[i].type.dtype;
  if (!r.shape) r.shape = g.outputs[i].type.shape;
  return r;
}

Status infer_sequence_map(InferContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph is required");
  if (body->inputs.size() != static_cast<size_t>(ctx.num_inputs()))
    return ctx.error("body takes " + std::to_string(body->inputs.size()) + " inputs but the node has " +
                     std::to_string(ctx.num_inputs()));
  if (body->outputs.size() != static_cast<size_t>(ctx.num_outputs()))
    return ctx.error("body has " + std::to_string(body->outputs.size()) + " outputs but the node has " +
                     std::to_string(ctx.num_outputs()));
  for (int64_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is empty");
  // Unknown types read as kTensor: only a known optional type is surely wrong here.
  if (kind_is_optional(ctx.input_type(0).kind))
    return ctx.error("input_sequence must be a sequence, got " + ctx.input_type(0).to_string());
  for (int64_t i = 0; i < ctx.num_outputs(); ++i) {
    TensorType b = body_output(*body, static_cast<size_t>(i));
    ctx.set_output(i, seq_type(b.dtype, b.shape));
  }
  return Status::ok();
}

Status k_sequence_map(KernelContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph missing");
  const int64_t nin = ctx.num_inputs();
  if (static_cast<int64_t>(body->inputs.size()) != nin)
    return ctx.error("body takes " + std::to_string(body->inputs.size()) + " inputs but the node has " + std::to_string(nin));
  if (static_cast<int64_t>(body->outputs.size()) != ctx.num_outputs())
    return ctx.error("body has " + std::to_string(body->outputs.size()) + " outputs but the node has " +
                     std::to_string(ctx.num_outputs()));
  ASSIGN_OR_RETURN(const std::vector<Tensor>* first, sequence_input(ctx, 0, "input_sequence"));
  const size_t n = first->size();
  for (int64_t i = 1; i < nin; ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is empty");
    const Value& v = ctx.input_value(i);
    if (!v.has_element) return ctx.error("input " + std::to_string(i) + " is an empty optional");
    if (v.is_sequence() && v.sequence.size() != n)
      return ctx.error("input " + std::to_string(i) + " is a sequence of " + std::to_string(v.sequence.size()) +
                       " tensors but input_sequence has " + std::to_string(n));
  }
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(ctx.num_outputs()));
  for (size_t k = 0; k < n; ++k) {
    std::vector<Value> in;
    in.reserve(static_cast<size_t>(nin));
    for (int64_t i = 0; i < nin; ++i) {
      const Value& v = ctx.input_value(i);
      if (v.is_sequence()) in.push_back(Value(v.sequence[k]));
      else in.push_back(Value(v.tensor));
    }
    std::vector<Value> out;
    RETURN_IF_ERROR(ctx.run_subgraph(*body, in, &out));
    if (out.size() != outs.size()) return ctx.error("body returned the wrong number of outputs");
    for (size_t j = 0; j < out.size(); ++j) {
      if (!out[j].is_tensor()) return ctx.error("body output " + std::to_string(j) + " is " + out[j].describe() + ", not a tensor");
      outs[j].push_back(out[j].tensor);
    }
  }
  for (size_t j = 0; j < outs.size(); ++j) ctx.set_output_value(static_cast<int64_t>(j), Value::make_sequence(std::move(outs[j])));
  return Status::ok();
}

// ---- Optional / OptionalHasElement / OptionalGetElement ----------------------------------------

Status infer_optional(InferContext& ctx) {
  TensorType t;
  if (ctx.has_input(0)) {
    t = ctx.input_type(0);
    if (kind_is_optional(t.kind)) return ctx.error("input must be a tensor or a sequence, got " + t.to_string());
  } else {
    const Attribute* a = ctx.node().attr("type");
    if (!a || a->type != AttrType::kTypeProto) return ctx.error("needs an input or the 'type' attribute");
    t = a->tp;
    if (kind_is_optional(t.kind)) return ctx.error("attribute 'type' must be a tensor or sequence type, got " + t.to_string());
  }
  t.kind = kind_is_sequence(t.kind) ? ValueKind::kOptionalSequence : ValueKind::kOptionalTensor;
  ctx.set_output(0, t);
  return Status::ok();
}

Status k_optional(KernelContext& ctx) {
  if (ctx.has_input(0)) {
    Value v = ctx.input_value(0);
    if (!v.has_element) return ctx.error("input must be a tensor or a sequence, got an empty optional");
    v.kind = v.is_sequence() ? ValueKind::kOptionalSequence : ValueKind::kOptionalTensor;
    ctx.set_output_value(0, std::move(v));
    return Status::ok();
  }
  const Attribute* a = ctx.node().attr("type");
  if (!a || a->type != AttrType::kTypeProto) return ctx.error("needs an input or the 'type' attribute");
  ctx.set_output_value(0, Value::none(kind_is_sequence(a->tp.kind) ? ValueKind::kOptionalSequence : ValueKind::kOptionalTensor));
  return Status::ok();
}

Status infer_optional_has_element(InferContext& ctx) {
  if (ctx.opset() < 18 && ctx.has_input(0)) {
    const TensorType& t = ctx.input_type(0);
    if (!kind_is_optional(t.kind) && t.dtype != DType::kUndefined)
      return ctx.error("input must be an optional before opset 18, got " + t.to_string());
  }
  ctx.set_output(0, TensorType{DType::kBool, Shape()});
  return Status::ok();
}

Status k_optional_has_element(KernelContext& ctx) {
  // A graph input declared optional may be fed a plain tensor or sequence: that has an element.
  const bool has = ctx.has_input(0) && ctx.input_value(0).has_element;
  ctx.set_output(0, Tensor::scalar<bool>(has));
  return Status::ok();
}

Status infer_optional_get_element(InferContext& ctx) {
  TensorType t = ctx.input_type(0);
  if (ctx.opset() < 18 && !kind_is_optional(t.kind) && t.dtype != DType::kUndefined)
    return ctx.error("input must be an optional before opset 18, got " + t.to_string());
  t.kind = kind_is_sequence(t.kind) ? ValueKind::kSequence : ValueKind::kTensor;
  ctx.set_output(0, t);
  return Status::ok();
}

Status k_optional_get_element(KernelContext& ctx) {
  Value v = ctx.input_value(0);
  if (!v.has_element) return ctx.error("the optional input is empty");
  v.kind = v.is_sequence() ? ValueKind::kSequence : ValueKind::kTensor;
  ctx.set_output_value(0, std::move(v));
  return Status::ok();
}

constexpr int kMany = 1 << 16;

}  // namespace

void register_sequence_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "SequenceEmpty", .since_version = 11, .min_inputs = 0, .max_inputs = 0,
                 .attrs = {{"dtype", AttrType::kInt}}, .infer = infer_sequence_empty, .kernel = k_sequence_empty,
                 .accepts_sequences = true});
  r.add(OpSchema{.name = "SequenceConstruct", .since_version = 11, .min_inputs = 1, .max_inputs = kMany,
                 .infer = infer_sequence_construct, .kernel = k_sequence_construct, .accepts_sequences = true});
  r.add(OpSchema{.name = "SequenceLength", .since_version = 11, .infer = infer_sequence_length,
                 .kernel = k_sequence_length, .accepts_sequences = true});
  r.add(OpSchema{.name = "SequenceAt", .since_version = 11, .min_inputs = 2, .max_inputs = 2, .infer = infer_sequence_at,
                 .kernel = k_sequence_at, .accepts_sequences = true});
  r.add(OpSchema{.name = "SequenceInsert", .since_version = 11, .min_inputs = 2, .max_inputs = 3,
                 .infer = infer_sequence_insert, .kernel = k_sequence_insert, .accepts_sequences = true});
  r.add(OpSchema{.name = "SequenceErase", .since_version = 11, .min_inputs = 1, .max_inputs = 2,
                 .infer = infer_sequence_erase, .kernel = k_sequence_erase, .accepts_sequences = true});
  r.add(OpSchema{.name = "SplitToSequence", .since_version = 11, .min_inputs = 1, .max_inputs = 2,
                 .attrs = {{"axis", AttrType::kInt}, {"keepdims", AttrType::kInt}}, .infer = infer_split_to_sequence,
                 .kernel = k_split_to_sequence});
  r.add(OpSchema{.name = "ConcatFromSequence", .since_version = 11,
                 .attrs = {{"axis", AttrType::kInt, true}, {"new_axis", AttrType::kInt}},
                 .infer = infer_concat_from_sequence, .kernel = k_concat_from_sequence, .accepts_sequences = true});
  r.add(OpSchema{.name = "SequenceMap", .since_version = 17, .min_inputs = 1, .max_inputs = kMany, .min_outputs = 1,
                 .max_outputs = kMany, .attrs = {{"body", AttrType::kGraph, true}}, .infer = infer_sequence_map,
                 .kernel = k_sequence_map, .accepts_sequences = true});
  r.add(OpSchema{.name = "Optional", .since_version = 15, .min_inputs = 0, .max_inputs = 1,
                 .attrs = {{"type", AttrType::kTypeProto}}, .infer = infer_optional, .kernel = k_optional,
                 .accepts_sequences = true});
  r.add(OpSchema{.name = "OptionalHasElement", .since_version = 15, .infer = infer_optional_has_element,
                 .kernel = k_optional_has_element, .accepts_sequences = true});
  r.add(OpSchema{.name = "OptionalHasElement", .since_version = 18, .min_inputs = 0, .max_inputs = 1,
                 .infer = infer_optional_has_element, .kernel = k_optional_has_element, .accepts_sequences = true});
  r.add(OpSchema{.name = "OptionalGetElement", .since_version = 15, .infer = infer_optional_get_element,
                 .kernel = k_optional_get_element, .accepts_sequences = true});
  r.add(OpSchema{.name = "OptionalGetElement", .since_version = 18, .infer = infer_optional_get_element,
                 .kernel = k_optional_get_element, .accepts_sequences = true});
}

}  // namespace ferry
