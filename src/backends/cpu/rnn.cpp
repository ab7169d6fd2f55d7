// Optimized RNN, GRU and LSTM (f32, bf16) for the cpu backend.
//
// At creation the constant weights are packed once: W^T and R^T per direction ([I, G*H] and
// [H, G*H]), biases split into the input part (Wb) and the recurrent part (Rb). A run computes
// X * W^T for all time steps in one oneDNN GEMM per direction, then per step H(t-1) * R^T + Rb for
// the batch rows (small_gemm, R^T resident in cache) followed by the gate equations (vectorized
// sigmoid / tanh from vec_math.h; LSTM on AVX-512 / AVX2: rnn_gates.h, with Wb folded into the product's
// bias), writing Y, Y_h and Y_c directly; each row's next-step projection is prefetched between the
// rows' gate math.
// Directions and batch-row blocks are independent, so with several threads each one runs its whole
// sequence on its own thread (no barrier per step); a thread that runs a whole direction also
// computes its projection (one parallel region per node).
//
// Covered: f32, and bf16 computed in f32 (rounded at the end, as the reference kernel does);
// forward / reverse / bidirectional, layouts 0 and 1, B, initial_h / initial_c,
// sequence_lens (rows past their length keep their state; Y is zero there), clip, LSTM input_forget
// and peepholes, GRU linear_before_reset 0 and 1, the default activations only. The factory returns
// nullptr for anything else (other activations, non-constant weights, f16 / f64), and a run whose
// inputs the kernel does not handle (bad shapes or lengths, other dtypes) goes to the reference
// kernel, which also gives the error messages.
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/bf16_span.h"
#include "backends/cpu/const_weight_gemm.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/rnn_gates.h"
#include "backends/cpu/small_gemm.h"
#include "backends/cpu/vec_math.h"
#include "common/env_switch.h"
#include "ops/op_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {

using std::vector;

enum class Cell { kRnn, kGru, kLstm };

// ---- gate equations, one batch row (x: the row's X * W^T, wb: Wb, g: H(t-1) * R^T + Rb) -------
// Spans never overlap (restrict): without it GCC gives up vectorizing for the number of alias checks.

using In = const float* __restrict;
using Out = float* __restrict;

FERRY_VEC void rnn_row(int64_t H, In x, In wb, In g, float clip, Out h) {
  for (int64_t j = 0; j < H; ++j) h[j] = vec::tanh(vec::clampf(x[j] + wb[j] + g[j], -clip, clip));
}

// Gate blocks i, o, f, c; peepholes pi / po / pf (zeros when the node has none).
FERRY_VEC void lstm_row(int64_t H, In x, In wb, In g, In pi, In po, In pf, float clip, bool input_forget, Out c,
                        Out h) {
  for (int64_t j = 0; j < H; ++j) {
    const float ig = vec::sigmoid(vec::clampf(x[j] + wb[j] + g[j] + pi[j] * c[j], -clip, clip));
    const float fv = vec::sigmoid(vec::clampf(x[2 * H + j] + wb[2 * H + j] + g[2 * H + j] + pf[j] * c[j], -clip, clip));
    const float fg = input_forget ? 1.f - ig : fv;
    const float cc = vec::tanh(vec::clampf(x[3 * H + j] + wb[3 * H + j] + g[3 * H + j], -clip, clip));
    const float cn = fg * c[j] + ig * cc;
    const float og = vec::sigmoid(vec::clampf(x[H + j] + wb[H + j] + g[H + j] + po[j] * cn, -clip, clip));
    c[j] = cn;
    h[j] = og * vec::tanh(cn);
  }
}

// GRU z and r gates in place: g = sigmoid(clip(x + wb + g)) over the first 2H columns.
FERRY_VEC void gru_zr(int64_t n, In x, In wb, Out g, float clip) {
  for (int64_t j = 0; j < n; ++j) g[j] = vec::sigmoid(vec::clampf(x[j] + wb[j] + g[j], -clip, clip));
}

FERRY_VEC void mul_span(int64_t n, In a, In b, Out out) {
  for (int64_t j = 0; j < n; ++j) out[j] = a[j] * b[j];
}

