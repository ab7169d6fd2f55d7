// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
// ConvInteger, QLinearConv.
#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

Tensor U8_(const vector<uint8_t>& v, vector<int64_t> dims) { return Tensor::from_vector<uint8_t>(v, std::move(dims)); }
Tensor I8_(const vector<int8_t>& v, vector<int64_t> dims) { return Tensor::from_vector<int8_t>(v, std::move(dims)); }
Tensor I32_(const vector<int32_t>& v, vector<int64_t> dims) { return Tensor::from_vector<int32_t>(v, std::move(dims)); }

vector<int64_t> ints(const Tensor& t) { return t.to_int64_vector(); }

TEST(QuantizeLinear, RoundsHalfToEvenAndSaturatesUint8) {
  auto out = OpTester("QuantizeLinear", 13)
                 .input(T_({0, 1, 2.5f, 3.5f, -1, 300, 1000, -300}, {8}))
                 .input(Tensor::scalar<float>(2.0f))
                 .input(Tensor::scalar<uint8_t>(128))
                 .run();
  ASSERT_EQ(out[0].dtype(), DType::kU8);
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{128, 128, 129, 130, 128, 255, 255, 0}));
}

TEST(QuantizeLinear, Int8ZeroPointAndDefaultUint8) {
  auto out = OpTester("QuantizeLinear", 10)
                 .input(T_({-1000, -3, 0.4f, 1000}, {4}))
                 .input(Tensor::scalar<float>(1.0f))
                 .input(Tensor::scalar<int8_t>(-1))
                 .run();
  ASSERT_EQ(out[0].dtype(), DType::kI8);
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{-128, -4, -1, 127}));
  auto u = OpTester("QuantizeLinear", 13).input(T_({-1, 1.6f, 7}, {3})).input(Tensor::scalar<float>(0.5f)).run();
  ASSERT_EQ(u[0].dtype(), DType::kU8);
  EXPECT_EQ(ints(u[0]), (vector<int64_t>{0, 3, 14}));
}

TEST(QuantizeLinear, PerAxis) {
  // x [2, 3], per-axis along axis 1 (the default).
  auto out = OpTester("QuantizeLinear", 13)
                 .input(T_({1, 2, 3, 4, 5, 6}, {2, 3}))
                 .input(T_({1, 2, 4}, {3}))
                 .input(U8_({0, 10, 20}, {3}))
                 .run();
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{1, 11, 21, 4, 12, 22}));  // 0.75 -> 1, 1.5 -> 2 (half to even)
  auto ax0 = OpTester("QuantizeLinear", 13).attr("axis", 0)
                 .input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).input(T_({1, 2}, {2})).input(U8_({0, 100}, {2})).run();
  EXPECT_EQ(ints(ax0[0]), (vector<int64_t>{1, 2, 3, 102, 102, 103}));  // 2.5 -> 2
  auto neg = OpTester("QuantizeLinear", 13).attr("axis", -1)
                 .input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).input(T_({1, 2, 4}, {3})).run();
  EXPECT_EQ(ints(neg[0]), (vector<int64_t>{1, 1, 1, 4, 2, 2}));
}

TEST(QuantizeLinear, Int32Input) {
  auto out = OpTester("QuantizeLinear", 13).input(I32_({-10, 7, 500}, {3})).input(Tensor::scalar<float>(2.0f))
                 .input(Tensor::scalar<int8_t>(0)).run();
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{-5, 4, 127}));
}

TEST(QuantizeLinear, BlockedOpset21) {
  // x [1, 4] with block_size 2 along axis 1: scale [1, 2].
  auto out = OpTester("QuantizeLinear", 21).attr("axis", 1).attr("block_size", 2)
                 .input(T_({2, 4, 6, 8}, {1, 4})).input(T_({2, 4}, {1, 2})).input(U8_({0, 1}, {1, 2})).run();
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{1, 2, 3, 3}));  // 6/4 = 1.5 -> 2, +1
}

