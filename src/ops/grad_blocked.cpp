// Op family 'grad_blocked' (domain com.ferry, see op_families.inc): training activations in oneDNN's
// blocked layout nChwBc (B = 16, or 8 on AVX2 CPUs: the attribute `block`, default 16), held as the
// logical shape [N, C/B, H, W, B] (ops/blocked_layout.h; written by the pass train_blocked_layout,
// src/passes/train_blocked_layout.cpp):
//   ToBlocked(X [N, C, H, W]; block) -> [N, C/B, H, W, B] and FromBlocked (the inverse, B from its
//       input's shape): the region's edges (any element type; C % B == 0);
//   Blocked(inputs...; op, op_domain, op_opset, blocked_inputs, blocked_outputs, the op's own
//       attributes) -> outputs: runs op (Conv, FusedConv, ConvGrad, BatchNormTraining,
//       BatchNormTrainingGrad) with input i held blocked where bit i of blocked_inputs is set and
//       output j written blocked (in blocks of `block`) where bit j of blocked_outputs is set; the
//       blocked inputs have the same block. Its shape rule is the op's on
//       the plain shapes; its reference kernel converts the blocked inputs to plain copies, runs the
//       op's reference kernel and converts the blocked outputs back (the oracle; the cpu backend runs
//       the blocked tensors directly: dnnl_conv_grad.cpp, grad_blocked.cpp).
#include <string>
#include <vector>

#include "ops/blocked_layout.h"
#include "ops/op_util.h"
#include "ops/registry.h"

namespace ferry {
namespace {

using std::vector;

// The node's `block` (16 when absent), checked.
StatusOr<int64_t> block_of(const Node& n) {
  const int64_t b = node_layout_block(n);
  if (!valid_layout_block(b))
    return invalid_model(n.describe() + ": attribute 'block' is " + std::to_string(b) + "; the blocked layouts have 8 or 16");
  return b;
}

Status check_plain(const InferContext& ctx, const TensorType& t, const char* what, int64_t block) {
  if (!t.shape) return Status::ok();
  if (t.shape->rank() < 3)
    return ctx.error(std::string(what) + " must have rank >= 3 (N x C x spatial), got " + t.shape->to_string());
  const Dim& c = t.shape->dims[1];
  if (c.is_known() && c.value % block != 0)
    return ctx.error(std::string(what) + " has " + std::to_string(c.value) + " channels, not a multiple of " +
                     std::to_string(block) + " (the blocked layout needs whole blocks)");
  return Status::ok();
}

// `block` 0: 8 or 16, as the shape says.
Status check_blocked(const InferContext& ctx, const TensorType& t, const char* what, int64_t block) {
  if (!t.shape) return Status::ok();
  const Dim* last = t.shape->rank() >= 4 ? &t.shape->dims.back() : nullptr;
  if (!last || (last->is_known() && (block ? last->value != block : !valid_layout_block(last->value))))
    return ctx.error(std::string(what) + " must be blocked [N, C/B, spatial..., B] with B = " +
                     (block ? std::to_string(block) : std::string("8 or 16")) + ", got " + t.shape->to_string());
  return Status::ok();
}

TensorType blocked_type(const TensorType& t, int64_t block) {
  if (!t.shape) return t;
  TensorType b = t;
  b.shape->dims[1] = t.shape->dims[1].is_known() ? Dim(t.shape->dims[1].value / block) : Dim();
  b.shape->dims.push_back(Dim(block));
  return b;
}

TensorType plain_type(const TensorType& b, int64_t block) {
  if (!b.shape) return b;
  TensorType t = b;
  if (t.shape->dims.back().is_known()) block = t.shape->dims.back().value;
  t.shape->dims.pop_back();
  t.shape->dims[1] = b.shape->dims[1].is_known() ? Dim(b.shape->dims[1].value * block) : Dim();
  return t;
}

Status infer_to_blocked(InferContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t block, block_of(ctx.node()));
  RETURN_IF_ERROR(check_plain(ctx, ctx.input_type(0), "input X", block));
  ctx.set_output(0, blocked_type(ctx.input_type(0), block));
  return Status::ok();
}

Status infer_from_blocked(InferContext& ctx) {
  RETURN_IF_ERROR(check_blocked(ctx, ctx.input_type(0), "input X", 0));
  ctx.set_output(0, plain_type(ctx.input_type(0), kLayoutBlock));
  return Status::ok();
}

// The plain [N, C, S] of a tensor given blocked (`blocked`) or plain.
void nc_s(const vector<int64_t>& plain, int64_t* N, int64_t* C, int64_t* S) {
  *N = plain[0];
  *C = plain[1];
  *S = 1;
  for (size_t i = 2; i < plain.size(); ++i) *S *= plain[i];
}

// A blocked tensor [N, C/B, spatial..., B] to its plain copy (B its last dim).
StatusOr<Tensor> to_plain_copy(const Tensor& t) {
  const vector<int64_t> plain = plain_dims(t.dims());
  ASSIGN_OR_RETURN(Tensor out, Tensor::create(t.dtype(), plain, "layout copy"));
  int64_t N, C, S;
  nc_s(plain, &N, &C, &S);
  convert_blocked(t.raw(), out.mutable_raw(), N, C, S, dtype_size(t.dtype()), true, t.dims().back());
  return out;
}

Status k_layout(KernelContext& ctx, bool to_plain) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kString) return ctx.error("string tensors have no blocked layout");
  ASSIGN_OR_RETURN(int64_t block, block_of(ctx.node()));
  if (to_plain && x.rank() >= 4) block = x.dims().back();
  if (to_plain ? (x.rank() < 4 || !valid_layout_block(block)) : (x.rank() < 3 || x.dim(1) % block != 0))
    return ctx.error("input X " + dims_to_string(x.dims()) +
                     (to_plain ? " is not blocked [N, C/B, spatial..., B] (B = 8 or 16)"
                               : " has no whole blocks of " + std::to_string(block) + " channels"));
  const vector<int64_t> plain = to_plain ? plain_dims(x.dims()) : x.dims();
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), to_plain ? plain : blocked_dims(x.dims(), block), false));
  int64_t N, C, S;
  nc_s(plain, &N, &C, &S);
  convert_blocked(x.raw(), y->mutable_raw(), N, C, S, dtype_size(x.dtype()), to_plain, block);
  return Status::ok();
}

