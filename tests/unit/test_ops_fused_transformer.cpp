// com.ferry LayerNorm, Gelu and Attention (op family fused_transformer): reference kernels
// against hand-computed values, shape rules, and the optimized cpu kernels against the reference.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

Tensor random_tensor(std::vector<int64_t> dims, uint32_t seed) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = nd(rng);
  return t;
}

TEST(FusedLayerNorm, MatchesHandComputed) {
  auto out = OpTester("LayerNorm", 1, "com.ferry")
                 .input(T_({1, 2, 3, 4, 0, 0, 4, 4}, {2, 4}))
                 .const_input(T_({1, 1, 2, 2}, {4}))
                 .const_input(T_({0, 0, 0, 1}, {4}))
                 .attr("epsilon", 0.0f)
                 .run();
  const float s = 1.0f / std::sqrt(1.25f);
  // Row 2: mean 2, variance 4: (-1, -1, 1, 1) * (1, 1, 2, 2) + (0, 0, 0, 1).
  expect_near(out[0], T_({-1.5f * s, -0.5f * s, 1.0f * s, 3.0f * s + 1, -1, -1, 2, 3}, {2, 4}), 1e-5);
}

TEST(FusedLayerNorm, CpuMatchesReference) {
  for (int64_t c : {7, 64, 768}) {
    Tensor x = random_tensor({3, 5, c}, 1), g = random_tensor({c}, 2), b = random_tensor({c}, 3);
    auto ref = OpTester("LayerNorm", 1, "com.ferry").input(x).const_input(g).const_input(b).run("cpu-ref");
    auto cpu = OpTester("LayerNorm", 1, "com.ferry").input(x).const_input(g).const_input(b).run("cpu");
    expect_near(cpu[0], ref[0], 1e-4, 1e-4);
  }
}

TEST(FusedGelu, MatchesErfAndTanhForms) {
  auto exact = OpTester("Gelu", 1, "com.ferry").input(T_({-2, 0, 1, 3}, {4})).run();
  auto tanh_form = OpTester("Gelu", 1, "com.ferry").input(T_({-2, 0, 1, 3}, {4})).attr("approximate", "tanh").run();
  std::vector<float> e, t;
  for (double v : {-2.0, 0.0, 1.0, 3.0}) {
    e.push_back(static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))));
    t.push_back(static_cast<float>(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))));
  }
  expect_near(exact[0], T_(e, {4}), 1e-6);
  expect_near(tanh_form[0], T_(t, {4}), 1e-6);
}

TEST(FusedGelu, CpuMatchesReference) {
  Tensor x = random_tensor({1000}, 4);
  for (const char* mode : {"none", "tanh"}) {
    auto ref = OpTester("Gelu", 1, "com.ferry").input(x).attr("approximate", mode).run("cpu-ref");
    auto cpu = OpTester("Gelu", 1, "com.ferry").input(x).attr("approximate", mode).run("cpu");
    expect_near(cpu[0], ref[0], 1e-6, 1e-5);
  }
}

TEST(FusedAttention, UniformScoresAverageValues) {
  // Q = 0: every score is 0, the softmax is uniform, each output row is the mean of V's rows.
  auto out = OpTester("Attention", 1, "com.ferry")
                 .input(T_({0, 0, 0, 0}, {1, 2, 2}))
                 .input(T_({1, 2, 3, 4}, {1, 2, 2}))
                 .input(T_({1, 10, 3, 30}, {1, 2, 2}))
                 .attr("scale", 0.5f)
                 .run();
  expect_near(out[0], T_({2, 20, 2, 20}, {1, 2, 2}), 1e-6);
}

TEST(FusedAttention, MaskSelectsKeys) {
  // A -inf mask on key 0 leaves all weight on key 1.
  auto out = OpTester("Attention", 1, "com.ferry")
                 .input(T_({1, 1}, {1, 1, 2}))
                 .input(T_({5, 0, 0, 5}, {1, 2, 2}))
                 .input(T_({1, 2, 3, 4}, {1, 2, 2}))
                 .input(T_({-INFINITY, 0}, {1, 1, 2}))
                 .run();
  expect_near(out[0], T_({3, 4}, {1, 1, 2}), 1e-6);
}

TEST(FusedAttention, PermutedOperandsShapeRule) {
  // q, k, v stored [S, BH, D]; k read as [BH, D, S]; output stored [S, BH, D].
  auto t = OpTester("Attention", 1, "com.ferry")
               .input(random_tensor({5, 3, 4}, 1))
               .input(random_tensor({5, 3, 4}, 2))
               .input(random_tensor({5, 3, 4}, 3))
               .attr("q_perm", std::vector<int64_t>{1, 0, 2})
               .attr("k_perm", std::vector<int64_t>{1, 2, 0})
               .attr("v_perm", std::vector<int64_t>{1, 0, 2})
               .attr("out_perm", std::vector<int64_t>{1, 0, 2});
  auto out = t.run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{5, 3, 4}));
}

