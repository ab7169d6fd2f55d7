#include <limits>

#include "op_tester.h"

namespace ferry::testing {
namespace {

template <typename T>
Tensor V_(const std::vector<T>& v, std::vector<int64_t> dims) { return Tensor::from_vector<T>(v, std::move(dims)); }

// ---- BitShift ----

TEST(BitShift, LeftAndRightWithBroadcast) {
  auto l = OpTester("BitShift", 11).attr("direction", "LEFT").input(V_<uint8_t>({16, 4, 1}, {3})).input(V_<uint8_t>({1}, {1})).run();
  expect_near(l[0], V_<uint8_t>({32, 8, 2}, {3}));
  auto r = OpTester("BitShift", 11).attr("direction", "RIGHT").input(V_<uint64_t>({16, 4, 1}, {3})).input(V_<uint64_t>({1, 2, 3}, {3})).run();
  expect_near(r[0], V_<uint64_t>({8, 1, 0}, {3}));
}

TEST(BitShift, OverflowingShiftsAndWrapping) {
  auto l = OpTester("BitShift", 11).attr("direction", "LEFT").input(V_<uint8_t>({255, 1, 1}, {3})).input(V_<uint8_t>({1, 8, 200}, {3})).run();
  expect_near(l[0], V_<uint8_t>({254, 0, 0}, {3}));
  auto r = OpTester("BitShift", 11).attr("direction", "RIGHT").input(V_<uint32_t>({0xffffffffu}, {1})).input(V_<uint32_t>({40}, {1})).run();
  expect_near(r[0], V_<uint32_t>({0}, {1}));
}

TEST(BitShift, BadInputsAreErrors) {
  EXPECT_FALSE(OpTester("BitShift", 11).attr("direction", "LEFT").input(I64_({1}, {1})).input(I64_({1}, {1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("BitShift", 11).attr("direction", "UP").input(V_<uint8_t>({1}, {1})).input(V_<uint8_t>({1}, {1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("BitShift", 11).input(V_<uint8_t>({1}, {1})).input(V_<uint8_t>({1}, {1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("BitShift", 11).attr("direction", "LEFT").input(V_<uint8_t>({1}, {1})).input(V_<uint16_t>({1}, {1})).run_status().is_ok());
}

// ---- Shrink ----

TEST(Shrink, SoftAndHard) {
  auto soft = OpTester("Shrink", 9).attr("bias", 1.5f).attr("lambd", 1.5f).input(T_({-2, -1, 0, 1, 2}, {5})).run();
  expect_near(soft[0], T_({-0.5f, 0, 0, 0, 0.5f}, {5}));
  auto hard = OpTester("Shrink", 9).attr("lambd", 1.5f).input(T_({-2, -1, 0, 1, 2}, {5})).run();
  expect_near(hard[0], T_({-2, 0, 0, 0, 2}, {5}));
  auto dflt = OpTester("Shrink", 9).input(V_<double>({-0.6, 0.4, 0.7}, {3})).run();
  expect_near(dflt[0], V_<double>({-0.6, 0, 0.7}, {3}));
}

TEST(Shrink, IntegerInput) {
  auto out = OpTester("Shrink", 9).attr("bias", 1.0f).attr("lambd", 1.0f).input(V_<int32_t>({-3, -1, 0, 1, 3}, {5})).run();
  expect_near(out[0], V_<int32_t>({-2, 0, 0, 0, 2}, {5}));
}

// ---- random ----

TEST(RandomUniform, ShapeRangeAndSeed) {
  auto a = OpTester("RandomUniform", 1).attr("shape", std::vector<int64_t>{100, 10}).attr("low", 2.0f).attr("high", 3.0f)
               .attr("seed", 7.0f).run();
  ASSERT_EQ(a[0].dims(), (std::vector<int64_t>{100, 10}));
  EXPECT_EQ(a[0].dtype(), DType::kF32);
  double sum = 0;
  for (int64_t i = 0; i < a[0].numel(); ++i) {
    const double v = a[0].get_double(i);
    EXPECT_GE(v, 2.0);
    EXPECT_LE(v, 3.0);
    sum += v;
  }
  EXPECT_NEAR(sum / 1000.0, 2.5, 0.05);
  auto b = OpTester("RandomUniform", 1).attr("shape", std::vector<int64_t>{100, 10}).attr("low", 2.0f).attr("high", 3.0f)
               .attr("seed", 7.0f).run();
  expect_near(a[0], b[0], 0, 0);  // the same seed draws the same values
  auto c = OpTester("RandomUniform", 1).attr("shape", std::vector<int64_t>{100, 10}).attr("seed", 8.0f).run();
  EXPECT_NE(a[0].get_double(0) - 2.0, c[0].get_double(0));
}

TEST(RandomNormal, MomentsAndDtype) {
  auto a = OpTester("RandomNormal", 1).attr("shape", std::vector<int64_t>{20000}).attr("mean", 1.0f).attr("scale", 2.0f)
               .attr("dtype", 11).attr("seed", 1.0f).run();
  EXPECT_EQ(a[0].dtype(), DType::kF64);
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < a[0].numel(); ++i) {
    s += a[0].get_double(i);
    s2 += a[0].get_double(i) * a[0].get_double(i);
  }
  const double mean = s / 20000.0, var = s2 / 20000.0 - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.05);
  auto h = OpTester("RandomNormal", 1).attr("shape", std::vector<int64_t>{3}).attr("dtype", 10).run();
  EXPECT_EQ(h[0].dtype(), DType::kF16);
  EXPECT_FALSE(OpTester("RandomNormal", 1).attr("shape", std::vector<int64_t>{3}).attr("dtype", 7).run_status().is_ok());
  EXPECT_FALSE(OpTester("RandomNormal", 1).run_status().is_ok());
}

TEST(RandomLike, TypesAndShapes) {
  auto u = OpTester("RandomUniformLike", 1).input(V_<double>({0, 0, 0, 0, 0, 0}, {2, 3})).run();
  EXPECT_EQ(u[0].dtype(), DType::kF64);
  EXPECT_EQ(u[0].dims(), (std::vector<int64_t>{2, 3}));
  auto n = OpTester("RandomNormalLike", 1).attr("dtype", 1).input(I64_({1, 2}, {2})).run();
  EXPECT_EQ(n[0].dtype(), DType::kF32);
  EXPECT_EQ(n[0].dims(), (std::vector<int64_t>{2}));
  EXPECT_FALSE(OpTester("RandomUniformLike", 1).input(I64_({1, 2}, {2})).run_status().is_ok());
}

TEST(Bernoulli, DeterministicProbabilities) {
  auto out = OpTester("Bernoulli", 15).input(T_({0, 1, 1, 0, 1}, {5})).run();
  expect_near(out[0], T_({0, 1, 1, 0, 1}, {5}));
  auto b = OpTester("Bernoulli", 15).attr("dtype", 9).input(V_<double>({1, 0}, {2})).run();
  EXPECT_EQ(b[0].dtype(), DType::kBool);
  EXPECT_EQ(b[0].to_int64_vector(), (std::vector<int64_t>{1, 0}));
  auto i = OpTester("Bernoulli", 15).attr("dtype", 7).input(T_({1, 0}, {2})).run();
  expect_near(i[0], I64_({1, 0}, {2}));
}

TEST(Bernoulli, SeededAndStatistics) {
  std::vector<float> p(4000, 0.25f);
  auto a = OpTester("Bernoulli", 15).attr("seed", 3.0f).input(T_(p, {4000})).run();
  auto b = OpTester("Bernoulli", 15).attr("seed", 3.0f).input(T_(p, {4000})).run();
  expect_near(a[0], b[0], 0, 0);
  double s = 0;
  for (int64_t i = 0; i < 4000; ++i) s += a[0].get_double(i);
  EXPECT_NEAR(s / 4000.0, 0.25, 0.03);
  EXPECT_FALSE(OpTester("Bernoulli", 15).input(T_({1.5f}, {1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("Bernoulli", 15).input(I64_({1}, {1})).run_status().is_ok());
}

TEST(Multinomial, SamplesOnlyPossibleClasses) {
  const float ninf = -std::numeric_limits<float>::infinity();
  auto out = OpTester("Multinomial", 7).attr("sample_size", 50).attr("dtype", 7).attr("seed", 5.0f)
                 .input(T_({ninf, 0.0f, ninf, 0.0f, 0.0f, ninf}, {2, 3})).run();
  ASSERT_EQ(out[0].dims(), (std::vector<int64_t>{2, 50}));
  EXPECT_EQ(out[0].dtype(), DType::kI64);
  int zeros = 0;
  for (int64_t s = 0; s < 50; ++s) {
    EXPECT_EQ(out[0].get_int64(s), 1);
    const int64_t v = out[0].get_int64(50 + s);
    EXPECT_TRUE(v == 0 || v == 1);
    zeros += v == 0;
  }
  EXPECT_GT(zeros, 10);
  EXPECT_LT(zeros, 40);
  auto i32 = OpTester("Multinomial", 7).input(T_({0.0f, 0.0f}, {1, 2})).run();
  EXPECT_EQ(i32[0].dtype(), DType::kI32);
  EXPECT_EQ(i32[0].dims(), (std::vector<int64_t>{1, 1}));
  EXPECT_FALSE(OpTester("Multinomial", 7).input(T_({ninf, ninf}, {1, 2})).run_status().is_ok());
  EXPECT_FALSE(OpTester("Multinomial", 7).attr("dtype", 1).input(T_({0.0f, 0.0f}, {1, 2})).run_status().is_ok());
}

// ---- ai.onnx.preview.training ----

const char* kTraining = "ai.onnx.preview.training";

TEST(Adagrad, MatchesTheFormula) {
  auto out = OpTester("Adagrad", 1, kTraining).attr("norm_coefficient", 0.001f).attr("epsilon", 1e-5f).attr("decay_factor", 0.1f)
                 .input(T_({0.1f}, {})).input(I64_({2}, {})).input(T_({1.0f}, {1})).input(T_({-1.0f}, {1})).input(T_({2.0f}, {1}))
                 .outputs(2).run();
  const double r = 0.1 / (1 + 2 * 0.1f), g = 0.001f * 1.0 - 1.0, h = 2.0 + g * g;
  expect_near(out[0], T_({static_cast<float>(1.0 - r * g / (std::sqrt(h) + 1e-5f))}, {1}));
  expect_near(out[1], T_({static_cast<float>(h)}, {1}));
}

TEST(Momentum, StandardNesterovAndMultiple) {
  auto std_ = OpTester("Momentum", 1, kTraining).attr("norm_coefficient", 0.001f).attr("alpha", 0.95f).attr("beta", 0.1f)
                  .attr("mode", "standard")
                  .input(T_({0.1f}, {})).input(I64_({1}, {})).input(T_({1.2f}, {1})).input(T_({-0.94f}, {1})).input(T_({1.7f}, {1}))
                  .outputs(2).run();
  const double g = 0.001f * 1.2f + -0.94f, v = 0.95f * 1.7f + 0.1f * g;
  expect_near(std_[0], T_({static_cast<float>(1.2f - 0.1f * v)}, {1}));
  expect_near(std_[1], T_({static_cast<float>(v)}, {1}));
  auto nes = OpTester("Momentum", 1, kTraining).attr("norm_coefficient", 0.001f).attr("alpha", 0.95f).attr("beta", 0.1f)
                 .attr("mode", "nesterov")
                 .input(T_({0.1f}, {})).input(I64_({0}, {})).input(T_({1.2f}, {1})).input(T_({-0.94f}, {1})).input(T_({1.7f}, {1}))
                 .outputs(2).run();
  const double v0 = 0.95f * 1.7f + g;  // beta is 1 at T = 0
  expect_near(nes[0], T_({static_cast<float>(1.2f - 0.1f * (g + 0.95f * v0))}, {1}));
  // Two tensors: outputs are X1_new, X2_new, V1_new, V2_new.
  auto two = OpTester("Momentum", 1, kTraining).attr("norm_coefficient", 0.0f).attr("alpha", 0.5f).attr("beta", 1.0f)
                 .attr("mode", "standard")
                 .input(T_({1.0f}, {})).input(I64_({0}, {}))
                 .input(T_({1.0f}, {1})).input(T_({1.0f, 2.0f}, {2})).input(T_({1.0f}, {1})).input(T_({2.0f, 2.0f}, {2}))
                 .input(T_({2.0f}, {1})).input(T_({0.0f, 4.0f}, {2}))
                 .outputs(4).run();
  expect_near(two[0], T_({-1.0f}, {1}));
  expect_near(two[1], T_({-1.0f, -2.0f}, {2}));
  expect_near(two[2], T_({2.0f}, {1}));
  expect_near(two[3], T_({2.0f, 4.0f}, {2}));
  EXPECT_FALSE(OpTester("Momentum", 1, kTraining).attr("alpha", 0.5f).attr("beta", 1.0f).attr("norm_coefficient", 0.0f)
                   .input(T_({1.0f}, {})).input(I64_({0}, {})).input(T_({1.0f}, {1})).input(T_({1.0f}, {1})).input(T_({1.0f}, {1}))
                   .outputs(2).run_status().is_ok());  // 'mode' is required
}

TEST(Adam, MatchesTheFormula) {
  for (int64_t t : {0, 3}) {
    auto out = OpTester("Adam", 1, kTraining).attr("norm_coefficient", 0.001f).attr("alpha", 0.95f).attr("beta", 0.1f)
                   .attr("epsilon", 1e-7f).attr("norm_coefficient_post", 0.01f)
                   .input(T_({0.1f}, {})).input(I64_({t}, {})).input(T_({1.2f}, {1})).input(T_({-0.94f}, {1}))
                   .input(T_({1.7f}, {1})).input(T_({0.1f}, {1}))
                   .outputs(3).run();
    const double a = 0.95f, b = 0.1f, g = 0.001f * 1.2f + -0.94f;
    const double v = a * 1.7f + (1 - a) * g, h = b * 0.1f + (1 - b) * g * g;
    const double r = t > 0 ? 0.1f * std::sqrt(1 - std::pow(b, t)) / (1 - std::pow(a, t)) : 0.1f;
    const double x = (1 - 0.01f) * (1.2f - r * v / (std::sqrt(h) + 1e-7f));
    expect_near(out[0], T_({static_cast<float>(x)}, {1}));
    expect_near(out[1], T_({static_cast<float>(v)}, {1}));
    expect_near(out[2], T_({static_cast<float>(h)}, {1}));
  }
  EXPECT_FALSE(OpTester("Adam", 1, kTraining)
                   .input(T_({0.1f}, {})).input(I64_({0}, {})).input(T_({1.2f}, {1})).input(T_({-0.94f}, {2}))
                   .input(T_({1.7f}, {1})).input(T_({0.1f}, {1})).outputs(3).run_status().is_ok());  // G's shape differs
}

}  // namespace
}  // namespace ferry::testing