Status k_to_blocked(KernelContext& ctx) { return k_layout(ctx, false); }
Status k_from_blocked(KernelContext& ctx) { return k_layout(ctx, true); }

// The node Blocked runs: its op, without the wrapper's attributes.
StatusOr<Node> inner_node(const Node& n) {
  Node in = n;
  const Attribute* op = n.attr("op");
  if (!op || op->s.empty()) return invalid_model(n.describe() + ": com.ferry Blocked needs the attribute 'op'");
  const Attribute* dom = n.attr("op_domain");
  in.op_type = op->s;
  in.domain = dom ? dom->s : "";
  if (in.domain == "com.ferry" && in.op_type == "Blocked")
    return invalid_model(n.describe() + ": com.ferry Blocked cannot wrap itself");
  for (const char* a : {"op", "op_domain", "op_opset", "blocked_inputs", "blocked_outputs", "bf16_inputs", "bf16_outputs", "block"})
    in.attrs.erase(a);
  return in;
}

int64_t inner_opset(const Node& n) {
  const Attribute* a = n.attr("op_opset");
  return a ? a->i : 1;
}

Status infer_blocked(InferContext& ctx) {
  ASSIGN_OR_RETURN(Node in, inner_node(ctx.node()));
  ASSIGN_OR_RETURN(const int64_t block, block_of(ctx.node()));
  const int64_t opset = inner_opset(ctx.node());
  ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(in, opset));
  vector<TensorType> plain(static_cast<size_t>(ctx.num_inputs()));
  vector<const TensorType*> types;
  vector<const Tensor*> values;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) {
      types.push_back(nullptr);
      values.push_back(nullptr);
      continue;
    }
    const bool b = input_blocked(ctx.node(), static_cast<size_t>(i));
    if (b) RETURN_IF_ERROR(check_blocked(ctx, ctx.input_type(i), ("input " + std::to_string(i)).c_str(), block));
    plain[static_cast<size_t>(i)] = b ? plain_type(ctx.input_type(i), block) : ctx.input_type(i);
    if (blocked_bit(ctx.node(), "bf16_inputs", static_cast<size_t>(i))) {
      if (ctx.input_type(i).dtype != DType::kBF16)
        return ctx.error("input " + std::to_string(i) + " is marked bf16 (bf16_inputs) but has element type " +
                         dtype_name(ctx.input_type(i).dtype));
      plain[static_cast<size_t>(i)].dtype = DType::kF32;
    }
    types.push_back(&plain[static_cast<size_t>(i)]);
    values.push_back(b ? nullptr : ctx.input_value(i));
  }
  InferContext ic(in, opset, types, values);
  if (schema->infer) RETURN_IF_ERROR(schema->infer(ic));
  for (int64_t j = 0; j < ctx.num_outputs(); ++j) {
    TensorType t = ic.outputs()[static_cast<size_t>(j)];
    if (blocked_bit(ctx.node(), "bf16_outputs", static_cast<size_t>(j))) {
      if (t.dtype != DType::kF32 && t.dtype != DType::kUndefined)
        return ctx.error("output " + std::to_string(j) + " is marked bf16 (bf16_outputs) but the op makes " +
                         dtype_name(t.dtype));
      t.dtype = DType::kBF16;
    }
    if (output_blocked(ctx.node(), static_cast<size_t>(j))) {
      RETURN_IF_ERROR(check_plain(ctx, t, ("output " + std::to_string(j)).c_str(), block));
      ctx.set_output(j, blocked_type(t, block));
    } else {
      ctx.set_output(j, t);
    }
  }
  return Status::ok();
}