TEST(QuantizeLinear, Errors) {
  // Before opset 13 the scale must be a scalar.
  EXPECT_FALSE(OpTester("QuantizeLinear", 10).input(T_({1, 2, 3}, {1, 3})).input(T_({1, 1, 1}, {3})).run_status().is_ok());
  // Per-axis scale size mismatch.
  EXPECT_FALSE(OpTester("QuantizeLinear", 13).input(T_({1, 2, 3}, {1, 3})).input(T_({1, 1}, {2})).run_status().is_ok());
  // Axis out of range.
  EXPECT_FALSE(OpTester("QuantizeLinear", 13).attr("axis", 2).input(T_({1, 2, 3}, {1, 3})).input(T_({1, 1, 1}, {3}))
                   .run_status().is_ok());
  // Zero point shape differs from the scale's.
  EXPECT_FALSE(OpTester("QuantizeLinear", 13).input(T_({1, 2, 3}, {1, 3})).input(T_({1, 1, 1}, {3}))
                   .input(U8_({0, 0}, {2})).run_status().is_ok());
  // Zero point of an unsupported type.
  EXPECT_FALSE(OpTester("QuantizeLinear", 13).input(T_({1}, {1})).input(Tensor::scalar<float>(1))
                   .input(Tensor::scalar<int32_t>(0)).run_status().is_ok());
  // Integer scale.
  EXPECT_FALSE(OpTester("QuantizeLinear", 13).input(T_({1}, {1})).input(Tensor::scalar<int32_t>(1)).run_status().is_ok());
}

TEST(DequantizeLinear, PerTensorAndPerAxis) {
  auto out = OpTester("DequantizeLinear", 10).input(U8_({0, 3, 128, 255}, {4})).input(Tensor::scalar<float>(2.0f))
                 .input(Tensor::scalar<uint8_t>(128)).run();
  expect_near(out[0], T_({-256, -250, 0, 254}, {4}));
  auto s8 = OpTester("DequantizeLinear", 13).input(I8_({-128, -1, 127}, {3})).input(Tensor::scalar<float>(0.5f)).run();
  expect_near(s8[0], T_({-64, -0.5f, 63.5f}, {3}));
  auto i32 = OpTester("DequantizeLinear", 13).input(I32_({-7, 100000}, {2})).input(Tensor::scalar<float>(0.25f)).run();
  expect_near(i32[0], T_({-1.75f, 25000}, {2}));
  auto ax = OpTester("DequantizeLinear", 13).input(U8_({1, 2, 3, 4, 5, 6}, {1, 3, 2})).input(T_({1, 2, 4}, {3}))
                .input(U8_({0, 1, 2}, {3})).run();
  expect_near(ax[0], T_({1, 2, 4, 6, 12, 16}, {1, 3, 2}));
}

TEST(DequantizeLinear, Opset19HalfScaleGivesHalfOutput) {
  Tensor s = Tensor::allocate(DType::kF16, {});
  s.mutable_data<uint16_t>()[0] = f32_to_f16(0.5f);
  auto out = OpTester("DequantizeLinear", 19).input(U8_({4, 10}, {2})).input(s).input(Tensor::scalar<uint8_t>(2)).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  EXPECT_EQ(out[0].get_double(0), 1.0);
  EXPECT_EQ(out[0].get_double(1), 4.0);
}

TEST(DequantizeLinear, Errors) {
  EXPECT_FALSE(OpTester("DequantizeLinear", 13).input(U8_({1}, {1})).input(Tensor::scalar<float>(1))
                   .input(Tensor::scalar<int8_t>(0)).run_status().is_ok());
  EXPECT_FALSE(OpTester("DequantizeLinear", 13).input(T_({1}, {1})).input(Tensor::scalar<float>(1)).run_status().is_ok());
}