TEST(FusedAttention, RejectsMismatchedInnerDims) {
  auto r = OpTester("Attention", 1, "com.ferry")
               .input(random_tensor({2, 3, 4}, 1))
               .input(random_tensor({2, 5, 3}, 2))
               .input(random_tensor({2, 3, 4}, 3))
               .run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("inner dims"), std::string::npos) << r.status().to_string();
}

TEST(FusedAttention, CpuMatchesReference) {
  for (bool permuted : {false, true}) {
    std::vector<int64_t> dims = permuted ? std::vector<int64_t>{17, 6, 8} : std::vector<int64_t>{6, 17, 8};
    auto make = [&] {
      OpTester t("Attention", 1, "com.ferry");
      t.input(random_tensor(dims, 1)).input(random_tensor(permuted ? dims : std::vector<int64_t>{6, 8, 17}, 2));
      t.input(random_tensor(dims, 3)).input(random_tensor({6, 1, 17}, 4)).attr("scale", 0.35f);
      if (permuted) {
        t.attr("q_perm", std::vector<int64_t>{1, 0, 2}).attr("k_perm", std::vector<int64_t>{1, 2, 0});
        t.attr("v_perm", std::vector<int64_t>{1, 0, 2}).attr("out_perm", std::vector<int64_t>{1, 0, 2});
      }
      return t;
    };
    auto ref = make().run("cpu-ref");
    auto cpu = make().run("cpu");
    expect_near(cpu[0], ref[0], 1e-5, 1e-4);
  }
}

TEST(FusedAttention, SlicedOperandsOfOnePackedTensor) {
  // q_slice / k_slice / v_slice over the heads axis of one [B, S, 3H, D] tensor equal the three parts
  // passed as separate tensors, on the reference and on the cpu kernel.
  const int64_t b = 2, s = 7, h = 3, d = 4;
  const Tensor packed = random_tensor({b, s, 3 * h, d}, 5);
  auto part = [&](int64_t k) {
    Tensor t = Tensor::allocate(DType::kF32, {b, s, h, d});
    for (int64_t i = 0; i < b * s; ++i)
      for (int64_t j = 0; j < h * d; ++j)
        t.mutable_data<float>()[i * h * d + j] = packed.data<float>()[i * 3 * h * d + k * h * d + j];
    return t;
  };
  auto perms = [](OpTester& t) {
    t.attr("q_perm", std::vector<int64_t>{0, 2, 1, 3}).attr("k_perm", std::vector<int64_t>{0, 2, 3, 1});
    t.attr("v_perm", std::vector<int64_t>{0, 2, 1, 3}).attr("out_perm", std::vector<int64_t>{0, 2, 1, 3});
    t.attr("scale", 0.5f);
  };
  auto make_packed = [&] {
    OpTester t("Attention", 1, "com.ferry");
    t.input(packed).input(packed).input(packed);
    perms(t);
    t.attr("q_slice", std::vector<int64_t>{2, 0, h}).attr("k_slice", std::vector<int64_t>{2, h, 2 * h});
    t.attr("v_slice", std::vector<int64_t>{2, 2 * h, 3 * h});
    return t;
  };
  OpTester sep("Attention", 1, "com.ferry");
  sep.input(part(0)).input(part(1)).input(part(2));
  perms(sep);
  auto want = sep.run("cpu-ref");
  auto ref = make_packed().run("cpu-ref");
  auto cpu = make_packed().run("cpu");
  EXPECT_EQ(ref[0].dims(), (std::vector<int64_t>{b, s, h, d}));
  expect_near(ref[0], want[0], 1e-6, 1e-6);
  expect_near(cpu[0], want[0], 1e-5, 1e-4);
}

TEST(FusedAttention, RejectsSliceOutsideItsInput) {
  auto r = OpTester("Attention", 1, "com.ferry")
               .input(random_tensor({2, 3, 6, 4}, 1))
               .input(random_tensor({2, 3, 6, 4}, 2))
               .input(random_tensor({2, 3, 6, 4}, 3))
               .attr("q_slice", std::vector<int64_t>{2, 4, 8})
               .run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("q_slice"), std::string::npos) << r.status().to_string();
}

