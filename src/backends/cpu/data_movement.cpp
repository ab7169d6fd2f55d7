// CPU kernels that move data:
//   - Slice (opset 10+, unit steps): the output is a box of the input, copied as contiguous runs
//     with memcpy (any element type: the q/k/v split of a fused QKV projection, in f32 or bf16);
//   - Concat: each input's contiguous block per outer index, memcpy-ed in parallel;
//   - Resize / Upsample, f32, resizing at most two adjacent axes (H, W in NCHW or in the NHWC
//     regions of the layout pass): the reference's own taps (ops/resize.h), applied in one pass
//     per output row, vectorized over the channels when they are innermost.
// Other cases (steps, strings, other dtypes, tf_crop_and_resize extrapolation) run the reference.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/one_thread_rules.h"
#include "backends/cpu/vec_math.h"
#include "ops/op_util.h"
#include "ops/resize.h"

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

// ---- Concat ------------------------------------------------------------------------------------

StatusOr<bool> run_concat(KernelContext& ctx) {
  const int64_t n = ctx.num_inputs();
  if (n < 1) return false;
  for (int64_t i = 0; i < n; ++i)
    if (!ctx.has_input(i) || !ctx.input_value(i).is_tensor()) return false;
  const Tensor& x0 = ctx.input(0);
  const DType dt = x0.dtype();
  const int64_t es = dtype_size(dt);
  const int64_t rank = x0.rank();
  int64_t axis = ctx.get_int("axis", 0);
  if (es == 0 || dt == DType::kString || rank == 0 || !normalize_axis(&axis, rank)) return false;
  std::vector<int64_t> out_dims = x0.dims();
  out_dims[axis] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    if (t.dtype() != dt || t.rank() != rank) return false;  // the reference names the mismatch
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t.dim(d) != x0.dim(d)) return false;
    out_dims[axis] += t.dim(axis);
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, out_dims, false));
  if (y->numel() == 0) return true;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out_dims[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= out_dims[d];
  // (outer index, input) blocks: byte offsets in the output row and block sizes.
  std::vector<int64_t> block(n), at(n);
  int64_t row = 0;
  for (int64_t i = 0; i < n; ++i) {
    block[i] = ctx.input(i).dim(axis) * inner * es;
    at[i] = row;
    row += block[i];
  }
  char* py = static_cast<char*>(y->mutable_raw());
  std::optional<SingleThreadScope> one;  // a small output: one thread (one_thread_rules.h)
  if (move_on_one_thread(y->nbytes())) one.emplace();
  parallel_ranges(outer * n, row / n + 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t o = b / n, i = b % n;
      if (block[i] == 0) continue;
      std::memcpy(py + o * row + at[i], static_cast<const char*>(ctx.input(i).raw()) + o * block[i],
                  static_cast<size_t>(block[i]));
    }
  });
  return true;
}

// ---- Resize --------------------------------------------------------------------------------------

// dst[0, len) += w * src[0, len)
FERRY_VEC void axpy(float w, const float* src, float* dst, int64_t len) {
  for (int64_t c = 0; c < len; ++c) dst[c] += w * src[c];
}

// dst[0, len) = the 4-tap blend of a, b, c, d (bilinear: two rows, two columns).
FERRY_VEC void blend4(const float* w, const float* a, const float* b, const float* c, const float* d, float* dst,
                      int64_t len) {
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
  for (int64_t i = 0; i < len; ++i) dst[i] = w0 * a[i] + w1 * b[i] + w2 * c[i] + w3 * d[i];
}

// One output row (o, j) of a [outer, H, W, inner] -> [outer, OH, OW, inner] resize.
FERRY_VEC void resize_row_inner1(const float* in_rows[], const float* wy, int64_t ny, const ResizeAxisTaps& tx,
                                 int64_t ow, float* dst) {
  const int64_t nx = tx.n;
  for (int64_t i = 0; i < ow; ++i) {
    float acc = 0.0f;
    for (int64_t ky = 0; ky < ny; ++ky) {
      float h = 0.0f;
      for (int64_t kx = 0; kx < nx; ++kx) h += tx.w[i * nx + kx] * in_rows[ky][tx.idx[i * nx + kx]];
      acc += wy[ky] * h;
    }
    dst[i] = acc;
  }
}