TEST(DynamicQuantizeLinear, ComputesScaleZeroPointAndValues) {
  auto out = OpTester("DynamicQuantizeLinear", 11).input(T_({0, 2, -3, 1.34f, 0.1f}, {5})).outputs(3).run();
  const float scale = 5.0f / 255.0f;
  expect_near(out[1], Tensor::scalar<float>(scale));
  EXPECT_EQ(out[2].dtype(), DType::kU8);
  EXPECT_EQ(out[2].get_int64(0), 153);
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{153, 255, 0, 221, 158}));
}

TEST(DynamicQuantizeLinear, PositiveOnlyAndAllZero) {
  auto out = OpTester("DynamicQuantizeLinear", 11).input(T_({1, 2.55f}, {2})).outputs(3).run();
  EXPECT_EQ(out[2].get_int64(0), 0);  // the range includes 0
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{100, 255}));
  auto z = OpTester("DynamicQuantizeLinear", 11).input(T_({0, 0}, {2})).outputs(3).run();
  EXPECT_EQ(ints(z[0]), (vector<int64_t>{0, 0}));
  EXPECT_EQ(z[1].get_double(0), 0.0);
}

TEST(MatMulInteger, ZeroPointsScalarPerRowPerColumn) {
  // A [2, 2] uint8, B [2, 2] uint8.
  Tensor a = U8_({2, 4, 6, 8}, {2, 2}), b = U8_({1, 2, 3, 4}, {2, 2});
  auto plain = OpTester("MatMulInteger", 10).input(a).input(b).run();
  ASSERT_EQ(plain[0].dtype(), DType::kI32);
  EXPECT_EQ(ints(plain[0]), (vector<int64_t>{14, 20, 30, 44}));
  auto scalar = OpTester("MatMulInteger", 10).input(a).input(b).input(Tensor::scalar<uint8_t>(2)).run();
  EXPECT_EQ(ints(scalar[0]), (vector<int64_t>{6, 8, 22, 32}));  // A' = [[0,2],[4,6]]
  auto rows = OpTester("MatMulInteger", 10).input(a).input(b).input(U8_({2, 6}, {2})).input(U8_({1, 2}, {2})).run();
  // A' = [[0,2],[0,2]], B' = [[0,0],[2,2]]
  EXPECT_EQ(ints(rows[0]), (vector<int64_t>{4, 4, 4, 4}));
}

TEST(MatMulInteger, Int8BatchedBroadcast) {
  Tensor a = I8_({1, -1, 2, 0, -3, 1}, {3, 1, 2});  // 3 batches of [1, 2]
  Tensor b = I8_({1, 2, 3, 4}, {2, 2});
  auto out = OpTester("MatMulInteger", 10).input(a).input(b).run();
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{3, 1, 2}));
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{-2, -2, 2, 4, 0, -2}));
}

TEST(QLinearMatMul, HandComputed) {
  // a' = [1, 3], b' = [[1], [2]]: acc = 7; multiplier 0.5 * 2 / 1 = 1; + y_zp 10 = 17.
  auto out = OpTester("QLinearMatMul", 10)
                 .input(U8_({2, 4}, {1, 2})).input(Tensor::scalar<float>(0.5f)).input(Tensor::scalar<uint8_t>(1))
                 .input(U8_({1, 2}, {2, 1})).input(Tensor::scalar<float>(2.0f)).input(Tensor::scalar<uint8_t>(0))
                 .input(Tensor::scalar<float>(1.0f)).input(Tensor::scalar<uint8_t>(10))
                 .run();
  ASSERT_EQ(out[0].dtype(), DType::kU8);
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{17}));
}

