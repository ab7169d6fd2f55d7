// Signal processing: DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix (opset 17+).
// Transforms are plain DFTs accumulated in double with an exact twiddle table (index j*k mod n).
#include <cmath>
#include <optional>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

constexpr double kPi = 3.14159265358979323846;

/// Reads a scalar (or one-element) integer tensor.
template <class Ctx>
Status scalar_int(Ctx& ctx, const Tensor& t, const char* name, int64_t* out) {
  if (!dtype_is_integer(t.dtype())) return ctx.error(std::string("input '") + name + "' must be an integer tensor");
  if (t.numel() != 1)
    return ctx.error(std::string("input '") + name + "' must be a scalar, got shape " + dims_to_string(t.dims()));
  *out = t.get_int64(0);
  return Status::ok();
}

template <class Ctx>
Status scalar_float(Ctx& ctx, const Tensor& t, const char* name, double* out) {
  if (t.dtype() == DType::kString || t.dtype() == DType::kUndefined)
    return ctx.error(std::string("input '") + name + "' must be numeric");
  if (t.numel() != 1)
    return ctx.error(std::string("input '") + name + "' must be a scalar, got shape " + dims_to_string(t.dims()));
  *out = t.get_double(0);
  return Status::ok();
}

/// Twiddle table: w[m] = exp(sign * 2*pi*i * m / n), m in [0, n).
void twiddles(int64_t n, double sign, vector<double>* re, vector<double>* im) {
  re->resize(static_cast<size_t>(n));
  im->resize(static_cast<size_t>(n));
  for (int64_t m = 0; m < n; ++m) {
    const double a = 2.0 * kPi * static_cast<double>(m) / static_cast<double>(n);
    (*re)[m] = std::cos(a);
    (*im)[m] = sign * std::sin(a);
  }
}

/// out[k] = sum_j in[j] * w[(j*k) mod n] for k < out_len; `in` has `len` (<= n) values, the rest zero.
void dft_line(const double* in_re, const double* in_im, int64_t len, int64_t n, int64_t out_len, const vector<double>& wr,
              const vector<double>& wi, double* out_re, double* out_im) {
  for (int64_t k = 0; k < out_len; ++k) {
    double sr = 0.0, si = 0.0;
    int64_t m = 0;
    const int64_t step = k % n;
    for (int64_t j = 0; j < len; ++j) {
      const double c = wr[m], s = wi[m];
      sr += in_re[j] * c - in_im[j] * s;
      si += in_re[j] * s + in_im[j] * c;
      m += step;
      if (m >= n) m -= n;
    }
    out_re[k] = sr;
    out_im[k] = si;
  }
}

// ---- DFT ------------------------------------------------------------------------------------

struct DftArgs {
  int64_t axis = 1;  // normalized
  bool inverse = false, onesided = false;
};

/// Reads the attributes and the axis (an attribute until opset 19, input 2 from 20). `axis_value` is
/// the axis input's value when known. Returns false in *known when the axis cannot be determined yet.
template <class Ctx>
Status read_dft_args(Ctx& ctx, int64_t rank, const Tensor* axis_value, DftArgs* a, bool* known) {
  *known = true;
  const int64_t inv = ctx.get_int("inverse", 0), one = ctx.get_int("onesided", 0);
  if (inv != 0 && inv != 1) return ctx.error("attribute 'inverse' must be 0 or 1, got " + std::to_string(inv));
  if (one != 0 && one != 1) return ctx.error("attribute 'onesided' must be 0 or 1, got " + std::to_string(one));
  a->inverse = inv == 1;
  a->onesided = one == 1;
  int64_t axis;
  if (ctx.opset() >= 20) {
    axis = -2;
    if (axis_value) RETURN_IF_ERROR(scalar_int(ctx, *axis_value, "axis", &axis));
  } else {
    axis = ctx.get_int("axis", 1);
  }
  if (rank < 0) {
    *known = false;
    return Status::ok();
  }
  if (rank < 2) return ctx.error("input must have rank >= 2 ([..., signal, 1 or 2]), got rank " + std::to_string(rank));
  const int64_t orig = axis;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank - 2)
    return ctx.error("axis " + std::to_string(orig) + " is out of range for rank " + std::to_string(rank) +
                     " (the last dimension holds the real/imaginary parts)");
  a->axis = axis;
  return Status::ok();
}

