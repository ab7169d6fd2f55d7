// Control flow: If, Loop, Scan. Bodies are subgraphs run through KernelContext::run_subgraph.
#include <algorithm>
#include <cstring>

#include "ops/op_util.h"

namespace ferry {
namespace {

bool scalar_true(const Tensor& t) { return t.numel() > 0 && t.get_double(0) != 0.0; }

// Merges two possible types of one output (If branches): dims that differ become unknown.
TensorType merge_types(const TensorType& a, const TensorType& b) {
  TensorType t;
  t.dtype = a.dtype != DType::kUndefined ? a.dtype : b.dtype;
  t.kind = a.kind;
  if (a.shape && b.shape && a.shape->rank() == b.shape->rank()) {
    Shape s = *a.shape;
    for (int64_t i = 0; i < s.rank(); ++i)
      if (!(s.dims[i] == b.shape->dims[i])) s.dims[i] = Dim();
    t.shape = s;
  }
  return t;
}

TensorType body_output_type(const Graph& g, size_t i) {
  if (i >= g.outputs.size()) return {};
  const TensorType* t = g.find_type(g.outputs[i].name);
  TensorType r = t ? *t : g.outputs[i].type;
  if (r.dtype == DType::kUndefined) r.dtype = g.outputs[i].type.dtype;
  return r;
}

Status infer_if(InferContext& ctx) {
  const Graph* then_g = ctx.get_graph("then_branch");
  const Graph* else_g = ctx.get_graph("else_branch");
  if (!then_g || !else_g) return ctx.error("then_branch and else_branch graphs are required");
  if (then_g->outputs.size() != static_cast<size_t>(ctx.num_outputs()) ||
      else_g->outputs.size() != static_cast<size_t>(ctx.num_outputs()))
    return ctx.error("then_branch has " + std::to_string(then_g->outputs.size()) + " outputs and else_branch " +
                     std::to_string(else_g->outputs.size()) + ", but the node has " + std::to_string(ctx.num_outputs()));
  const Tensor* cond = ctx.input_value(0);
  for (int64_t i = 0; i < ctx.num_outputs(); ++i) {
    TensorType a = body_output_type(*then_g, static_cast<size_t>(i));
    TensorType b = body_output_type(*else_g, static_cast<size_t>(i));
    if (cond) ctx.set_output(i, scalar_true(*cond) ? a : b);
    else ctx.set_output(i, merge_types(a, b));
  }
  return Status::ok();
}

Status k_if(KernelContext& ctx) {
  const Tensor& cond = ctx.input(0);
  if (cond.numel() != 1) return ctx.error("cond must hold exactly one element, has " + std::to_string(cond.numel()));
  const Graph* body = ctx.get_graph(scalar_true(cond) ? "then_branch" : "else_branch");
  if (!body) return ctx.error("branch graph missing");
  std::vector<Value> outs;
  RETURN_IF_ERROR(ctx.run_subgraph(*body, {}, &outs));
  if (static_cast<int64_t>(outs.size()) != ctx.num_outputs())
    return ctx.error("branch produced " + std::to_string(outs.size()) + " outputs, expected " + std::to_string(ctx.num_outputs()));
  for (size_t i = 0; i < outs.size(); ++i) ctx.set_output_value(static_cast<int64_t>(i), outs[i]);
  return Status::ok();
}

// Stacks equally-shaped tensors along a new axis 0.
StatusOr<Tensor> stack(KernelContext& ctx, const std::vector<Tensor>& items, const std::string& what) {
  if (items.empty()) return ctx.error(what + ": no iterations to stack");
  std::vector<int64_t> dims = items[0].dims();
  for (const Tensor& t : items)
    if (t.dims() != dims || t.dtype() != items[0].dtype())
      return ctx.error(what + ": iterations produced different shapes " + dims_to_string(dims) + " and " +
                       dims_to_string(t.dims()));
  dims.insert(dims.begin(), static_cast<int64_t>(items.size()));
  ASSIGN_OR_RETURN(Tensor out, Tensor::create(items[0].dtype(), dims, what));
  if (out.dtype() == DType::kString) {
    int64_t k = 0;
    for (const Tensor& t : items)
      for (const std::string& s : t.strings()) out.mutable_strings()[k++] = s;
    return out;
  }
  const int64_t bytes = items[0].nbytes();
  char* dst = static_cast<char*>(out.mutable_raw());
  for (size_t i = 0; i < items.size(); ++i)
    if (bytes) std::memcpy(dst + i * bytes, items[i].raw(), static_cast<size_t>(bytes));
  return out;
}

constexpr int64_t kMaxLoopIterations = int64_t(1) << 31;

Status k_loop(KernelContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph missing");
  int64_t max_trip = ctx.has_input(0) ? ctx.input(0).get_int64(0) : -1;
  bool cond = ctx.has_input(1) ? scalar_true(ctx.input(1)) : true;
  const int64_t n_carried = ctx.num_inputs() - 2;
  if (n_carried < 0) return ctx.error("Loop needs at least 2 inputs (M, cond)");
  if (static_cast<int64_t>(body->inputs.size()) != n_carried + 2)
    return ctx.error("body takes " + std::to_string(body->inputs.size()) + " inputs, expected " +
                     std::to_string(n_carried + 2) + " (iteration number, condition, loop-carried values)");
  const int64_t n_scan = static_cast<int64_t>(body->outputs.size()) - 1 - n_carried;
  if (n_scan < 0) return ctx.error("body has too few outputs");
  if (max_trip < 0 && !ctx.has_input(1)) return ctx.error("Loop with neither M nor cond would never end");
  std::vector<Value> carried;
  for (int64_t i = 0; i < n_carried; ++i) carried.push_back(ctx.input_value(2 + i));
  std::vector<std::vector<Tensor>> scans(static_cast<size_t>(n_scan));
  int64_t iter = 0;
  while (cond && (max_trip < 0 || iter < max_trip)) {
    if (iter >= kMaxLoopIterations) return ctx.error("more than 2^31 iterations; refusing to continue");
    std::vector<Value> in;
    in.push_back(Value(Tensor::scalar<int64_t>(iter)));
    in.push_back(Value(Tensor::scalar<bool>(cond)));
    for (const Value& t : carried) in.push_back(t);
    std::vector<Value> out;
    RETURN_IF_ERROR(ctx.run_subgraph(*body, in, &out));
    if (static_cast<int64_t>(out.size()) != 1 + n_carried + n_scan) return ctx.error("body returned the wrong number of outputs");
    if (!out[0].is_tensor()) return ctx.error("body's condition output is not a tensor");
    cond = scalar_true(out[0].tensor);
    for (int64_t i = 0; i < n_carried; ++i) carried[i] = out[1 + i];
    for (int64_t i = 0; i < n_scan; ++i) {
      if (!out[1 + n_carried + i].is_tensor()) return ctx.error("scan output " + std::to_string(i) + " is not a tensor");
      scans[i].push_back(out[1 + n_carried + i].tensor);
    }
    ++iter;
  }
  for (int64_t i = 0; i < n_carried && i < ctx.num_outputs(); ++i) ctx.set_output_value(i, carried[i]);
  for (int64_t i = 0; i < n_scan && n_carried + i < ctx.num_outputs(); ++i) {
    if (scans[i].empty()) {
      // No iteration ran: an empty tensor with the body's declared element type.
      TensorType t = body_output_type(*body, static_cast<size_t>(1 + n_carried + i));
      std::vector<int64_t> dims = {0};
      if (t.shape)
        for (const Dim& d : t.shape->dims) dims.push_back(d.is_known() ? d.value : 0);
      ASSIGN_OR_RETURN(Tensor* o, ctx.allocate_output(n_carried + i, t.dtype == DType::kUndefined ? DType::kF32 : t.dtype, dims));
      (void)o;
      continue;
    }
    ASSIGN_OR_RETURN(Tensor s, stack(ctx, scans[i], "scan output " + std::to_string(i)));
    ctx.set_output(n_carried + i, s);
  }
  return Status::ok();
}

Status infer_loop(InferContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph is required");
  const int64_t n_carried = ctx.num_inputs() - 2;
  for (int64_t i = 0; i < ctx.num_outputs(); ++i) {
    if (i < n_carried) {
      TensorType t = ctx.has_input(2 + i) ? ctx.input_type(2 + i) : TensorType{};
      TensorType b = body_output_type(*body, static_cast<size_t>(1 + i));
      TensorType m = merge_types(t, b);
      if (b.dtype != DType::kUndefined) m.kind = b.kind;  // the body decides (optional in, sequence out)
      ctx.set_output(i, m);
    } else {
      TensorType b = body_output_type(*body, static_cast<size_t>(1 + i));
      TensorType t{b.dtype, std::nullopt};
      if (b.shape) {
        Shape s = *b.shape;
        s.dims.insert(s.dims.begin(), Dim());
        t.shape = s;
      }
      ctx.set_output(i, t);
    }
  }
  return Status::ok();
}

// Slice k of `t` along `axis` (removing that axis).
Tensor take_slice(const Tensor& t, int64_t axis, int64_t k) {
  std::vector<int64_t> dims = t.dims();
  const int64_t outer = element_count(std::vector<int64_t>(dims.begin(), dims.begin() + axis));
  const int64_t inner = element_count(std::vector<int64_t>(dims.begin() + axis + 1, dims.end()));
  const int64_t n = dims[axis];
  dims.erase(dims.begin() + axis);
  Tensor out = Tensor::allocate(t.dtype(), dims);
  const int64_t es = dtype_size(t.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < inner; ++i) out.mutable_strings()[o * inner + i] = t.strings()[(o * n + k) * inner + i];
    } else if (inner) {
      std::memcpy(static_cast<char*>(out.mutable_raw()) + o * inner * es,
                  static_cast<const char*>(t.raw()) + (o * n + k) * inner * es, static_cast<size_t>(inner * es));
    }
  }
  return out;
}