TEST(QLinearMatMul, PerColumnScaleAndSaturation) {
  // a' = [[1, 1]], b' = [[1, 100], [1, 100]]: acc = [2, 200]; b_scale per column [1, 2]; y int8.
  auto out = OpTester("QLinearMatMul", 10)
                 .input(I8_({1, 1}, {1, 2})).input(Tensor::scalar<float>(1.0f)).input(Tensor::scalar<int8_t>(0))
                 .input(I8_({1, 100, 1, 100}, {2, 2})).input(T_({1, 2}, {2})).input(I8_({0, 0}, {2}))
                 .input(Tensor::scalar<float>(1.0f)).input(Tensor::scalar<int8_t>(-5))
                 .run();
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{-3, 127}));
}

TEST(ConvInteger, WithAndWithoutPadding) {
  Tensor x = U8_({2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 1, 3, 3});
  Tensor w = U8_({1, 1, 1, 1}, {1, 1, 2, 2});
  auto out = OpTester("ConvInteger", 10).input(x).input(w).input(Tensor::scalar<uint8_t>(1)).run();
  ASSERT_EQ(out[0].dtype(), DType::kI32);
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{12, 16, 24, 28}));
  auto pad = OpTester("ConvInteger", 10).attr("pads", vector<int64_t>{1, 1, 1, 1}).input(x).input(w)
                 .input(Tensor::scalar<uint8_t>(1)).run();
  EXPECT_EQ(ints(pad[0]), (vector<int64_t>{1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9}));
}

TEST(ConvInteger, GroupsStridesAndPerChannelWeightZeroPoint) {
  // 2 groups, 1x1 kernels, stride 2 over a 1-D signal.
  Tensor x = U8_({1, 2, 3, 4, 10, 20, 30, 40}, {1, 2, 4});
  Tensor w = I8_({3, -2}, {2, 1, 1});
  auto out = OpTester("ConvInteger", 10).attr("group", 2).attr("strides", vector<int64_t>{2}).input(x).input(w)
                 .no_input().input(I8_({1, 0}, {2})).run();
  // channel 0: (x - 0) * (3 - 1) at positions 0, 2; channel 1: x * -2.
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{2, 6, -20, -60}));
}

TEST(QLinearConv, PerChannelScaleAndBias) {
  auto out = OpTester("QLinearConv", 10)
                 .input(U8_({10, 20, 30, 40}, {1, 1, 2, 2})).input(Tensor::scalar<float>(0.5f)).input(Tensor::scalar<uint8_t>(10))
                 .input(I8_({3, -2}, {2, 1, 1, 1})).input(T_({1, 2}, {2})).input(I8_({1, 0}, {2}))
                 .input(Tensor::scalar<float>(2.0f)).input(Tensor::scalar<uint8_t>(100))
                 .input(I32_({4, -6}, {2}))
                 .run();
  ASSERT_EQ(out[0].dtype(), DType::kU8);
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(ints(out[0]), (vector<int64_t>{101, 106, 111, 116, 97, 87, 77, 67}));
}

TEST(QLinearConv, Errors) {
  // Per-channel w_scale of the wrong size.
  EXPECT_FALSE(OpTester("QLinearConv", 10)
                   .input(U8_({10, 20, 30, 40}, {1, 1, 2, 2})).input(Tensor::scalar<float>(0.5f)).input(Tensor::scalar<uint8_t>(10))
                   .input(I8_({3, -2}, {2, 1, 1, 1})).input(T_({1, 2, 3}, {3})).input(Tensor::scalar<int8_t>(0))
                   .input(Tensor::scalar<float>(2.0f)).input(Tensor::scalar<uint8_t>(100))
                   .run_status().is_ok());
  // Float x.
  EXPECT_FALSE(OpTester("ConvInteger", 10).input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).input(U8_({1}, {1, 1, 1, 1}))
                   .run_status().is_ok());
  // Channel mismatch.
  EXPECT_FALSE(OpTester("ConvInteger", 10).input(U8_({1, 2, 3, 4}, {1, 1, 2, 2})).input(U8_({1, 1}, {1, 2, 1, 1}))
                   .run_status().is_ok());
}

}  // namespace
}  // namespace ferry::testing
