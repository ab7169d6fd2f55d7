#include <limits>

#include "op_tester.h"

namespace ferry::testing {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor F16_(const std::vector<float>& v, std::vector<int64_t> dims) {
  Tensor t = Tensor::allocate(DType::kF16, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<uint16_t>()[i] = f32_to_f16(v[i]);
  return t;
}

bool message_has(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

const std::vector<float> kX = {-2.0f, -0.5f, 0.0f, 1.5f};

TEST(Relu, FloatAndInt) {
  expect_near(OpTester("Relu").input(T_(kX, {2, 2})).run()[0], T_({0, 0, 0, 1.5f}, {2, 2}));
  auto out = OpTester("Relu", 14).input(Tensor::from_vector<int32_t>({-3, 0, 7}, {3})).run();
  EXPECT_EQ(out[0].dtype(), DType::kI32);
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{0, 0, 7}));
}

TEST(Relu, PropagatesNaN) {
  auto out = OpTester("Relu").input(T_({kNaN, -1.0f}, {2})).run();
  EXPECT_TRUE(std::isnan(out[0].get_double(0)));
  EXPECT_EQ(out[0].get_double(1), 0.0);
}

TEST(Relu, RejectsBool) {
  auto r = OpTester("Relu").input(Tensor::from_vector<bool>({true}, {1})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "Relu_under_test")) << r.status().message();
}

TEST(LeakyRelu, DefaultAndCustomAlpha) {
  expect_near(OpTester("LeakyRelu").input(T_(kX, {4})).run()[0], T_({-0.02f, -0.005f, 0, 1.5f}, {4}));
  expect_near(OpTester("LeakyRelu").attr("alpha", 0.5f).input(T_(kX, {4})).run()[0], T_({-1.0f, -0.25f, 0, 1.5f}, {4}));
}

TEST(PRelu, SlopeBroadcastPerChannel) {
  // X [1,2,2] (N, C, L), slope [2,1] per channel.
  auto out = OpTester("PRelu").input(T_({-1, 2, -3, 4}, {1, 2, 2})).input(T_({0.1f, 0.5f}, {2, 1})).run();
  expect_near(out[0], T_({-0.1f, 2, -1.5f, 4}, {1, 2, 2}));
}

TEST(PRelu, ScalarSlopeAndInt) {
  expect_near(OpTester("PRelu").input(T_(kX, {4})).input(T_({0.25f}, {1})).run()[0], T_({-0.5f, -0.125f, 0, 1.5f}, {4}));
  auto out = OpTester("PRelu", 16).input(I64_({-2, 3}, {2})).input(I64_({3}, {1})).run();
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{-6, 3}));
}

TEST(PRelu, SlopeMustNotGrowX) {
  auto r = OpTester("PRelu").input(T_({1, 2}, {2})).input(T_({1, 2, 3, 4}, {2, 2})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "PRelu_under_test")) << r.status().message();
  auto r2 = OpTester("PRelu").input(T_({1, 2, 3}, {3})).input(T_({1, 2}, {2})).run_status();
  EXPECT_FALSE(r2.is_ok());
}

TEST(Elu, Values) {
  expect_near(OpTester("Elu").input(T_(kX, {4})).run()[0], T_({-0.8646647168f, -0.3934693403f, 0, 1.5f}, {4}));
}

TEST(Selu, Values) {
  expect_near(OpTester("Selu").input(T_(kX, {4})).run()[0], T_({-1.5201664733f, -0.6917581900f, 0, 1.5760515332f}, {4}));
}

TEST(Celu, AlphaTwo) {
  expect_near(OpTester("Celu", 12).attr("alpha", 2.0f).input(T_(kX, {4})).run()[0],
              T_({-1.2642411177f, -0.4423984339f, 0, 1.5f}, {4}));
}

TEST(ThresholdedRelu, StrictlyAboveAlpha) {
  expect_near(OpTester("ThresholdedRelu", 10).input(T_({0.5f, 1.0f, 1.5f, -3.0f}, {4})).run()[0], T_({0, 0, 1.5f, 0}, {4}));
  expect_near(OpTester("ThresholdedRelu", 10).attr("alpha", 0.2f).input(T_({0.5f, 0.1f}, {2})).run()[0], T_({0.5f, 0}, {2}));
}

