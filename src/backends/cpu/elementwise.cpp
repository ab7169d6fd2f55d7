// CPU kernels for f32 elementwise ops: Add/Sub/Mul/Div with numpy broadcasting (dims collapsed
// so the inner loop is a contiguous span against a span or a scalar), and unary Relu, Sigmoid,
// Tanh, Erf, Exp, Neg, Sqrt, Abs; Sum of equally shaped inputs. Vectorized loops, threads over
// chunks of the output.
// (bf16 operands and f32<->bf16 Casts: bf16.cpp.)
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/one_thread_rules.h"
#include "backends/cpu/vec_math.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

enum class BinOp { kAdd, kSub, kMul, kDiv };

// y[i] = a[i*sa] op b[i*sb], sa/sb in {0, 1}.
#define FERRY_BINARY_SPAN(NAME, EXPR)                                                     \
  FERRY_VEC void NAME(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) { \
    if (sa && sb) {                                                                       \
      for (int64_t i = 0; i < n; ++i) { const float x = a[i], z = b[i]; y[i] = EXPR; }    \
    } else if (sa) {                                                                      \
      const float z = b[0];                                                               \
      for (int64_t i = 0; i < n; ++i) { const float x = a[i]; y[i] = EXPR; }              \
    } else if (sb) {                                                                      \
      const float x = a[0];                                                               \
      for (int64_t i = 0; i < n; ++i) { const float z = b[i]; y[i] = EXPR; }              \
    } else {                                                                              \
      const float x = a[0], z = b[0];                                                     \
      for (int64_t i = 0; i < n; ++i) y[i] = EXPR;                                        \
    }                                                                                     \
  }
FERRY_BINARY_SPAN(add_span, x + z)
FERRY_BINARY_SPAN(sub_span, x - z)
FERRY_BINARY_SPAN(mul_span, x * z)
FERRY_BINARY_SPAN(div_span, x / z)
#undef FERRY_BINARY_SPAN

using BinarySpan = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);

// y[r*inner + i] = a[r*ra + i] op b[r*rb + i] for rows r, ra/rb in {0, inner}: a [rows, inner] tensor
// against a row vector broadcast over the rows (squeeze-excitation's NHWC x [1,1,1,C] scale), one
// call over many rows instead of one span call (and index arithmetic) per row. EfficientNet-B0 b1,
// 1 thread: its 16 SE Muls 0.289 -> 0.243 ms per run (`ferry profile`, per-node CPU-time minimum
// over 4 interleaved rounds, loaded machine).
#define FERRY_BINARY_ROWS(NAME, EXPR)                                                               \
  FERRY_VEC void NAME(const float* a, int64_t ra, const float* b, int64_t rb, float* y, int64_t rows, \
                      int64_t inner) {                                                              \
    for (int64_t r = 0; r < rows; ++r, a += ra, b += rb, y += inner)                                \
      for (int64_t i = 0; i < inner; ++i) { const float x = a[i], z = b[i]; y[i] = EXPR; }          \
  }
FERRY_BINARY_ROWS(add_rows, x + z)
FERRY_BINARY_ROWS(sub_rows, x - z)
FERRY_BINARY_ROWS(mul_rows, x * z)
FERRY_BINARY_ROWS(div_rows, x / z)
#undef FERRY_BINARY_ROWS

using BinaryRows = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t);

BinaryRows binary_rows(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return add_rows;
    case BinOp::kSub: return sub_rows;
    case BinOp::kMul: return mul_rows;
    case BinOp::kDiv: return div_rows;
  }
  return add_rows;
}

BinarySpan binary_span(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return add_span;
    case BinOp::kSub: return sub_span;
    case BinOp::kMul: return mul_span;
    case BinOp::kDiv: return div_span;
  }
  return add_span;
}

// Output dims with the operands' strides, adjacent dims merged where both operands allow it.
struct CollapsedBroadcast {
  std::vector<int64_t> dims, sa, sb;
};