// GRU output: hh = tanh(clip(x + wb + s * gh)), h = (1 - z) hh + z h. s is r (linear_before_reset)
// or ones (gh then already is (r .* H(t-1)) * Rh^T + Rbh).
FERRY_VEC void gru_h(int64_t H, In x, In wb, In z, In s, In gh, float clip, Out h) {
  for (int64_t j = 0; j < H; ++j) {
    const float hh = vec::tanh(vec::clampf(x[j] + wb[j] + s[j] * gh[j], -clip, clip));
    h[j] = (1.f - z[j]) * hh + z[j] * h[j];
  }
}

// ---- the kernel ---------------------------------------------------------------------------------

struct Direction {
  cpu::PanelMatrix r_first;   // R^T [H, G*H] (GRU with linear_before_reset 0: the z and r columns only)
  cpu::PanelMatrix r_second;  // GRU with linear_before_reset 0: Rh^T [H, H]
  vector<float> wb, rb;      // [G*H] (zeros without B)
  vector<float> wrb;         // LSTM on AVX-512: Wb + Rb [G*H], the recurrent product's bias
  vector<float> pi, po, pf;  // [H] (zeros without P)
  bool reverse = false;
};

// Geometry and buffers of one run.
struct Run {
  int64_t S, B, layout;
  const float* xd;  // X (f32)
  const int64_t* lens;
  const float *h0, *c0;  // initial states (layout's order) or null
  float *y, *yh, *yc;    // outputs or null
};

class RnnKernel : public Kernel {
 public:
  RnnKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  // Reads the attributes and packs the constant weights; false when the node is not covered.
  bool init(const Graph& graph);
  Status compute(KernelContext& ctx) override;

 private:
  int64_t state_offset(const Run& r, int64_t d, int64_t b) const {
    return (r.layout == 0 ? d * r.B + b : b * D_ + d) * H_;
  }
  // xw: direction d's X * W_d^T [S*B, G*H], rows in X's order.
  void run_rows(const Run& r, int64_t d, const float* xw, int64_t b0, int64_t nb) const;
  // The checks of the reference kernel that this one relies on; false: let the reference run it.
  bool inputs_handled(const KernelContext& ctx, int64_t layout) const;

  Node node_;
  KernelFn fallback_;
  Cell cell_ = Cell::kRnn;
  int64_t D_ = 1, G_ = 1, H_ = 0, I_ = 0;
  int64_t layout_attr_ = 0;
  float clip_ = std::numeric_limits<float>::infinity();
  bool input_forget_ = false, linear_before_reset_ = false;
  vector<std::unique_ptr<cpu::ConstWeightGemm>> input_gemm_;  // per direction X * W_d^T, W_d^T [I, G*H]
  // The input projections' buffers, one per work item, kept between runs (compute()); kept_mu_ is
  // held by the run using them (a run that overlaps it allocates its own).
  std::mutex kept_mu_;
  vector<vector<float>> kept_;
  vector<Direction> dirs_;
  vector<float> ones_;  // [H]
  cpu::LstmGatesFn lstm16_ = nullptr;  // LSTM gates on AVX-512 or AVX2 + FMA (null: lstm_row)
};

bool default_activations(const AttrReader& a, Cell cell, int64_t dirs) {
  const vector<std::string> names = a.get_strings("activations");
  if (names.empty()) return true;
  const vector<std::string> want = cell == Cell::kRnn   ? vector<std::string>{"tanh"}
                                   : cell == Cell::kGru ? vector<std::string>{"sigmoid", "tanh"}
                                                        : vector<std::string>{"sigmoid", "tanh", "tanh"};
  if (names.size() != want.size() && names.size() != want.size() * static_cast<size_t>(dirs)) return false;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string lower = names[i];
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower != want[i % want.size()]) return false;
  }
  return true;
}

bool given(const Node& n, size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); }

