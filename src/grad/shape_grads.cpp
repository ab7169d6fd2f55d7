// Gradient family 'shape' (see grad_families.inc and grad/registry.h): ops that move or repeat
// elements (Reshape and friends, Transpose, Concat, Split, Slice, Gather, Expand, Tile) and the
// ReduceSum / ReduceMean reductions. Slice and Gather emit com.ferry backward ops
// (src/ops/grad_shape.cpp); the others are composite ONNX nodes in the form the model's opset wants.
#include "grad/registry.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::string;
using std::vector;


// dX = Reshape(dY, X's static dims): Reshape, Flatten, Squeeze, Unsqueeze.
Status grad_reshape_like(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  g.set_input_grad(0, g.reshape(g.output_grad(0), dims));
  return Status::ok();
}

Status grad_transpose(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  const int64_t rank = static_cast<int64_t>(dims.size());
  vector<int64_t> perm = g.get_ints("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != rank) return g.error("attribute perm does not match the input's rank");
  vector<int64_t> inverse(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= rank || inverse[static_cast<size_t>(perm[i])] >= 0)
      return g.error("attribute perm is not a permutation of the input's axes");
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  }
  g.set_input_grad(0, g.emit1("Transpose", {g.output_grad(0)}, {{"perm", attr_ints(inverse)}}));
  return Status::ok();
}

// One Split of dY into the inputs' extents along the axis.
Status grad_concat(GradContext& g) {
  const int64_t n = g.num_inputs();
  if (n == 1) {
    g.set_input_grad(0, g.output_grad(0));
    return Status::ok();
  }
  ASSIGN_OR_RETURN(vector<int64_t> out_dims, g.dims_of(g.output(0)));
  int64_t axis = g.get_int("axis", 0);
  if (!normalize_axis(&axis, static_cast<int64_t>(out_dims.size())))
    return g.error("attribute axis " + std::to_string(g.get_int("axis", 0)) + " is out of range");
  vector<int64_t> sizes;
  for (int64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(vector<int64_t> d, g.dims_of(g.input(i)));
    if (d.size() != out_dims.size()) return g.error("input " + std::to_string(i) + " does not have the output's rank");
    sizes.push_back(d[static_cast<size_t>(axis)]);
  }
  vector<string> parts;
  if (g.opset() < 13) {
    parts = g.emit("Split", {g.output_grad(0)}, n, {{"axis", attr_int(axis)}, {"split", attr_ints(sizes)}});
  } else {
    parts = g.emit("Split", {g.output_grad(0), g.ints_constant(sizes)}, n, {{"axis", attr_int(axis)}});
  }
  for (int64_t i = 0; i < n; ++i) g.set_input_grad(i, parts[static_cast<size_t>(i)]);
  return Status::ok();
}

// dX = Concat of the outputs' gradients along the axis; zeros for outputs without one. The split
// sizes (attribute, input or num_outputs, by opset) are already in the outputs' static dims.
Status grad_split(GradContext& g) {
  const TensorType* t = g.type_of(g.input(0));
  if (!t) return g.error("the input's type is not known");
  vector<string> parts;
  for (int64_t k = 0; k < g.num_outputs(); ++k) {
    if (!g.output_grad(k).empty()) {
      parts.push_back(g.output_grad(k));
      continue;
    }
    ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.output(k)));
    parts.push_back(g.constant(Tensor::allocate(t->dtype, dims), "zeros"));
  }
  if (parts.size() == 1) {
    g.set_input_grad(0, parts[0]);
    return Status::ok();
  }
  g.set_input_grad(0, g.emit1("Concat", std::move(parts), {{"axis", attr_int(g.get_int("axis", 0))}}));
  return Status::ok();
}

// dX = SliceGrad(dY, shape(X), starts, ends, axes, steps); Slice-1's attributes become constants.
Status grad_slice(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  vector<string> in = {g.output_grad(0), g.ints_constant(dims)};
  if (g.opset() < 10) {
    in.push_back(g.ints_constant(g.get_ints("starts")));
    in.push_back(g.ints_constant(g.get_ints("ends")));
    if (g.has("axes")) in.push_back(g.ints_constant(g.get_ints("axes")));
  } else {
    for (int64_t i = 1; i <= 4; ++i) in.push_back(g.input(i));
    while (in.back().empty()) in.pop_back();
  }
  g.set_input_grad(0, g.emit1("SliceGrad", std::move(in), {}, kFerryGradDomain));
  return Status::ok();
}

Status grad_gather(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  g.set_input_grad(0, g.emit1("GatherGrad", {g.output_grad(0), g.input(1), g.ints_constant(dims)},
                              {{"axis", attr_int(g.get_int("axis", 0))}}, kFerryGradDomain));
  return Status::ok();
}

Status grad_expand(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> out_dims, g.dims_of(g.output(0)));
  ASSIGN_OR_RETURN(string d, g.sum_to(g.output_grad(0), out_dims, g.input(0)));
  g.set_input_grad(0, d);
  return Status::ok();
}

// Tile(X, repeats): dY viewed as [r0, d0, r1, d1, ...] summed over the r axes.
Status grad_tile(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  const Tensor* reps = g.constant_of(g.input(1));
  if (!reps) return g.error("input 'repeats' must be known when the training graph is built (a constant)");
  const vector<int64_t> r = reps->to_int64_vector();
  if (r.size() != dims.size()) return g.error("input 'repeats' has " + std::to_string(r.size()) + " entries for rank " +
                                              std::to_string(dims.size()));
  vector<int64_t> view, axes;
  bool tiled = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    axes.push_back(static_cast<int64_t>(view.size()));
    view.push_back(r[i]);
    view.push_back(dims[i]);
    tiled |= r[i] != 1;
  }
  if (!tiled) {
    g.set_input_grad(0, g.output_grad(0));
    return Status::ok();
  }
  g.set_input_grad(0, g.reduce_sum(g.reshape(g.output_grad(0), view), axes, false));
  return Status::ok();
}

