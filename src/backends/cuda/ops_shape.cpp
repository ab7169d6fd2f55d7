// CUDA kernels for data movement: Reshape/Flatten/Squeeze/Unsqueeze (views, no copy), Transpose,
// Concat, Slice, Expand (strided copies), Gather. Shape-like inputs (Reshape's shape, Slice's
// starts...) are read on the host (host_input_mask). Launchers in data_attention.cu.
#include <algorithm>

#include "backends/cuda/ops_util.h"

namespace ferry {
namespace {

constexpr uint64_t kInputs1to4 = 0x1e;  // inputs 1..4 read on the host
constexpr uint64_t kInput1 = 0x2;

using Inputs = std::vector<const DeviceTensor*>;
using Outputs = std::vector<DeviceTensor>;

Status copy_view(CudaContext& ctx, const Node& node, const DeviceTensor& in, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& in_strides, int64_t in_offset, DeviceTensor* out, int64_t out_offset,
                 const std::vector<int64_t>& out_strides) {
  cuda::StridedDesc d;
  RETURN_IF_ERROR(make_copy_desc(dims, in_strides, in_offset, out_strides, out_offset, &d));
  return launched(cuda::launch_strided_copy(static_cast<int>(dtype_size(in.dtype)), in.data, out->data, d, ctx.stream()),
                  node, node.op_type.c_str());
}

bool numeric(const DeviceTensor& t) { return t.dtype != DType::kString && dtype_size(t.dtype) > 0; }

// --- views ---

StatusOr<std::vector<int64_t>> reshape_dims(const Node& node, const std::vector<int64_t>& in, const Tensor& shape,
                                            bool allow_zero) {
  std::vector<int64_t> dims = shape.to_int64_vector();
  int64_t known = 1, infer = -1;
  int64_t total = 1;
  for (int64_t d : in) total *= d;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allow_zero) {
      if (i >= in.size()) return invalid_argument(node.describe() + ": shape has 0 at axis " + std::to_string(i) + " past the input's rank");
      dims[i] = in[i];
    }
    if (dims[i] == -1) {
      if (infer >= 0) return invalid_argument(node.describe() + ": shape has more than one -1");
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (dims[i] < 0) return invalid_argument(node.describe() + ": negative dim in shape " + dims_to_string(dims));
    known *= dims[i];
  }
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      return invalid_argument(node.describe() + ": cannot reshape " + dims_to_string(in) + " to " + dims_to_string(dims));
    dims[static_cast<size_t>(infer)] = total / known;
  } else if (known != total) {
    return invalid_argument(node.describe() + ": cannot reshape " + dims_to_string(in) + " (" + std::to_string(total) +
                            " elements) to " + dims_to_string(dims));
  }
  return dims;
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_reshape(const CudaKernelArgs& a) {
  const Node& node = a.node;
  const bool allow_zero = AttrReader(node).get_int("allowzero", 0) != 0;
  if (a.opset < 5) return std::unique_ptr<CudaOpKernel>();
  return make_fn_kernel(
      [&node, allow_zero](CudaContext&, KernelContext& kc, const Inputs& in, Outputs& out) -> Status {
        ASSIGN_OR_RETURN(std::vector<int64_t> dims, reshape_dims(node, in[0]->dims, kc.input(1), allow_zero));
        out[0] = in[0]->reshaped(dims);
        return Status::ok();
      },
      kInput1);
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_flatten(const CudaKernelArgs& a) {
  const Node& node = a.node;
  const int64_t axis_attr = AttrReader(node).get_int("axis", 1);
  return make_fn_kernel([&node, axis_attr](CudaContext&, KernelContext&, const Inputs& in, Outputs& out) -> Status {
    int64_t axis = axis_attr;
    const int64_t r = in[0]->rank();
    if (axis < 0) axis += r;
    if (axis < 0 || axis > r) return invalid_argument(node.describe() + ": axis out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= in[0]->dims[i];
    out[0] = in[0]->reshaped({outer, inner});
    return Status::ok();
  });
}

/// Squeeze / Unsqueeze: axes from the attribute (opset < 13) or input 1 (host).
StatusOr<std::unique_ptr<CudaOpKernel>> make_squeeze(const CudaKernelArgs& a, bool unsqueeze) {
  const Node& node = a.node;
  const bool axes_input = a.opset >= 13;
  const std::vector<int64_t> attr_axes = AttrReader(node).get_ints("axes");
  return make_fn_kernel(
      [&node, axes_input, attr_axes, unsqueeze](CudaContext&, KernelContext& kc, const Inputs& in, Outputs& out) -> Status {
        std::vector<int64_t> axes = attr_axes;
        if (axes_input && kc.has_input(1)) axes = kc.input(1).to_int64_vector();
        const std::vector<int64_t>& d = in[0]->dims;
        std::vector<int64_t> dims;
        if (unsqueeze) {
          const int64_t r = static_cast<int64_t>(d.size() + axes.size());
          std::vector<bool> is_new(static_cast<size_t>(r), false);
          for (int64_t ax : axes) {
            if (!normalize_axis(&ax, r) || is_new[static_cast<size_t>(ax)])
              return invalid_argument(node.describe() + ": bad or repeated axis " + std::to_string(ax));
            is_new[static_cast<size_t>(ax)] = true;
          }
          size_t k = 0;
          for (int64_t i = 0; i < r; ++i) dims.push_back(is_new[static_cast<size_t>(i)] ? 1 : d[k++]);
        } else {
          const int64_t r = static_cast<int64_t>(d.size());
          std::vector<bool> drop(d.size(), false);
          if (axes.empty())
            for (size_t i = 0; i < d.size(); ++i) drop[i] = d[i] == 1;
          for (int64_t ax : axes) {
            if (!normalize_axis(&ax, r) || d[static_cast<size_t>(ax)] != 1)
              return invalid_argument(node.describe() + ": cannot squeeze axis " + std::to_string(ax) + " of " + dims_to_string(d));
            drop[static_cast<size_t>(ax)] = true;
          }
          for (size_t i = 0; i < d.size(); ++i)
            if (!drop[i]) dims.push_back(d[i]);
        }
        out[0] = in[0]->reshaped(dims);
        return Status::ok();
      },
      axes_input ? kInput1 : 0);
}

// --- copies ---

StatusOr<std::unique_ptr<CudaOpKernel>> make_transpose(const CudaKernelArgs& a) {
  const Node& node = a.node;
  const std::vector<int64_t> perm_attr = AttrReader(node).get_ints("perm");
  return make_fn_kernel([&node, perm_attr](CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) -> Status {
    const DeviceTensor& x = *in[0];
    if (!numeric(x)) return unsupported(node.describe() + ": type not covered");
    const int64_t r = x.rank();
    std::vector<int64_t> perm = perm_attr;
    if (perm.empty())
      for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
    if (static_cast<int64_t>(perm.size()) != r) return invalid_argument(node.describe() + ": perm has the wrong length");
    const std::vector<int64_t> in_strides = strides_of(x.dims);
    std::vector<int64_t> dims, strides;
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (int64_t p : perm) {
      if (p < 0 || p >= r || seen[static_cast<size_t>(p)]) return invalid_argument(node.describe() + ": perm is not a permutation");
      seen[static_cast<size_t>(p)] = true;
      dims.push_back(x.dims[static_cast<size_t>(p)]);
      strides.push_back(in_strides[static_cast<size_t>(p)]);
    }
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, dims));
    return copy_view(ctx, node, x, dims, strides, 0, &out[0], 0, strides_of(dims));
  });
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_concat(const CudaKernelArgs& a) {
  const Node& node = a.node;
  const int64_t axis_attr = AttrReader(node).get_int("axis", 0);
  return make_fn_kernel([&node, axis_attr](CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) -> Status {
    const DeviceTensor* first = nullptr;
    for (const DeviceTensor* t : in)
      if (t && !first) first = t;
    if (!first || !numeric(*first)) return unsupported(node.describe() + ": type not covered");
    int64_t axis = axis_attr;
    if (!normalize_axis(&axis, first->rank())) return invalid_argument(node.describe() + ": axis out of range");
    std::vector<int64_t> dims = first->dims;
    dims[static_cast<size_t>(axis)] = 0;
    for (const DeviceTensor* t : in) {
      if (!t) continue;
      if (t->rank() != first->rank() || t->dtype != first->dtype)
        return invalid_argument(node.describe() + ": inputs differ in rank or type");
      for (int64_t i = 0; i < t->rank(); ++i)
        if (i != axis && t->dims[i] != first->dims[i])
          return invalid_argument(node.describe() + ": input shapes " + dims_to_string(first->dims) + " and " +
                                  dims_to_string(t->dims) + " differ off the concat axis");
      dims[static_cast<size_t>(axis)] += t->dims[axis];
    }
    ASSIGN_OR_RETURN(out[0], ctx.allocate(first->dtype, dims));
    const std::vector<int64_t> os = strides_of(dims);
    int64_t offset = 0;
    for (const DeviceTensor* t : in) {
      if (!t || t->numel() == 0) {
        if (t) offset += t->dims[axis];
        continue;
      }
      RETURN_IF_ERROR(copy_view(ctx, node, *t, t->dims, strides_of(t->dims), 0, &out[0], offset * os[axis], os));
      offset += t->dims[axis];
    }
    return Status::ok();
  });
}

/// Slice-10+: starts, ends, [axes], [steps] as host inputs; Slice-1: attributes.
StatusOr<std::unique_ptr<CudaOpKernel>> make_slice(const CudaKernelArgs& a) {
  const Node& node = a.node;
  const bool from_inputs = a.opset >= 10;
  AttrReader r(node);
  const std::vector<int64_t> s_attr = r.get_ints("starts"), e_attr = r.get_ints("ends"), ax_attr = r.get_ints("axes");
  return make_fn_kernel(
      [&node, from_inputs, s_attr, e_attr, ax_attr](CudaContext& ctx, KernelContext& kc, const Inputs& in,
                                                      Outputs& out) -> Status {
        const DeviceTensor& x = *in[0];
        if (!numeric(x)) return unsupported(node.describe() + ": type not covered");
        std::vector<int64_t> starts = s_attr, ends = e_attr, axes = ax_attr, steps;
        if (from_inputs) {
          starts = kc.input(1).to_int64_vector();
          ends = kc.input(2).to_int64_vector();
          axes = kc.has_input(3) ? kc.input(3).to_int64_vector() : std::vector<int64_t>{};
          if (kc.has_input(4)) steps = kc.input(4).to_int64_vector();
        }
        const int64_t rank = x.rank();
        if (axes.empty())
          for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
        if (steps.empty()) steps.assign(starts.size(), 1);
        if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
          return invalid_argument(node.describe() + ": starts, ends, axes and steps differ in length");
        std::vector<int64_t> st(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1), dims = x.dims;
        for (size_t i = 0; i < starts.size(); ++i) {
          int64_t ax = axes[i];
          if (!normalize_axis(&ax, rank)) return invalid_argument(node.describe() + ": axis out of range");
          const int64_t n = x.dims[ax], sp = steps[i];
          if (sp == 0) return invalid_argument(node.describe() + ": step 0");
          int64_t b = 0, len = 0;
          slice_axis_range(starts[i], ends[i], sp, n, &b, &len);  // the cpu kernels' clamping (an empty axis too)
          st[ax] = b;
          step[ax] = sp;
          dims[ax] = len;
        }
        const std::vector<int64_t> xs = strides_of(x.dims);
        std::vector<int64_t> is(static_cast<size_t>(rank));
        int64_t off = 0;
        for (int64_t i = 0; i < rank; ++i) {
          is[i] = xs[i] * step[i];
          off += st[i] * xs[i];
        }
        ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, dims));
        if (out[0].numel() == 0) return Status::ok();
        return copy_view(ctx, node, x, dims, is, off, &out[0], 0, strides_of(dims));
      },
      from_inputs ? kInputs1to4 : 0);
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_expand(const CudaKernelArgs& a) {
  const Node& node = a.node;
  return make_fn_kernel(
      [&node](CudaContext& ctx, KernelContext& kc, const Inputs& in, Outputs& out) -> Status {
        const DeviceTensor& x = *in[0];
        if (!numeric(x)) return unsupported(node.describe() + ": type not covered");
        std::vector<int64_t> dims;
        if (!broadcast_dims(x.dims, kc.input(1).to_int64_vector(), &dims))
          return invalid_argument(node.describe() + ": " + dims_to_string(x.dims) + " does not expand to " +
                                  dims_to_string(kc.input(1).to_int64_vector()));
        ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, dims));
        return copy_view(ctx, node, x, dims, broadcast_strides(x.dims, dims), 0, &out[0], 0, strides_of(dims));
      },
      kInput1);
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_gather(const CudaKernelArgs& a) {
  const Node& node = a.node;
  const int64_t axis_attr = AttrReader(node).get_int("axis", 0);
  return make_fn_kernel([&node, axis_attr](CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) -> Status {
    const DeviceTensor &x = *in[0], &idx = *in[1];
    if (!numeric(x) || (idx.dtype != DType::kI64 && idx.dtype != DType::kI32))
      return unsupported(node.describe() + ": types not covered");
    int64_t axis = axis_attr;
    if (!normalize_axis(&axis, x.rank())) return invalid_argument(node.describe() + ": axis out of range");
    std::vector<int64_t> dims(x.dims.begin(), x.dims.begin() + axis);
    dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
    dims.insert(dims.end(), x.dims.begin() + axis + 1, x.dims.end());
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.dims[i];
    for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dims[i];
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, dims));
    ASSIGN_OR_RETURN(DeviceTensor flag, ctx.allocate(DType::kI32, {1}));
    if (cudaMemsetAsync(flag.data, 0, sizeof(int), ctx.stream()) != cudaSuccess)
      return internal_error(node.describe() + ": cudaMemsetAsync failed");
    RETURN_IF_ERROR(launched(cuda::launch_gather(static_cast<int>(dtype_size(x.dtype)), x.data, onnx_type(idx.dtype),
                                                 idx.data, out[0].data, outer, x.dims[axis], idx.numel(), inner,
                                                 flag.as<int>(), ctx.stream()),
                             node, "Gather"));
    // An index out of range is the model's or the input's error, never silently zeros.
    ASSIGN_OR_RETURN(Tensor host_flag, ctx.download(flag));
    const int bad = host_flag.data<int32_t>()[0];
    if (bad != 0)
      return invalid_argument(node.describe() + ": index at position " + std::to_string(bad - 1) +
                              " is out of range for axis " + std::to_string(axis) + " of size " +
                              std::to_string(x.dims[axis]));
    return Status::ok();
  });
}

}  // namespace

void register_cuda_shape_kernels(CudaKernelTable& t) {
  t.add("", "Reshape", {nullptr, make_reshape, {}});
  t.add("", "Flatten", {nullptr, make_flatten, {}});
  t.add("", "Squeeze", {nullptr, [](const CudaKernelArgs& a) { return make_squeeze(a, false); }, {}});
  t.add("", "Unsqueeze", {nullptr, [](const CudaKernelArgs& a) { return make_squeeze(a, true); }, {}});
  t.add("", "Transpose", {nullptr, make_transpose, {}});
  t.add("", "Concat", {nullptr, make_concat, {}});
  t.add("", "Slice", {nullptr, make_slice, {}});
  t.add("", "Expand", {nullptr, make_expand, {}});
  t.add("", "Gather", {nullptr, make_gather, {}});
}

}  // namespace ferry
