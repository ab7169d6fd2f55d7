// CUDA kernel binding for com.ferry.Attention (produced by the attention_fusion pass):
//   Y = To(softmax(scale * Tq(Q) @ Tk(K) + Mask) @ Tv(V)), T*(X) = Transpose(X, *_perm)
// The permutations become strides of the fused kernel (data_attention.cu), so the transposes the
// fusion absorbed are never materialized.
#include "backends/cuda/ops_util.h"

namespace ferry {
namespace {

using Inputs = std::vector<const DeviceTensor*>;
using Outputs = std::vector<DeviceTensor>;

/// Logical dims and strides of `dims` read through `perm` (empty: identity); false if not a permutation.
bool permuted(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm, std::vector<int64_t>* ldims,
              std::vector<int64_t>* lstrides) {
  const std::vector<int64_t> s = strides_of(dims);
  const size_t r = dims.size();
  if (perm.empty()) {
    *ldims = dims;
    *lstrides = s;
    return true;
  }
  if (perm.size() != r) return false;
  std::vector<bool> seen(r, false);
  ldims->clear();
  lstrides->clear();
  for (int64_t p : perm) {
    if (p < 0 || static_cast<size_t>(p) >= r || seen[static_cast<size_t>(p)]) return false;
    seen[static_cast<size_t>(p)] = true;
    ldims->push_back(dims[static_cast<size_t>(p)]);
    lstrides->push_back(s[static_cast<size_t>(p)]);
  }
  return true;
}

/// Fills 4 strides (batch, head, row, col) from logical strides of rank 2..4.
bool to4(const std::vector<int64_t>& ls, int64_t* out) {
  const size_t r = ls.size();
  if (r < 2 || r > 4) return false;
  out[0] = r == 4 ? ls[0] : (r == 3 ? ls[0] : 0);
  out[1] = r == 4 ? ls[1] : 0;
  out[2] = ls[r - 2];
  out[3] = ls[r - 1];
  return true;
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_attention(const CudaKernelArgs& a) {
  const Node& node = a.node;
  AttrReader r(node);
  const float scale = r.get_float("scale", 1.0f);
  const std::vector<int64_t> pq = r.get_ints("q_perm"), pk = r.get_ints("k_perm"), pv = r.get_ints("v_perm"),
                             po = r.get_ints("out_perm");
  // Operands read as slices of one packed QKV tensor are a cpu-only form (passes/attention_qkv_views
  // runs for the cpu target only); this kernel reads whole operands, so it must not take them.
  for (const char* attr : {"q_slice", "k_slice", "v_slice"})
    if (!r.get_ints(attr).empty())
      return unsupported(node.describe() + ": cuda attention does not read sliced operands (" + attr +
                         ", made by the cpu-only attention_qkv_views pass); compile the model for the cuda target, "
                         "or run with FERRY_DISABLE_PASSES=attention_qkv_views");
  return make_fn_kernel([&node, scale, pq, pk, pv, po](CudaContext& ctx, KernelContext&, const Inputs& in,
                                                       Outputs& out) -> Status {
    const DeviceTensor &q = *in[0], &k = *in[1], &v = *in[2];
    const DeviceTensor* m = in.size() > 3 ? in[3] : nullptr;
    if (!is_cuda_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype || (m && m->dtype != q.dtype))
      return unsupported(node.describe() + ": cuda attention takes Q, K, V (and Mask) of one float type");
    std::vector<int64_t> qd, qs, kd, ks, vd, vs;
    if (!permuted(q.dims, pq, &qd, &qs) || !permuted(k.dims, pk, &kd, &ks) || !permuted(v.dims, pv, &vd, &vs))
      return invalid_argument(node.describe() + ": a q_perm/k_perm/v_perm attribute is not a permutation");
    const size_t rank = qd.size();
    if (rank < 2 || rank > 4 || kd.size() != rank || vd.size() != rank)
      return unsupported(node.describe() + ": cuda attention takes rank 2..4 operands");
    for (size_t i = 0; i + 2 < rank; ++i)
      if (qd[i] != kd[i] || qd[i] != vd[i]) return invalid_argument(node.describe() + ": batch dims of Q, K and V differ");
    const int64_t sq = qd[rank - 2], d = qd[rank - 1], sk = kd[rank - 1], dv = vd[rank - 1];
    if (kd[rank - 2] != d || vd[rank - 2] != sk)
      return invalid_argument(node.describe() + ": inner dims do not match: Q " + dims_to_string(qd) + ", K^T " +
                              dims_to_string(kd) + ", V " + dims_to_string(vd));
    if (d > 128 || dv > 128) return unsupported(node.describe() + ": head size above 128");
    // Output: logical [batch..., Sq, Dv], stored as Transpose(logical, out_perm).
    std::vector<int64_t> logical(qd.begin(), qd.end() - 1);
    logical.push_back(dv);
    std::vector<int64_t> stored = logical;
    std::vector<int64_t> os(rank);
    if (!po.empty()) {
      if (po.size() != rank) return invalid_argument(node.describe() + ": out_perm has the wrong length");
      for (size_t i = 0; i < rank; ++i) {
        if (po[i] < 0 || static_cast<size_t>(po[i]) >= rank) return invalid_argument(node.describe() + ": bad out_perm");
        stored[i] = logical[static_cast<size_t>(po[i])];
      }
      const std::vector<int64_t> ss = strides_of(stored);
      for (size_t i = 0; i < rank; ++i) os[static_cast<size_t>(po[i])] = ss[i];
    } else {
      os = strides_of(stored);
    }
    cuda::AttentionDesc desc;
    desc.batch = rank == 4 ? qd[0] : (rank == 3 ? qd[0] : 1);
    desc.heads = rank == 4 ? qd[1] : 1;
    desc.seq_q = sq;
    desc.seq_k = sk;
    desc.head_dim = d;
    desc.v_dim = dv;
    desc.scale = scale;
    to4(qs, desc.q_strides);
    to4(ks, desc.k_strides);
    to4(vs, desc.v_strides);
    to4(os, desc.o_strides);
    if (m) {
      std::vector<int64_t> score(qd.begin(), qd.end() - 1);
      score.push_back(sk);
      std::vector<int64_t> bd;
      if (!broadcast_dims(m->dims, score, &bd) || bd != score)
        return invalid_argument(node.describe() + ": Mask " + dims_to_string(m->dims) + " does not broadcast to the scores " +
                                dims_to_string(score));
      to4(broadcast_strides(m->dims, score), desc.m_strides);
    }
    ASSIGN_OR_RETURN(out[0], ctx.allocate(q.dtype, stored));
    return launched(cuda::launch_attention(onnx_type(q.dtype), q.data, k.data, v.data, m ? m->data : nullptr, out[0].data,
                                           desc, ctx.stream()),
                    node, "Attention");
  });
}

}  // namespace

void register_cuda_attention_kernels(CudaKernelTable& t) {
  t.add("com.ferry", "Attention", {nullptr, make_attention, cuda_float_types()});
}

}  // namespace ferry
