// Op family 'random' (see op_families.inc): the random generators (RandomUniform, RandomNormal,
// their *Like forms, Bernoulli, Multinomial).
//
// Random ops: with a 'seed' attribute every run of the node draws the same values (the generator is
// seeded from the seed's bits on each call); without one, each call draws fresh values. The values
// come from ferry's own generator (mt19937_64), so they do not match numpy's or onnxruntime's streams.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::string;
using std::vector;

// ---- random ---------------------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(const AttrReader& a) {
    if (a.has("seed")) {
      const float s = a.get_float("seed", 0.0f);
      uint32_t bits;
      std::memcpy(&bits, &s, 4);
      gen_.seed(0x9E3779B97F4A7C15ull ^ bits);
    } else {
      std::random_device rd;
      gen_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  /// Standard normal (Box-Muller).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1;
    do u1 = uniform();
    while (u1 <= 0.0);
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * 3.14159265358979323846 * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

 private:
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

/// Output dtype from the 'dtype' attribute (or `dflt` when absent); must be a float type.
template <class Ctx>
Status random_float_dtype(Ctx& ctx, DType dflt, DType* out) {
  DType t = dflt;
  if (ctx.has("dtype")) {
    const int64_t v = ctx.get_int("dtype", 1);
    if (v > INT32_MAX || !dtype_from_onnx(static_cast<int32_t>(v), &t))
      return ctx.error("attribute 'dtype' " + std::to_string(v) + " is not a known tensor type");
  }
  if (t == DType::kUndefined) {
    *out = t;
    return Status::ok();
  }
  if (!dtype_is_float(t)) return ctx.error(string("output type ") + dtype_name(t) + " is not a float type");
  *out = t;
  return Status::ok();
}

template <class Ctx>
Status read_shape_attr(Ctx& ctx, vector<int64_t>* dims) {
  if (!ctx.has("shape")) return ctx.error("required attribute 'shape' is missing");
  *dims = ctx.get_ints("shape");
  for (int64_t d : *dims)
    if (d < 0) return ctx.error("attribute 'shape' " + dims_to_string(*dims) + " has a negative dimension");
  return Status::ok();
}

template <bool kLike>
Status infer_random(InferContext& ctx) {
  DType dt = DType::kUndefined;
  if (kLike) {
    RETURN_IF_ERROR(random_float_dtype(ctx, ctx.input_type(0).dtype, &dt));
    ctx.set_output(0, TensorType{dt, ctx.input_type(0).shape});
    return Status::ok();
  }
  RETURN_IF_ERROR(random_float_dtype(ctx, DType::kF32, &dt));
  vector<int64_t> dims;
  RETURN_IF_ERROR(read_shape_attr(ctx, &dims));
  ctx.set_output(0, TensorType{dt, Shape::of(dims)});
  return Status::ok();
}

template <bool kNormal, bool kLike>
Status k_random(KernelContext& ctx) {
  DType dt = DType::kUndefined;
  vector<int64_t> dims;
  if (kLike) {
    RETURN_IF_ERROR(random_float_dtype(ctx, ctx.input(0).dtype(), &dt));
    dims = ctx.input(0).dims();
  } else {
    RETURN_IF_ERROR(random_float_dtype(ctx, DType::kF32, &dt));
    RETURN_IF_ERROR(read_shape_attr(ctx, &dims));
  }
  ASSIGN_OR_RETURN(int64_t n, checked_element_count(dims, ctx.node().describe() + " output"));
  Rng rng(ctx);
  vector<double> v(static_cast<size_t>(n));
  if (kNormal) {
    const double mean = ctx.get_float("mean", 0.0f), scale = ctx.get_float("scale", 1.0f);
    for (double& x : v) x = mean + scale * rng.normal();
  } else {
    const double lo = ctx.get_float("low", 0.0f), hi = ctx.get_float("high", 1.0f);
    if (!(hi >= lo)) return ctx.error("attribute 'high' must be >= 'low'");
    for (double& x : v) x = lo + (hi - lo) * rng.uniform();
  }
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(v, dims, dt));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

/// Bernoulli's output type: 'dtype' or the input's; any numeric type or bool.
template <class Ctx>
Status bernoulli_dtype(Ctx& ctx, DType in, DType* out) {
  DType t = in;
  if (ctx.has("dtype")) {
    const int64_t v = ctx.get_int("dtype", 1);
    if (v > INT32_MAX || !dtype_from_onnx(static_cast<int32_t>(v), &t) || t == DType::kString || t == DType::kUndefined)
      return ctx.error("attribute 'dtype' " + std::to_string(v) + " is not a numeric tensor type");
  }
  *out = t;
  return Status::ok();
}

Status infer_bernoulli(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined && !dtype_is_float(x.dtype))
    return ctx.error(string("input must be a float tensor of probabilities, got ") + dtype_name(x.dtype));
  DType dt = DType::kUndefined;
  RETURN_IF_ERROR(bernoulli_dtype(ctx, x.dtype, &dt));
  ctx.set_output(0, TensorType{dt, x.shape});
  return Status::ok();
}

