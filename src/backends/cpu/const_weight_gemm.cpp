// Products with a constant, pre-packed right operand; see const_weight_gemm.h.
#include "backends/cpu/const_weight_gemm.h"

#include <string>

#include "backends/cpu/dnnl_util.h"

namespace ferry::cpu {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

Status ConstWeightGemm::plan_for(int64_t M, Plan** out) {
  auto it = plans_.find(M);
  if (it != plans_.end()) {
    *out = &it->second;
    return Status::ok();
  }
  const memory::data_type f32 = memory::data_type::f32;
  Plan plan;
  plan.src = memory::desc({M, k_}, f32, tag::ab);
  plan.dst = memory::desc({M, n_}, f32, tag::ab);
  const memory::desc user_w({k_, n_}, f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan.src, memory::desc({k_, n_}, f32, tag::any), plan.dst),
                                  dnnl_engine());
  // Where oneDNN keeps the weights plain (its gemm path: AVX2 hosts), a row stride of a multiple of
  // 256 floats (N 512, 1024, 3072: every row in the same cache sets) halves its speed; 16 floats of
  // padding per row take it back (padded_plain_weights). [100, 256] x [256, 512] on a Zen 3 core,
  // 1 thread, thread CPU time (the input projection of the BiLSTM's second layer, per direction):
  // 67 -> 96 GFLOP/s; N 1024 and 3072: 48 -> 98.
  if (const memory::desc padded = padded_plain_weights(pd.weights_desc()); !padded.is_zero())
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(plan.src, padded, plan.dst), dnnl_engine());
  plan.prim = dnnl::matmul(pd);
  for (auto& [desc, mem] : packed_)
    if (desc == pd.weights_desc()) plan.weights = &mem;
  if (!plan.weights) {
    memory user(user_w, dnnl_engine(), w_.data());
    memory packed(pd.weights_desc(), dnnl_engine());
    dnnl::reorder(user, packed).execute(dnnl_stream(), user, packed);
    dnnl_stream().wait();
    packed_.emplace_back(pd.weights_desc(), packed);
    plan.weights = &packed_.back().second;
  }
  *out = &plans_.emplace(M, std::move(plan)).first->second;
  return Status::ok();
}

Status ConstWeightGemm::run(const float* x, int64_t M, float* y) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    Plan* p = nullptr;
    RETURN_IF_ERROR(plan_for(M, &p));
    memory src(p->src, dnnl_engine(), const_cast<float*>(x)), dst(p->dst, dnnl_engine(), y);
    p->prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, *p->weights}, {DNNL_ARG_DST, dst}});
    dnnl_stream().wait();
  } catch (const dnnl::error& e) {
    return internal_error(std::string("oneDNN matmul failed: ") + e.what());
  }
  return Status::ok();
}

}  // namespace ferry::cpu