bool RnnKernel::init(const Graph& graph) {
  cell_ = node_.op_type == "LSTM" ? Cell::kLstm : node_.op_type == "GRU" ? Cell::kGru : Cell::kRnn;
  G_ = cell_ == Cell::kRnn ? 1 : cell_ == Cell::kGru ? 3 : 4;
  AttrReader a(node_);
  const std::string dir = a.get_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") return false;
  D_ = dir == "bidirectional" ? 2 : 1;
  if (!default_activations(a, cell_, D_)) return false;
  layout_attr_ = a.get_int("layout", 0);
  if (layout_attr_ != 0 && layout_attr_ != 1) return false;
  if (a.has("clip")) {
    clip_ = a.get_float("clip", 0.f);
    if (!(clip_ > 0.f)) return false;
  }
  const int64_t inf = cell_ == Cell::kLstm ? a.get_int("input_forget", 0) : 0;
  if (inf != 0 && inf != 1) return false;
  input_forget_ = inf == 1;
  linear_before_reset_ = cell_ == Cell::kGru && a.get_int("linear_before_reset", 0) != 0;
  const TensorType* xt = graph.find_type(node_.inputs[0]);
  if (xt && xt->dtype != DType::kUndefined && !cpu::f32_or_bf16(xt->dtype)) return false;

  // f32 or bf16 (a bf16 precision mode) constants, computed in f32 as the reference kernel does.
  auto f32_constant = [&](size_t i) -> std::optional<Tensor> {
    const Tensor* t = cpu::constant_input(graph, node_, i);
    if (!t || !cpu::f32_or_bf16(t->dtype())) return std::nullopt;
    return widen_to_f32(*t);
  };
  const std::optional<Tensor> w_t = f32_constant(1), r_t = f32_constant(2);
  if (!w_t || !r_t || w_t->rank() != 3 || r_t->rank() != 3) return false;
  const Tensor* w = &*w_t;
  const Tensor* r = &*r_t;
  H_ = r->dim(2);
  I_ = w->dim(2);
  const int64_t GH = G_ * H_;
  if (H_ < 1 || I_ < 1 || w->dim(0) != D_ || r->dim(0) != D_ || w->dim(1) != GH || r->dim(1) != GH) return false;
  if (a.has("hidden_size") && a.get_int("hidden_size", 0) != H_) return false;
  std::optional<Tensor> bias_t, peep_t;
  if (given(node_, 3)) {
    bias_t = f32_constant(3);
    if (!bias_t || bias_t->dims() != vector<int64_t>{D_, 2 * GH}) return false;
  }
  if (cell_ == Cell::kLstm && given(node_, 7)) {
    peep_t = f32_constant(7);
    if (!peep_t || peep_t->dims() != vector<int64_t>{D_, 3 * H_}) return false;
  }
  const Tensor* bias = bias_t ? &*bias_t : nullptr;
  const Tensor* peep = peep_t ? &*peep_t : nullptr;

  // W_d^T per direction: each direction's input projection is its own GEMM, so that a thread that
  // runs a direction can compute it too (see compute).
  for (int64_t d = 0; d < D_; ++d) {
    vector<float> wt(static_cast<size_t>(I_ * GH));
    const float* wd = w->data<float>() + d * GH * I_;
    for (int64_t n = 0; n < GH; ++n)
      for (int64_t i = 0; i < I_; ++i) wt[i * GH + n] = wd[n * I_ + i];
    input_gemm_.push_back(std::make_unique<cpu::ConstWeightGemm>(std::move(wt), I_, GH));
  }
  dirs_.resize(static_cast<size_t>(D_));
  for (int64_t d = 0; d < D_; ++d) {
    Direction& dr = dirs_[d];
    dr.reverse = dir == "reverse" || d == 1;
    const float* rd = r->data<float>() + d * GH * H_;  // R[n, k]: R^T's (k, n) is rd[k + n * H]
    const bool gru2 = cell_ == Cell::kGru && !linear_before_reset_;
    dr.r_first = cpu::pack_panels(H_, gru2 ? 2 * H_ : GH, rd, 1, H_);
    if (gru2) dr.r_second = cpu::pack_panels(H_, H_, rd + 2 * H_ * H_, 1, H_);
    dr.wb.assign(static_cast<size_t>(GH), 0.f);
    dr.rb.assign(static_cast<size_t>(GH), 0.f);
    if (bias) {
      const float* bd = bias->data<float>() + d * 2 * GH;
      std::copy(bd, bd + GH, dr.wb.begin());
      std::copy(bd + GH, bd + 2 * GH, dr.rb.begin());
    }
    dr.pi.assign(static_cast<size_t>(H_), 0.f);
    dr.po = dr.pi;
    dr.pf = dr.pi;
    if (peep) {
      const float* pd = peep->data<float>() + d * 3 * H_;
      std::copy(pd, pd + H_, dr.pi.begin());
      std::copy(pd + H_, pd + 2 * H_, dr.po.begin());
      std::copy(pd + 2 * H_, pd + 3 * H_, dr.pf.begin());
    }
  }
  ones_.assign(static_cast<size_t>(H_), 1.f);
  const bool clipped = clip_ != std::numeric_limits<float>::infinity();
  if (cell_ == Cell::kLstm) {
    lstm16_ = cpu::lstm_gates_avx512(peep != nullptr, clipped);
    if (!lstm16_) lstm16_ = cpu::lstm_gates_avx2(peep != nullptr, clipped);
  }
  if (lstm16_) {
    for (Direction& dr : dirs_) {
      dr.wrb.resize(static_cast<size_t>(GH));
      for (int64_t n = 0; n < GH; ++n) dr.wrb[n] = dr.wb[n] + dr.rb[n];
    }
  }
  return true;
}

