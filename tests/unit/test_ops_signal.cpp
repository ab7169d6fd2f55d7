#include "op_tester.h"

namespace ferry::testing {
namespace {

Tensor I32_(const std::vector<int32_t>& v, std::vector<int64_t> dims) { return Tensor::from_vector<int32_t>(v, std::move(dims)); }

// ---- DFT ----

TEST(DFT, RealInputFullSpectrum) {
  auto out = OpTester("DFT", 17).input(T_({1, 2, 3, 4}, {1, 4, 1})).run();
  expect_near(out[0], T_({10, 0, -2, 2, -2, 0, -2, -2}, {1, 4, 2}));
}

TEST(DFT, OnesidedKeepsHalf) {
  auto out = OpTester("DFT", 17).attr("onesided", 1).input(T_({1, 2, 3, 4}, {1, 4, 1})).run();
  expect_near(out[0], T_({10, 0, -2, 2, -2, 0}, {1, 3, 2}));
}

TEST(DFT, InverseRoundTrips) {
  auto out = OpTester("DFT", 17).attr("inverse", 1).input(T_({10, 0, -2, 2, -2, 0, -2, -2}, {1, 4, 2})).run();
  expect_near(out[0], T_({1, 0, 2, 0, 3, 0, 4, 0}, {1, 4, 2}), 1e-5);
}

TEST(DFT, DftLengthPadsOrTruncates) {
  auto trunc = OpTester("DFT", 17).input(T_({1, 2, 3, 4}, {1, 4, 1})).const_input(I64_({2}, {})).run();
  expect_near(trunc[0], T_({3, 0, -1, 0}, {1, 2, 2}), 1e-5);
  auto pad = OpTester("DFT", 17).input(T_({1, 2, 3, 4}, {1, 4, 1})).input(I64_({6}, {})).run();
  ASSERT_EQ(pad[0].dims(), (std::vector<int64_t>{1, 6, 2}));
  EXPECT_NEAR(pad[0].get_double(0), 10.0, 1e-5);
  EXPECT_NEAR(pad[0].get_double(6), -2.0, 1e-5);  // k = 3: 1 - 2 + 3 - 4
  EXPECT_NEAR(pad[0].get_double(7), 0.0, 1e-5);
}

TEST(DFT, AxisAttributeAndOpset20AxisInput) {
  Tensor x = T_({1, 2, 3, 4, 5, 6}, {2, 3, 1});
  auto a17 = OpTester("DFT", 17).attr("axis", 0).input(x).run();
  expect_near(a17[0], T_({5, 0, 7, 0, 9, 0, -3, 0, -3, 0, -3, 0}, {2, 3, 2}));
  auto a20 = OpTester("DFT", 20).input(x).no_input().const_input(I64_({0}, {})).run();
  expect_near(a20[0], a17[0]);
  // Opset 20's default axis is -2: the last signal axis.
  auto d20 = OpTester("DFT", 20).input(x).run();
  auto along1 = OpTester("DFT", 17).attr("axis", 1).input(x).run();
  expect_near(d20[0], along1[0]);
}

TEST(DFT, BadInputsAreErrors) {
  EXPECT_FALSE(OpTester("DFT", 17).input(T_({1, 2, 3}, {1, 1, 3})).run_status().is_ok());
  EXPECT_FALSE(OpTester("DFT", 17).attr("axis", 2).input(T_({1, 2}, {1, 2, 1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("DFT", 17).input(T_({1, 2}, {1, 2, 1})).input(I64_({0}, {})).run_status().is_ok());
}

// ---- STFT ----

TEST(STFT, FramesWithFrameLength) {
  auto out = OpTester("STFT", 17)
                 .input(T_({0, 1, 2, 3, 4, 5, 6, 7}, {1, 8, 1})).const_input(I64_({2}, {})).no_input().const_input(I64_({4}, {}))
                 .run();
  expect_near(out[0], T_({6, 0, -2, 2, -2, 0, 14, 0, -2, 2, -2, 0, 22, 0, -2, 2, -2, 0}, {1, 3, 3, 2}), 1e-5);
}

TEST(STFT, WindowAndTwoSided) {
  auto out = OpTester("STFT", 17).attr("onesided", 0)
                 .input(T_({0, 1, 2, 3, 4, 5, 6, 7}, {1, 8, 1})).input(I64_({4}, {})).input(T_({0, 1, 1, 0}, {4})).run();
  ASSERT_EQ(out[0].dims(), (std::vector<int64_t>{1, 2, 4, 2}));
  // Frame 0 windowed: [0, 1, 2, 0].
  expect_near(out[0].reshaped({16}), T_({3, 0, -2, -1, 1, 0, -2, 1, 11, 0, -6, -5, 1, 0, -6, 5}, {16}), 1e-5);
}

TEST(STFT, BadInputsAreErrors) {
  Tensor sig = T_({0, 1, 2, 3, 4, 5, 6, 7}, {1, 8, 1});
  EXPECT_FALSE(OpTester("STFT", 17).input(sig).input(I64_({2}, {})).input(T_({1, 1, 1}, {3})).input(I64_({4}, {})).run_status().is_ok());
  EXPECT_FALSE(OpTester("STFT", 17).input(sig).input(I64_({0}, {})).no_input().input(I64_({4}, {})).run_status().is_ok());
  EXPECT_FALSE(OpTester("STFT", 17).input(sig).input(I64_({1}, {})).no_input().input(I64_({9}, {})).run_status().is_ok());
}

// ---- windows ----

TEST(Windows, HannPeriodicAndSymmetric) {
  auto p = OpTester("HannWindow", 17).input(I64_({4}, {})).run();
  expect_near(p[0], T_({0, 0.5f, 1, 0.5f}, {4}), 1e-6);
  auto s = OpTester("HannWindow", 17).attr("periodic", 0).input(I32_({5}, {})).run();
  expect_near(s[0], T_({0, 0.5f, 1, 0.5f, 0}, {5}), 1e-6);
}

TEST(Windows, HammingAndBlackman) {
  auto h = OpTester("HammingWindow", 17).input(I64_({2}, {})).run();
  expect_near(h[0], T_({4.0f / 46.0f, 1.0f}, {2}), 1e-6);
  auto b = OpTester("BlackmanWindow", 17).const_input(I64_({4}, {})).run();
  expect_near(b[0], T_({0, 0.34f, 1, 0.34f}, {4}), 1e-6);
}

TEST(Windows, OutputDatatypeAndEdgeSizes) {
  auto d = OpTester("HannWindow", 17).attr("output_datatype", 11).input(I64_({4}, {})).run();
  EXPECT_EQ(d[0].dtype(), DType::kF64);
  auto one = OpTester("HammingWindow", 17).attr("periodic", 0).input(I64_({1}, {})).run();
  expect_near(one[0], T_({1.0f}, {1}));
  auto zero = OpTester("BlackmanWindow", 17).input(I64_({0}, {})).run();
  EXPECT_EQ(zero[0].numel(), 0);
  EXPECT_FALSE(OpTester("HannWindow", 17).input(I64_({-1}, {})).run_status().is_ok());
  EXPECT_FALSE(OpTester("HannWindow", 17).attr("output_datatype", 8).input(I64_({3}, {})).run_status().is_ok());
}

// ---- MelWeightMatrix ----

TEST(MelWeightMatrix, MatchesTheOnnxExample) {
  auto out = OpTester("MelWeightMatrix", 17)
                 .input(I32_({8}, {})).input(I32_({16}, {})).input(I32_({8192}, {})).input(T_({0.0f}, {})).input(T_({4096.0f}, {}))
                 .run();
  std::vector<float> e(72, 0.0f);
  e[0 * 8 + 0] = e[0 * 8 + 1] = 1;
  e[1 * 8 + 2] = e[1 * 8 + 3] = 1;
  e[2 * 8 + 4] = e[3 * 8 + 5] = e[4 * 8 + 6] = e[5 * 8 + 7] = 1;
  expect_near(out[0], T_(e, {9, 8}));
}

TEST(MelWeightMatrix, ConstantInputsGiveAStaticShape) {
  OpTester t("MelWeightMatrix", 17);
  t.const_input(I64_({4}, {})).const_input(I64_({32}, {})).input(I64_({16000}, {})).input(T_({20.0f}, {})).input(T_({8000.0f}, {}));
  auto out = t.run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{17, 4}));
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[17,4]");
  EXPECT_FALSE(OpTester("MelWeightMatrix", 17)
                   .input(I64_({4}, {})).input(I64_({32}, {})).input(I64_({0}, {})).input(T_({0.0f}, {})).input(T_({10.0f}, {}))
                   .run_status().is_ok());
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

TEST(SignalShapes, SymbolicBatchAndRuntimeLength) {
  OpTester d("DFT", 17);
  d.attr("onesided", 1).input(T_(std::vector<float>(8, 1.0f), {2, 4, 1})).symbolic_input_shape(0, Shape({Dim::symbolic("b"), Dim(4), Dim(1)}));
  d.run();
  EXPECT_EQ(d.last_model()->graph.value_types["out0"].shape->to_string(), "[b,3,2]");
  OpTester rt("DFT", 17);
  rt.input(T_(std::vector<float>(8, 1.0f), {2, 4, 1})).input(I64_({5}, {}));
  auto out = rt.run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 5, 2}));
  EXPECT_EQ(rt.last_model()->graph.value_types["out0"].shape->to_string(), "[2,?,2]");
}

}  // namespace
}  // namespace ferry::testing
