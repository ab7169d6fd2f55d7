// The cpu backend's column-split products (dnnl_matmul.cpp: constant f32 weights, 2+ threads, at
// most 128 rows: one single-thread oneDNN primitive per thread over its own block of N columns)
// against the reference kernels, and the split must actually run: Gemm with and without transB and
// bias, N not a multiple of 64 (a partial last block), MatMul + bias + residual Add + Relu fused into
// one FusedMatMul (the sum post-op on each block's columns of the residual), leading dims folded
// into M; one thread never splits. FERRY_MATMUL_NSPLIT=128 is set for the splits: without it hosts
// where oneDNN keeps the weights plain do not split (test_cpu_matmul_padded_weights.cpp).
#include <cstdlib>
#include <string>

#include "backends/cpu/dnnl_matmul.h"
#include "graph_builder.h"
#include "op_tester.h"
#include "runtime/executor.h"

namespace ferry::testing {
namespace {

using std::vector;

// FERRY_MATMUL_NSPLIT=128 while alive: the split also where oneDNN keeps the weights plain (AVX2
// hosts), which it otherwise leaves to one multi-thread primitive (dnnl_matmul.cpp, nsplit_max_rows).
struct SplitOn {
  const char* e = std::getenv("FERRY_MATMUL_NSPLIT");
  const bool had = e != nullptr;
  const std::string saved = e ? e : "";
  SplitOn() { ::setenv("FERRY_MATMUL_NSPLIT", "128", 1); }
  ~SplitOn() { had ? ::setenv("FERRY_MATMUL_NSPLIT", saved.c_str(), 1) : ::unsetenv("FERRY_MATMUL_NSPLIT"); }
};

Tensor run_model(const std::shared_ptr<Model>& model, const NamedTensors& feeds, const std::string& device,
                 int threads) {
  ExecutorOptions o;
  o.device = device;
  o.threads = threads;
  auto ex = Executor::create(model, o);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return Tensor();
  NamedTensors outs;
  const Status st = ex.value()->run(feeds, &outs);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return outs.empty() ? Tensor() : outs[0].second;
}

TEST(CpuMatMulColumnSplit, GemmMatchesReferenceAndSplits) {
  const SplitOn split_on;
  const int64_t M = 40, K = 96, N = 200;  // 4 blocks of 64 columns, the last holding 8
  for (bool trans_b : {true, false}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(std::string(trans_b ? "transB" : "") + (bias ? " bias" : ""));
      GraphBuilder b(13);
      const std::string a = b.input("a", DType::kF32, {M, K});
      std::vector<std::string> in = {
          a, b.initializer("w", random_tensor(trans_b ? vector<int64_t>{N, K} : vector<int64_t>{K, N}, 2))};
      if (bias) in.push_back(b.initializer("c", random_tensor({N}, 3)));
      b.output(b.node("Gemm", in, {{"transB", GraphBuilder::i(trans_b ? 1 : 0)}, {"beta", GraphBuilder::f(0.5f)}}));
      const auto model = b.build();
      const NamedTensors feeds = {{"a", random_tensor({M, K}, 1)}};
      const int64_t before = cpu::matmul_column_split_runs();
      const Tensor got = run_model(model, feeds, "cpu", 2);
      EXPECT_GT(cpu::matmul_column_split_runs(), before) << "the column split did not run";
      ASSERT_EQ(got.dims(), (vector<int64_t>{M, N}));
      expect_near(got, run_model(model, feeds, "cpu-ref", 1), 1e-4, 1e-4);
    }
  }
}

// Relu(MatMul(a, w) + bias + z) with a [2, 30, 64] input: FusedMatMul with bias, residual and
// activation on the cpu device (checked: the split runs, so the MatMul node reached dnnl_matmul).
std::shared_ptr<Model> fused_model() {
  GraphBuilder b(17);
  const std::string a = b.input("a", DType::kF32, {2, 30, 64});
  const std::string z = b.input("z", DType::kF32, {2, 30, 130});
  const std::string mm = b.node("MatMul", {a, b.initializer("w", random_tensor({64, 130}, 5))});
  const std::string biased = b.node("Add", {mm, b.initializer("bias", random_tensor({130}, 6))});
  b.output(b.node("Relu", {b.node("Add", {biased, z})}));
  return b.build();
}

TEST(CpuMatMulColumnSplit, FusedMatMulBiasResidualRelu) {
  const SplitOn split_on;
  const auto model = fused_model();
  const NamedTensors feeds = {{"a", random_tensor({2, 30, 64}, 4)}, {"z", random_tensor({2, 30, 130}, 7)}};
  const int64_t before = cpu::matmul_column_split_runs();
  const Tensor got = run_model(model, feeds, "cpu", 2);
  EXPECT_GT(cpu::matmul_column_split_runs(), before) << "the column split did not run";
  ASSERT_EQ(got.dims(), (vector<int64_t>{2, 30, 130}));
  expect_near(got, run_model(model, feeds, "cpu-ref", 1), 1e-4, 1e-4);
}

// A transformer-sized product (BERT's out-projection: 128 rows, 768 x 768 + bias), two blocks of 384.
// FERRY_MATMUL_ROW_GEMM=0 here: the split is what is tested, whatever rows cpu::RowGemm takes
// (dnnl_matmul.cpp: kRowGemmMaxRows, row_gemm_threads).
TEST(CpuMatMulColumnSplit, TransformerShapeBlocksMatchReference) {
  const SplitOn split_on;
  const char* e = std::getenv("FERRY_MATMUL_ROW_GEMM");
  const std::string saved = e ? e : "";
  ::setenv("FERRY_MATMUL_ROW_GEMM", "0", 1);
  struct Restore {
    std::string v;
    bool had;
    ~Restore() { had ? ::setenv("FERRY_MATMUL_ROW_GEMM", v.c_str(), 1) : ::unsetenv("FERRY_MATMUL_ROW_GEMM"); }
  } restore{saved, e != nullptr};
  GraphBuilder b(13);
  const std::string a = b.input("a", DType::kF32, {128, 768});
  b.output(b.node("Gemm", {a, b.initializer("w", random_tensor({768, 768}, 31)), b.initializer("c", random_tensor({768}, 32))}));
  const auto model = b.build();
  const NamedTensors feeds = {{"a", random_tensor({128, 768}, 33)}};
  const int64_t runs = cpu::matmul_column_split_runs();
  const Tensor got = run_model(model, feeds, "cpu", 2);
  EXPECT_GT(cpu::matmul_column_split_runs(), runs) << "the column split did not run";
  expect_near(got, run_model(model, feeds, "cpu-ref", 1), 2e-4, 1e-4);
}

TEST(CpuMatMulColumnSplit, OneThreadDoesNotSplit) {
  const auto model = fused_model();
  const NamedTensors feeds = {{"a", random_tensor({2, 30, 64}, 4)}, {"z", random_tensor({2, 30, 130}, 7)}};
  const int64_t before = cpu::matmul_column_split_runs();
  const Tensor got = run_model(model, feeds, "cpu", 1);
  EXPECT_EQ(cpu::matmul_column_split_runs(), before);
  expect_near(got, run_model(model, feeds, "cpu-ref", 1), 1e-4, 1e-4);
}

}  // namespace
}  // namespace ferry::testing