Status infer_dft(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const int64_t rank = x.shape ? x.shape->rank() : -1;
  const bool axis_given = ctx.opset() >= 20 && ctx.has_input(2);
  DftArgs a;
  bool known = true;
  RETURN_IF_ERROR(read_dft_args(ctx, rank, axis_given ? ctx.input_value(2) : nullptr, &a, &known));
  if (axis_given && !ctx.input_value(2)) known = false;
  if (rank >= 0) {
    const Dim last = x.shape->dims.back();
    if (last.is_known() && last.value != 1 && last.value != 2)
      return ctx.error("the last dimension of the input must be 1 (real) or 2 (complex), got " + x.shape->to_string());
  }
  if (!known) {
    ctx.set_output(0, TensorType{x.dtype, rank >= 0 ? std::optional<Shape>(Shape(vector<Dim>(static_cast<size_t>(rank))))
                                                     : std::nullopt});
    return Status::ok();
  }
  Shape s = *x.shape;
  s.dims.back() = Dim(2);
  Dim n = s.dims[static_cast<size_t>(a.axis)];
  if (ctx.has_input(1)) {
    const Tensor* dl = ctx.input_value(1);
    n = Dim();
    if (dl) {
      int64_t v;
      RETURN_IF_ERROR(scalar_int(ctx, *dl, "dft_length", &v));
      if (v < 1) return ctx.error("input 'dft_length' must be >= 1, got " + std::to_string(v));
      n = Dim(v);
    }
  }
  if (a.onesided) n = n.is_known() ? Dim(n.value / 2 + 1) : Dim();
  s.dims[static_cast<size_t>(a.axis)] = n;
  ctx.set_output(0, TensorType{x.dtype, s});
  return Status::ok();
}

Status k_dft(KernelContext& ctx) {
  const Tensor& xt = ctx.input(0);
  if (!dtype_is_float(xt.dtype())) return ctx.error("input must be a float tensor");
  DftArgs a;
  bool known = true;
  const bool axis_given = ctx.opset() >= 20 && ctx.has_input(2);
  RETURN_IF_ERROR(read_dft_args(ctx, xt.rank(), axis_given ? &ctx.input(2) : nullptr, &a, &known));
  const int64_t r = xt.rank();
  const int64_t comps = xt.dim(r - 1);
  if (comps != 1 && comps != 2)
    return ctx.error("the last dimension of the input must be 1 (real) or 2 (complex), got " + dims_to_string(xt.dims()));
  const int64_t len = xt.dim(a.axis);
  int64_t n = len;
  if (ctx.has_input(1)) {
    RETURN_IF_ERROR(scalar_int(ctx, ctx.input(1), "dft_length", &n));
    if (n < 1) return ctx.error("input 'dft_length' must be >= 1, got " + std::to_string(n));
  }
  if (n < 1) return ctx.error("the signal axis " + std::to_string(a.axis) + " is empty");
  if (n > (int64_t(1) << 26)) return ctx.error("DFT length " + std::to_string(n) + " is too large (at most 2^26)");
  const int64_t out_len = a.onesided ? n / 2 + 1 : n;
  vector<int64_t> out_dims = xt.dims();
  out_dims[a.axis] = out_len;
  out_dims[r - 1] = 2;
  ASSIGN_OR_RETURN(int64_t total, checked_element_count(out_dims, ctx.node().describe() + " output"));
  if (static_cast<double>(total) / 2.0 * static_cast<double>(std::min(len, n)) > 4e12)
    return ctx.error("the transform is too large for the reference DFT");
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < a.axis; ++i) outer *= xt.dim(i);
  for (int64_t i = a.axis + 1; i < r - 1; ++i) inner *= xt.dim(i);
  const vector<double> x = xt.to_double_vector();
  vector<double> y(static_cast<size_t>(total));
  vector<double> wr, wi;
  twiddles(n, a.inverse ? 1.0 : -1.0, &wr, &wi);
  const int64_t used = std::min(len, n);
  vector<double> lre(static_cast<size_t>(used)), lim(static_cast<size_t>(used)), ore(static_cast<size_t>(out_len)),
      oim(static_cast<size_t>(out_len));
  const double scale = a.inverse ? 1.0 / static_cast<double>(n) : 1.0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t j = 0; j < used; ++j) {
        const int64_t base = ((o * len + j) * inner + i) * comps;
        lre[j] = x[base];
        lim[j] = comps == 2 ? x[base + 1] : 0.0;
      }
      dft_line(lre.data(), lim.data(), used, n, out_len, wr, wi, ore.data(), oim.data());
      for (int64_t k = 0; k < out_len; ++k) {
        const int64_t base = ((o * out_len + k) * inner + i) * 2;
        y[base] = ore[k] * scale;
        y[base + 1] = oim[k] * scale;
      }
    }
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, out_dims, xt.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// ---- STFT -----------------------------------------------------------------------------------