// Stacks items along `axis` (inserting it).
Tensor stack_axis(const std::vector<Tensor>& items, int64_t axis) {
  std::vector<int64_t> dims = items[0].dims();
  const int64_t outer = element_count(std::vector<int64_t>(dims.begin(), dims.begin() + axis));
  const int64_t inner = element_count(std::vector<int64_t>(dims.begin() + axis, dims.end()));
  const int64_t n = static_cast<int64_t>(items.size());
  dims.insert(dims.begin() + axis, n);
  Tensor out = Tensor::allocate(items[0].dtype(), dims);
  const int64_t es = dtype_size(out.dtype());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k) {
      if (out.dtype() == DType::kString) {
        for (int64_t i = 0; i < inner; ++i) out.mutable_strings()[(o * n + k) * inner + i] = items[k].strings()[o * inner + i];
      } else if (inner) {
        std::memcpy(static_cast<char*>(out.mutable_raw()) + (o * n + k) * inner * es,
                    static_cast<const char*>(items[k].raw()) + o * inner * es, static_cast<size_t>(inner * es));
      }
    }
  return out;
}

Status k_scan(KernelContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph missing");
  const int64_t n_scan_in = ctx.get_int("num_scan_inputs", -1);
  if (n_scan_in < 1 || n_scan_in > ctx.num_inputs()) return ctx.error("num_scan_inputs is missing or out of range");
  const int64_t n_state = ctx.num_inputs() - n_scan_in;
  const int64_t n_scan_out = ctx.num_outputs() - n_state;
  if (n_scan_out < 0) return ctx.error("fewer outputs than state variables");
  std::vector<int64_t> in_axes = ctx.get_ints("scan_input_axes", std::vector<int64_t>(n_scan_in, 0));
  std::vector<int64_t> in_dirs = ctx.get_ints("scan_input_directions", std::vector<int64_t>(n_scan_in, 0));
  std::vector<int64_t> out_axes = ctx.get_ints("scan_output_axes", std::vector<int64_t>(n_scan_out, 0));
  std::vector<int64_t> out_dirs = ctx.get_ints("scan_output_directions", std::vector<int64_t>(n_scan_out, 0));
  if (static_cast<int64_t>(in_axes.size()) != n_scan_in || static_cast<int64_t>(in_dirs.size()) != n_scan_in ||
      static_cast<int64_t>(out_axes.size()) != n_scan_out || static_cast<int64_t>(out_dirs.size()) != n_scan_out)
    return ctx.error("scan axes/directions attributes have the wrong length");
  int64_t seq = -1;
  for (int64_t i = 0; i < n_scan_in; ++i) {
    const Tensor& t = ctx.input(n_state + i);
    if (!normalize_axis(&in_axes[i], t.rank())) return ctx.error("scan_input_axes[" + std::to_string(i) + "] out of range");
    int64_t len = t.dim(in_axes[i]);
    if (seq >= 0 && len != seq) return ctx.error("scan inputs have different sequence lengths");
    seq = len;
  }
  std::vector<Tensor> state;
  for (int64_t i = 0; i < n_state; ++i) state.push_back(ctx.input(i));
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(n_scan_out));
  for (int64_t it = 0; it < seq; ++it) {
    std::vector<Value> in(state.begin(), state.end());
    for (int64_t i = 0; i < n_scan_in; ++i) {
      int64_t k = in_dirs[i] ? seq - 1 - it : it;
      in.push_back(Value(take_slice(ctx.input(n_state + i), in_axes[i], k)));
    }
    std::vector<Value> out;
    RETURN_IF_ERROR(ctx.run_subgraph(*body, in, &out));
    if (static_cast<int64_t>(out.size()) != n_state + n_scan_out) return ctx.error("body returned the wrong number of outputs");
    for (const Value& v : out)
      if (!v.is_tensor()) return ctx.error("Scan body outputs must be tensors");
    for (int64_t i = 0; i < n_state; ++i) state[i] = out[i].tensor;
    for (int64_t i = 0; i < n_scan_out; ++i) outs[i].push_back(out[n_state + i].tensor);
  }
  for (int64_t i = 0; i < n_state; ++i) ctx.set_output(i, state[i]);
  for (int64_t i = 0; i < n_scan_out; ++i) {
    if (outs[i].empty()) return ctx.error("Scan over a zero-length sequence is not supported");
    if (out_dirs[i]) std::reverse(outs[i].begin(), outs[i].end());
    int64_t axis = out_axes[i];
    if (!normalize_axis(&axis, outs[i][0].rank() + 1)) return ctx.error("scan_output_axes out of range");
    ctx.set_output(n_state + i, stack_axis(outs[i], axis));
  }
  return Status::ok();
}

