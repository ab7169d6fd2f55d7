// cpu::RowGemm (single-thread product on sliver-packed constant weights, dnnl_matmul.cpp's path at 1
// thread for 16..256 rows, 16..24 where oneDNN keeps the weights plain, unless FERRY_MATMUL_ROW_GEMM=0) against a plain-loop product in double,
// each microkernel set the CPU runs (AVX-512F, AVX2 + FMA) bit for bit against a scalar model of its
// operations, and through the FusedMatMul kernel against the reference backend (checking that the path is taken).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/row_gemm.h"
#include "graph_builder.h"
#include "op_tester.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

using testing::expect_near;
using testing::OpTester;
using testing::random_tensor;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& f : v) f = d(gen);
  return v;
}

// The ISAs whose microkernels this CPU runs.
std::vector<cpu::RowGemm::Isa> isas() {
  std::vector<cpu::RowGemm::Isa> v;
  for (auto isa : {cpu::RowGemm::Isa::kAvx2, cpu::RowGemm::Isa::kAvx512})
    if (cpu::RowGemm::has(isa)) v.push_back(isa);
  return v;
}
const char* isa_name(cpu::RowGemm::Isa isa) { return isa == cpu::RowGemm::Isa::kAvx512 ? "AVX-512F" : "AVX2"; }

TEST(CpuRowGemm, MatchesPlainLoopProduct) {
  struct Case {
    int64_t m, k, n, lda;
    bool trans_b;
  };
  // K = 200 and 300: a last K block shorter than the 128 of the others; M = 21 and 37: a last row
  // block of 5; rows 205 floats apart; transB; one row; N = 144: three slivers.
  const Case cases[] = {{21, 200, 96, 200, false}, {8, 64, 48, 64, true}, {37, 300, 144, 305, false},
                        {1, 130, 48, 130, true}, {16, 768, 96, 768, false}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.k << "x" << c.n << (c.trans_b ? " transB" : ""));
    if (!cpu::RowGemm::supported(c.k, c.n)) GTEST_SKIP() << "no AVX-512F nor AVX2 + FMA";
    const auto x = random_floats(static_cast<size_t>(c.m * c.lda), seed++);
    const auto w = random_floats(static_cast<size_t>(c.k * c.n), seed++);
    const auto bias = random_floats(static_cast<size_t>(c.n), seed++);
    const auto z = random_floats(static_cast<size_t>(c.m * c.n), seed++);
   for (const auto isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    auto created = cpu::RowGemm::create(w.data(), c.trans_b, bias.data(), c.k, c.n, true, isa);
    ASSERT_TRUE(created.is_ok()) << created.status().to_string();
    cpu::RowGemm& g = *created.value();
    // Without and with the residual already in y, without and with GELU.
    for (int mode = 0; mode < 4; ++mode) {
      SCOPED_TRACE(mode);
      const bool accumulate = mode & 1, gelu = mode & 2;
      std::vector<float> y = accumulate ? z : std::vector<float>(z.size(), 123.f);
      const int64_t before = cpu::RowGemm::calls();
      g.run(x.data(), c.m, c.lda, y.data(), accumulate, gelu);
      EXPECT_EQ(cpu::RowGemm::calls(), before + 1);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double acc = 0;
          for (int64_t kk = 0; kk < c.k; ++kk)
            acc += double(x[i * c.lda + kk]) * (c.trans_b ? w[j * c.k + kk] : w[kk * c.n + j]);
          acc += bias[j];
          if (accumulate) acc += z[i * c.n + j];
          if (gelu) acc = 0.5 * acc * (1.0 + std::erf(acc / std::sqrt(2.0)));
          ASSERT_NEAR(y[i * c.n + j], acc, 2e-5 * (1.0 + std::sqrt(double(c.k)))) << "at " << i << "," << j;
        }
    }
   }
  }
}

// The microkernels' operations in scalar float, in their order: each element is its products summed
// by FMA with k ascending (over every K block), + bias, + the residual; GELU as gelu16/gelu8.
float model_gelu(float x) {
  float u = x * 0.70710678118654752f;
  u = u > -4.f ? u : -4.f;  // maxps(u, -4), then minps(., 4)
  u = u < 4.f ? u : 4.f;
  const float x2 = u * u;
  float p = -2.72614225801306e-10f;
  for (float c : {2.77068142495902e-08f, -2.10102402082508e-06f, -5.69250639462346e-05f, -7.34990630326855e-04f,
                  -2.95459980854025e-03f, -1.60960333262415e-02f})
    p = std::fma(p, x2, c);
  p = p * u;
  float q = -1.45660718464996e-05f;
  for (float c : {-2.13374055278905e-04f, -1.68282697438203e-03f, -7.37332916720468e-03f, -1.42647390514189e-02f})
    q = std::fma(q, x2, c);
  const float erf = p / q;
  const float half_x = x * 0.5f;
  return std::fma(half_x, erf, half_x);
}

