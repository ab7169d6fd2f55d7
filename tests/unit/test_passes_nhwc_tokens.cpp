// Pass nhwc_tokens: a patch embedding's flatten(2).transpose(1, 2) after a channels-last convolution
// (Transpose to NCHW, Reshape [N, C, H*W], Transpose [0, 2, 1]) becomes one Reshape of the NHWC value;
// a classifier's Flatten after a channels-last global pooling reads the pooled NHWC value, no Transpose.
#include <random>

#include "pass_test_util.h"

namespace ferry::testing {
namespace {

Tensor rnd(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

std::shared_ptr<Model> optimized(const Model& m, bool tokens) {
  std::shared_ptr<Model> copy = m.clone();
  OptimizeOptions oo;
  if (!tokens) oo.disabled.push_back("nhwc_tokens");
  Status st = optimize_model(copy.get(), oo);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return copy;
}

TEST(NhwcTokens, PatchEmbeddingTokensAreOneReshapeOfTheNhwcConvolution) {
  // [2, 3, 16, 16] -> 4x4 patches of 16 channels -> [2, 16, 16] tokens -> a linear layer.
  ModelBuilder b(17);
  auto x = b.input("x", {2, 3, 16, 16});
  auto y = b.node("Conv", {x, b.constant(rnd({16, 3, 4, 4}, 1)), b.constant(rnd({16}, 2))},
                  {{"kernel_shape", ints_attr({4, 4})}, {"strides", ints_attr({4, 4})}});
  auto flat = b.node("Reshape", {y, b.constant(Tensor::from_vector<int64_t>({2, 16, -1}, {3}))});
  auto tokens = b.node("Transpose", {flat}, {{"perm", ints_attr({0, 2, 1})}});
  b.output(b.node("MatMul", {tokens, b.constant(rnd({16, 5}, 3))}));
  auto model = b.build();
  auto on = optimized(*model, true), off = optimized(*model, false);
  EXPECT_EQ(count_ops(*off, "Transpose"), 2);  // nhwc_layout's exit Transpose and the export's
  EXPECT_EQ(count_ops(*on, "Transpose"), 0);
  NamedTensors feeds = random_feeds(*model);
  NamedTensors want = run_model(model, feeds), got = run_model(on, feeds, "cpu"), got_off = run_model(off, feeds, "cpu");
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got_off.size(), 1u);
  expect_near(got[0].second, want[0].second, 1e-5, 1e-4);
  expect_near(got[0].second, got_off[0].second, 0, 0);
}

TEST(NhwcTokens, FlattenAfterGlobalPoolingReadsTheNhwcValue) {
  // [2, 3, 9, 9] -> conv (NHWC) -> GlobalAveragePool [2, 8, 1, 1] -> Flatten -> a linear layer.
  ModelBuilder b(17);
  auto x = b.input("x", {2, 3, 9, 9});
  auto y = b.node("Conv", {x, b.constant(rnd({8, 3, 3, 3}, 4)), b.constant(rnd({8}, 5))});
  auto flat = b.node("Flatten", {b.node("GlobalAveragePool", {y})});
  b.output(b.node("MatMul", {flat, b.constant(rnd({8, 5}, 6))}));
  auto model = b.build();
  auto on = optimized(*model, true), off = optimized(*model, false);
  EXPECT_EQ(count_ops(*off, "Transpose"), 1);  // nhwc_layout's exit Transpose of the pooled [2, 1, 1, 8]
  EXPECT_EQ(count_ops(*on, "Transpose"), 0);
  EXPECT_EQ(count_ops(*on, "Flatten"), 1);
  NamedTensors feeds = random_feeds(*model);
  NamedTensors want = run_model(model, feeds), got = run_model(on, feeds, "cpu"), got_off = run_model(off, feeds, "cpu");
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got_off.size(), 1u);
  EXPECT_EQ(got[0].second.dims(), (std::vector<int64_t>{2, 5}));
  expect_near(got[0].second, want[0].second, 1e-5, 1e-4);
  expect_near(got[0].second, got_off[0].second, 0, 0);
}

TEST(NhwcTokens, FlattenOfAPooledValueWithSpatialExtentKeepsItsTranspose) {
  // AveragePool 3x3 / 3 leaves [2, 8, 2, 2]: that Transpose moves bytes and stays.
  ModelBuilder b(17);
  auto x = b.input("x", {2, 3, 8, 8});
  auto y = b.node("Conv", {x, b.constant(rnd({8, 3, 3, 3}, 7)), b.constant(rnd({8}, 8))});
  auto pooled = b.node("AveragePool", {y}, {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({3, 3})}});
  b.output(b.node("Flatten", {pooled}));
  auto model = b.build();
  auto on = optimized(*model, true);
  EXPECT_EQ(count_ops(*on, "Transpose"), 1);
  NamedTensors feeds = random_feeds(*model);
  expect_near(run_model(on, feeds, "cpu")[0].second, run_model(model, feeds)[0].second, 1e-5, 1e-4);
}

}  // namespace
}  // namespace ferry::testing
