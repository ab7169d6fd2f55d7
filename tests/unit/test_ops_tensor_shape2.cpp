// Tests for the tensor_shape family (part 2): Cast, CastLike, Range, Pad, Trilu, CumSum, EyeLike.
#include "op_tester.h"

namespace ferry::testing {
namespace {

using V = std::vector<int64_t>;

// ---- Cast -----------------------------------------------------------------------------------

TEST(Cast, FloatToIntTruncatesAndWraps) {
  auto out = OpTester("Cast", 13).attr("to", int64_t(7)).input(T_({1.9f, -1.9f, 0.0f, 1e10f}, {4})).run();
  EXPECT_EQ(out[0].to_int64_vector(), (V{1, -1, 0, 10000000000}));
  auto u8 = OpTester("Cast", 13).attr("to", int64_t(2)).input(T_({300.0f, 255.0f}, {2})).run();
  EXPECT_EQ(u8[0].to_int64_vector(), (V{44, 255}));
  auto nan = OpTester("Cast", 13).attr("to", int64_t(6)).input(T_({NAN}, {1})).run();
  EXPECT_EQ(nan[0].get_int64(0), 0);
}

TEST(Cast, BoolBothWays) {
  auto b = OpTester("Cast", 13).attr("to", int64_t(9)).input(T_({0.0f, -0.0f, 0.5f, NAN}, {4})).run();
  ASSERT_EQ(b[0].dtype(), DType::kBool);
  EXPECT_EQ(b[0].to_int64_vector(), (V{0, 0, 1, 1}));
  auto f = OpTester("Cast", 13).attr("to", int64_t(1)).input(Tensor::from_vector<bool>({true, false}, {2})).run();
  expect_near(f[0], T_({1, 0}, {2}));
}

TEST(Cast, HalfAndBFloat16) {
  auto h = OpTester("Cast", 13).attr("to", int64_t(10)).input(T_({1.0f, 0.1f, 65504.0f, 1e6f}, {4})).run();
  ASSERT_EQ(h[0].dtype(), DType::kF16);
  EXPECT_EQ(h[0].data<uint16_t>()[0], 0x3C00);
  EXPECT_EQ(h[0].data<uint16_t>()[1], f32_to_f16(0.1f));
  EXPECT_EQ(h[0].get_double(2), 65504.0);
  EXPECT_TRUE(std::isinf(h[0].get_double(3)));
  auto back = OpTester("Cast", 13).attr("to", int64_t(1)).input(h[0]).run();
  EXPECT_NEAR(back[0].get_double(1), 0.1, 1e-4);
  auto bf = OpTester("Cast", 13).attr("to", int64_t(16)).input(T_({1.0f, 3.14159f}, {2})).run();
  ASSERT_EQ(bf[0].dtype(), DType::kBF16);
  EXPECT_EQ(bf[0].data<uint16_t>()[0], 0x3F80);
  EXPECT_EQ(bf[0].get_double(1), 3.140625);
  auto i = OpTester("Cast", 13).attr("to", int64_t(7)).input(bf[0]).run();
  EXPECT_EQ(i[0].get_int64(1), 3);
}

TEST(Cast, IntegersKeepFullPrecision) {
  const int64_t big = (int64_t(1) << 62) + 1;
  auto u = OpTester("Cast", 13).attr("to", int64_t(13)).input(I64_({big, -1}, {2})).run();
  EXPECT_EQ(u[0].data<uint64_t>()[0], static_cast<uint64_t>(big));
  EXPECT_EQ(u[0].data<uint64_t>()[1], ~uint64_t(0));
  auto i32 = OpTester("Cast", 13).attr("to", int64_t(6)).input(I64_({(int64_t(1) << 32) + 5}, {1})).run();
  EXPECT_EQ(i32[0].get_int64(0), 5);
}

TEST(Cast, StringNumberRoundTrip) {
  Tensor s = Tensor::from_vector<std::string>({"3.5", "-1e2", "INF", "-inf", "NaN", "+INF"}, {6});
  auto f = OpTester("Cast", 13).attr("to", int64_t(1)).input(s).run();
  EXPECT_EQ(f[0].get_double(0), 3.5);
  EXPECT_EQ(f[0].get_double(1), -100.0);
  EXPECT_TRUE(std::isinf(f[0].get_double(2)) && f[0].get_double(2) > 0);
  EXPECT_TRUE(std::isinf(f[0].get_double(3)) && f[0].get_double(3) < 0);
  EXPECT_TRUE(std::isnan(f[0].get_double(4)));
  EXPECT_TRUE(std::isinf(f[0].get_double(5)));
  auto i = OpTester("Cast", 13).attr("to", int64_t(7)).input(Tensor::from_vector<std::string>({"9007199254740993", "100.5"}, {2})).run();
  EXPECT_EQ(i[0].to_int64_vector(), (V{9007199254740993, 100}));
  auto str = OpTester("Cast", 13).attr("to", int64_t(8)).input(T_({0.1f, 100.0f, -2.5f, INFINITY, NAN}, {5})).run();
  EXPECT_EQ(str[0].strings(), (std::vector<std::string>{"0.1", "100", "-2.5", "INF", "NaN"}));
  auto istr = OpTester("Cast", 13).attr("to", int64_t(8)).input(I64_({-7, 123456789012345}, {2})).run();
  EXPECT_EQ(istr[0].strings(), (std::vector<std::string>{"-7", "123456789012345"}));
  expect_error(OpTester("Cast", 13).attr("to", int64_t(1)).input(Tensor::from_vector<std::string>({"hello"}, {1})).run_status(),
               {"Cast_under_test", "'hello'"});
}

TEST(Cast, UnsupportedTargetAndShape) {
  expect_error(OpTester("Cast", 19).attr("to", int64_t(17)).input(T_({1}, {1})).run_status(), {"17"});
  OpTester t("Cast", 13);
  t.attr("to", int64_t(11)).input(iota_f({2, 3})).symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3)}));
  auto out = t.run();
  EXPECT_EQ(out[0].dtype(), DType::kF64);
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].to_string(), "f64[n,3]");
}