Status k_bernoulli(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) return ctx.error(string("input must be a float tensor of probabilities, got ") + dtype_name(x.dtype()));
  DType dt = DType::kUndefined;
  RETURN_IF_ERROR(bernoulli_dtype(ctx, x.dtype(), &dt));
  Rng rng(ctx);
  Tensor draws = Tensor::allocate(DType::kU8, x.dims());
  uint8_t* pd = draws.mutable_data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double p = x.get_double(i);
    if (!(p >= 0.0 && p <= 1.0))
      return ctx.error("probability input[" + std::to_string(i) + "] = " + std::to_string(p) + " is not in [0, 1]");
    pd[i] = rng.uniform() < p ? 1 : 0;
  }
  ASSIGN_OR_RETURN(Tensor out, cast_tensor(draws, dt));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

template <class Ctx>
Status multinomial_attrs(Ctx& ctx, DType* dt, int64_t* samples) {
  const int64_t v = ctx.get_int("dtype", 6);
  if (v != 6 && v != 7) return ctx.error("attribute 'dtype' must be 6 (int32) or 7 (int64), got " + std::to_string(v));
  *dt = v == 6 ? DType::kI32 : DType::kI64;
  *samples = ctx.get_int("sample_size", 1);
  if (*samples < 1) return ctx.error("attribute 'sample_size' must be >= 1, got " + std::to_string(*samples));
  return Status::ok();
}

Status infer_multinomial(InferContext& ctx) {
  DType dt = DType::kUndefined;
  int64_t s = 1;
  RETURN_IF_ERROR(multinomial_attrs(ctx, &dt, &s));
  const TensorType& x = ctx.input_type(0);
  if (x.shape && x.shape->rank() != 2)
    return ctx.error("input must have shape [batch_size, class_size], got " + x.shape->to_string());
  ctx.set_output(0, TensorType{dt, Shape({x.shape ? x.shape->dims[0] : Dim(), Dim(s)})});
  return Status::ok();
}

Status k_multinomial(KernelContext& ctx) {
  DType dt = DType::kUndefined;
  int64_t samples = 1;
  RETURN_IF_ERROR(multinomial_attrs(ctx, &dt, &samples));
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) return ctx.error("input must be a float tensor of log-probabilities");
  if (x.rank() != 2) return ctx.error("input must have shape [batch_size, class_size], got " + dims_to_string(x.dims()));
  const int64_t batch = x.dim(0), classes = x.dim(1);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, {batch, samples}));
  Rng rng(ctx);
  vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch; ++b) {
    // Unnormalized log-probabilities: p_i proportional to exp(x_i - max).
    double mx = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = x.get_double(b * classes + c);
      if (std::isnan(v)) return ctx.error("row " + std::to_string(b) + " has a NaN log-probability");
      mx = std::max(mx, v);
    }
    if (classes == 0 || mx == -INFINITY)
      return ctx.error("row " + std::to_string(b) + " has no class with a nonzero probability");
    double total = 0.0;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = x.get_double(b * classes + c);
      total += mx == INFINITY ? (v == INFINITY ? 1.0 : 0.0) : std::exp(v - mx);
      cdf[c] = total;
    }
    for (int64_t s = 0; s < samples; ++s) {
      const double u = rng.uniform() * total;
      int64_t k = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      if (k >= classes) k = classes - 1;
      while (k > 0 && cdf[k] == cdf[k - 1]) --k;  // never a zero-probability class
      if (dt == DType::kI32) y->mutable_data<int32_t>()[b * samples + s] = static_cast<int32_t>(k);
      else y->mutable_data<int64_t>()[b * samples + s] = k;
    }
  }
  return Status::ok();
}

}  // namespace

void register_random_ops(OpRegistry& r) {
  const vector<AttrSpec> uni = {{"dtype", AttrType::kInt}, {"high", AttrType::kFloat}, {"low", AttrType::kFloat},
                                {"seed", AttrType::kFloat}};
  const vector<AttrSpec> nor = {{"dtype", AttrType::kInt}, {"mean", AttrType::kFloat}, {"scale", AttrType::kFloat},
                                {"seed", AttrType::kFloat}};
  auto with_shape = [](vector<AttrSpec> v) {
    v.push_back({"shape", AttrType::kInts, true});
    return v;
  };
  r.add(OpSchema{.name = "RandomUniform", .since_version = 1, .min_inputs = 0, .max_inputs = 0, .attrs = with_shape(uni),
                 .infer = infer_random<false>, .kernel = k_random<false, false>});
  r.add(OpSchema{.name = "RandomNormal", .since_version = 1, .min_inputs = 0, .max_inputs = 0, .attrs = with_shape(nor),
                 .infer = infer_random<false>, .kernel = k_random<true, false>});
  r.add(OpSchema{.name = "RandomUniformLike", .since_version = 1, .attrs = uni, .infer = infer_random<true>,
                 .kernel = k_random<false, true>});
  r.add(OpSchema{.name = "RandomNormalLike", .since_version = 1, .attrs = nor, .infer = infer_random<true>,
                 .kernel = k_random<true, true>});
  r.add(OpSchema{.name = "Bernoulli", .since_version = 15, .attrs = {{"dtype", AttrType::kInt}, {"seed", AttrType::kFloat}},
                 .types = kFloatTypes, .infer = infer_bernoulli, .kernel = k_bernoulli});
  r.add(OpSchema{.name = "Multinomial", .since_version = 7,
                 .attrs = {{"dtype", AttrType::kInt}, {"sample_size", AttrType::kInt}, {"seed", AttrType::kFloat}},
                 .types = kFloatTypes, .infer = infer_multinomial, .kernel = k_multinomial});
}

}  // namespace ferry