bool RnnKernel::inputs_handled(const KernelContext& ctx, int64_t layout) const {
  if (!ctx.has_input(0) || !ctx.input_value(0).is_tensor()) return false;
  const Tensor& x = ctx.input(0);
  if (!cpu::f32_or_bf16(x.dtype()) || x.rank() != 3 || x.dim(2) != I_) return false;
  const int64_t S = x.dim(layout == 0 ? 0 : 1), B = x.dim(layout == 0 ? 1 : 0);
  if (S < 1 || B < 1) return false;
  const vector<int64_t> state = layout == 0 ? vector<int64_t>{D_, B, H_} : vector<int64_t>{B, D_, H_};
  for (int64_t i : {int64_t(5), int64_t(6)}) {
    if (i == 6 && cell_ != Cell::kLstm) break;
    if (!ctx.has_input(i)) continue;
    if (!ctx.input_value(i).is_tensor()) return false;
    const Tensor& t = ctx.input(i);
    if (t.dtype() != x.dtype() || t.dims() != state) return false;
  }
  if (ctx.has_input(4)) {
    if (!ctx.input_value(4).is_tensor()) return false;
    const Tensor& sl = ctx.input(4);
    if ((sl.dtype() != DType::kI32 && sl.dtype() != DType::kI64) || sl.dims() != vector<int64_t>{B}) return false;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t v = sl.get_int64(b);
      if (v < 0 || v > S) return false;
    }
  }
  return true;
}

