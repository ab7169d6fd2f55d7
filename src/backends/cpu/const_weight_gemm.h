// Y[M, N] = X[M, K] * W[K, N] for a constant W, through a oneDNN matmul with W reordered once into
// the layout oneDNN picks (per problem size) and one primitive per M, cached. Unlike dnnl_sgemm,
// which packs its operands into freshly allocated buffers on every call, a run allocates nothing.
// Used by the recurrent kernels for the input projection of all time steps.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ferry::cpu {

class ConstWeightGemm {
 public:
  /// Keeps W ([K, N] row-major) for the reorders.
  ConstWeightGemm(std::vector<float> w, int64_t K, int64_t N) : w_(std::move(w)), k_(K), n_(N) {}

  /// y[M, N] = x[M, K] * W (row-major, dense). Runs one call at a time (the plans are shared).
  Status run(const float* x, int64_t M, float* y);

 private:
  struct Plan {
    dnnl::matmul prim;
    dnnl::memory::desc src, dst;
    const dnnl::memory* weights = nullptr;
  };
  Status plan_for(int64_t M, Plan** out);

  std::vector<float> w_;
  int64_t k_, n_;
  std::map<int64_t, Plan> plans_;
  std::list<std::pair<dnnl::memory::desc, dnnl::memory>> packed_;
  std::mutex mu_;
};

}  // namespace ferry::cpu