CollapsedBroadcast collapse(const std::vector<int64_t>& out, std::vector<int64_t> sa, std::vector<int64_t> sb) {
  CollapsedBroadcast c;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    if (!c.dims.empty()) {
      const int64_t d = out[i];
      const bool a_ok = c.sa.back() == sa[i] * d;
      const bool b_ok = c.sb.back() == sb[i] * d;
      if (a_ok && b_ok) {
        c.dims.back() *= d;
        c.sa.back() = sa[i];
        c.sb.back() = sb[i];
        continue;
      }
    }
    c.dims.push_back(out[i]);
    c.sa.push_back(sa[i]);
    c.sb.push_back(sb[i]);
  }
  if (c.dims.empty()) {
    c.dims = {1};
    c.sa = {0};
    c.sb = {0};
  }
  return c;
}

// Calls span(offset_a, stride_a, offset_b, stride_b, offset_y, n) over the contiguous output runs
// of a collapsed broadcast (numel elements), in parallel.
template <typename Span>
void run_collapsed(const CollapsedBroadcast& c, int64_t numel, Span span) {
  const size_t r = c.dims.size();
  const int64_t inner = c.dims[r - 1];
  const int64_t rows = numel / inner;
  if (rows == 1) {
    parallel_ranges(inner, 1, [&](int64_t s, int64_t e) { span(s * c.sa[0], c.sa[0], s * c.sb[0], c.sb[0], s, e - s); });
    return;
  }
  parallel_ranges(rows, inner, [&](int64_t s, int64_t e) {
    for (int64_t row = s; row < e; ++row) {
      int64_t oa = 0, ob = 0, rem = row;
      for (size_t i = r - 1; i-- > 0;) {
        const int64_t idx = rem % c.dims[i];
        rem /= c.dims[i];
        oa += idx * c.sa[i];
        ob += idx * c.sb[i];
      }
      span(oa, c.sa[r - 1], ob, c.sb[r - 1], row * inner, inner);
    }
  });
}

template <BinOp kOp>
StatusOr<bool> run_binary(KernelContext& ctx) {
  if (ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.input_value(0).is_tensor() ||
      !ctx.input_value(1).is_tensor())
    return false;
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32) return false;
  std::vector<int64_t> out;
  if (!broadcast_dims(a.dims(), b.dims(), &out)) return false;
  CollapsedBroadcast c = collapse(out, broadcast_strides(a.dims(), out), broadcast_strides(b.dims(), out));
  const size_t r = c.dims.size();
  // The innermost run must be contiguous or broadcast for both operands.
  if ((c.sa[r - 1] != 0 && c.sa[r - 1] != 1) || (c.sb[r - 1] != 0 && c.sb[r - 1] != 1)) return false;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, out, false));
  if (y->numel() == 0) return true;
  // A small row broadcast (the NHWC squeeze-excitation scale after a one-thread global pool and
  // small-GEMM FCs) runs on one thread: one_thread_rules.h.
  std::optional<SingleThreadScope> one;
  const bool row_broadcast = r >= 2 && r <= 3 && (c.sa[r - 2] == 0 || c.sb[r - 2] == 0);
  if (row_broadcast && binary_on_one_thread(y->numel() * int64_t{4})) one.emplace();
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* py = y->mutable_data<float>();
  if (r == 2 && c.sa[1] == 1 && c.sb[1] == 1 && (c.sa[0] == 0 || c.sa[0] == c.dims[1]) &&
      (c.sb[0] == 0 || c.sb[0] == c.dims[1])) {  // [rows, inner] against a row, or two contiguous tensors
    const int64_t rows = c.dims[0], inner = c.dims[1];
    parallel_ranges(rows, inner, [&](int64_t s, int64_t e) {
      binary_rows(kOp)(pa + s * c.sa[0], c.sa[0], pb + s * c.sb[0], c.sb[0], py + s * inner, e - s, inner);
    });
    return true;
  }
  if (r == 3 && c.sa[2] == 1 && c.sb[2] == 1 && (c.sa[1] == 0 || c.sa[1] == c.dims[2]) &&
      (c.sb[1] == 0 || c.sb[1] == c.dims[2])) {  // the same per batch row: [batch, rows, inner] against [batch, 1, inner]
    const int64_t batch = c.dims[0], rows = c.dims[1], inner = c.dims[2];
    // Threads over batch x rows, each range cut at batch boundaries into binary_rows calls.
    parallel_ranges(batch * rows, inner, [&](int64_t s, int64_t e) {
      while (s < e) {
        const int64_t bi = s / rows, r0 = s % rows, r1 = std::min(rows, r0 + (e - s));
        binary_rows(kOp)(pa + bi * c.sa[0] + r0 * c.sa[1], c.sa[1], pb + bi * c.sb[0] + r0 * c.sb[1], c.sb[1],
                         py + (bi * rows + r0) * inner, r1 - r0, inner);
        s += r1 - r0;
      }
    });
    return true;
  }
  run_collapsed(c, y->numel(), [&](int64_t oa, int64_t sa, int64_t ob, int64_t sb, int64_t oy, int64_t n) {
    binary_span(kOp)(pa + oa, sa, pb + ob, sb, py + oy, n);
  });
  return true;
}