// Runs direction d for batch rows [b0, b0 + nb) over the whole sequence.
void RnnKernel::run_rows(const Run& r, int64_t d, const float* xw, int64_t b0, int64_t nb) const {
  const int64_t H = H_, GH = G_ * H_;
  const Direction& dr = dirs_[d];
  vector<float> h(static_cast<size_t>(nb * H), 0.f), c(static_cast<size_t>(nb * H), 0.f);
  vector<float> g(static_cast<size_t>(nb * GH)), rh(static_cast<size_t>(nb * H), 0.f);
  int64_t max_len = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t b = b0 + i, off = state_offset(r, d, b);
    if (r.h0) std::memcpy(h.data() + i * H, r.h0 + off, sizeof(float) * H);
    if (r.c0) std::memcpy(c.data() + i * H, r.c0 + off, sizeof(float) * H);
    max_len = std::max(max_len, r.lens[b]);
  }
  bool h_zero = !r.h0;  // H(t-1) = 0: the recurrent product is Rb
  const bool gru2 = cell_ == Cell::kGru && !linear_before_reset_;  // second product on r .* H(t-1)
  const int64_t n_first = gru2 ? 2 * H : GH;
  auto x_row = [&](int64_t t, int64_t b) {
    return xw + (r.layout == 0 ? t * r.B + b : b * r.S + t) * GH;
  };
  auto time_of = [&](int64_t k, int64_t b) { return dr.reverse ? r.lens[b] - 1 - k : k; };

  // The AVX-512 LSTM gates take g with both biases (Wb + Rb) in it.
  const float* rbias = lstm16_ ? dr.wrb.data() : dr.rb.data();
  // RNN and LSTM write H(t) straight into Y when every row runs the whole sequence, and the next
  // step's product reads it there: no copy of h into Y per step (GRU updates h in place).
  // Measured against a copy (the switch that chose it is gone, issue 39): BiLSTM b8 1 thread, `perf record` shares (load 6, 4 runs): memmove
  // 1.75-2.68% -> 0.84-1.93%, the recurrence against the (unchanged) projection 1.04-1.16 -> 1.00-1.09.
  bool direct = r.y && cell_ != Cell::kGru;
  for (int64_t i = 0; i < nb && direct; ++i) direct = r.lens[b0 + i] == r.S;
  auto y_row = [&](int64_t t, int64_t b) {
    return r.y + (r.layout == 0 ? (t * D_ + d) * r.B + b : (b * r.S + t) * D_ + d) * H;
  };
  const float* h_prev = h.data();  // H(t-1) rows, h_ld apart
  int64_t h_ld = H;
  for (int64_t k = 0; k < max_len; ++k) {
    if (h_zero) {
      for (int64_t i = 0; i < nb; ++i) std::memcpy(g.data() + i * GH, rbias, sizeof(float) * n_first);
    } else {
      cpu::small_gemm(nb, h_prev, h_ld, dr.r_first, rbias, g.data(), GH);
    }
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      if (k >= r.lens[b]) continue;
      const float* x = x_row(time_of(k, b), b);
      float* gi = g.data() + i * GH;
      float* hi = direct ? y_row(time_of(k, b), b) : h.data() + i * H;
      switch (cell_) {
        case Cell::kRnn: rnn_row(H, x, dr.wb.data(), gi, clip_, hi); break;
        case Cell::kLstm:
          if (lstm16_) {
            lstm16_(H, x, gi, dr.pi.data(), dr.po.data(), dr.pf.data(), clip_, input_forget_, c.data() + i * H, hi);
            break;
          }
          lstm_row(H, x, dr.wb.data(), gi, dr.pi.data(), dr.po.data(), dr.pf.data(), clip_, input_forget_,
                   c.data() + i * H, hi);
          break;
        case Cell::kGru:
          gru_zr(2 * H, x, dr.wb.data(), gi, clip_);
          if (gru2) mul_span(H, gi + H, hi, rh.data() + i * H);
          break;
      }
      // The row's X * W^T for the next step (the projection of a whole layer outgrows L2 and is read
      // once, step by step): requested now, between the rows' gate math, it is in L2 when the next
      // step's gates read it rather than in L3. All of them in one burst before the recurrent product
      // stalled it (the load queue fills up) as much as it saved.
      if (k + 1 < r.lens[b]) {
        const char* next = reinterpret_cast<const char*>(x_row(time_of(k + 1, b), b));
        for (int64_t off = 0; off < GH * int64_t(sizeof(float)); off += 64) __builtin_prefetch(next + off, 0, 2);
      }
    }
    if (cell_ == Cell::kGru) {
      if (gru2) {
        if (h_zero) {
          for (int64_t i = 0; i < nb; ++i)
            std::memcpy(g.data() + i * GH + 2 * H, dr.rb.data() + 2 * H, sizeof(float) * H);
        } else {
          cpu::small_gemm(nb, rh.data(), H, dr.r_second, dr.rb.data() + 2 * H, g.data() + 2 * H, GH);
        }
      }
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t b = b0 + i;
        if (k >= r.lens[b]) continue;
        const float* gi = g.data() + i * GH;
        gru_h(H, x_row(time_of(k, b), b) + 2 * H, dr.wb.data() + 2 * H, gi, gru2 ? ones_.data() : gi + H, gi + 2 * H,
              clip_, h.data() + i * H);
      }
    }
    if (direct) {
      h_prev = y_row(time_of(k, b0), b0);
      h_ld = r.layout == 0 ? H : r.S * D_ * H;
    } else if (r.y) {
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t b = b0 + i;
        if (k >= r.lens[b]) continue;
        const int64_t t = time_of(k, b);
        float* dst = r.y + (r.layout == 0 ? (t * D_ + d) * r.B + b : (b * r.S + t) * D_ + d) * H;
        std::memcpy(dst, h.data() + i * H, sizeof(float) * H);
      }
    }
    h_zero = false;
  }
  if (direct)
    for (int64_t i = 0; i < nb; ++i) std::memcpy(h.data() + i * H, h_prev + i * h_ld, sizeof(float) * H);
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t b = b0 + i, off = state_offset(r, d, b);
    const bool ran = r.lens[b] > 0;
    if (r.yh) {
      if (ran) std::memcpy(r.yh + off, h.data() + i * H, sizeof(float) * H);
      else std::fill(r.yh + off, r.yh + off + H, 0.f);
    }
    if (r.yc) {
      if (ran) std::memcpy(r.yc + off, c.data() + i * H, sizeof(float) * H);
      else std::fill(r.yc + off, r.yc + off + H, 0.f);
    }
  }
}