// The reduced axes of ReduceSum / ReduceMean (normalized, sorted), or *noop when the node passes
// its input through (empty axes with noop_with_empty_axes=1).
Status reduced_axes(GradContext& g, int64_t axes_input_since, int64_t rank, vector<bool>* reduced, bool* noop) {
  vector<int64_t> axes;
  *noop = false;
  if (g.opset() < axes_input_since) {
    axes = g.get_ints("axes");
  } else if (!g.input(1).empty()) {
    const Tensor* t = g.constant_of(g.input(1));
    if (!t) return g.error("input 'axes' must be known when the training graph is built (a constant or initializer)");
    axes = t->to_int64_vector();
  }
  reduced->assign(static_cast<size_t>(rank), axes.empty());
  if (axes.empty() && g.opset() >= axes_input_since && g.get_int("noop_with_empty_axes", 0) != 0) {
    *noop = true;
    return Status::ok();
  }
  for (int64_t a : axes) {
    const int64_t orig = a;
    if (!normalize_axis(&a, rank))
      return g.error("axis " + std::to_string(orig) + " is out of range for rank " + std::to_string(rank));
    (*reduced)[static_cast<size_t>(a)] = true;
  }
  return Status::ok();
}

// dX = broadcast of dY (reshaped with the reduced axes kept as 1) to X's dims, times `scale`
// (1 for ReduceSum, 1 / count for ReduceMean).
template <bool kMean>
Status grad_reduce(GradContext& g, int64_t axes_input_since) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  const int64_t rank = static_cast<int64_t>(dims.size());
  vector<bool> reduced;
  bool noop = false;
  RETURN_IF_ERROR(reduced_axes(g, axes_input_since, rank, &reduced, &noop));
  if (noop) {
    g.set_input_grad(0, g.output_grad(0));
    return Status::ok();
  }
  vector<int64_t> kept = dims;
  int64_t count = 1;
  for (int64_t i = 0; i < rank; ++i)
    if (reduced[static_cast<size_t>(i)]) {
      count *= dims[static_cast<size_t>(i)];
      kept[static_cast<size_t>(i)] = 1;
    }
  string d = g.reshape(g.output_grad(0), kept);
  if (kMean) {
    const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
    d = g.emit1("Mul", {d, g.scalar_like(scale, g.input(0))});
  }
  if (kept != dims) {
    if (g.opset() >= 8) {
      d = g.emit1("Expand", {d, g.ints_constant(dims)});
    } else {
      vector<int64_t> reps(dims.size());
      for (size_t i = 0; i < dims.size(); ++i) reps[i] = kept[i] == dims[i] ? 1 : dims[i];
      d = g.emit1("Tile", {d, g.ints_constant(reps)});
    }
  }
  g.set_input_grad(0, d);
  return Status::ok();
}

Status grad_reduce_sum(GradContext& g) { return grad_reduce<false>(g, 13); }
Status grad_reduce_mean(GradContext& g) { return grad_reduce<true>(g, 18); }

}  // namespace

void register_shape_grads(GradRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    r.add(GradDef{.op = op, .inputs = 0b1, .formula = "dX = Reshape(dY, dims(X))", .emits = {"Reshape"},
                  .build = grad_reshape_like});
  r.add(GradDef{.op = "Transpose", .inputs = 0b1, .formula = "dX = Transpose(dY, inverse(perm))", .emits = {"Transpose"},
                .build = grad_transpose});
  r.add(GradDef{.op = "Concat", .formula = "dX_i = Split(dY, dims(X_i)[axis], axis)[i]", .emits = {"Split"},
                .build = grad_concat});
  r.add(GradDef{.op = "Split", .inputs = 0b1, .formula = "dX = Concat(dY_k or zeros, axis)", .emits = {"Concat"},
                .build = grad_split});
  r.add(GradDef{.op = "Slice", .inputs = 0b1, .formula = "dX = SliceGrad(dY, dims(X), starts, ends, axes, steps)",
                .emits = {"com.ferry.SliceGrad"}, .build = grad_slice});
  r.add(GradDef{.op = "Gather", .inputs = 0b1, .formula = "dX = GatherGrad(dY, indices, dims(X); axis) (scatter-add)",
                .emits = {"com.ferry.GatherGrad"}, .build = grad_gather});
  r.add(GradDef{.op = "Expand", .inputs = 0b1, .formula = "dX = sum_to(dY, X)", .emits = {"ReduceSum", "Reshape"},
                .build = grad_expand});
  r.add(GradDef{.op = "Tile", .inputs = 0b1, .formula = "dX = ReduceSum(Reshape(dY, [r0, d0, r1, d1, ...]), r axes)",
                .emits = {"Reshape", "ReduceSum"}, .build = grad_tile});
  r.add(GradDef{.op = "ReduceSum", .inputs = 0b1, .formula = "dX = Expand(Reshape(dY, dims with reduced axes 1), dims(X))",
                .emits = {"Reshape", "Expand", "Tile"}, .build = grad_reduce_sum});
  r.add(GradDef{.op = "ReduceMean", .inputs = 0b1,
                .formula = "dX = Expand(Reshape(dY, dims with reduced axes 1), dims(X)) / count",
                .emits = {"Reshape", "Mul", "Expand", "Tile"}, .build = grad_reduce_mean});
}

}  // namespace ferry
