// The cpu backend's few-row products with constant weights (dnnl_matmul.cpp: at most 8 rows, f32, no
// residual or activation run as cpu::small_gemm_panels, the column panels split over the threads)
// against the reference kernels: Gemm with and without transB, with a bias (beta != 1) and without,
// 1 to 8 rows and 9 (oneDNN again), a column count that leaves a partial last panel, K large enough
// for the panels to be split over two threads; MatMul with a 3-D input (rows folded into M).
#include <string>

#include "graph_builder.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

TEST(CpuSmallGemmMatMul, FewRowGemmMatchesReference) {
  const int64_t K = 600, N = 130;  // 3 panels of 64 columns, the last holding 2
  for (int64_t M : {1, 3, 8, 9}) {
    for (bool trans_b : {true, false}) {
      for (bool bias : {true, false}) {
        SCOPED_TRACE("M " + std::to_string(M) + (trans_b ? " transB" : "") + (bias ? " bias" : ""));
        const Tensor a = random_tensor({M, K}, 1 + static_cast<uint32_t>(M));
        const Tensor w = random_tensor(trans_b ? vector<int64_t>{N, K} : vector<int64_t>{K, N}, 2);
        const Tensor c = random_tensor({N}, 3);
        const auto run = [&](const char* device) {
          OpTester t("Gemm", 13);
          t.attr("transB", int64_t(trans_b ? 1 : 0)).attr("beta", 0.5f);
          t.input(a).const_input(w);
          if (bias) t.const_input(c);
          return t.run(device)[0];
        };
        const Tensor got = run("cpu");
        ASSERT_EQ(got.dims(), (vector<int64_t>{M, N}));
        expect_near(got, run("cpu-ref"), 1e-4, 1e-4);  // sums of 600 products in another order
      }
    }
  }
}

TEST(CpuSmallGemmMatMul, FewRowMatMulFoldsLeadingDims) {
  const Tensor a = random_tensor({2, 3, 70}, 4), w = random_tensor({70, 65}, 5);
  const auto run = [&](const char* device) { return OpTester("MatMul", 13).input(a).const_input(w).run(device)[0]; };
  const Tensor got = run("cpu");
  ASSERT_EQ(got.dims(), (vector<int64_t>{2, 3, 65}));
  expect_near(got, run("cpu-ref"), 1e-5, 1e-5);
}

}  // namespace
}  // namespace ferry::testing