Status RnnKernel::compute(KernelContext& ctx) {
  const int64_t layout = ctx.opset() >= 14 ? layout_attr_ : 0;
  if (!inputs_handled(ctx, layout)) return fallback_(ctx);
  const Tensor& x = ctx.input(0);
  Run r{};
  r.layout = layout;
  r.S = x.dim(layout == 0 ? 0 : 1);
  r.B = x.dim(layout == 0 ? 1 : 0);
  const int64_t S = r.S, B = r.B, GH = G_ * H_;
  vector<int64_t> lens(static_cast<size_t>(B), S);
  bool padded = false;
  if (ctx.has_input(4)) {
    for (int64_t b = 0; b < B; ++b) {
      lens[b] = ctx.input(4).get_int64(b);
      padded = padded || lens[b] < S;
    }
  }
  r.lens = lens.data();
  // bf16 tensors are widened into f32 copies; the outputs are computed in f32 buffers and rounded.
  const DType dt = x.dtype();
  const bool bf16 = dt == DType::kBF16;
  vector<float> x32, h032, c032, y32, yh32, yc32;
  auto f32_input = [&](int64_t i, vector<float>* copy) -> const float* {
    const Tensor& t = ctx.input(i);
    if (!bf16) return t.data<float>();
    copy->resize(static_cast<size_t>(t.numel()));
    return cpu::f32_view(t, 0, t.numel(), copy->data());
  };
  const float* xd = f32_input(0, &x32);
  r.h0 = ctx.has_input(5) ? f32_input(5, &h032) : nullptr;
  r.c0 = cell_ == Cell::kLstm && ctx.has_input(6) ? f32_input(6, &c032) : nullptr;
  auto f32_output = [&](Tensor* t, vector<float>* computed) -> float* {
    if (!bf16) return t->mutable_data<float>();
    computed->assign(static_cast<size_t>(t->numel()), 0.f);
    return computed->data();
  };
  Tensor *y_t = nullptr, *yh_t = nullptr, *yc_t = nullptr;

  const auto& outs = node_.outputs;
  auto wanted = [&](int64_t i) {
    return i < ctx.num_outputs() && i < static_cast<int64_t>(outs.size()) && !outs[i].empty();
  };
  const vector<int64_t> state = layout == 0 ? vector<int64_t>{D_, B, H_} : vector<int64_t>{B, D_, H_};
  if (wanted(0)) {
    const vector<int64_t> ydims = layout == 0 ? vector<int64_t>{S, D_, B, H_} : vector<int64_t>{B, S, D_, H_};
    ASSIGN_OR_RETURN(y_t, ctx.allocate_output(0, dt, ydims, padded));
    r.y = f32_output(y_t, &y32);
  }
  if (wanted(1)) {
    ASSIGN_OR_RETURN(yh_t, ctx.allocate_output(1, dt, state, false));
    r.yh = f32_output(yh_t, &yh32);
  }
  if (cell_ == Cell::kLstm && wanted(2)) {
    ASSIGN_OR_RETURN(yc_t, ctx.allocate_output(2, dt, state, false));
    r.yc = f32_output(yc_t, &yc32);
  }

  r.xd = xd;

  // Independent work items: each direction's rows, split in blocks when there are threads to spare.
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t blocks = std::clamp<int64_t>((threads + D_ - 1) / D_, 1, B);
  const int64_t items = D_ * blocks;
  const bool worth = S * B * GH * H_ >= (int64_t(1) << 15);
  const bool parallel = threads > 1 && items > 1 && worth;
  // Where an item is a whole direction (1 thread, or a bidirectional node on 2), the item computes
  // its direction's input projection [S*B, I] x [I, G*H] itself, on its own thread: no fork/join
  // between the projection and the recurrence, and the projection is written in the cache of the
  // core that reads it. Otherwise (row blocks) every direction's projection runs first, on all
  // threads. Against always first, BiLSTM, CPU ms p50 (median of 6 interleaved
  // rounds, load 6): 2 threads b1 0.667 -> 0.605, b8 2.76 -> 2.66; 1 thread b8 3.07 / 3.11 (same).
  const bool item_projection = blocks == 1;
  // Projection buffers: one per work item, kept by the kernel between runs up to 16 MiB each (a
  // fresh one would be page-faulted in on every run); larger ones, and those of a run that overlaps
  // another run of this node (concurrent sessions), are freed after the run. (Not thread_local: the
  // OpenMP workers of a thread that ends are not destroyed, and their buffers would leak.)
  constexpr size_t kKeptFloats = size_t(1) << 22;
  std::unique_lock<std::mutex> kept_lock(kept_mu_, std::try_to_lock);
  const bool keep = kept_lock.owns_lock();
  if (keep && kept_.size() < static_cast<size_t>(items)) kept_.resize(static_cast<size_t>(items));
  const size_t per_dir = static_cast<size_t>(S * B * GH);
  vector<Status> failed(static_cast<size_t>(items), Status::ok());
  auto project = [&](int64_t d, float* out) { return input_gemm_[d]->run(xd, S * B, out); };
  vector<float> all_once;
  float* all = nullptr;  // [D][S*B, G*H] when the projections run first
  if (!item_projection) {
    vector<float>& buf = keep && per_dir * D_ <= kKeptFloats ? kept_[0] : all_once;
    if (buf.size() < per_dir * D_) buf.resize(per_dir * D_);
    all = buf.data();
    for (int64_t d = 0; d < D_ && failed[0].is_ok(); ++d) failed[0] = project(d, all + d * per_dir);
  }
  auto item = [&](int64_t it) {
    const int64_t d = it / blocks, blk = it % blocks;
    const int64_t b0 = B * blk / blocks, b1 = B * (blk + 1) / blocks;
    if (b1 <= b0) return;
    if (all) {
      run_rows(r, d, all + d * per_dir, b0, b1 - b0);
      return;
    }
    vector<float> once;
    vector<float>& buf = keep && per_dir <= kKeptFloats ? kept_[static_cast<size_t>(it)] : once;
    if (buf.size() < per_dir) buf.resize(per_dir);
    failed[it] = project(d, buf.data());
    if (failed[it].is_ok()) run_rows(r, d, buf.data(), b0, b1 - b0);
  };
  if (failed[0].is_ok()) {
    if (parallel) {
#pragma omp parallel for num_threads(static_cast<int>(std::min<int64_t>(items, threads))) schedule(static)
      for (int64_t it = 0; it < items; ++it) item(it);
    } else {
      for (int64_t it = 0; it < items; ++it) item(it);
    }
  }
  for (const Status& st : failed)
    if (!st.is_ok())
      return internal_error(node_.describe() + ": " + st.message() +
                            "; run with --device cpu-ref to use the reference kernel");
  if (bf16) {
    if (y_t) cpu::store_f32(y_t, 0, y_t->numel(), y32.data());
    if (yh_t) cpu::store_f32(yh_t, 0, yh_t->numel(), yh32.data());
    if (yc_t) cpu::store_f32(yc_t, 0, yc_t->numel(), yc32.data());
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<Kernel>> make_rnn(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<RnnKernel>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void register_cpu_rnn_kernels(CpuKernelTable& t) {
  t.add("", "RNN", make_rnn);
  t.add("", "GRU", make_rnn);
  t.add("", "LSTM", make_rnn);
}

}  // namespace ferry