Status infer_stft(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const int64_t one = ctx.get_int("onesided", 1);
  if (one != 0 && one != 1) return ctx.error("attribute 'onesided' must be 0 or 1, got " + std::to_string(one));
  if (x.shape && x.shape->rank() != 3)
    return ctx.error("input 'signal' must have rank 3 [batch, signal_length, 1 or 2], got " + x.shape->to_string());
  const Dim last = dim_or_unknown(x, 2);
  if (last.is_known() && last.value != 1 && last.value != 2)
    return ctx.error("the last dimension of 'signal' must be 1 (real) or 2 (complex), got " + x.shape->to_string());
  int64_t frame_len = -1;
  if (ctx.has_input(2)) {
    const TensorType& w = ctx.input_type(2);
    if (w.shape && w.shape->rank() != 1) return ctx.error("input 'window' must have rank 1, got " + w.shape->to_string());
    const Dim wl = dim_or_unknown(w, 0);
    if (wl.is_known()) frame_len = wl.value;
  }
  if (ctx.has_input(3) && ctx.input_value(3)) {
    int64_t v;
    RETURN_IF_ERROR(scalar_int(ctx, *ctx.input_value(3), "frame_length", &v));
    if (v < 1) return ctx.error("input 'frame_length' must be >= 1, got " + std::to_string(v));
    if (frame_len >= 0 && frame_len != v)
      return ctx.error("input 'frame_length' " + std::to_string(v) + " differs from the window length " + std::to_string(frame_len));
    frame_len = v;
  }
  if (!ctx.has_input(2) && !ctx.has_input(3)) return ctx.error("either 'window' or 'frame_length' must be given");
  Dim frames, bins;
  const Dim sl = dim_or_unknown(x, 1);
  if (frame_len >= 0) bins = Dim(one ? frame_len / 2 + 1 : frame_len);
  if (frame_len >= 0 && sl.is_known() && ctx.input_value(1)) {
    int64_t step;
    RETURN_IF_ERROR(scalar_int(ctx, *ctx.input_value(1), "frame_step", &step));
    if (step < 1) return ctx.error("input 'frame_step' must be >= 1, got " + std::to_string(step));
    if (sl.value < frame_len)
      return ctx.error("the signal length " + std::to_string(sl.value) + " is shorter than the frame length " +
                       std::to_string(frame_len));
    frames = Dim((sl.value - frame_len) / step + 1);
  }
  ctx.set_output(0, TensorType{x.dtype, Shape({dim_or_unknown(x, 0), frames, bins, Dim(2)})});
  return Status::ok();
}

