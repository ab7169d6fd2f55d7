// Op family 'rnn': the recurrent layers RNN, GRU and LSTM (opsets 7 and 14).
//
// One direction is computed as: XW = X * W^T for all time steps at once (gemm_ref), then per step
// HR = H(t-1) * R^T for the whole batch (gemm_ref) followed by the per-element gate equations.
// Batch rows whose sequence (sequence_lens) has ended keep their state; the reverse direction of
// a row of length L visits times L-1 .. 0. Y is zero past a row's length, Y_h / Y_c hold the state
// after the row's last valid step (zeros for a zero-length row, as onnxruntime does).
// f32 computes in f32, f64 in f64, f16/bf16 via f32 (rounded back at the end).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "ops/float_util.h"
#include "ops/gemm_ref.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

enum class Cell { kRnn, kGru, kLstm };

int64_t num_gates(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }
int64_t num_activations(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 2 : 3; }
Cell cell_of(const Node& n) {
  if (n.op_type == "GRU") return Cell::kGru;
  if (n.op_type == "LSTM") return Cell::kLstm;
  return Cell::kRnn;
}

// ---- activations ----------------------------------------------------------------------------

enum class ActFn { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
                   kSoftsign, kSoftplus };

struct Act {
  ActFn fn = ActFn::kTanh;
  float alpha = 0.0f;
  float beta = 0.0f;
};

struct ActInfo {
  const char* name;  // lower case
  ActFn fn;
  bool uses_alpha, uses_beta;
  float alpha, beta;  // defaults (those of the ONNX operators of the same name)
};