// Scan-8: inputs are [sequence_lens], states..., scans...; every input has a batch axis 0 and the
// scan inputs' sequence axis is 1. Runs the Scan-9 logic once per batch entry.
Status k_scan8(KernelContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph missing");
  const int64_t n_scan_in = ctx.get_int("num_scan_inputs", -1);
  const int64_t n_rest = ctx.num_inputs() - 1;
  if (n_scan_in < 1 || n_scan_in > n_rest) return ctx.error("num_scan_inputs is missing or out of range");
  const int64_t n_state = n_rest - n_scan_in;
  const int64_t n_scan_out = ctx.num_outputs() - n_state;
  std::vector<int64_t> dirs = ctx.get_ints("directions", std::vector<int64_t>(n_scan_in, 0));
  if (static_cast<int64_t>(dirs.size()) != n_scan_in) return ctx.error("directions has the wrong length");
  if (!ctx.has_input(1 + n_state)) return ctx.error("scan input missing");
  const Tensor& first = ctx.input(1 + n_state);
  if (first.rank() < 2) return ctx.error("scan inputs need [batch, sequence, ...] dims");
  const int64_t batch = first.dim(0), seq = first.dim(1);
  for (int64_t i = 1; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i) || ctx.input(i).rank() < 1 || ctx.input(i).dim(0) != batch)
      return ctx.error("input " + std::to_string(i) + " must have batch dimension " + std::to_string(batch));
  if (ctx.has_input(0)) {
    const Tensor& lens = ctx.input(0);
    for (int64_t b = 0; b < lens.numel(); ++b)
      if (lens.get_int64(b) != seq)
        return unsupported(ctx.node().describe() + ": sequence_lens shorter than the sequence axis are not supported");
  }
  std::vector<std::vector<Tensor>> state_out(static_cast<size_t>(n_state)), scan_out(static_cast<size_t>(n_scan_out));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> state;
    for (int64_t i = 0; i < n_state; ++i) state.push_back(take_slice(ctx.input(1 + i), 0, b));
    std::vector<Tensor> scans;
    for (int64_t i = 0; i < n_scan_in; ++i) scans.push_back(take_slice(ctx.input(1 + n_state + i), 0, b));
    std::vector<std::vector<Tensor>> outs(static_cast<size_t>(n_scan_out));
    for (int64_t it = 0; it < seq; ++it) {
      std::vector<Value> in(state.begin(), state.end());
      for (int64_t i = 0; i < n_scan_in; ++i) in.push_back(Value(take_slice(scans[i], 0, dirs[i] ? seq - 1 - it : it)));
      std::vector<Value> out;
      RETURN_IF_ERROR(ctx.run_subgraph(*body, in, &out));
      if (static_cast<int64_t>(out.size()) != n_state + n_scan_out) return ctx.error("body returned the wrong number of outputs");
      for (const Value& v : out)
        if (!v.is_tensor()) return ctx.error("Scan body outputs must be tensors");
      for (int64_t i = 0; i < n_state; ++i) state[i] = out[i].tensor;
      for (int64_t i = 0; i < n_scan_out; ++i) outs[i].push_back(out[n_state + i].tensor);
    }
    for (int64_t i = 0; i < n_state; ++i) state_out[i].push_back(state[i]);
    for (int64_t i = 0; i < n_scan_out; ++i) {
      if (outs[i].empty()) return ctx.error("Scan over a zero-length sequence is not supported");
      scan_out[i].push_back(stack_axis(outs[i], 0));
    }
  }
  for (int64_t i = 0; i < n_state; ++i) ctx.set_output(i, stack_axis(state_out[i], 0));
  for (int64_t i = 0; i < n_scan_out; ++i) ctx.set_output(n_state + i, stack_axis(scan_out[i], 0));
  return Status::ok();
}