Status k_stft(KernelContext& ctx) {
  const Tensor& xt = ctx.input(0);
  if (!dtype_is_float(xt.dtype())) return ctx.error("input 'signal' must be a float tensor");
  const int64_t one = ctx.get_int("onesided", 1);
  if (one != 0 && one != 1) return ctx.error("attribute 'onesided' must be 0 or 1, got " + std::to_string(one));
  if (xt.rank() != 3 || (xt.dim(2) != 1 && xt.dim(2) != 2))
    return ctx.error("input 'signal' must have shape [batch, signal_length, 1 or 2], got " + dims_to_string(xt.dims()));
  int64_t step;
  RETURN_IF_ERROR(scalar_int(ctx, ctx.input(1), "frame_step", &step));
  if (step < 1) return ctx.error("input 'frame_step' must be >= 1, got " + std::to_string(step));
  int64_t frame_len = -1;
  vector<double> window;
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    if (!dtype_is_float(w.dtype()) || w.rank() != 1)
      return ctx.error("input 'window' must be a 1-D float tensor, got " + std::string(dtype_name(w.dtype())) +
                       dims_to_string(w.dims()));
    window = w.to_double_vector();
    frame_len = w.dim(0);
  }
  if (ctx.has_input(3)) {
    int64_t v;
    RETURN_IF_ERROR(scalar_int(ctx, ctx.input(3), "frame_length", &v));
    if (frame_len >= 0 && frame_len != v)
      return ctx.error("input 'frame_length' " + std::to_string(v) + " differs from the window length " + std::to_string(frame_len));
    frame_len = v;
  }
  if (frame_len < 0) return ctx.error("either 'window' or 'frame_length' must be given");
  if (frame_len < 1) return ctx.error("the frame length must be >= 1, got " + std::to_string(frame_len));
  const int64_t batch = xt.dim(0), sl = xt.dim(1), comps = xt.dim(2);
  if (sl < frame_len)
    return ctx.error("the signal length " + std::to_string(sl) + " is shorter than the frame length " + std::to_string(frame_len));
  const int64_t frames = (sl - frame_len) / step + 1;
  const int64_t bins = one ? frame_len / 2 + 1 : frame_len;
  vector<int64_t> out_dims = {batch, frames, bins, 2};
  ASSIGN_OR_RETURN(int64_t total, checked_element_count(out_dims, ctx.node().describe() + " output"));
  if (static_cast<double>(total) / 2.0 * static_cast<double>(frame_len) > 4e12)
    return ctx.error("the transform is too large for the reference STFT");
  const vector<double> x = xt.to_double_vector();
  vector<double> y(static_cast<size_t>(total));
  vector<double> wr, wi;
  twiddles(frame_len, -1.0, &wr, &wi);
  vector<double> fre(static_cast<size_t>(frame_len)), fim(static_cast<size_t>(frame_len)), ore(static_cast<size_t>(bins)),
      oim(static_cast<size_t>(bins));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t j = 0; j < frame_len; ++j) {
        const int64_t base = (b * sl + f * step + j) * comps;
        const double wv = window.empty() ? 1.0 : window[j];
        fre[j] = x[base] * wv;
        fim[j] = comps == 2 ? x[base + 1] * wv : 0.0;
      }
      dft_line(fre.data(), fim.data(), frame_len, frame_len, bins, wr, wi, ore.data(), oim.data());
      for (int64_t k = 0; k < bins; ++k) {
        const int64_t base = ((b * frames + f) * bins + k) * 2;
        y[base] = ore[k];
        y[base + 1] = oim[k];
      }
    }
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, out_dims, xt.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// ---- windows --------------------------------------------------------------------------------

template <class Ctx>
Status window_out_dtype(Ctx& ctx, DType* dt) {
  const int64_t od = ctx.get_int("output_datatype", 1);
  DType t;
  if (od > INT32_MAX || !dtype_from_onnx(static_cast<int32_t>(od), &t) || t == DType::kString || t == DType::kBool ||
      t == DType::kUndefined)
    return ctx.error("attribute 'output_datatype' " + std::to_string(od) + " is not a numeric tensor type");
  *dt = t;
  return Status::ok();
}

Status infer_window(InferContext& ctx) {
  DType dt = DType::kUndefined;
  RETURN_IF_ERROR(window_out_dtype(ctx, &dt));
  const int64_t p = ctx.get_int("periodic", 1);
  if (p != 0 && p != 1) return ctx.error("attribute 'periodic' must be 0 or 1, got " + std::to_string(p));
  Dim n;
  if (const Tensor* s = ctx.input_value(0)) {
    int64_t v;
    RETURN_IF_ERROR(scalar_int(ctx, *s, "size", &v));
    if (v < 0) return ctx.error("input 'size' must be >= 0, got " + std::to_string(v));
    n = Dim(v);
  }
  ctx.set_output(0, TensorType{dt, Shape({n})});
  return Status::ok();
}

