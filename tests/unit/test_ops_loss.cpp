#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

// input [2, 3] log-probabilities, targets [2, 0].
Tensor nll_x() { return T_({-1, -2, -3, -0.5f, -1.5f, -2.5f}, {2, 3}); }
Tensor nll_t() { return I64_({2, 0}, {2}); }

TEST(NegativeLogLikelihoodLoss, ReductionNone) {
  auto out = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "none").input(nll_x()).input(nll_t()).run();
  expect_near(out[0], T_({3, 0.5f}, {2}));
}

TEST(NegativeLogLikelihoodLoss, DefaultIsMeanAndSumWorks) {
  auto mean = OpTester("NegativeLogLikelihoodLoss", 12).input(nll_x()).input(nll_t()).run();
  expect_near(mean[0], T_({1.75f}, {}));
  auto sum = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "sum").input(nll_x()).input(nll_t()).run();
  expect_near(sum[0], T_({3.5f}, {}));
}

TEST(NegativeLogLikelihoodLoss, WeightedMeanDividesByWeightSum) {
  auto none = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "none").input(nll_x()).input(nll_t())
                  .input(T_({1, 2, 3}, {3})).run();
  expect_near(none[0], T_({9, 0.5f}, {2}));
  auto mean = OpTester("NegativeLogLikelihoodLoss", 13).input(nll_x()).input(nll_t()).input(T_({1, 2, 3}, {3})).run();
  expect_near(mean[0], T_({9.5f / 4}, {}));
}

TEST(NegativeLogLikelihoodLoss, IgnoreIndexDropsEntriesFromMean) {
  auto none = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "none").attr("ignore_index", 0)
                  .input(nll_x()).input(nll_t()).run();
  expect_near(none[0], T_({3, 0}, {2}));
  auto mean = OpTester("NegativeLogLikelihoodLoss", 13).attr("ignore_index", 0).input(nll_x()).input(nll_t()).run();
  expect_near(mean[0], T_({3}, {}));
  // An ignore_index outside [0, C) (e.g. -100) is allowed in the target.
  auto neg = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "sum").attr("ignore_index", -100)
                 .input(nll_x()).input(I64_({-100, 1}, {2})).run();
  expect_near(neg[0], T_({1.5f}, {}));
}

TEST(NegativeLogLikelihoodLoss, SpatialDims) {
  // N=1, C=2, d=2: x[0,:,0] = [-1,-2], x[0,:,1] = [-3,-4]; targets [1, 0] -> [2, 3].
  Tensor x = T_({-1, -3, -2, -4}, {1, 2, 2});
  auto none = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "none").input(x)
                  .input(Tensor::from_vector<int32_t>({1, 0}, {1, 2})).run();
  expect_near(none[0], T_({2, 3}, {1, 2}));
  auto sum = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "sum").input(x).input(I64_({1, 0}, {1, 2})).run();
  expect_near(sum[0], T_({5}, {}));
}

TEST(NegativeLogLikelihoodLoss, Float16RoundTrips) {
  Tensor x = cast_tensor(nll_x(), DType::kF16).value();
  auto out = OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "none").input(x).input(nll_t()).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  expect_near(cast_tensor(out[0], DType::kF32).value(), T_({3, 0.5f}, {2}), 1e-3);
}

TEST(NegativeLogLikelihoodLoss, Errors) {
  // Target out of range (and not ignore_index).
  auto r = OpTester("NegativeLogLikelihoodLoss", 13).input(nll_x()).input(I64_({3, 0}, {2})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << r.status().message();
  // Bad reduction.
  EXPECT_FALSE(OpTester("NegativeLogLikelihoodLoss", 13).attr("reduction", "avg").input(nll_x()).input(nll_t()).run_status().is_ok());
  // Target shape does not match.
  EXPECT_FALSE(OpTester("NegativeLogLikelihoodLoss", 13).input(nll_x()).input(I64_({0, 0, 0}, {3})).run_status().is_ok());
  // Weight of the wrong length.
  EXPECT_FALSE(OpTester("NegativeLogLikelihoodLoss", 13).input(nll_x()).input(nll_t()).input(T_({1, 2}, {2})).run_status().is_ok());
  // Float target.
  EXPECT_FALSE(OpTester("NegativeLogLikelihoodLoss", 13).input(nll_x()).input(T_({0, 1}, {2})).run_status().is_ok());
  // Rank-1 input.
  EXPECT_FALSE(OpTester("NegativeLogLikelihoodLoss", 13).input(T_({1, 2}, {2})).input(I64_({0}, {})).run_status().is_ok());
}

TEST(SoftmaxCrossEntropyLoss, MeanWithLogProb) {
  auto out = OpTester("SoftmaxCrossEntropyLoss", 13).outputs(2).input(T_({1, 2, 3, 0, 0, 0}, {2, 3}))
                 .input(I64_({2, 1}, {2})).run();
  const double l0 = 0.4076059644, l1 = std::log(3.0);
  expect_near(out[0], T_({static_cast<float>((l0 + l1) / 2)}, {}));
  expect_near(out[1], T_({-2.4076059644f, -1.4076059644f, -0.4076059644f, static_cast<float>(-l1), static_cast<float>(-l1),
                          static_cast<float>(-l1)},
                         {2, 3}));
}

TEST(SoftmaxCrossEntropyLoss, WeightsIgnoreIndexAndSpatialDims) {
  // N=1, C=2, d=3: scores all 0 -> log_prob = -ln 2 everywhere; labels [0, 1, -1] with -1 ignored.
  Tensor x = T_({0, 0, 0, 0, 0, 0}, {1, 2, 3});
  auto none = OpTester("SoftmaxCrossEntropyLoss", 12).attr("reduction", "none").attr("ignore_index", -1).input(x)
                  .input(I64_({0, 1, -1}, {1, 3})).input(T_({1, 3}, {2})).run();
  const float ln2 = static_cast<float>(std::log(2.0));
  expect_near(none[0], T_({ln2, 3 * ln2, 0}, {1, 3}));
  auto mean = OpTester("SoftmaxCrossEntropyLoss", 12).attr("ignore_index", -1).input(x).input(I64_({0, 1, -1}, {1, 3}))
                  .input(T_({1, 3}, {2})).run();
  expect_near(mean[0], T_({ln2}, {}));  // (1 + 3) ln2 / (1 + 3)
}

TEST(SoftmaxCrossEntropyLoss, Float64) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3}, {1, 3});
  auto out = OpTester("SoftmaxCrossEntropyLoss", 13).attr("reduction", "sum").input(x).input(I64_({2}, {1})).run();
  ASSERT_EQ(out[0].dtype(), DType::kF64);
  EXPECT_NEAR(out[0].get_double(0), 0.40760596444438, 1e-12);
}

TEST(SoftmaxCrossEntropyLoss, SymbolicShapes) {
  OpTester t("SoftmaxCrossEntropyLoss", 13);
  t.attr("reduction", "none").outputs(2).input(T_({0, 0, 0, 0}, {2, 2})).input(I64_({0, 1}, {2}));
  t.symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(2)})).symbolic_input_shape(1, Shape({Dim()}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].to_string(), "f32[n]");
  EXPECT_EQ(t.last_model()->graph.value_types["out1"].to_string(), "f32[n,2]");
}

}  // namespace
}  // namespace ferry::testing
