// Op family 'fused_transformer' (see op_families.inc): com.ferry ops produced by the
// transformer fusions (passes layernorm_fusion, gelu_fusion, attention_fusion).
//
//   LayerNorm(X, [Scale], [B]; axis=-1, epsilon=1e-5): normalizes over dims [axis, rank);
//       Y = (X - mean) / sqrt(var + epsilon) * Scale + B (Scale, B broadcast to X's trailing dims).
//   Gelu(X; approximate="none"|"tanh"): 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation.
//   Attention(Q, K, V, [Mask]; scale, q_perm, k_perm, v_perm, out_perm):
//       Y = To(softmax(scale * Tq(Q) @ Tk(K) + Mask) @ Tv(V)), T*(X) = Transpose(X, *_perm)
//       when the attribute is set. Tk(K) is K already transposed ([..., D, Sk]); Tq(Q) is
//       [..., Sq, D], Tv(V) [..., Sk, Dv]; their batch dims broadcast as MatMul's do; Mask
//       (additive, float) broadcasts to [..., Sq, Sk]. q_slice / k_slice / v_slice = [axis, start,
//       end]: the operand is Slice(input, start, end, axis) before its permutation (one packed QKV
//       tensor read by all three: pass attention_qkv_views).
// Reference kernels compute in double (f16/bf16 through f32); they are the oracle for the fast ones.
#include <cmath>

#include "ops/attention_view.h"
#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

Status check_float(const InferContext& ctx, int64_t i, const char* what) {
  if (!ctx.has_input(i)) return Status::ok();
  DType t = ctx.input_type(i).dtype;
  if (t != DType::kUndefined && !dtype_is_float(t))
    return ctx.error(std::string("input ") + what + " has element type " + dtype_name(t) + "; expected a float type");
  return Status::ok();
}

// Runs body(float* y) on a float32 copy of the output, rounding back to `dt` when needed.
template <typename Body>
Status with_f32_output(KernelContext& ctx, DType dt, const vector<int64_t>& dims, Body body) {
  if (!dtype_is_float(dt)) return ctx.error(std::string("element type ") + dtype_name(dt) + " is not a float type");
  if (dt == DType::kF32) {
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, dims));
    body(y->mutable_data<float>());
    return Status::ok();
  }
  Tensor y = Tensor::allocate(DType::kF32, dims);
  body(y.mutable_data<float>());
  ASSIGN_OR_RETURN(Tensor r, cast_tensor(y, dt));
  ctx.set_output(0, std::move(r));
  return Status::ok();
}

// ---- LayerNorm -------------------------------------------------------------------------------

Status infer_layernorm(InferContext& ctx) {
  for (int64_t i = 0; i < 3; ++i) RETURN_IF_ERROR(check_float(ctx, i, i == 0 ? "X" : i == 1 ? "Scale" : "B"));
  const TensorType& x = ctx.input_type(0);
  if (x.shape) {
    int64_t axis = ctx.get_int("axis", -1);
    if (!normalize_axis(&axis, x.shape->rank()))
      return ctx.error("attribute axis " + std::to_string(ctx.get_int("axis", -1)) + " is out of range for rank " +
                       std::to_string(x.shape->rank()));
  }
  ctx.set_output(0, x);
  return Status::ok();
}

Status k_layernorm(KernelContext& ctx) {
  const Tensor x = widen_to_f32(ctx.input(0));
  if (x.dtype() != DType::kF32) return ctx.error("input X must be a float tensor");
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, x.rank())) return ctx.error("attribute axis is out of range for rank " + std::to_string(x.rank()));
  int64_t inner = 1;
  for (int64_t i = axis; i < x.rank(); ++i) inner *= x.dim(i);
  const int64_t outer = inner == 0 ? 0 : x.numel() / inner;
  vector<float> scale, bias;
  for (int64_t k = 1; k < 3; ++k) {
    if (!ctx.has_input(k)) continue;
    vector<float>& p = k == 1 ? scale : bias;
    p = to_float_vector(ctx.input(k));
    if (p.empty() || inner % static_cast<int64_t>(p.size()) != 0)
      return ctx.error(std::string("input ") + (k == 1 ? "Scale" : "B") + " has " + std::to_string(p.size()) +
                       " elements; expected a shape broadcasting to the normalized " + std::to_string(inner) + " elements");
  }
  const double eps = ctx.get_float("epsilon", 1e-5f);
  const float* px = x.data<float>();
  return with_f32_output(ctx, ctx.input(0).dtype(), x.dims(), [&](float* py) {
    for (int64_t o = 0; o < outer; ++o) {
      const float* row = px + o * inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mean += row[i];
      mean /= static_cast<double>(inner);
      for (int64_t i = 0; i < inner; ++i) var += (row[i] - mean) * (row[i] - mean);
      const double inv = 1.0 / std::sqrt(var / static_cast<double>(inner) + eps);
      for (int64_t i = 0; i < inner; ++i) {
        double v = (row[i] - mean) * inv;
        if (!scale.empty()) v *= scale[i % scale.size()];
        if (!bias.empty()) v += bias[i % bias.size()];
        py[o * inner + i] = static_cast<float>(v);
      }
    }
  });
}