enum class Window { kHann, kHamming, kBlackman };

template <Window kW>
Status k_window(KernelContext& ctx) {
  DType dt = DType::kUndefined;
  RETURN_IF_ERROR(window_out_dtype(ctx, &dt));
  const int64_t p = ctx.get_int("periodic", 1);
  if (p != 0 && p != 1) return ctx.error("attribute 'periodic' must be 0 or 1, got " + std::to_string(p));
  int64_t size;
  RETURN_IF_ERROR(scalar_int(ctx, ctx.input(0), "size", &size));
  if (size < 0) return ctx.error("input 'size' must be >= 0, got " + std::to_string(size));
  RETURN_IF_ERROR(checked_element_count({size}, ctx.node().describe() + " output").status());
  // Periodic windows have period `size`; symmetric ones span size - 1 intervals.
  const double denom = static_cast<double>(p ? size : size - 1);
  vector<double> y(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    if (denom <= 0) {  // a symmetric window of one sample
      y[i] = 1.0;
      continue;
    }
    const double a = 2.0 * kPi * static_cast<double>(i) / denom;
    switch (kW) {
      case Window::kHann: y[i] = 0.5 - 0.5 * std::cos(a); break;
      case Window::kHamming: y[i] = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a); break;
      case Window::kBlackman: y[i] = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2.0 * a); break;
    }
  }
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, {size}, dt));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// ---- MelWeightMatrix ------------------------------------------------------------------------

Status infer_mel(InferContext& ctx) {
  DType dt = DType::kUndefined;
  RETURN_IF_ERROR(window_out_dtype(ctx, &dt));
  Dim rows, cols;
  if (const Tensor* t = ctx.input_value(1)) {
    int64_t v;
    RETURN_IF_ERROR(scalar_int(ctx, *t, "dft_length", &v));
    if (v < 1) return ctx.error("input 'dft_length' must be >= 1, got " + std::to_string(v));
    rows = Dim(v / 2 + 1);
  }
  if (const Tensor* t = ctx.input_value(0)) {
    int64_t v;
    RETURN_IF_ERROR(scalar_int(ctx, *t, "num_mel_bins", &v));
    if (v < 0) return ctx.error("input 'num_mel_bins' must be >= 0, got " + std::to_string(v));
    cols = Dim(v);
  }
  ctx.set_output(0, TensorType{dt, Shape({rows, cols})});
  return Status::ok();
}