TEST(FusedAttention, BroadcastsBatchDimsOnCpu) {
  auto make = [] {
    OpTester t("Attention", 1, "com.ferry");
    t.input(random_tensor({2, 3, 5, 8}, 1)).input(random_tensor({1, 3, 8, 5}, 2)).input(random_tensor({2, 1, 5, 8}, 3));
    return t;
  };
  auto ref = make().run("cpu-ref");
  auto cpu = make().run("cpu");
  EXPECT_EQ(ref[0].dims(), (std::vector<int64_t>{2, 3, 5, 8}));
  expect_near(cpu[0], ref[0], 1e-5, 1e-4);
}

// The cpu kernel runs the heads in chunks (FERRY_ATTENTION_CHUNK heads each here: 2, 2, 1 of 5),
// the chunks split over the threads: every chunk, the short last one included, must match.
TEST(FusedAttention, ChunksOfHeadsMatchReferenceOnCpu) {
  for (const char* chunk : {"2", "1", "64"}) {
    setenv("FERRY_ATTENTION_CHUNK", chunk, 1);
    auto make = [] {
      OpTester t("Attention", 1, "com.ferry");
      t.input(random_tensor({33, 5, 16}, 11)).input(random_tensor({40, 5, 16}, 12)).input(random_tensor({40, 5, 24}, 13));
      t.input(random_tensor({5, 1, 40}, 14)).attr("scale", 0.25f);
      t.attr("q_perm", std::vector<int64_t>{1, 0, 2}).attr("k_perm", std::vector<int64_t>{1, 2, 0});
      t.attr("v_perm", std::vector<int64_t>{1, 0, 2}).attr("out_perm", std::vector<int64_t>{1, 0, 2});
      return t;
    };
    auto ref = make().run("cpu-ref");
    auto cpu = make().run("cpu");
    unsetenv("FERRY_ATTENTION_CHUNK");
    EXPECT_EQ(cpu[0].dims(), (std::vector<int64_t>{33, 5, 24}));
    expect_near(cpu[0], ref[0], 1e-5, 1e-4);
  }
}

// A query of fewer rows than the keys (ViT's class token alone: 1 row against 197 keys), heads
// read through permutations as the fusion leaves them: output row i depends only on query row i, so
// the 1-row and 3-row queries give exactly rows of the full query's output, on cpu and cpu-ref.
TEST(FusedAttention, FewQueryRowsMatchFullQueryRows) {
  const Tensor q = random_tensor({1, 20, 3, 16}, 21), k = random_tensor({1, 20, 3, 16}, 22),
               v = random_tensor({1, 20, 3, 16}, 23);
  auto run = [&](const Tensor& query, const char* device) {
    OpTester t("Attention", 1, "com.ferry");
    t.input(query).input(k).input(v).attr("scale", 0.25f);
    t.attr("q_perm", std::vector<int64_t>{0, 2, 1, 3}).attr("k_perm", std::vector<int64_t>{0, 2, 3, 1});
    t.attr("v_perm", std::vector<int64_t>{0, 2, 1, 3}).attr("out_perm", std::vector<int64_t>{0, 2, 1, 3});
    return t.run(device)[0];
  };
  for (const char* device : {"cpu", "cpu-ref"}) {
    SCOPED_TRACE(device);
    const Tensor full = run(q, device);
    ASSERT_EQ(full.dims(), (std::vector<int64_t>{1, 20, 3, 16}));
    for (int64_t rows : {1, 3}) {
      // The first `rows` query rows: [1, rows, 3, 16], contiguous in q.
      Tensor part = Tensor::allocate(DType::kF32, {1, rows, 3, 16});
      std::copy(q.data<float>(), q.data<float>() + rows * 48, part.mutable_data<float>());
      const Tensor got = run(part, device);
      ASSERT_EQ(got.dims(), (std::vector<int64_t>{1, rows, 3, 16}));
      for (int64_t i = 0; i < rows * 48; ++i) EXPECT_NEAR(got.data<float>()[i], full.data<float>()[i], 1e-5) << i;
    }
  }
}