const ActInfo kActs[] = {
    {"relu", ActFn::kRelu, false, false, 0.0f, 0.0f},
    {"tanh", ActFn::kTanh, false, false, 0.0f, 0.0f},
    {"sigmoid", ActFn::kSigmoid, false, false, 0.0f, 0.0f},
    {"affine", ActFn::kAffine, true, true, 1.0f, 0.0f},
    {"leakyrelu", ActFn::kLeakyRelu, true, false, 0.01f, 0.0f},
    {"thresholdedrelu", ActFn::kThresholdedRelu, true, false, 1.0f, 0.0f},
    {"scaledtanh", ActFn::kScaledTanh, true, true, 1.0f, 1.0f},
    {"hardsigmoid", ActFn::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", ActFn::kElu, true, false, 1.0f, 0.0f},
    {"softsign", ActFn::kSoftsign, false, false, 0.0f, 0.0f},
    {"softplus", ActFn::kSoftplus, false, false, 0.0f, 0.0f},
};

template <typename T>
inline T sigmoid(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <typename T>
inline T apply_act(const Act& a, T x) {
  const T alpha = static_cast<T>(a.alpha), beta = static_cast<T>(a.beta);
  switch (a.fn) {
    case ActFn::kRelu: return x > 0 ? x : T(0);
    case ActFn::kTanh: return std::tanh(x);
    case ActFn::kSigmoid: return sigmoid(x);
    case ActFn::kAffine: return alpha * x + beta;
    case ActFn::kLeakyRelu: return x >= 0 ? x : alpha * x;
    case ActFn::kThresholdedRelu: return x > alpha ? x : T(0);
    case ActFn::kScaledTanh: return alpha * std::tanh(beta * x);
    case ActFn::kHardSigmoid: return std::min(T(1), std::max(T(0), alpha * x + beta));
    case ActFn::kElu: return x >= 0 ? x : alpha * (std::exp(x) - T(1));
    case ActFn::kSoftsign: return x / (T(1) + std::fabs(x));
    case ActFn::kSoftplus: return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
  return x;
}

// Reads `activations` / `activation_alpha` / `activation_beta` into num_activations(cell) entries per
// direction. alpha and beta values are consumed in order by the functions that take them (as
// onnxruntime does); a function whose value is not in the list uses its operator's default. A list
// of activations for one direction is used for both directions of a bidirectional layer.
template <class Ctx>
Status read_activations(Ctx& ctx, Cell cell, int64_t dirs, vector<Act>* acts) {
  const int64_t n = num_activations(cell);
  vector<std::string> names = ctx.get_strings("activations");
  if (names.empty()) {
    if (cell == Cell::kRnn) names = {"Tanh"};
    else if (cell == Cell::kGru) names = {"Sigmoid", "Tanh"};
    else names = {"Sigmoid", "Tanh", "Tanh"};
  }
  const int64_t given = static_cast<int64_t>(names.size());
  if (given != n && given != n * dirs)
    return ctx.error("attribute 'activations' has " + std::to_string(given) + " entries; " + ctx.node().op_type +
                     " with " + std::to_string(dirs) + " direction(s) needs " + std::to_string(n * dirs) +
                     " (one per activation function f" + (n > 1 ? ", g" : "") + (n > 2 ? ", h" : "") +
                     " per direction)");
  const vector<float> alphas = ctx.get_floats("activation_alpha");
  const vector<float> betas = ctx.get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  vector<Act> parsed;
  for (const std::string& raw : names) {
    std::string lower = raw;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const ActInfo* info = nullptr;
    for (const ActInfo& a : kActs)
      if (lower == a.name) info = &a;
    if (!info)
      return ctx.error("attribute 'activations' has unknown function '" + raw +
                       "'; expected Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                       "HardSigmoid, Elu, Softsign or Softplus");
    Act a;
    a.fn = info->fn;
    a.alpha = info->alpha;
    a.beta = info->beta;
    if (info->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (info->uses_beta && bi < betas.size()) a.beta = betas[bi++];
    parsed.push_back(a);
  }
  acts->clear();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t k = 0; k < n; ++k) acts->push_back(parsed[given == n ? k : d * n + k]);
  return Status::ok();
}

// ---- shapes ---------------------------------------------------------------------------------

enum class Direction { kForward, kReverse, kBidirectional };

struct RnnInfo {
  Cell cell = Cell::kRnn;
  Direction direction = Direction::kForward;
  int64_t dirs = 1;
  int64_t layout = 0;
  Dim seq, batch, input, hidden;
  std::optional<Shape> y, y_h;  // output shapes (Y_c = Y_h)
  vector<Act> acts;
  std::optional<float> clip;
  bool input_forget = false;
  bool linear_before_reset = false;
};

// Input names for messages, by index.
const char* input_name(int64_t i) {
  static const char* kNames[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
  return i >= 0 && i < 8 ? kNames[i] : "?";
}

template <class Ctx>
Status check_dim(Ctx& ctx, int64_t input, const Shape& s, int64_t axis, const Dim& want, const std::string& meaning) {
  const Dim& got = s.dims[axis];
  if (got.is_known() && want.is_known() && got.value != want.value)
    return ctx.error(std::string("input '") + input_name(input) + "' has shape " + s.to_string() + ": dimension " +
                     std::to_string(axis) + " must be " + meaning + " = " + std::to_string(want.value) + ", got " +
                     std::to_string(got.value));
  return Status::ok();
}

Dim dim_times(const Dim& d, int64_t k) { return d.is_known() ? Dim(d.value * k) : Dim(); }
Dim first_known(const Dim& a, const Dim& b) { return a.is_known() || !a.symbol.empty() ? a : b; }

// Validates the node against its input types (null = not given) and computes the output shapes.
// Shared by the shape rule (types may be partly unknown) and the kernel (all known).
template <class Ctx>
Status rnn_info(Ctx& ctx, const vector<const TensorType*>& in, RnnInfo* info) {
  const Cell cell = cell_of(ctx.node());
  info->cell = cell;
  const int64_t G = num_gates(cell);
  const int64_t max_in = cell == Cell::kLstm ? 8 : 6;
  const std::string dir = ctx.get_string("direction", "forward");
  if (dir == "forward") info->direction = Direction::kForward;
  else if (dir == "reverse") info->direction = Direction::kReverse;
  else if (dir == "bidirectional") info->direction = Direction::kBidirectional;
  else return ctx.error("attribute 'direction' is '" + dir + "'; expected forward, reverse or bidirectional");
  info->dirs = info->direction == Direction::kBidirectional ? 2 : 1;
  const int64_t D = info->dirs;
  info->layout = ctx.opset() >= 14 ? ctx.get_int("layout", 0) : 0;
  if (info->layout != 0 && info->layout != 1)
    return ctx.error("attribute 'layout' must be 0 or 1, got " + std::to_string(info->layout));
  if (ctx.has("clip")) {
    const float c = ctx.get_float("clip", 0.0f);
    if (!(c > 0.0f)) return ctx.error("attribute 'clip' must be a positive number, got " + std::to_string(c));
    info->clip = c;
  } else {
    info->clip.reset();
  }
  const int64_t inf = cell == Cell::kLstm ? ctx.get_int("input_forget", 0) : 0;
  if (inf != 0 && inf != 1) return ctx.error("attribute 'input_forget' must be 0 or 1, got " + std::to_string(inf));
  info->input_forget = inf == 1;
  info->linear_before_reset = cell == Cell::kGru && ctx.get_int("linear_before_reset", 0) != 0;
  RETURN_IF_ERROR(read_activations(ctx, cell, D, &info->acts));

  // Element types: X is a float type; every other float input has X's type; sequence_lens is integer.
  const DType xt = in[0] ? in[0]->dtype : DType::kUndefined;
  if (xt != DType::kUndefined && !dtype_is_float(xt))
    return ctx.error(std::string("input 'X' has element type ") + dtype_name(xt) +
                     "; only float types (f16, bf16, f32, f64) are supported");
  for (int64_t i = 1; i < max_in; ++i) {
    if (i >= static_cast<int64_t>(in.size()) || !in[i]) continue;
    const DType t = in[i]->dtype;
    if (t == DType::kUndefined) continue;
    if (i == 4) {
      if (!dtype_is_integer(t))
        return ctx.error(std::string("input 'sequence_lens' has element type ") + dtype_name(t) + "; expected int32");
      continue;
    }
    if (xt != DType::kUndefined && t != xt)
      return ctx.error(std::string("input '") + input_name(i) + "' has element type " + dtype_name(t) +
                       " but input 'X' has " + dtype_name(xt) + "; they must match");
  }
  // Ranks.
  const int64_t want_rank[] = {3, 3, 3, 2, 1, 3, 3, 2};
  for (int64_t i = 0; i < max_in && i < static_cast<int64_t>(in.size()); ++i) {
    if (!in[i] || !in[i]->shape) continue;
    if (in[i]->shape->rank() != want_rank[i])
      return ctx.error(std::string("input '") + input_name(i) + "' must have rank " + std::to_string(want_rank[i]) +
                       ", got shape " + in[i]->shape->to_string());
  }
  auto shape_of = [&](int64_t i) -> const Shape* {
    return i < static_cast<int64_t>(in.size()) && in[i] && in[i]->shape ? &*in[i]->shape : nullptr;
  };
  const Shape* X = shape_of(0);
  const Shape* W = shape_of(1);
  const Shape* R = shape_of(2);
  // hidden_size: the attribute, else R's last dim.
  if (ctx.has("hidden_size")) {
    const int64_t h = ctx.get_int("hidden_size", 0);
    if (h < 1 || h > (int64_t(1) << 31))
      return ctx.error("attribute 'hidden_size' must be >= 1, got " + std::to_string(h));
    info->hidden = Dim(h);
  } else {
    info->hidden = R ? R->dims[2] : Dim();
    if (!info->hidden.is_known() && W && W->dims[1].is_known()) info->hidden = Dim(W->dims[1].value / G);
  }
  const Dim H = info->hidden;
  const int64_t lo = info->layout;
  info->seq = X ? X->dims[lo == 0 ? 0 : 1] : Dim();
  info->batch = X ? X->dims[lo == 0 ? 1 : 0] : Dim();
  info->input = X ? X->dims[2] : Dim();
  if (const Shape* sl = shape_of(4)) info->batch = first_known(info->batch, sl->dims[0]);
  if (!info->input.is_known() && W) info->input = W->dims[2];
  if (W) {
    RETURN_IF_ERROR(check_dim(ctx, 1, *W, 0, Dim(D), "num_directions"));
    RETURN_IF_ERROR(check_dim(ctx, 1, *W, 1, dim_times(H, G), std::to_string(G) + " * hidden_size"));
    RETURN_IF_ERROR(check_dim(ctx, 1, *W, 2, info->input, "input_size (X's last dimension)"));
  }
  if (R) {
    RETURN_IF_ERROR(check_dim(ctx, 2, *R, 0, Dim(D), "num_directions"));
    RETURN_IF_ERROR(check_dim(ctx, 2, *R, 1, dim_times(H, G), std::to_string(G) + " * hidden_size"));
    RETURN_IF_ERROR(check_dim(ctx, 2, *R, 2, H, "hidden_size"));
  }
  if (const Shape* B = shape_of(3)) {
    RETURN_IF_ERROR(check_dim(ctx, 3, *B, 0, Dim(D), "num_directions"));
    RETURN_IF_ERROR(check_dim(ctx, 3, *B, 1, dim_times(H, 2 * G), std::to_string(2 * G) + " * hidden_size"));
  }
  if (const Shape* sl = shape_of(4)) RETURN_IF_ERROR(check_dim(ctx, 4, *sl, 0, info->batch, "batch_size"));
  for (int64_t i : {int64_t(5), int64_t(6)}) {
    if (i == 6 && cell != Cell::kLstm) break;
    if (const Shape* s = shape_of(i)) {
      RETURN_IF_ERROR(check_dim(ctx, i, *s, lo == 0 ? 0 : 1, Dim(D), "num_directions"));
      RETURN_IF_ERROR(check_dim(ctx, i, *s, lo == 0 ? 1 : 0, info->batch, "batch_size"));
      RETURN_IF_ERROR(check_dim(ctx, i, *s, 2, H, "hidden_size"));
    }
  }
  if (cell == Cell::kLstm) {
    if (const Shape* P = shape_of(7)) {
      RETURN_IF_ERROR(check_dim(ctx, 7, *P, 0, Dim(D), "num_directions"));
      RETURN_IF_ERROR(check_dim(ctx, 7, *P, 1, dim_times(H, 3), "3 * hidden_size"));
    }
  }
  if (lo == 0) {
    info->y = Shape({info->seq, Dim(D), info->batch, H});
    info->y_h = Shape({Dim(D), info->batch, H});
  } else {
    info->y = Shape({info->batch, info->seq, Dim(D), H});
    info->y_h = Shape({info->batch, Dim(D), H});
  }
  return Status::ok();
}

Status infer_rnn(InferContext& ctx) {
  vector<const TensorType*> in;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) in.push_back(ctx.has_input(i) ? &ctx.input_type(i) : nullptr);
  RnnInfo info;
  RETURN_IF_ERROR(rnn_info(ctx, in, &info));
  const DType dt = ctx.input_type(0).dtype;
  if (ctx.num_outputs() > 0) ctx.set_output(0, TensorType{dt, info.y});
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{dt, info.y_h});
  if (ctx.num_outputs() > 2) ctx.set_output(2, TensorType{dt, info.y_h});
  return Status::ok();
}

// ---- kernel ---------------------------------------------------------------------------------

struct Dims {
  int64_t S, B, I, H, D, G;
};

template <typename T>
inline T clip_to(T v, const std::optional<float>& clip) {
  if (!clip) return v;
  const T c = static_cast<T>(*clip);
  return v > c ? c : (v < -c ? -c : v);
}

// Runs one direction `d` over the sequence. x: [S, B, I]; w: [G*H, I]; r: [G*H, H]; wb/rb: [G*H]
// (or null); p: [3*H] (or null); h0/c0: [B, H] (or null). Writes y: [S, D, B, H] at direction d
// (when non-null) and the final states yh/yc: [B, H].
template <typename T>
void run_direction(const RnnInfo& info, const Dims& n, int64_t d, bool reverse, const T* x, const T* w, const T* r,
                   const T* wb, const T* rb, const T* p, const T* h0, const T* c0, const vector<int64_t>& lens, T* y,
                   T* yh, T* yc) {
  const int64_t S = n.S, B = n.B, I = n.I, H = n.H, GH = n.G * n.H;
  const Cell cell = info.cell;
  const Act* acts = info.acts.data() + d * num_activations(cell);
  // Transposed weights so that X * W^T and H * R^T are plain row-major products.
  vector<T> wt(static_cast<size_t>(I * GH)), rt(static_cast<size_t>(H * GH));
  for (int64_t g = 0; g < GH; ++g)
    for (int64_t i = 0; i < I; ++i) wt[i * GH + g] = w[g * I + i];
  for (int64_t g = 0; g < GH; ++g)
    for (int64_t i = 0; i < H; ++i) rt[i * GH + g] = r[g * H + i];
  vector<T> zeros(static_cast<size_t>(GH), T(0));
  if (!wb) wb = zeros.data();
  if (!rb) rb = zeros.data();
  vector<T> xw(static_cast<size_t>(S * B * GH));
  gemm_ref<T>(S * B, GH, I, x, I, 1, wt.data(), GH, xw.data(), GH);

  vector<T> hs(static_cast<size_t>(B * H), T(0)), cs(static_cast<size_t>(B * H), T(0));
  if (h0) std::copy(h0, h0 + B * H, hs.begin());
  if (c0) std::copy(c0, c0 + B * H, cs.begin());
  vector<T> hr(static_cast<size_t>(B * GH));
  vector<T> hnew(static_cast<size_t>(H)), cnew(static_cast<size_t>(H)), gate(static_cast<size_t>(H)),
      rh(static_cast<size_t>(H)), lin(static_cast<size_t>(H));
  const std::optional<float>& clip = info.clip;
  for (int64_t k = 0; k < S; ++k) {
    gemm_ref<T>(B, GH, H, hs.data(), H, 1, rt.data(), GH, hr.data(), GH);
    for (int64_t b = 0; b < B; ++b) {
      if (k >= lens[b]) continue;
      const int64_t t = reverse ? lens[b] - 1 - k : k;
      const T* xg = xw.data() + (t * B + b) * GH;
      const T* hg = hr.data() + b * GH;
      T* h = hs.data() + b * H;
      T* c = cs.data() + b * H;
      if (cell == Cell::kRnn) {
        for (int64_t j = 0; j < H; ++j) hnew[j] = apply_act(acts[0], clip_to(xg[j] + hg[j] + wb[j] + rb[j], clip));
      } else if (cell == Cell::kGru) {
        // Gate blocks z, r, h. gate = z, rh = r .* H(t-1) (or r itself with linear_before_reset).
        for (int64_t j = 0; j < H; ++j) gate[j] = apply_act(acts[0], clip_to(xg[j] + hg[j] + wb[j] + rb[j], clip));
        for (int64_t j = 0; j < H; ++j) {
          const T rg = apply_act(acts[0], clip_to(xg[H + j] + hg[H + j] + wb[H + j] + rb[H + j], clip));
          rh[j] = info.linear_before_reset ? rg : rg * h[j];
        }
        if (info.linear_before_reset) {
          for (int64_t j = 0; j < H; ++j)
            lin[j] = xg[2 * H + j] + wb[2 * H + j] + rh[j] * (hg[2 * H + j] + rb[2 * H + j]);
        } else {
          // (r .* H(t-1)) * Rh^T
          std::fill(lin.begin(), lin.end(), T(0));
          for (int64_t i = 0; i < H; ++i) {
            const T a = rh[i];
            const T* row = rt.data() + i * GH + 2 * H;
            for (int64_t j = 0; j < H; ++j) lin[j] += a * row[j];
          }
          for (int64_t j = 0; j < H; ++j) lin[j] = xg[2 * H + j] + wb[2 * H + j] + lin[j] + rb[2 * H + j];
        }
        for (int64_t j = 0; j < H; ++j) {
          const T hh = apply_act(acts[1], clip_to(lin[j], clip));
          hnew[j] = (T(1) - gate[j]) * hh + gate[j] * h[j];
        }
      } else {
        // Gate blocks i, o, f, c; peepholes P = [Pi, Po, Pf].
        for (int64_t j = 0; j < H; ++j) {
          T vi = xg[j] + hg[j] + wb[j] + rb[j];
          if (p) vi += p[j] * c[j];
          const T ig = apply_act(acts[0], clip_to(vi, clip));
          T fg;
          if (info.input_forget) {
            fg = T(1) - ig;
          } else {
            T vf = xg[2 * H + j] + hg[2 * H + j] + wb[2 * H + j] + rb[2 * H + j];
            if (p) vf += p[2 * H + j] * c[j];
            fg = apply_act(acts[0], clip_to(vf, clip));
          }
          const T cc = apply_act(acts[1], clip_to(xg[3 * H + j] + hg[3 * H + j] + wb[3 * H + j] + rb[3 * H + j], clip));
          const T cn = fg * c[j] + ig * cc;
          T vo = xg[H + j] + hg[H + j] + wb[H + j] + rb[H + j];
          if (p) vo += p[H + j] * cn;
          const T og = apply_act(acts[0], clip_to(vo, clip));
          cnew[j] = cn;
          hnew[j] = og * apply_act(acts[2], cn);
        }
        std::copy(cnew.begin(), cnew.end(), c);
      }
      std::copy(hnew.begin(), hnew.end(), h);
      if (y) std::copy(hnew.begin(), hnew.end(), y + ((t * n.D + d) * B + b) * H);
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    const bool any = lens[b] > 0;
    for (int64_t j = 0; j < H; ++j) {
      if (yh) yh[b * H + j] = any ? hs[b * H + j] : T(0);
      if (yc) yc[b * H + j] = any ? cs[b * H + j] : T(0);
    }
  }
}

// [A, B, K] -> [B, A, K]
template <typename T>
vector<T> swap01(const T* src, int64_t a, int64_t b, int64_t k) {
  vector<T> out(static_cast<size_t>(a * b * k));
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) std::copy(src + (i * b + j) * k, src + (i * b + j + 1) * k, out.begin() + (j * a + i) * k);
  return out;
}

template <typename T>
Status rnn_compute(KernelContext& ctx, const RnnInfo& info, const Dims& n, DType out_dtype) {
  const int64_t S = n.S, B = n.B, H = n.H, D = n.D, GH = n.G * n.H;
  auto in_data = [&](int64_t i) -> const Tensor* { return ctx.has_input(i) ? &ctx.input(i) : nullptr; };
  // Inputs in compute precision (f16/bf16 widened to f32).
  vector<Tensor> held(8);
  auto data = [&](int64_t i) -> const T* {
    const Tensor* t = in_data(i);
    if (!t) return nullptr;
    held[i] = widen_to_f32(*t);
    return held[i].data<T>();
  };
  const T* x = data(0);
  const T* w = data(1);
  const T* r = data(2);
  const T* bias = data(3);
  const T* h0 = data(5);
  const bool lstm = info.cell == Cell::kLstm;
  const T* c0 = lstm ? data(6) : nullptr;
  const T* p = lstm ? data(7) : nullptr;
  vector<int64_t> lens(static_cast<size_t>(B), S);
  if (const Tensor* sl = in_data(4)) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t v = sl->get_int64(b);
      if (v < 0 || v > S)
        return ctx.error("input 'sequence_lens' has value " + std::to_string(v) + " for batch row " +
                         std::to_string(b) + "; it must be in [0, " + std::to_string(S) + "] (the sequence length)");
      lens[b] = v;
    }
  }
  // Batch-first (layout 1) inputs are brought to [S, B, ...] / [D, B, H].
  vector<T> x_t, h0_t, c0_t;
  if (info.layout == 1) {
    x_t = swap01(x, B, S, n.I);
    x = x_t.data();
    if (h0) {
      h0_t = swap01(h0, B, D, H);
      h0 = h0_t.data();
    }
    if (c0) {
      c0_t = swap01(c0, B, D, H);
      c0 = c0_t.data();
    }
  }
  const auto& outs = ctx.node().outputs;
  auto wanted = [&](int64_t i) { return i < ctx.num_outputs() && i < static_cast<int64_t>(outs.size()) && !outs[i].empty(); };
  const bool want_y = wanted(0), want_h = wanted(1), want_c = lstm && wanted(2);
  vector<T> y(want_y ? static_cast<size_t>(S * D * B * H) : 0, T(0));
  vector<T> yh(static_cast<size_t>(D * B * H), T(0)), yc(static_cast<size_t>(D * B * H), T(0));
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = info.direction == Direction::kReverse || (info.direction == Direction::kBidirectional && d == 1);
    const T* wb = bias ? bias + d * 2 * GH : nullptr;
    const T* rb = bias ? bias + d * 2 * GH + GH : nullptr;
    run_direction<T>(info, n, d, reverse, x, w + d * GH * n.I, r + d * GH * H, wb, rb, p ? p + d * 3 * H : nullptr,
                     h0 ? h0 + d * B * H : nullptr, c0 ? c0 + d * B * H : nullptr, lens, want_y ? y.data() : nullptr,
                     yh.data() + d * B * H, yc.data() + d * B * H);
  }
  const DType ct = DTypeOf<T>::value;
  auto emit = [&](int64_t i, const vector<T>& v, vector<int64_t> dims) -> Status {
    Tensor t = Tensor::allocate(ct, std::move(dims));
    std::copy(v.begin(), v.end(), t.mutable_data<T>());
    if (out_dtype != ct) {
      ASSIGN_OR_RETURN(t, cast_tensor(t, out_dtype));
    }
    ctx.set_output(i, std::move(t));
    return Status::ok();
  };
  if (info.layout == 0) {
    if (want_y) RETURN_IF_ERROR(emit(0, y, {S, D, B, H}));
    if (want_h) RETURN_IF_ERROR(emit(1, yh, {D, B, H}));
    if (want_c) RETURN_IF_ERROR(emit(2, yc, {D, B, H}));
  } else {
    if (want_y) RETURN_IF_ERROR(emit(0, swap01(y.data(), S * D, B, H), {B, S, D, H}));
    if (want_h) RETURN_IF_ERROR(emit(1, swap01(yh.data(), D, B, H), {B, D, H}));
    if (want_c) RETURN_IF_ERROR(emit(2, swap01(yc.data(), D, B, H), {B, D, H}));
  }
  return Status::ok();
}