// Every microkernel set this CPU runs gives the model's bits: with and without a residual (several K
// blocks: staged through the scratch chunk), GELU, row tails of 1..7 rows (M = 8 + 1..7), a 3-row
// tail, a single row, transB. So the AVX2 and AVX-512 paths agree with each other bit for bit.
TEST(CpuRowGemm, EveryIsaGivesTheSameBitsAsItsScalarModel) {
  if (isas().empty()) GTEST_SKIP() << "no AVX-512F nor AVX2 + FMA";
  struct Case {
    int64_t m, k, n, lda;
    bool trans_b;
  };
  // N = 480: two column chunks of 240, also run one chunk at a time (run_chunks, as threads do).
  const Case cases[] = {{15, 300, 96, 301, false}, {11, 129, 48, 129, true}, {3, 64, 144, 64, false},
                        {1, 200, 48, 200, false}, {13, 256, 96, 256, true}, {9, 150, 480, 150, false}};
  uint32_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.k << "x" << c.n << (c.trans_b ? " transB" : ""));
    const auto x = random_floats(static_cast<size_t>(c.m * c.lda), seed++);
    const auto w = random_floats(static_cast<size_t>(c.k * c.n), seed++);
    const auto bias = random_floats(static_cast<size_t>(c.n), seed++);
    auto z = random_floats(static_cast<size_t>(c.m * c.n), seed++);
    for (float& v : z) v *= 64.f;  // a residual larger than the product, as a transformer's
    for (int mode = 0; mode < 4; ++mode) {
      const bool accumulate = mode & 1, gelu = mode & 2;
      std::vector<float> want(z.size());
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          float acc = 0.f;
          for (int64_t kk = 0; kk < c.k; ++kk)
            acc = std::fma(x[i * c.lda + kk], c.trans_b ? w[j * c.k + kk] : w[kk * c.n + j], acc);
          acc = acc + bias[j];
          if (accumulate) acc = acc + z[i * c.n + j];
          want[i * c.n + j] = gelu ? model_gelu(acc) : acc;
        }
      for (const auto isa : isas()) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " mode " << mode);
        auto created = cpu::RowGemm::create(w.data(), c.trans_b, bias.data(), c.k, c.n, false, isa);
        ASSERT_TRUE(created.is_ok()) << created.status().to_string();
        const cpu::RowGemm& g = *created.value();
        std::vector<float> y = accumulate ? z : std::vector<float>(z.size(), -7.f);
        g.run(x.data(), c.m, c.lda, y.data(), accumulate, gelu);
        for (size_t e = 0; e < y.size(); ++e)
          ASSERT_EQ(std::memcmp(&y[e], &want[e], sizeof(float)), 0)
              << "at " << e / c.n << "," << e % c.n << ": " << y[e] << " vs " << want[e];
        if (g.chunks() > 1) {  // chunk by chunk, the last first
          std::vector<float> yc = accumulate ? z : std::vector<float>(z.size(), -7.f);
          for (int64_t ch = g.chunks() - 1; ch >= 0; --ch) g.run_chunks(x.data(), c.m, c.lda, yc.data(), accumulate, gelu, ch, ch + 1);
          ASSERT_EQ(std::memcmp(yc.data(), want.data(), want.size() * sizeof(float)), 0) << "chunk by chunk";
        }
      }
    }
  }
}

// Through the FusedMatMul kernel at 1 thread (FERRY_MATMUL_ROW_GEMM=1 set here): [1, 24, 200] x [200, 96] +
// bias (+ residual), GELU, takes cpu::RowGemm and equals cpu-ref.
TEST(CpuRowGemm, FusedMatMulTakesThePathAndMatchesReference) {
  if (!cpu::RowGemm::supported(200, 96)) GTEST_SKIP() << "no AVX-512F nor AVX2 + FMA";
  const char* e = std::getenv("FERRY_MATMUL_ROW_GEMM");
  const std::string saved = e ? e : "";
  ::setenv("FERRY_MATMUL_ROW_GEMM", "1", 1);
  struct Restore {
    std::string v;
    bool had;
    ~Restore() { had ? ::setenv("FERRY_MATMUL_ROW_GEMM", v.c_str(), 1) : ::unsetenv("FERRY_MATMUL_ROW_GEMM"); }
  } restore{saved, e != nullptr};
  for (bool residual : {true, false}) {
    SCOPED_TRACE(residual);
    Tensor x = random_tensor({1, 24, 200}, 51);
    Tensor w = random_tensor({200, 96}, 52);
    Tensor b = random_tensor({96}, 53);
    Tensor z = random_tensor({1, 24, 96}, 54);
    OpTester t("FusedMatMul", 1, "com.ferry");
    t.attr("activation", std::string("Gelu")).input(x).const_input(w).const_input(b);
    if (residual) t.input(z);
    const Tensor want = t.run("cpu-ref")[0];
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = 1;
    auto ex = Executor::create(t.last_model(), eo);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    const auto& in = t.last_model()->graph.inputs;
    ASSERT_EQ(in.size(), residual ? 2u : 1u);
    NamedTensors feeds = {{in[0].name, x}}, outs;
    if (residual) feeds.push_back({in[1].name, z});
    const int64_t before = cpu::RowGemm::calls();
    const Status st = ex.value()->run(feeds, &outs);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_GT(cpu::RowGemm::calls(), before) << "the FusedMatMul kernel did not take cpu::RowGemm";
    ASSERT_EQ(outs.size(), 1u);
    expect_near(outs[0].second, want, 1e-4, 1e-4);
  }
}