Status k_mel(KernelContext& ctx) {
  DType dt = DType::kUndefined;
  RETURN_IF_ERROR(window_out_dtype(ctx, &dt));
  int64_t bins, dft_len, rate;
  double lo, hi;
  RETURN_IF_ERROR(scalar_int(ctx, ctx.input(0), "num_mel_bins", &bins));
  RETURN_IF_ERROR(scalar_int(ctx, ctx.input(1), "dft_length", &dft_len));
  RETURN_IF_ERROR(scalar_int(ctx, ctx.input(2), "sample_rate", &rate));
  RETURN_IF_ERROR(scalar_float(ctx, ctx.input(3), "lower_edge_hertz", &lo));
  RETURN_IF_ERROR(scalar_float(ctx, ctx.input(4), "upper_edge_hertz", &hi));
  if (bins < 0 || bins > (int64_t(1) << 20)) return ctx.error("input 'num_mel_bins' must be in [0, 2^20], got " + std::to_string(bins));
  if (dft_len < 1 || dft_len > (int64_t(1) << 30)) return ctx.error("input 'dft_length' must be >= 1, got " + std::to_string(dft_len));
  if (rate < 1) return ctx.error("input 'sample_rate' must be >= 1, got " + std::to_string(rate));
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo < 0 || hi < lo)
    return ctx.error("inputs 'lower_edge_hertz' (" + std::to_string(lo) + ") and 'upper_edge_hertz' (" + std::to_string(hi) +
                     ") must be finite with 0 <= lower <= upper");
  const int64_t rows = dft_len / 2 + 1;
  RETURN_IF_ERROR(checked_element_count({rows, bins}, ctx.node().describe() + " output").status());
  // As the ONNX reference: num_mel_bins + 2 points evenly spaced in mel from the lower edge (in steps of
  // (high - low) / (num_mel_bins + 2)), mapped to DFT bins floor((dft_length + 1) * hz / sample_rate).
  const double low_mel = 2595.0 * std::log10(1.0 + lo / 700.0);
  const double high_mel = 2595.0 * std::log10(1.0 + hi / 700.0);
  const double step = (high_mel - low_mel) / static_cast<double>(bins + 2);
  vector<int64_t> fb(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double mel = static_cast<double>(i) * step + low_mel;
    const double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
    fb[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft_len + 1) * hz / static_cast<double>(rate)));
  }
  vector<double> y(static_cast<size_t>(rows * bins), 0.0);
  auto set = [&](int64_t row, int64_t col, double v) {
    if (row >= 0 && row < rows) y[row * bins + col] = v;  // points past the last DFT bin are dropped
  };
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t left = fb[i], center = fb[i + 1], right = fb[i + 2];
    const int64_t up = center - left;
    if (up == 0) {
      set(center, i, 1.0);
    } else {
      for (int64_t j = std::max<int64_t>(left, 0); j <= center && j < rows; ++j)
        set(j, i, static_cast<double>(j - left) / static_cast<double>(up));
    }
    const int64_t down = right - center;
    if (down > 0)
      for (int64_t j = std::max<int64_t>(center, 0); j < right && j < rows; ++j)
        set(j, i, static_cast<double>(right - j) / static_cast<double>(down));
  }
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, {rows, bins}, dt));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

}  // namespace

void register_signal_ops(OpRegistry& r) {
  const vector<AttrSpec> dft_attrs = {{"inverse", AttrType::kInt}, {"onesided", AttrType::kInt}};
  vector<AttrSpec> dft17 = dft_attrs;
  dft17.push_back({"axis", AttrType::kInt});
  r.add(OpSchema{.name = "DFT", .since_version = 17, .min_inputs = 1, .max_inputs = 2, .attrs = dft17, .types = kFloatTypes,
                 .infer = infer_dft, .kernel = k_dft});
  // DFT-20: the axis is input 2 (default -2).
  r.add(OpSchema{.name = "DFT", .since_version = 20, .min_inputs = 1, .max_inputs = 3, .attrs = dft_attrs,
                 .types = kFloatTypes, .infer = infer_dft, .kernel = k_dft});
  r.add(OpSchema{.name = "STFT", .since_version = 17, .min_inputs = 2, .max_inputs = 4, .attrs = {{"onesided", AttrType::kInt}},
                 .types = kFloatTypes, .infer = infer_stft, .kernel = k_stft});
  const vector<AttrSpec> win_attrs = {{"output_datatype", AttrType::kInt}, {"periodic", AttrType::kInt}};
  const vector<DType> size_types = {DType::kI32, DType::kI64};
  r.add(OpSchema{.name = "HannWindow", .since_version = 17, .attrs = win_attrs, .types = size_types, .infer = infer_window,
                 .kernel = k_window<Window::kHann>});
  r.add(OpSchema{.name = "HammingWindow", .since_version = 17, .attrs = win_attrs, .types = size_types,
                 .infer = infer_window, .kernel = k_window<Window::kHamming>});
  r.add(OpSchema{.name = "BlackmanWindow", .since_version = 17, .attrs = win_attrs, .types = size_types,
                 .infer = infer_window, .kernel = k_window<Window::kBlackman>});
  r.add(OpSchema{.name = "MelWeightMatrix", .since_version = 17, .min_inputs = 5, .max_inputs = 5,
                 .attrs = {{"output_datatype", AttrType::kInt}}, .types = size_types, .infer = infer_mel, .kernel = k_mel});
}

}  // namespace ferry