Status k_rnn(KernelContext& ctx) {
  vector<TensorType> types(static_cast<size_t>(ctx.num_inputs()));
  vector<const TensorType*> in;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (ctx.has_input(i)) types[i] = ctx.input(i).type();
    in.push_back(ctx.has_input(i) ? &types[i] : nullptr);
  }
  RnnInfo info;
  RETURN_IF_ERROR(rnn_info(ctx, in, &info));
  if (!info.seq.is_known() || !info.batch.is_known() || !info.input.is_known() || !info.hidden.is_known())
    return internal_error(ctx.node().describe() + ": RNN geometry is incomplete");
  Dims n{info.seq.value, info.batch.value, info.input.value, info.hidden.value, info.dirs, num_gates(info.cell)};
  const DType dt = ctx.input(0).dtype();
  switch (dt) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return rnn_compute<float>(ctx, info, n, dt);
    case DType::kF64: return rnn_compute<double>(ctx, info, n, dt);
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
}

}  // namespace

void register_rnn_ops(OpRegistry& r) {
  const vector<AttrSpec> common = {{"activation_alpha", AttrType::kFloats}, {"activation_beta", AttrType::kFloats},
                                   {"activations", AttrType::kStrings},     {"clip", AttrType::kFloat},
                                   {"direction", AttrType::kString},        {"hidden_size", AttrType::kInt}};
  auto with = [&](std::initializer_list<AttrSpec> extra) {
    vector<AttrSpec> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  for (int64_t since : {int64_t(7), int64_t(14)}) {
    auto lay = [&](vector<AttrSpec> a) {
      if (since >= 14) a.push_back({"layout", AttrType::kInt});
      return a;
    };
    r.add(OpSchema{.name = "RNN", .since_version = since, .min_inputs = 3, .max_inputs = 6, .min_outputs = 0,
                   .max_outputs = 2, .attrs = lay(with({})), .types = kFloatTypes, .infer = infer_rnn,
                   .kernel = k_rnn});
    r.add(OpSchema{.name = "GRU", .since_version = since, .min_inputs = 3, .max_inputs = 6, .min_outputs = 0,
                   .max_outputs = 2, .attrs = lay(with({{"linear_before_reset", AttrType::kInt}})),
                   .types = kFloatTypes, .infer = infer_rnn, .kernel = k_rnn});
    r.add(OpSchema{.name = "LSTM", .since_version = since, .min_inputs = 3, .max_inputs = 8, .min_outputs = 0,
                   .max_outputs = 3, .attrs = lay(with({{"input_forget", AttrType::kInt}})), .types = kFloatTypes,
                   .infer = infer_rnn, .kernel = k_rnn});
  }
}

}  // namespace ferry