StatusOr<bool> run_resize(KernelContext& ctx) {
  if (!ctx.has_input(0) || !ctx.input_value(0).is_tensor() || ctx.input(0).dtype() != DType::kF32) return false;
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  if (rank < 1) return false;
  std::vector<int64_t> out_dims;
  std::vector<ResizeAxisTaps> taps;
  ASSIGN_OR_RETURN(bool ok, resize_taps(ctx, &out_dims, &taps));
  if (!ok) return false;
  std::vector<int64_t> resized;
  for (int64_t d = 0; d < rank; ++d)
    if (!taps[d].identity) resized.push_back(d);
  if (resized.size() > 2 || (resized.size() == 2 && resized[1] != resized[0] + 1)) return false;
  // The two axes (ah, aw) the pass walks; a non-resized one gets identity taps.
  int64_t ah = 0, aw = 0;
  if (resized.size() == 2) ah = resized[0], aw = resized[1];
  else if (resized.size() == 1) ah = resized[0] + 1 < rank ? resized[0] : resized[0] - 1, aw = ah + 1;
  else ah = 0, aw = rank > 1 ? 1 : 0;
  if (rank == 1) return false;  // (1-D resizes are rare; the reference handles them)
  for (int64_t d : {ah, aw}) {
    ResizeAxisTaps& t = taps[d];
    if (!t.identity) continue;
    t.n = 1;
    t.idx.resize(static_cast<size_t>(out_dims[d]));
    for (int64_t j = 0; j < out_dims[d]; ++j) t.idx[j] = j;
    t.w.assign(static_cast<size_t>(out_dims[d]), 1.0f);
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, out_dims, false));
  if (y->numel() == 0) return true;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ah; ++d) outer *= out_dims[d];
  for (int64_t d = aw + 1; d < rank; ++d) inner *= out_dims[d];
  const int64_t h = x.dim(ah), w = x.dim(aw), oh = out_dims[ah], ow = out_dims[aw];
  const ResizeAxisTaps& ty = taps[ah];
  const ResizeAxisTaps& tx = taps[aw];
  const float* px = x.data<float>();
  float* py = y->mutable_data<float>();
  const int64_t ny = ty.n;
  std::optional<SingleThreadScope> one;  // a small output: one thread (one_thread_rules.h)
  if (move_on_one_thread(y->nbytes())) one.emplace();
  parallel_ranges(outer * oh, ow * inner * ny * tx.n, [&](int64_t r0, int64_t r1) {
    std::vector<const float*> rows(static_cast<size_t>(ny));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / oh, j = r % oh;
      const float* wy = ty.w.data() + j * ny;
      for (int64_t ky = 0; ky < ny; ++ky) rows[ky] = px + (o * h + ty.idx[j * ny + ky]) * w * inner;
      float* dst = py + r * ow * inner;
      if (inner == 1) {
        resize_row_inner1(rows.data(), wy, ny, tx, ow, dst);
        continue;
      }
      if (ny == 2 && tx.n == 2) {  // bilinear
        for (int64_t i = 0; i < ow; ++i) {
          const float* wx = tx.w.data() + i * 2;
          const int64_t x0 = tx.idx[i * 2] * inner, x1 = tx.idx[i * 2 + 1] * inner;
          const float wk[4] = {wy[0] * wx[0], wy[0] * wx[1], wy[1] * wx[0], wy[1] * wx[1]};
          blend4(wk, rows[0] + x0, rows[0] + x1, rows[1] + x0, rows[1] + x1, dst + i * inner, inner);
        }
        continue;
      }
      std::memset(dst, 0, static_cast<size_t>(ow * inner) * sizeof(float));
      for (int64_t i = 0; i < ow; ++i)
        for (int64_t ky = 0; ky < ny; ++ky) {
          if (wy[ky] == 0.0f) continue;
          for (int64_t kx = 0; kx < tx.n; ++kx) {
            const float wk = wy[ky] * tx.w[i * tx.n + kx];
            if (wk != 0.0f) axpy(wk, rows[ky] + tx.idx[i * tx.n + kx] * inner, dst + i * inner, inner);
          }
        }
    }
  });
  return true;
}

StatusOr<std::unique_ptr<Kernel>> make_concat(const Node&, const OpSchema& schema, const Graph&) {
  return make_fn_kernel(run_concat, schema);
}

StatusOr<std::unique_ptr<Kernel>> make_resize(const Node& node, const OpSchema& schema, const Graph& g) {
  if (node.inputs.empty() || !maybe_f32(g, node.inputs[0])) return std::unique_ptr<Kernel>();
  return make_fn_kernel(run_resize, schema);
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_data_movement_kernels(CpuKernelTable& t) {
  t.add("", "Slice", cpu::make_slice);
  t.add("", "Concat", cpu::make_concat);
  t.add("", "Resize", cpu::make_resize);
  t.add("", "Upsample", cpu::make_resize);
}
}  // namespace ferry