Status k_blocked(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Node in, inner_node(ctx.node()));
  ASSIGN_OR_RETURN(const int64_t block, block_of(ctx.node()));
  const int64_t opset = inner_opset(ctx.node());
  ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(in, opset));
  if (!schema->kernel) return ctx.error("op " + in.op_type + " has no reference kernel");
  vector<Value> copies(static_cast<size_t>(ctx.num_inputs()));
  vector<const Value*> ptrs;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) {
      ptrs.push_back(nullptr);
      continue;
    }
    const bool widen = blocked_bit(ctx.node(), "bf16_inputs", static_cast<size_t>(i));
    if (widen && ctx.input(i).dtype() != DType::kBF16)
      return ctx.error("input " + std::to_string(i) + " is marked bf16 (bf16_inputs) but is " +
                       dtype_name(ctx.input(i).dtype()));
    if (!input_blocked(ctx.node(), static_cast<size_t>(i))) {
      if (!widen) {
        ptrs.push_back(&ctx.input_value(i));
        continue;
      }
      ASSIGN_OR_RETURN(Tensor w, cast_tensor(ctx.input(i), DType::kF32));
      copies[static_cast<size_t>(i)] = Value(std::move(w));
      ptrs.push_back(&copies[static_cast<size_t>(i)]);
      continue;
    }
    const Tensor& t = ctx.input(i);
    if (t.rank() < 4 || t.dims().back() != block)
      return ctx.error("input " + std::to_string(i) + " " + dims_to_string(t.dims()) + " is not blocked [N, C/" +
                       std::to_string(block) + ", spatial..., " + std::to_string(block) + "]");
    ASSIGN_OR_RETURN(Tensor p, to_plain_copy(t));
    if (widen) {
      ASSIGN_OR_RETURN(p, cast_tensor(p, DType::kF32));
    }
    copies[static_cast<size_t>(i)] = Value(std::move(p));
    ptrs.push_back(&copies[static_cast<size_t>(i)]);
  }
  vector<Value> results(static_cast<size_t>(ctx.num_outputs()));
  KernelContext ic(in, opset, ptrs, &results);
  ic.run_subgraph = ctx.run_subgraph;
  RETURN_IF_ERROR(schema->kernel(ic));
  for (int64_t j = 0; j < ctx.num_outputs(); ++j) {
    Value& r = results[static_cast<size_t>(j)];
    if (!r.is_tensor() || !r.tensor.defined()) continue;
    if (blocked_bit(ctx.node(), "bf16_outputs", static_cast<size_t>(j)) && r.tensor.dtype() != DType::kBF16) {
      ASSIGN_OR_RETURN(r.tensor, cast_tensor(r.tensor, DType::kBF16));
    }
    const Tensor& t = r.tensor;
    const bool b = output_blocked(ctx.node(), static_cast<size_t>(j));
    if (b && (t.rank() < 3 || t.dim(1) % block != 0))
      return ctx.error("output " + std::to_string(j) + " " + dims_to_string(t.dims()) + " has no whole blocks of " +
                       std::to_string(block) + " channels");
    const vector<int64_t> dims = b ? blocked_dims(t.dims(), block) : t.dims();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(j, t.dtype(), dims, false));
    if (b) {
      int64_t N, C, S;
      nc_s(t.dims(), &N, &C, &S);
      convert_blocked(t.raw(), y->mutable_raw(), N, C, S, dtype_size(t.dtype()), false, block);
    } else if (t.nbytes() > 0) {
      std::memcpy(y->mutable_raw(), t.raw(), static_cast<size_t>(t.nbytes()));
    }
  }
  return Status::ok();
}

}  // namespace

void register_grad_blocked_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "ToBlocked", .domain = "com.ferry", .attrs = {{"block", AttrType::kInt}}, .infer = infer_to_blocked,
                 .kernel = k_to_blocked});
  r.add(OpSchema{.name = "FromBlocked", .domain = "com.ferry", .infer = infer_from_blocked, .kernel = k_from_blocked});
  r.add(OpSchema{.name = "Blocked", .domain = "com.ferry", .min_inputs = 1, .max_inputs = 16, .min_outputs = 1,
                 .max_outputs = 16,
                 .attrs = {{"op", AttrType::kString, true},
                           {"op_domain", AttrType::kString},
                           {"op_opset", AttrType::kInt},
                           {"blocked_inputs", AttrType::kInt},
                           {"blocked_outputs", AttrType::kInt},
                           {"bf16_inputs", AttrType::kInt},
                           {"bf16_outputs", AttrType::kInt},
                           {"block", AttrType::kInt}},
                 .infer = infer_blocked,
                 .kernel = k_blocked});
}

}  // namespace ferry