TEST(CastLike, UsesTheSecondInputsType) {
  auto out = OpTester("CastLike", 15).input(T_({1.5f, 2.5f}, {2})).input(I64_({0}, {1})).run();
  EXPECT_EQ(out[0].dtype(), DType::kI64);
  EXPECT_EQ(out[0].to_int64_vector(), (V{1, 2}));
}

// ---- Range ----------------------------------------------------------------------------------

TEST(Range, IntegerAndFloat) {
  OpTester t("Range", 11);
  t.const_input(I64_({1}, {})).const_input(I64_({10}, {})).const_input(I64_({3}, {}));
  auto a = t.run();
  EXPECT_EQ(a[0].to_int64_vector(), (V{1, 4, 7}));
  EXPECT_EQ(inferred(t), "[3]");
  auto b = OpTester("Range", 11).input(I64_({10}, {})).input(I64_({1}, {})).input(I64_({-4}, {})).run();
  EXPECT_EQ(b[0].to_int64_vector(), (V{10, 6, 2}));
  auto c = OpTester("Range", 11).input(Tensor::scalar<float>(0)).input(Tensor::scalar<float>(1)).input(Tensor::scalar<float>(0.25f)).run();
  expect_near(c[0], T_({0, 0.25f, 0.5f, 0.75f}, {4}));
  auto e = OpTester("Range", 11).input(I64_({5}, {})).input(I64_({1}, {})).input(I64_({1}, {})).run();
  EXPECT_EQ(e[0].dims(), (V{0}));
  expect_error(OpTester("Range", 11).input(I64_({0}, {})).input(I64_({5}, {})).input(I64_({0}, {})).run_status(),
               {"Range_under_test", "delta is 0"});
  OpTester rt("Range", 11);
  rt.input(I64_({0}, {})).input(I64_({5}, {})).input(I64_({1}, {}));
  rt.run();
  EXPECT_EQ(inferred(rt), "[?]");
}

// ---- Pad ------------------------------------------------------------------------------------

TEST(Pad, ConstantWithInputsAndStaticShape) {
  OpTester t("Pad", 13);
  t.input(T_({1, 2, 3, 4}, {2, 2})).const_input(I64_({0, 1, 1, 0}, {4})).const_input(Tensor::scalar<float>(9));
  auto out = t.run();
  expect_near(out[0], T_({9, 1, 2, 9, 3, 4, 9, 9, 9}, {3, 3}));
  EXPECT_EQ(inferred(t), "[3,3]");
}

TEST(Pad, Opset2Attributes) {
  auto out = OpTester("Pad", 2).attr("pads", V{1, 0, 0, 0}).attr("value", 5.0f).input(T_({1, 2}, {1, 2})).run();
  expect_near(out[0], T_({5, 5, 1, 2}, {2, 2}));
}

TEST(Pad, ReflectEdgeWrap) {
  Tensor x = T_({1, 2, 3}, {3});
  auto r = OpTester("Pad", 13).attr("mode", "reflect").input(x).const_input(I64_({2, 2}, {2})).run();
  expect_near(r[0], T_({3, 2, 1, 2, 3, 2, 1}, {7}));
  auto e = OpTester("Pad", 13).attr("mode", "edge").input(x).const_input(I64_({2, 1}, {2})).run();
  expect_near(e[0], T_({1, 1, 1, 2, 3, 3}, {6}));
  auto w = OpTester("Pad", 19).attr("mode", "wrap").input(x).const_input(I64_({2, 4}, {2})).run();
  expect_near(w[0], T_({2, 3, 1, 2, 3, 1, 2, 3, 1}, {9}));
  expect_error(OpTester("Pad", 18).attr("mode", "wrap").input(x).const_input(I64_({1, 1}, {2})).run_status(), {"wrap"});
}