// ---- Gelu ------------------------------------------------------------------------------------

Status check_gelu_mode(const AttrReader& a) {
  const std::string mode = a.get_string("approximate", "none");
  if (mode != "none" && mode != "tanh")
    return invalid_model(a.node().describe() + ": attribute approximate is '" + mode + "'; expected 'none' or 'tanh'");
  return Status::ok();
}

Status infer_gelu(InferContext& ctx) {
  RETURN_IF_ERROR(check_float(ctx, 0, "X"));
  RETURN_IF_ERROR(check_gelu_mode(ctx));
  ctx.set_output(0, ctx.input_type(0));
  return Status::ok();
}

Status k_gelu(KernelContext& ctx) {
  RETURN_IF_ERROR(check_gelu_mode(ctx));
  const Tensor x = widen_to_f32(ctx.input(0));
  if (x.dtype() != DType::kF32) return ctx.error("input X must be a float tensor");
  const bool tanh_mode = ctx.get_string("approximate", "none") == "tanh";
  const float* px = x.data<float>();
  return with_f32_output(ctx, ctx.input(0).dtype(), x.dims(), [&](float* py) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = px[i];
      const double y = tanh_mode ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                                 : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      py[i] = static_cast<float>(y);
    }
  });
}

// ---- Attention -------------------------------------------------------------------------------

struct AttentionPerms {
  vector<int64_t> q, k, v, out, q_slice, k_slice, v_slice;
  explicit AttentionPerms(const AttrReader& a)
      : q(a.get_ints("q_perm")), k(a.get_ints("k_perm")), v(a.get_ints("v_perm")), out(a.get_ints("out_perm")),
        q_slice(a.get_ints("q_slice")), k_slice(a.get_ints("k_slice")), v_slice(a.get_ints("v_slice")) {}
};

bool dims_match(const Dim& a, const Dim& b) { return !a.is_known() || !b.is_known() || a.value == b.value; }

Status infer_attention(InferContext& ctx) {
  static const char* kNames[] = {"Q", "K", "V", "Mask"};
  for (int64_t i = 0; i < 4; ++i) RETURN_IF_ERROR(check_float(ctx, i, kNames[i]));
  AttentionPerms perms(ctx);
  const TensorType& q = ctx.input_type(0);
  if (!q.shape || !ctx.input_type(1).shape || !ctx.input_type(2).shape) {
    ctx.set_output(0, TensorType{q.dtype, std::nullopt});
    return Status::ok();
  }
  Shape cq, ck, cv;
  if (!slice_shape(*q.shape, perms.q_slice, &cq) || !slice_shape(*ctx.input_type(1).shape, perms.k_slice, &ck) ||
      !slice_shape(*ctx.input_type(2).shape, perms.v_slice, &cv))
    return ctx.error("a q_slice/k_slice/v_slice attribute is not [axis, start, end] within its input " +
                     q.shape->to_string() + ", " + ctx.input_type(1).shape->to_string() + ", " +
                     ctx.input_type(2).shape->to_string());
  Shape sq, sk, sv;
  if (!permute_shape(cq, perms.q, &sq) || !permute_shape(ck, perms.k, &sk) || !permute_shape(cv, perms.v, &sv))
    return ctx.error("a q_perm/k_perm/v_perm attribute is not a permutation of its input's axes");
  const int64_t r = sq.rank();
  if (r < 2 || sk.rank() != r || sv.rank() != r)
    return ctx.error("Q, K and V must have the same rank >= 2; got " + sq.to_string() + ", " + sk.to_string() + ", " +
                     sv.to_string());
  vector<Dim> od;
  if (!broadcast_batch_shape({&sq, &sk, &sv}, &od))
    return ctx.error("batch dims of Q " + sq.to_string() + ", K " + sk.to_string() + " and V " + sv.to_string() +
                     " do not broadcast");
  if (!dims_match(sq.dims[r - 1], sk.dims[r - 2]) || !dims_match(sk.dims[r - 1], sv.dims[r - 2]))
    return ctx.error("inner dims do not match: Q " + sq.to_string() + ", K^T " + sk.to_string() + ", V " + sv.to_string());
  od.push_back(sq.dims[r - 2]);
  od.push_back(sv.dims[r - 1]);
  Shape out;
  if (!permute_shape(Shape(od), perms.out, &out)) return ctx.error("attribute out_perm is not a permutation of the output's axes");
  ctx.set_output(0, TensorType{q.dtype, out});
  return Status::ok();
}