// ---- unary -------------------------------------------------------------------------------------

#define FERRY_UNARY_SPAN(NAME, EXPR) \
  FERRY_VEC void NAME(const float* a, float* y, int64_t n) { \
    for (int64_t i = 0; i < n; ++i) { const float x = a[i]; y[i] = EXPR; } \
  }
FERRY_UNARY_SPAN(relu_span, x < 0.f ? 0.f : x)  // NaN stays NaN, as numpy.maximum(x, 0)
FERRY_UNARY_SPAN(sigmoid_span, vec::sigmoid(x))
FERRY_UNARY_SPAN(tanh_span, vec::tanh(x))
FERRY_UNARY_SPAN(erf_span, vec::erf(x))
FERRY_UNARY_SPAN(exp_span, vec::exp(x))
FERRY_UNARY_SPAN(neg_span, -x)
FERRY_UNARY_SPAN(sqrt_span, std::sqrt(x))
FERRY_UNARY_SPAN(abs_span, std::fabs(x))
#undef FERRY_UNARY_SPAN

using UnarySpan = void (*)(const float*, float*, int64_t);

template <UnarySpan kSpan, int kCost>
StatusOr<bool> run_unary(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, x.dims(), false));
  const float* px = x.data<float>();
  float* py = y->mutable_data<float>();
  parallel_ranges(x.numel(), kCost, [&](int64_t s, int64_t e) { kSpan(px + s, py + s, e - s); });
  return true;
}

// Sum of equally shaped inputs (the accumulation of gradients of values read several times).

FERRY_VEC void add_spans(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

StatusOr<bool> run_sum(KernelContext& ctx) {
  if (!all_f32(ctx) || ctx.num_inputs() < 2) return false;
  const Tensor& a = ctx.input(0);
  for (int64_t i = 1; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i) || ctx.input(i).dims() != a.dims()) return false;  // broadcasting: the reference
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output_over(0, 0, DType::kF32, a.dims()));
  float* py = y->mutable_data<float>();
  // Left to right, as the reference: ((x0 + x1) + x2) + ...
  parallel_ranges(a.numel(), ctx.num_inputs(), [&](int64_t s, int64_t e) {
    add_spans(a.data<float>() + s, ctx.input(1).data<float>() + s, py + s, e - s);
    for (int64_t i = 2; i < ctx.num_inputs(); ++i) add_spans(py + s, ctx.input(i).data<float>() + s, py + s, e - s);
  });
  return true;
}

CpuKernelFactory factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    for (const std::string& in : node.inputs)
      if (!in.empty() && !maybe_f32(g, in)) return std::unique_ptr<Kernel>();
    return make_fn_kernel(fn, schema);
  };
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_elementwise_kernels(CpuKernelTable& t) {
  using namespace cpu;
  t.add("", "Add", factory(run_binary<BinOp::kAdd>));
  t.add("", "Sub", factory(run_binary<BinOp::kSub>));
  t.add("", "Mul", factory(run_binary<BinOp::kMul>));
  t.add("", "Div", factory(run_binary<BinOp::kDiv>));
  t.add("", "Relu", factory(run_unary<relu_span, 1>));
  t.add("", "Sigmoid", factory(run_unary<sigmoid_span, 20>));
  t.add("", "Tanh", factory(run_unary<tanh_span, 20>));
  t.add("", "Erf", factory(run_unary<erf_span, 20>));
  t.add("", "Exp", factory(run_unary<exp_span, 15>));
  t.add("", "Neg", factory(run_unary<neg_span, 1>));
  t.add("", "Sqrt", factory(run_unary<sqrt_span, 4>));
  t.add("", "Abs", factory(run_unary<abs_span, 1>));
  t.add("", "Sum", factory(run_sum));
}
}  // namespace ferry