TEST(Pad, NegativePadsCrop) {
  auto out = OpTester("Pad", 13).input(T_({1, 2, 3, 4}, {4})).const_input(I64_({-1, 1}, {2})).run();
  expect_near(out[0], T_({2, 3, 4, 0}, {4}));
  auto e = OpTester("Pad", 13).attr("mode", "edge").input(T_({1, 2, 3, 4}, {4})).input(I64_({1, -2}, {2})).run();
  expect_near(e[0], T_({1, 1, 2}, {3}));
  expect_error(OpTester("Pad", 13).input(T_({1, 2}, {2})).input(I64_({-2, -1}, {2})).run_status(),
               {"Pad_under_test", "below zero"});
}

TEST(Pad, AxesInputFrom18) {
  OpTester t("Pad", 18);
  t.input(iota_f({2, 2})).const_input(I64_({1, 1}, {2})).no_input().const_input(I64_({-1}, {1}));
  auto out = t.run();
  expect_near(out[0], T_({0, 0, 1, 0, 0, 2, 3, 0}, {2, 4}));
  EXPECT_EQ(inferred(t), "[2,4]");
}

TEST(Pad, RuntimePadsGiveRank) {
  OpTester t("Pad", 13);
  t.input(iota_f({2, 2})).input(I64_({0, 0, 1, 1}, {4}));
  EXPECT_EQ(t.run()[0].dims(), (V{3, 3}));
  EXPECT_EQ(inferred(t), "[?,?]");
  expect_error(OpTester("Pad", 13).input(iota_f({2, 2})).input(I64_({1, 1}, {2})).run_status(), {"4 entries"});
}

// ---- Trilu / CumSum / EyeLike ---------------------------------------------------------------

TEST(Trilu, UpperLowerWithK) {
  Tensor x = T_({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  expect_near(OpTester("Trilu", 14).input(x).run()[0], T_({1, 2, 3, 0, 5, 6, 0, 0, 9}, {3, 3}));
  expect_near(OpTester("Trilu", 14).attr("upper", 0).input(x).run()[0], T_({1, 0, 0, 4, 5, 0, 7, 8, 9}, {3, 3}));
  expect_near(OpTester("Trilu", 14).input(x).input(I64_({1}, {})).run()[0], T_({0, 2, 3, 0, 0, 6, 0, 0, 0}, {3, 3}));
  expect_near(OpTester("Trilu", 14).attr("upper", 0).input(x).input(I64_({-1}, {})).run()[0],
              T_({0, 0, 0, 4, 0, 0, 7, 8, 0}, {3, 3}));
  auto batched = OpTester("Trilu", 14).input(iota_f({2, 2, 3})).run();
  expect_near(batched[0], T_({0, 1, 2, 0, 4, 5, 6, 7, 8, 0, 10, 11}, {2, 2, 3}));
}

TEST(CumSum, ExclusiveReverseAxis) {
  Tensor x = T_({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_near(OpTester("CumSum", 14).input(x).input(I64_({1}, {})).run()[0], T_({1, 3, 6, 4, 9, 15}, {2, 3}));
  expect_near(OpTester("CumSum", 14).input(x).input(I64_({0}, {})).run()[0], T_({1, 2, 3, 5, 7, 9}, {2, 3}));
  expect_near(OpTester("CumSum", 14).attr("exclusive", 1).input(x).input(I64_({-1}, {})).run()[0],
              T_({0, 1, 3, 0, 4, 9}, {2, 3}));
  expect_near(OpTester("CumSum", 14).attr("reverse", 1).input(x).input(I64_({1}, {})).run()[0],
              T_({6, 5, 3, 15, 11, 6}, {2, 3}));
  expect_near(OpTester("CumSum", 14).attr("reverse", 1).attr("exclusive", 1).input(x).input(I64_({1}, {})).run()[0],
              T_({5, 3, 0, 11, 6, 0}, {2, 3}));
  auto i = OpTester("CumSum", 14).input(I64_({1, 2, 3}, {3})).input(Tensor::scalar<int32_t>(0)).run();
  EXPECT_EQ(i[0].to_int64_vector(), (V{1, 3, 6}));
  expect_error(OpTester("CumSum", 14).input(x).input(I64_({2}, {})).run_status(), {"CumSum_under_test", "axis 2"});
}

TEST(EyeLike, DtypeAndK) {
  auto a = OpTester("EyeLike").input(iota_f({2, 3})).run();
  expect_near(a[0], T_({1, 0, 0, 0, 1, 0}, {2, 3}));
  auto b = OpTester("EyeLike").attr("k", int64_t(1)).attr("dtype", int64_t(7)).input(iota_f({3, 3})).run();
  EXPECT_EQ(b[0].dtype(), DType::kI64);
  EXPECT_EQ(b[0].to_int64_vector(), (V{0, 1, 0, 0, 0, 1, 0, 0, 0}));
  auto c = OpTester("EyeLike").attr("k", int64_t(-1)).input(iota_f({2, 2})).run();
  expect_near(c[0], T_({0, 0, 1, 0}, {2, 2}));
  expect_error(OpTester("EyeLike").input(iota_f({2})).run_status(), {"2-D"});
}

}  // namespace
}  // namespace ferry::testing