Status k_attention(KernelContext& ctx) {
  AttentionPerms perms(ctx);
  const Tensor q = widen_to_f32(ctx.input(0)), k = widen_to_f32(ctx.input(1)), v = widen_to_f32(ctx.input(2));
  if (q.dtype() != DType::kF32 || k.dtype() != DType::kF32 || v.dtype() != DType::kF32)
    return ctx.error("Q, K and V must be float tensors of one type");
  PermutedView vq, vk, vv;
  int64_t q0 = 0, k0 = 0, v0 = 0;
  if (!make_sliced_view(q.dims(), perms.q_slice, perms.q, &vq, &q0) ||
      !make_sliced_view(k.dims(), perms.k_slice, perms.k, &vk, &k0) ||
      !make_sliced_view(v.dims(), perms.v_slice, perms.v, &vv, &v0))
    return ctx.error("a q_perm/k_perm/v_perm attribute is not a permutation of its input's axes, or a "
                     "q_slice/k_slice/v_slice not [axis, start, end] within it");
  const size_t r = vq.dims.size();
  if (r < 2 || vk.dims.size() != r || vv.dims.size() != r)
    return ctx.error("Q, K and V must have the same rank >= 2");
  vector<int64_t> batch_dims;
  if (!broadcast_batch_dims({&vq, &vk, &vv}, &batch_dims))
    return ctx.error("batch dims of Q " + dims_to_string(vq.dims) + ", K^T " + dims_to_string(vk.dims) + " and V " +
                     dims_to_string(vv.dims) + " do not broadcast");
  const int64_t sq = vq.dims[r - 2], d = vq.dims[r - 1], sk = vk.dims[r - 1], dv = vv.dims[r - 1];
  if (vk.dims[r - 2] != d || vv.dims[r - 2] != sk)
    return ctx.error("inner dims do not match: Q " + dims_to_string(vq.dims) + ", K^T " + dims_to_string(vk.dims) +
                     ", V " + dims_to_string(vv.dims));
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) batch *= vq.dims[i];
  vector<int64_t> logical_out(vq.dims.begin(), vq.dims.end() - 1);
  logical_out.push_back(dv);
  vector<int64_t> stored, ost;
  if (!make_output_view(logical_out, perms.out, &stored, &ost))
    return ctx.error("attribute out_perm is not a permutation of the output's axes");
  // Mask strides over the logical score dims [batch..., Sq, Sk].
  vector<int64_t> score_dims(vq.dims.begin(), vq.dims.end() - 1);
  score_dims.push_back(sk);
  vector<float> mask;
  vector<int64_t> mst;
  if (ctx.has_input(3)) {
    const Tensor& m = ctx.input(3);
    vector<int64_t> bd;
    if (!dtype_is_float(m.dtype()) || !broadcast_dims(m.dims(), score_dims, &bd) || bd != score_dims)
      return ctx.error("Mask " + m.type().to_string() + " must be a float tensor broadcasting to the scores " +
                       dims_to_string(score_dims));
    mask = to_float_vector(m);
    mst = broadcast_strides(m.dims(), score_dims);
  }
  const double scale = ctx.get_float("scale", 1.0f);
  const float *pq = q.data<float>() + q0, *pk = k.data<float>() + k0, *pv = v.data<float>() + v0;
  return with_f32_output(ctx, ctx.input(0).dtype(), stored, [&](float* py) {
    vector<double> s(static_cast<size_t>(sk));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t oq = batch_offset(vq.dims, vq.strides, b), ok = batch_offset(vk.dims, vk.strides, b),
                    ov = batch_offset(vv.dims, vv.strides, b), oo = batch_offset(logical_out, ost, b),
                    om = mask.empty() ? 0 : batch_offset(score_dims, mst, b);
      for (int64_t i = 0; i < sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          double acc = 0;
          for (int64_t t = 0; t < d; ++t)
            acc += static_cast<double>(pq[oq + i * vq.strides[r - 2] + t * vq.strides[r - 1]]) *
                   pk[ok + t * vk.strides[r - 2] + j * vk.strides[r - 1]];
          acc *= scale;
          if (!mask.empty()) acc += mask[om + i * mst[r - 2] + j * mst[r - 1]];
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t c = 0; c < dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < sk; ++j) acc += s[j] * pv[ov + j * vv.strides[r - 2] + c * vv.strides[r - 1]];
          py[oo + i * ost[r - 2] + c * ost[r - 1]] = static_cast<float>(acc / sum);
        }
      }
    }
  });
}

}  // namespace

void register_fused_transformer_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "LayerNorm", .domain = "com.ferry", .since_version = 1, .min_inputs = 1, .max_inputs = 3,
                 .attrs = {{"axis", AttrType::kInt}, {"epsilon", AttrType::kFloat}}, .types = kFloatTypes,
                 .infer = infer_layernorm, .kernel = k_layernorm});
  r.add(OpSchema{.name = "Gelu", .domain = "com.ferry", .since_version = 1, .attrs = {{"approximate", AttrType::kString}},
                 .types = kFloatTypes, .infer = infer_gelu, .kernel = k_gelu});
  r.add(OpSchema{.name = "Attention", .domain = "com.ferry", .since_version = 1, .min_inputs = 3, .max_inputs = 4,
                 .attrs = {{"scale", AttrType::kFloat}, {"q_perm", AttrType::kInts}, {"k_perm", AttrType::kInts},
                           {"v_perm", AttrType::kInts}, {"out_perm", AttrType::kInts}, {"q_slice", AttrType::kInts},
                           {"k_slice", AttrType::kInts}, {"v_slice", AttrType::kInts}},
                 .types = kFloatTypes, .infer = infer_attention, .kernel = k_attention});
}

}  // namespace ferry