TEST(Sigmoid, ValuesAndExtremes) {
  expect_near(OpTester("Sigmoid").input(T_(kX, {4})).run()[0], T_({0.1192029220f, 0.3775406688f, 0.5f, 0.8175744762f}, {4}));
  auto out = OpTester("Sigmoid").input(T_({-1000.0f, 1000.0f, -kInf, kInf}, {4})).run();
  expect_near(out[0], T_({0, 1, 0, 1}, {4}));
}

TEST(HardSigmoid, DefaultsAndAttrs) {
  // alpha 0.2, beta 0.5: clamp(0.2x + 0.5, 0, 1)
  expect_near(OpTester("HardSigmoid").input(T_({-3, -1, 0, 1, 3}, {5})).run()[0], T_({0, 0.3f, 0.5f, 0.7f, 1}, {5}));
  expect_near(OpTester("HardSigmoid").attr("alpha", 0.5f).attr("beta", 0.0f).input(T_({-1, 1, 3}, {3})).run()[0],
              T_({0, 0.5f, 1}, {3}));
}

TEST(HardSwish, Values) {
  expect_near(OpTester("HardSwish", 14).input(T_({-4, -1, 0, 1, 4}, {5})).run()[0],
              T_({0, -0.3333333333f, 0, 0.6666666667f, 4}, {5}));
}

TEST(Softplus, ValuesAndLargeInputs) {
  expect_near(OpTester("Softplus").input(T_(kX, {4})).run()[0], T_({0.1269280110f, 0.4740769842f, 0.6931471806f, 1.7014132780f}, {4}));
  auto out = OpTester("Softplus").input(T_({100.0f, -100.0f}, {2})).run();
  expect_near(out[0], T_({100.0f, 3.720076e-44f}, {2}));
}

TEST(Softsign, Values) {
  expect_near(OpTester("Softsign").input(T_({-3, 0, 1}, {3})).run()[0], T_({-0.75f, 0, 0.5f}, {3}));
}

TEST(Mish, Values) {
  expect_near(OpTester("Mish", 18).input(T_(kX, {4})).run()[0], T_({-0.2525014827f, -0.2207437747f, 0, 1.4033782664f}, {4}));
}

TEST(Mish, NotBeforeOpset18) {
  auto r = OpTester("Mish", 17).input(T_(kX, {4})).run_status();
  EXPECT_FALSE(r.is_ok());
}

TEST(Gelu, ExactAndTanh) {
  expect_near(OpTester("Gelu", 20).input(T_(kX, {4})).run()[0], T_({-0.0455002639f, -0.1542687694f, 0, 1.3997891981f}, {4}));
  expect_near(OpTester("Gelu", 20).attr("approximate", "tanh").input(T_(kX, {4})).run()[0],
              T_({-0.0454023059f, -0.1542859902f, 0, 1.3995715770f}, {4}));
}

TEST(Gelu, BadApproximateIsAnError) {
  auto r = OpTester("Gelu", 20).attr("approximate", "fast").input(T_(kX, {4})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "approximate")) << r.status().message();
}

TEST(Sigmoid, Float16) {
  auto out = OpTester("Sigmoid").input(F16_({0.0f, 2.0f}, {2})).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], f32_to_f16(0.5f));
  EXPECT_EQ(out[0].data<uint16_t>()[1], f32_to_f16(0.880797077977882f));
}

TEST(Sigmoid, IntInputIsAnError) {
  auto r = OpTester("Sigmoid").input(I64_({1}, {1})).run_status();
  EXPECT_FALSE(r.is_ok());
}

TEST(Activation, DoubleInput) {
  auto out = OpTester("Elu").input(Tensor::from_vector<double>({-1.0, 2.0}, {2})).run();
  ASSERT_EQ(out[0].dtype(), DType::kF64);
  EXPECT_DOUBLE_EQ(out[0].get_double(0), std::expm1(-1.0));
  EXPECT_DOUBLE_EQ(out[0].get_double(1), 2.0);
}

// ---- Clip -----------------------------------------------------------------------------------

TEST(Clip, Opset6Attributes) {
  auto out = OpTester("Clip", 6).attr("min", -1.0f).attr("max", 1.0f).input(T_({-2, -0.5f, 0.5f, 2}, {4})).run();
  expect_near(out[0], T_({-1, -0.5f, 0.5f, 1}, {4}));
  // Defaults are the float range: only infinities are clamped.
  auto d = OpTester("Clip", 6).attr("max", 0.0f).input(T_({-kInf, 3}, {2})).run();
  expect_near(d[0], T_({std::numeric_limits<float>::lowest(), 0}, {2}));
}

