// CPU kernels for the bf16 values of ferry's bf16 precision mode that no fused oneDNN op covers:
// Add/Sub/Mul/Div of bf16 tensors with numpy broadcasting (e.g. the squeeze-excitation scale
// x[N,H,W,C] * s[N,1,1,C] of EfficientNet, residual Adds left unfused), and Cast between f32 and
// bf16 (the precision mode's casts at the graph edges). Same arithmetic as the reference kernels,
// bit for bit: bf16 widened to f32, the op in f32, rounded back to nearest even (f32_to_bf16).
// Vectorized loops (FERRY_VEC), threads over chunks of the output. f32 inputs are left to
// elementwise.cpp (registered first); other dtypes run the reference kernel.
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/vec_math.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

enum class BinOp { kAdd, kSub, kMul, kDiv };

template <BinOp kOp>
inline float apply(float x, float z) {
  if constexpr (kOp == BinOp::kAdd) return x + z;
  else if constexpr (kOp == BinOp::kSub) return x - z;
  else if constexpr (kOp == BinOp::kMul) return x * z;
  else return x / z;
}

// y[i] = a[i*sa] op b[i*sb] for bf16 bit patterns, sa/sb in {0, 1} (one loop per case, so each vectorizes).
template <BinOp kOp>
FERRY_VEC void bf16_binary_span(const uint16_t* a, int64_t sa, const uint16_t* b, int64_t sb, uint16_t* y,
                                int64_t n) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(apply<kOp>(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
  } else if (sa) {
    const float z = bf16_to_f32(b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(apply<kOp>(bf16_to_f32(a[i]), z));
  } else if (sb) {
    const float x = bf16_to_f32(a[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(apply<kOp>(x, bf16_to_f32(b[i])));
  } else {
    const uint16_t r = f32_to_bf16(apply<kOp>(bf16_to_f32(a[0]), bf16_to_f32(b[0])));
    for (int64_t i = 0; i < n; ++i) y[i] = r;
  }
}

// Broadcast geometry: the output is walked as `outer` rows of `inner` contiguous elements; each
// operand's row starts at an offset from its strides and is read contiguously (step 1) or as one
// repeated element (step 0).
struct Walk {
  std::vector<int64_t> out_dims, a_strides, b_strides;  // over the outer axes (rank k)
  int64_t inner = 1, a_step = 1, b_step = 1;
};

// Element strides of `d` (padded to rank r) as seen from the output: 0 on broadcast axes.
std::vector<int64_t> broadcast_strides(std::vector<int64_t> d, size_t r) {
  d.insert(d.begin(), r - d.size(), 1);
  std::vector<int64_t> s(r, 0);
  int64_t acc = 1;
  for (size_t i = r; i-- > 0;) {
    s[i] = d[i] == 1 ? 0 : acc;
    acc *= d[i];
  }
  return s;
}

Walk make_walk(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& out) {
  const size_t r = out.size();
  const std::vector<int64_t> sa = broadcast_strides(a, r), sb = broadcast_strides(b, r);
  // The innermost axes where each operand is either all there or all broadcast become the row.
  size_t k = r;
  int64_t a_mode = -1, b_mode = -1;  // -1 undecided, 0 broadcast, 1 contiguous
  const auto fits = [](int64_t stride, int64_t dim, int64_t* mode) {
    const int64_t m = dim == 1 ? *mode : (stride == 0 ? 0 : 1);
    if (dim == 1) return true;
    if (*mode >= 0 && *mode != m) return false;
    *mode = m;
    return true;
  };
  while (k > 0 && fits(sa[k - 1], out[k - 1], &a_mode) && fits(sb[k - 1], out[k - 1], &b_mode)) --k;
  Walk w;
  for (size_t i = k; i < r; ++i) w.inner *= out[i];
  w.a_step = a_mode == 0 ? 0 : 1;
  w.b_step = b_mode == 0 ? 0 : 1;
  w.out_dims.assign(out.begin(), out.begin() + k);
  w.a_strides.assign(sa.begin(), sa.begin() + k);
  w.b_strides.assign(sb.begin(), sb.begin() + k);
  return w;
}

template <BinOp kOp>
StatusOr<bool> run_bf16_binary(KernelContext& ctx) {
  if (ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1)) return false;
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != DType::kBF16 || b.dtype() != DType::kBF16) return false;
  std::vector<int64_t> dims;
  if (!broadcast_dims(a.dims(), b.dims(), &dims)) return false;  // the reference kernel names the problem
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kBF16, dims, false));
  if (y->numel() == 0) return true;
  const Walk w = make_walk(a.dims(), b.dims(), dims);
  const uint16_t* pa = a.data<uint16_t>();
  const uint16_t* pb = b.data<uint16_t>();
  uint16_t* py = y->mutable_data<uint16_t>();
  const int64_t rows = y->numel() / w.inner;
  const size_t k = w.out_dims.size();
  parallel_ranges(rows, w.inner * 2, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t rest = row, oa = 0, ob = 0;
      for (size_t i = k; i-- > 0;) {
        const int64_t c = rest % w.out_dims[i];
        rest /= w.out_dims[i];
        oa += c * w.a_strides[i];
        ob += c * w.b_strides[i];
      }
      bf16_binary_span<kOp>(pa + oa, w.a_step, pb + ob, w.b_step, py + row * w.inner, w.inner);
    }
  });
  return true;
}

FERRY_VEC void f32_to_bf16_span(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}
FERRY_VEC void bf16_to_f32_span(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

StatusOr<bool> run_cast(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType to = static_cast<DType>(ctx.get_int("to", 0));
  const bool down = x.dtype() == DType::kF32 && to == DType::kBF16;
  const bool up = x.dtype() == DType::kBF16 && to == DType::kF32;
  if (!down && !up) return false;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, to, x.dims(), false));
  if (down) {
    const float* px = x.data<float>();
    uint16_t* py = y->mutable_data<uint16_t>();
    parallel_ranges(x.numel(), 2, [&](int64_t s, int64_t e) { f32_to_bf16_span(px + s, py + s, e - s); });
  } else {
    const uint16_t* px = x.data<uint16_t>();
    float* py = y->mutable_data<float>();
    parallel_ranges(x.numel(), 1, [&](int64_t s, int64_t e) { bf16_to_f32_span(px + s, py + s, e - s); });
  }
  return true;
}

// Takes the node unless its inputs are known at load time to be something else than bf16 / f32.
CpuKernelFactory factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    for (const std::string& in : node.inputs) {
      const TensorType* t = in.empty() ? nullptr : g.find_type(in);
      if (t && t->dtype != DType::kBF16 && t->dtype != DType::kF32 && t->dtype != DType::kUndefined)
        return std::unique_ptr<Kernel>();
    }
    return make_fn_kernel(fn, schema);
  };
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_bf16_kernels(CpuKernelTable& t) {
  using namespace cpu;
  t.add("", "Add", factory(run_bf16_binary<BinOp::kAdd>));
  t.add("", "Sub", factory(run_bf16_binary<BinOp::kSub>));
  t.add("", "Mul", factory(run_bf16_binary<BinOp::kMul>));
  t.add("", "Div", factory(run_bf16_binary<BinOp::kDiv>));
  t.add("", "Cast", factory(run_cast));
}
}  // namespace ferry