// At 2 threads on an AVX2 CPU without AVX-512 (dnnl_matmul.cpp: row_gemm_threads), a FusedMatMul of
// two column chunks ([1, 24, 200] x [200, 480] + bias + residual, GELU) takes cpu::RowGemm, both
// threads a chunk, and gives the 1-thread run's bits; elsewhere 2 threads keep oneDNN (within 1e-4).
TEST(CpuRowGemm, TwoThreadsShareTheChunksOnAvx2) {
  if (!cpu::RowGemm::supported(200, 480)) GTEST_SKIP() << "no AVX-512F nor AVX2 + FMA";
  const char* e = std::getenv("FERRY_MATMUL_ROW_GEMM");
  if (e && std::string(e) == "0") GTEST_SKIP() << "FERRY_MATMUL_ROW_GEMM=0";
  const bool avx2_only = cpu::RowGemm::best_isa() == cpu::RowGemm::Isa::kAvx2;
  Tensor x = random_tensor({1, 24, 200}, 81), z = random_tensor({1, 24, 480}, 84);
  OpTester t("FusedMatMul", 1, "com.ferry");
  t.attr("activation", std::string("Gelu")).input(x).const_input(random_tensor({200, 480}, 82));
  t.const_input(random_tensor({480}, 83)).input(z);
  const Tensor want = t.run("cpu-ref")[0];
  std::vector<Tensor> got;
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = threads;
    auto ex = Executor::create(t.last_model(), eo);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    const auto& in = t.last_model()->graph.inputs;
    NamedTensors feeds = {{in[0].name, x}, {in[1].name, z}}, outs;
    const int64_t before = cpu::RowGemm::calls();
    const Status st = ex.value()->run(feeds, &outs);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    if (threads == 1 || avx2_only) {
      EXPECT_GT(cpu::RowGemm::calls(), before) << "did not take cpu::RowGemm";
    } else {
      EXPECT_EQ(cpu::RowGemm::calls(), before) << "took cpu::RowGemm at 2 threads on an AVX-512 CPU";
    }
    ASSERT_EQ(outs.size(), 1u);
    expect_near(outs[0].second, want, 1e-4, 1e-4);
    got.push_back(outs[0].second);
  }
  if (avx2_only) {
    EXPECT_EQ(std::memcmp(got[0].raw(), got[1].raw(), static_cast<size_t>(got[0].nbytes())), 0) << "2 threads != 1 thread";
  }
}

// One MatMul node at 1 thread with a dynamic row count: 24 rows take cpu::RowGemm (which drops
// oneDNN's packed weights), then 300 rows (above the RowGemm limit) take oneDNN again, which packs
// them anew, then 24 rows again; each equals cpu-ref.
TEST(CpuRowGemm, OneDnnRepacksAfterRowGemm) {
  if (!cpu::RowGemm::supported(200, 96)) GTEST_SKIP() << "no AVX-512F nor AVX2 + FMA";
  const char* e = std::getenv("FERRY_MATMUL_ROW_GEMM");
  if (e && std::string(e) == "0") GTEST_SKIP() << "FERRY_MATMUL_ROW_GEMM=0";
  testing::GraphBuilder b(13);
  const std::string x = b.input("x", DType::kF32, {-1, 200});
  b.output(b.node("MatMul", {x, b.initializer("w", random_tensor({200, 96}, 61))}));
  const auto model = b.build();
  auto make = [&](const std::string& device) {
    ExecutorOptions eo;
    eo.device = device;
    eo.threads = 1;
    return Executor::create(model, eo);
  };
  auto cpu = make("cpu"), ref = make("cpu-ref");
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  for (int64_t rows : {24, 300, 24}) {
    SCOPED_TRACE(rows);
    const NamedTensors feeds = {{"x", random_tensor({rows, 200}, static_cast<uint32_t>(70 + rows))}};
    NamedTensors got, want;
    const int64_t before = cpu::RowGemm::calls();
    ASSERT_TRUE(cpu.value()->run(feeds, &got).is_ok());
    EXPECT_EQ(cpu::RowGemm::calls() > before, rows <= 24);
    ASSERT_TRUE(ref.value()->run(feeds, &want).is_ok());
    ASSERT_EQ(got.size(), 1u);
    expect_near(got[0].second, want[0].second, 1e-4, 1e-4);
  }
}

}  // namespace
}  // namespace ferry