// Key padding: -inf on a run of keys crossing a 16-lane boundary (and the row tail) gives them
// exactly zero weight in the cpu kernel's vector softmax, as in the reference.
TEST(FusedAttention, InfiniteMaskOnCpuMatchesReference) {
  std::vector<float> m(2 * 37, 0.f);
  for (int k = 12; k < 20; ++k) m[static_cast<size_t>(k)] = -INFINITY;
  for (int k = 30; k < 37; ++k) m[static_cast<size_t>(37 + k)] = -INFINITY;
  auto make = [&] {
    OpTester t("Attention", 1, "com.ferry");
    t.input(random_tensor({2, 21, 8}, 21)).input(random_tensor({2, 8, 37}, 22)).input(random_tensor({2, 37, 8}, 23));
    t.input(T_(m, {2, 1, 37}));
    return t;
  };
  auto ref = make().run("cpu-ref");
  auto cpu = make().run("cpu");
  expect_near(cpu[0], ref[0], 1e-5, 1e-4);
  // The padded keys' values do not matter: change them and the output stays.
  auto changed = [&] {
    OpTester t("Attention", 1, "com.ferry");
    Tensor v = random_tensor({2, 37, 8}, 23);
    for (int k = 12; k < 20; ++k)
      for (int j = 0; j < 8; ++j) v.mutable_data<float>()[k * 8 + j] = 1e3f;
    t.input(random_tensor({2, 21, 8}, 21)).input(random_tensor({2, 8, 37}, 22)).input(v).input(T_(m, {2, 1, 37}));
    return t;
  };
  expect_near(changed().run("cpu")[0], cpu[0], 0, 0);
}

// bf16 tensors: the cpu kernels compute in f32 rows and round once, as the reference does; the
// results may differ by an ulp of bf16 (their exp/erf are approximations), hence the tolerance.
Tensor bf16(const Tensor& t) { return cast_tensor(t, DType::kBF16).value(); }
void expect_bf16_near(const Tensor& cpu, const Tensor& ref, double tol) {
  ASSERT_EQ(cpu.dtype(), DType::kBF16);
  ASSERT_EQ(ref.dtype(), DType::kBF16);
  expect_near(cast_tensor(cpu, DType::kF32).value(), cast_tensor(ref, DType::kF32).value(), tol, tol);
}

TEST(FusedBf16, CpuLayerNormGeluSoftmaxMatchReference) {
  Tensor x = bf16(random_tensor({4, 7, 96}, 5)), g = bf16(random_tensor({96}, 6)), b = bf16(random_tensor({96}, 7));
  auto ln = [&](const char* dev) { return OpTester("LayerNorm", 1, "com.ferry").input(x).const_input(g).const_input(b).run(dev); };
  expect_bf16_near(ln("cpu")[0], ln("cpu-ref")[0], 2e-2);
  auto gelu = [&](const char* dev) { return OpTester("Gelu", 1, "com.ferry").input(x).run(dev); };
  expect_bf16_near(gelu("cpu")[0], gelu("cpu-ref")[0], 1e-2);
  auto softmax = [&](const char* dev) { return OpTester("Softmax", 13).input(x).attr("axis", int64_t{-1}).run(dev); };
  expect_bf16_near(softmax("cpu")[0], softmax("cpu-ref")[0], 1e-2);
}

TEST(FusedBf16, CpuAttentionMatchesReference) {
  auto make = [] {
    OpTester t("Attention", 1, "com.ferry");
    t.input(bf16(random_tensor({17, 6, 8}, 1))).input(bf16(random_tensor({17, 6, 8}, 2)));
    t.input(bf16(random_tensor({17, 6, 8}, 3))).input(bf16(random_tensor({6, 1, 17}, 4))).attr("scale", 0.35f);
    t.attr("q_perm", std::vector<int64_t>{1, 0, 2}).attr("k_perm", std::vector<int64_t>{1, 2, 0});
    t.attr("v_perm", std::vector<int64_t>{1, 0, 2}).attr("out_perm", std::vector<int64_t>{1, 0, 2});
    return t;
  };
  expect_bf16_near(make().run("cpu")[0], make().run("cpu-ref")[0], 2e-2);
}

TEST(FusedBf16, CpuAddMulCastMatchReference) {
  Tensor a = bf16(random_tensor({3, 5, 40}, 8)), b = bf16(random_tensor({40}, 9));
  for (const char* op : {"Add", "Mul"}) {
    auto run = [&](const char* dev) { return OpTester(op, 14).input(a).input(b).run(dev); };
    expect_bf16_near(run("cpu")[0], run("cpu-ref")[0], 0);  // one rounding of an exact f32 result: identical
  }
  Tensor x = random_tensor({1000}, 10);
  auto narrow = [&](const char* dev) { return OpTester("Cast", 13).input(x).attr("to", int64_t{16}).run(dev); };
  expect_bf16_near(narrow("cpu")[0], narrow("cpu-ref")[0], 0);
  auto widen = [&](const char* dev) { return OpTester("Cast", 13).input(bf16(x)).attr("to", int64_t{1}).run(dev); };
  expect_near(widen("cpu")[0], widen("cpu-ref")[0], 0, 0);
}

}  // namespace
}  // namespace ferry::testing