TEST(Clip, Opset11Inputs) {
  auto out = OpTester("Clip", 11).input(T_({-2, -0.5f, 0.5f, 2}, {4})).input(Tensor::scalar<float>(-1)).input(Tensor::scalar<float>(1)).run();
  expect_near(out[0], T_({-1, -0.5f, 0.5f, 1}, {4}));
}

TEST(Clip, OmittedMinWithEmptyName) {
  auto out = OpTester("Clip", 13).input(T_({-2, 0.5f, 2}, {3})).no_input().input(Tensor::scalar<float>(1)).run();
  expect_near(out[0], T_({-2, 0.5f, 1}, {3}));
  auto only_min = OpTester("Clip", 13).input(T_({-2, 0.5f, 2}, {3})).input(Tensor::scalar<float>(0)).run();
  expect_near(only_min[0], T_({0, 0.5f, 2}, {3}));
  auto none = OpTester("Clip", 13).input(T_({-kInf, 0.5f, kInf}, {3})).run();
  expect_near(none[0], T_({-kInf, 0.5f, kInf}, {3}));
}

TEST(Clip, MinGreaterThanMaxGivesMax) {
  auto out = OpTester("Clip", 13).input(T_({-5, 0, 5}, {3})).input(Tensor::scalar<float>(2)).input(Tensor::scalar<float>(1)).run();
  expect_near(out[0], T_({1, 1, 1}, {3}));
}

TEST(Clip, IntegerFromOpset12) {
  auto out = OpTester("Clip", 12).input(Tensor::from_vector<int32_t>({-7, 3, 9}, {3}))
                 .input(Tensor::scalar<int32_t>(0)).input(Tensor::scalar<int32_t>(5)).run();
  EXPECT_EQ(out[0].dtype(), DType::kI32);
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{0, 3, 5}));
  auto r = OpTester("Clip", 11).input(Tensor::from_vector<int32_t>({1}, {1})).run_status();
  EXPECT_FALSE(r.is_ok());
}

TEST(Clip, BoundTypeMismatchAndNonScalar) {
  auto r = OpTester("Clip", 13).input(T_({1, 2}, {2})).input(Tensor::scalar<double>(0)).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "Clip_under_test")) << r.status().message();
  auto r2 = OpTester("Clip", 13).input(T_({1, 2}, {2})).input(T_({0, 1}, {2})).run_status();
  EXPECT_FALSE(r2.is_ok());
}

TEST(Clip, PropagatesNaNAndF16) {
  auto out = OpTester("Clip", 13).input(T_({kNaN, 3}, {2})).input(Tensor::scalar<float>(0)).input(Tensor::scalar<float>(1)).run();
  EXPECT_TRUE(std::isnan(out[0].get_double(0)));
  EXPECT_EQ(out[0].get_double(1), 1.0);
  auto h = OpTester("Clip", 13).input(F16_({-3, 0.25f, 3}, {3})).input(F16_({-1}, {})).input(F16_({1}, {})).run();
  ASSERT_EQ(h[0].dtype(), DType::kF16);
  expect_near(h[0], F16_({-1, 0.25f, 1}, {3}));
}

// ---- Softmax family -------------------------------------------------------------------------

TEST(Softmax, LastAxisDefaultAtOpset13) {
  auto out = OpTester("Softmax", 13).input(T_({1, 2, 3, 1, 1, 1}, {2, 3})).run();
  expect_near(out[0], T_({0.0900305732f, 0.2447284711f, 0.6652409558f, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f}, {2, 3}));
}

TEST(Softmax, Opset11VersusOpset13On3D) {
  std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7};
  // Opset 11, axis=1: coerced to [2, 4]; each row of 4 is normalized.
  auto o11 = OpTester("Softmax", 11).attr("axis", 1).input(T_(x, {2, 2, 2})).run();
  const std::vector<float> row = {0.0320586033f, 0.0871443187f, 0.2368828181f, 0.6439142599f};
  std::vector<float> e11 = row;
  e11.insert(e11.end(), row.begin(), row.end());
  expect_near(o11[0], T_(e11, {2, 2, 2}));
  // Opset 13, axis=1: only along dim 1; pairs (x, x+2).
  auto o13 = OpTester("Softmax", 13).attr("axis", 1).input(T_(x, {2, 2, 2})).run();
  const float a = 0.1192029220f, b = 0.8807970780f;
  expect_near(o13[0], T_({a, a, b, b, a, a, b, b}, {2, 2, 2}));
}

