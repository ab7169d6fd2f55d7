#include "op_tester.h"

namespace ferry::testing {
namespace {

TEST(Add, BroadcastsAcrossRanks) {
  auto out = OpTester("Add").input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).input(T_({10, 20, 30}, {3})).run();
  expect_near(out[0], T_({11, 22, 33, 14, 25, 36}, {2, 3}));
}

TEST(Add, BroadcastsBothWays) {
  auto out = OpTester("Add").input(T_({1, 2}, {2, 1})).input(T_({10, 20, 30}, {1, 3})).run();
  expect_near(out[0], T_({11, 21, 31, 12, 22, 32}, {2, 3}));
}

TEST(Add, ZeroSizeDim) {
  auto out = OpTester("Add").input(T_({}, {0, 3})).input(T_({1, 2, 3}, {3})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 3}));
}

TEST(Add, IncompatibleShapesNameTheNode) {
  auto r = OpTester("Add").input(T_({1, 2}, {2})).input(T_({1, 2, 3}, {3})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("Add_under_test"), std::string::npos) << r.status().message();
}

TEST(Add, SymbolicBroadcast) {
  OpTester t("Add");
  t.input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).input(T_({1, 2, 3}, {3})).symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3)}));
  t.run();
  const TensorType& ty = t.last_model()->graph.value_types["out0"];
  ASSERT_TRUE(ty.shape.has_value());
  EXPECT_EQ(ty.shape->to_string(), "[n,3]");
}

TEST(Div, IntegerDivisionByZeroIsAnError) {
  auto r = OpTester("Div").input(I64_({1, 2}, {2})).input(I64_({1, 0}, {2})).run_status();
  EXPECT_FALSE(r.is_ok());
}

TEST(Pow, MixedExponentType) {
  auto out = OpTester("Pow").input(T_({2, 3}, {2})).input(I64_({3, 2}, {2})).run();
  expect_near(out[0], T_({8, 9}, {2}));
}

TEST(Mod, SignFollowsDivisor) {
  auto out = OpTester("Mod").input(I64_({-7, 7, -7, 7}, {4})).input(I64_({3, -3, -3, 3}, {4})).run();
  expect_near(out[0], I64_({2, -2, -1, 1}, {4}));
  auto f = OpTester("Mod").attr("fmod", 1).input(T_({-7, 7}, {2})).input(T_({3, -3}, {2})).run();
  expect_near(f[0], T_({-1, 1}, {2}));
}

TEST(Equal, ProducesBool) {
  auto out = OpTester("Equal").input(I64_({1, 2, 3}, {3})).input(I64_({2}, {1})).run();
  EXPECT_EQ(out[0].dtype(), DType::kBool);
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{0, 1, 0}));
}

TEST(Where, BroadcastsThreeWays) {
  Tensor c = Tensor::from_vector<bool>({true, false}, {2, 1});
  auto out = OpTester("Where").input(c).input(T_({1, 2, 3}, {3})).input(T_({-1}, {1})).run();
  expect_near(out[0], T_({1, 2, 3, -1, -1, -1}, {2, 3}));
}

TEST(Erf, MatchesKnownValues) {
  auto out = OpTester("Erf").input(T_({0.0f, 0.5f, -1.0f, 3.0f}, {4})).run();
  expect_near(out[0], T_({0.0f, 0.5204998778f, -0.8427007929f, 0.9999779095f}, {4}), 1e-6);
}

TEST(Sqrt, Float16ComputedAndRounded) {
  Tensor x = Tensor::allocate(DType::kF16, {2});
  x.mutable_data<uint16_t>()[0] = f32_to_f16(4.0f);
  x.mutable_data<uint16_t>()[1] = f32_to_f16(2.0f);
  auto out = OpTester("Sqrt").input(x).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  EXPECT_EQ(out[0].get_double(0), 2.0);
  EXPECT_EQ(out[0].data<uint16_t>()[1], f32_to_f16(std::sqrt(2.0f)));
}

TEST(Sum, VariadicBroadcast) {
  auto out = OpTester("Sum").input(T_({1, 2}, {2})).input(T_({10}, {1})).input(T_({100, 200}, {2})).run();
  expect_near(out[0], T_({111, 212}, {2}));
  auto mean = OpTester("Mean").input(T_({1, 2}, {2})).input(T_({3, 4}, {2})).run();
  expect_near(mean[0], T_({2, 3}, {2}));
}

TEST(Max, PropagatesNaN) {
  auto out = OpTester("Max").input(T_({1, NAN}, {2})).input(T_({2, 0}, {2})).run();
  EXPECT_EQ(out[0].get_double(0), 2.0);
  EXPECT_TRUE(std::isnan(out[0].get_double(1)));
}

}  // namespace
}  // namespace ferry::testing
