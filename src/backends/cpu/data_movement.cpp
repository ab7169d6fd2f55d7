// CPU kernel for Slice (opset 10+, unit steps): the output is a box of the input, copied as
// contiguous runs with memcpy (any element type: the q/k/v split of a fused QKV projection, in f32
// or bf16). Other steps, and dtypes without a fixed size (strings), run the reference kernel.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

// Reads an int32/int64 1-D input as int64 values; false when absent or of another type.
bool read_ints(const KernelContext& ctx, int64_t i, std::vector<int64_t>* out) {
  if (!ctx.has_input(i) || !ctx.input_value(i).is_tensor()) return false;
  const Tensor& t = ctx.input(i);
  if (t.rank() != 1) return false;
  out->resize(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kI64) std::copy(t.data<int64_t>(), t.data<int64_t>() + t.numel(), out->begin());
  else if (t.dtype() == DType::kI32) std::copy(t.data<int32_t>(), t.data<int32_t>() + t.numel(), out->begin());
  else return false;
  return true;
}

StatusOr<bool> run_slice(KernelContext& ctx) {
  if (!ctx.has_input(0) || !ctx.input_value(0).is_tensor()) return false;
  const Tensor& x = ctx.input(0);
  const int64_t es = dtype_size(x.dtype());
  if (es == 0 || x.dtype() == DType::kString || x.rank() == 0) return false;
  std::vector<int64_t> starts, ends, axes, steps;
  if (!read_ints(ctx, 1, &starts) || !read_ints(ctx, 2, &ends) || starts.size() != ends.size()) return false;
  if (ctx.has_input(3) && (!read_ints(ctx, 3, &axes) || axes.size() != starts.size())) return false;
  if (ctx.has_input(4) && (!read_ints(ctx, 4, &steps) || steps.size() != starts.size())) return false;
  const int64_t rank = x.rank();
  std::vector<int64_t> begin(rank, 0), out_dims = x.dims();
  std::vector<bool> seen(rank, false);
  for (size_t j = 0; j < starts.size(); ++j) {
    int64_t axis = axes.empty() ? static_cast<int64_t>(j) : axes[j];
    if (!normalize_axis(&axis, rank) || seen[axis] || (!steps.empty() && steps[j] != 1)) return false;
    seen[axis] = true;
    const int64_t dim = x.dim(axis);
    int64_t s = starts[j] < 0 ? starts[j] + dim : starts[j];
    int64_t e = ends[j] < 0 ? ends[j] + dim : ends[j];
    s = std::clamp<int64_t>(s, 0, dim);
    e = std::clamp<int64_t>(e, 0, dim);
    begin[axis] = s;
    out_dims[axis] = std::max<int64_t>(e - s, 0);
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims, false));
  if (y->numel() == 0) return true;
  // Trailing dims taken whole merge into one contiguous run with the last sliced one.
  int64_t last = rank - 1;
  int64_t run = out_dims[last];
  while (last > 0 && out_dims[last] == x.dim(last)) run *= out_dims[--last];
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  const int64_t rows = y->numel() / run;
  const char* px = static_cast<const char*>(x.raw());
  char* py = static_cast<char*>(y->mutable_raw());
  parallel_ranges(rows, run, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t off = begin[last] * in_strides[last], rem = r;
      for (int64_t i = last - 1; i >= 0; --i) {
        off += (begin[i] + rem % out_dims[i]) * in_strides[i];
        rem /= out_dims[i];
      }
      std::memcpy(py + r * run * es, px + off * es, static_cast<size_t>(run * es));
    }
  });
  return true;
}

StatusOr<std::unique_ptr<Kernel>> make_slice(const Node& node, const OpSchema& schema, const Graph& g) {
  if (node.inputs.size() < 3) return std::unique_ptr<Kernel>();  // Slice-1 (attributes): reference
  return make_fn_kernel(run_slice, schema);
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_data_movement_kernels(CpuKernelTable& t) { t.add("", "Slice", cpu::make_slice); }
}  // namespace ferry