TEST(Softmax, Opset11DefaultAxisIsOne) {
  // Default axis 1 on [1, 2, 2]: one row of 4.
  auto out = OpTester("Softmax", 11).input(T_({0, 1, 2, 3}, {1, 2, 2})).run();
  expect_near(out[0], T_({0.0320586033f, 0.0871443187f, 0.2368828181f, 0.6439142599f}, {1, 2, 2}));
}

TEST(Softmax, NegativeAxis) {
  auto out = OpTester("Softmax", 13).attr("axis", -2).input(T_({0, 0, 2, 0}, {2, 2})).run();
  expect_near(out[0], T_({0.1192029220f, 0.5f, 0.8807970780f, 0.5f}, {2, 2}));
}

TEST(Softmax, NumericallyStableForLargeInputs) {
  auto out = OpTester("Softmax", 13).input(T_({1000, 1001, 1002}, {3})).run();
  expect_near(out[0], T_({0.0900305732f, 0.2447284711f, 0.6652409558f}, {3}));
}

TEST(Softmax, NegativeInfinity) {
  // A row with some -inf gives 0 there; a row of all -inf gives NaN (as PyTorch).
  auto out = OpTester("Softmax", 13).input(T_({0, -kInf, 0, -kInf, -kInf, -kInf}, {2, 3})).run();
  expect_near(out[0], T_({0.5f, 0, 0.5f, kNaN, kNaN, kNaN}, {2, 3}));
}

TEST(Softmax, AxisOutOfRangeNamesTheNode) {
  auto r = OpTester("Softmax", 13).attr("axis", 2).input(T_({1, 2}, {1, 2})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "Softmax_under_test")) << r.status().message();
  EXPECT_TRUE(message_has(r.status(), "axis")) << r.status().message();
}

TEST(Softmax, Float16AndZeroSize) {
  auto h = OpTester("Softmax", 13).input(F16_({0, 0}, {2})).run();
  ASSERT_EQ(h[0].dtype(), DType::kF16);
  expect_near(h[0], F16_({0.5f, 0.5f}, {2}));
  auto z = OpTester("Softmax", 13).input(T_({}, {0, 3})).run();
  EXPECT_EQ(z[0].dims(), (std::vector<int64_t>{0, 3}));
  auto z2 = OpTester("Softmax", 13).attr("axis", 0).input(T_({}, {0, 3})).run();
  EXPECT_EQ(z2[0].dims(), (std::vector<int64_t>{0, 3}));
}

TEST(LogSoftmax, Values) {
  auto out = OpTester("LogSoftmax", 13).input(T_({1, 2, 3}, {1, 3})).run();
  expect_near(out[0], T_({-2.4076059644f, -1.4076059644f, -0.4076059644f}, {1, 3}));
  auto big = OpTester("LogSoftmax", 13).input(T_({1000, 0}, {2})).run();
  expect_near(big[0], T_({0, -1000}, {2}));
}

TEST(LogSoftmax, LegacyCoercion) {
  auto out = OpTester("LogSoftmax", 11).attr("axis", 0).input(T_({1, 2, 3, 0}, {2, 2})).run();
  // One row of 4 values.
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0);
  expect_near(out[0], T_({float(1 - lse), float(2 - lse), float(3 - lse), float(-lse)}, {2, 2}));
}

TEST(Hardmax, FirstMaximumWins) {
  auto out = OpTester("Hardmax", 13).input(T_({1, 3, 3, 0, -1, -2}, {2, 3})).run();
  expect_near(out[0], T_({0, 1, 0, 1, 0, 0}, {2, 3}));
}

TEST(Hardmax, LegacyVersusCurrent) {
  std::vector<float> x = {0, 5, 2, 1};  // [2, 2]
  auto o11 = OpTester("Hardmax", 11).attr("axis", 0).input(T_(x, {2, 2})).run();
  expect_near(o11[0], T_({0, 1, 0, 0}, {2, 2}));
  auto o13 = OpTester("Hardmax", 13).attr("axis", 0).input(T_(x, {2, 2})).run();
  expect_near(o13[0], T_({0, 1, 1, 0}, {2, 2}));
}

TEST(Softmax, RuntimeShapeRuleKeepsSymbols) {
  OpTester t("Softmax", 13);
  t.input(T_({1, 2, 3, 4}, {2, 2})).symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(2)}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[n,2]");
}

}  // namespace
}  // namespace ferry::testing