Status infer_scan8(InferContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph is required");
  for (int64_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, TensorType{body_output_type(*body, static_cast<size_t>(i)).dtype, std::nullopt});
  return Status::ok();
}

Status infer_scan(InferContext& ctx) {
  const Graph* body = ctx.get_graph("body");
  if (!body) return ctx.error("body graph is required");
  const int64_t n_scan_in = ctx.get_int("num_scan_inputs", -1);
  if (n_scan_in < 1 || n_scan_in > ctx.num_inputs()) return ctx.error("num_scan_inputs is missing or out of range");
  const int64_t n_state = ctx.num_inputs() - n_scan_in;
  for (int64_t i = 0; i < ctx.num_outputs(); ++i) {
    TensorType b = body_output_type(*body, static_cast<size_t>(i));
    if (i < n_state) ctx.set_output(i, ctx.has_input(i) ? merge_types(ctx.input_type(i), b) : b);
    else ctx.set_output(i, TensorType{b.dtype, std::nullopt});
  }
  return Status::ok();
}

}  // namespace

void register_control_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "If", .since_version = 1, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1 << 16,
                 .attrs = {{"then_branch", AttrType::kGraph, true}, {"else_branch", AttrType::kGraph, true}},
                 .types = {DType::kBool}, .infer = infer_if, .kernel = k_if, .accepts_sequences = true});
  r.add(OpSchema{.name = "Loop", .since_version = 1, .min_inputs = 2, .max_inputs = 1 << 16, .min_outputs = 0, .max_outputs = 1 << 16,
                 .attrs = {{"body", AttrType::kGraph, true}}, .infer = infer_loop, .kernel = k_loop, .accepts_sequences = true,
                 .optional_input_mask = 0b11});  // M and cond may be ""
  r.add(OpSchema{.name = "Scan", .since_version = 8, .min_inputs = 2, .max_inputs = 1 << 16, .min_outputs = 1, .max_outputs = 1 << 16,
                 .attrs = {{"body", AttrType::kGraph, true}, {"num_scan_inputs", AttrType::kInt, true}},
                 .infer = infer_scan8, .kernel = k_scan8, .optional_input_mask = 1});
  r.add(OpSchema{.name = "Scan", .since_version = 9, .min_inputs = 1, .max_inputs = 1 << 16, .min_outputs = 1, .max_outputs = 1 << 16,
                 .attrs = {{"body", AttrType::kGraph, true}, {"num_scan_inputs", AttrType::kInt, true}},
                 .infer = infer_scan, .kernel = k_scan});
}

}  // namespace ferry
