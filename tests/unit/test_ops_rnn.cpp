// RNN / GRU / LSTM. Expected values of the multi-feature cases come from an independent numpy
// reference (per batch row, per time step, straight from the ONNX equations).
#include <cmath>

#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

// ((i * k + off) mod 2) - 1 for i in [0, n): deterministic test data in [-1, 1).
Tensor lin(vector<int64_t> dims, double k, double off = 0.0, double scale = 1.0) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((std::fmod(i * k + off, 2.0) - 1.0) * scale);
  return T_(v, std::move(dims));
}

float sigm(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(RNN, SingleStepDefaultsIsTanhOfAffine) {
  // X [1, 1, 2], W [1, 2, 2], R [1, 2, 2], B [1, 4]
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 2)
                 .input(T_({1, 2}, {1, 1, 2}))
                 .input(T_({0.1f, 0.2f, 0.3f, -0.4f}, {1, 2, 2}))
                 .input(T_({1, 1, 1, 1}, {1, 2, 2}))
                 .input(T_({0.01f, 0.02f, 0.03f, 0.04f}, {1, 4}))
                 .outputs(2)
                 .run();
  const float h0 = std::tanh(0.1f + 0.4f + 0.01f + 0.03f), h1 = std::tanh(0.3f - 0.8f + 0.02f + 0.04f);
  expect_near(out[0], T_({h0, h1}, {1, 1, 1, 2}));
  expect_near(out[1], T_({h0, h1}, {1, 1, 2}));
}

TEST(RNN, TwoStepsUseRecurrence) {
  // H=1, I=1: h1 = tanh(w*x1 + r*h0), h2 = tanh(w*x2 + r*h1)
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 1)
                 .input(T_({0.5f, -1.0f}, {2, 1, 1}))
                 .input(T_({2.0f}, {1, 1, 1}))
                 .input(T_({0.5f}, {1, 1, 1}))
                 .no_input()
                 .no_input()
                 .input(T_({0.25f}, {1, 1, 1}))
                 .outputs(2)
                 .run();
  const float h1 = std::tanh(1.0f + 0.125f), h2 = std::tanh(-2.0f + 0.5f * h1);
  expect_near(out[0], T_({h1, h2}, {2, 1, 1, 1}));
  expect_near(out[1], T_({h2}, {1, 1, 1}));
}

TEST(RNN, ReverseWithSequenceLensZeroesPaddingAndKeepsFirstStepInYh) {
  // Batch row 0 has length 1, row 1 length 2. Reverse: row 1 visits t=1 then t=0.
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 1)
                 .attr("direction", "reverse")
                 .input(T_({1.0f, 0.5f, 9.0f, -1.0f}, {2, 2, 1}))
                 .input(T_({1.0f}, {1, 1, 1}))
                 .input(T_({0.5f}, {1, 1, 1}))
                 .no_input()
                 .input(Tensor::from_vector<int32_t>({1, 2}, {2}))
                 .outputs(2)
                 .run();
  const float r0 = std::tanh(1.0f);
  const float r1_t1 = std::tanh(-1.0f), r1_t0 = std::tanh(0.5f + 0.5f * r1_t1);
  expect_near(out[0], T_({r0, r1_t0, 0.0f, r1_t1}, {2, 1, 2, 1}));
  expect_near(out[1], T_({r0, r1_t0}, {1, 2, 1}));
}

TEST(RNN, ZeroLengthRowGivesZeros) {
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 1)
                 .input(T_({1.0f, 2.0f}, {1, 2, 1}))
                 .input(T_({1.0f}, {1, 1, 1}))
                 .input(T_({1.0f}, {1, 1, 1}))
                 .no_input()
                 .input(Tensor::from_vector<int32_t>({0, 1}, {2}))
                 .input(T_({0.7f, 0.7f}, {1, 2, 1}))
                 .outputs(2)
                 .run();
  expect_near(out[0], T_({0.0f, std::tanh(2.0f + 0.7f)}, {1, 1, 2, 1}));
  expect_near(out[1], T_({0.0f, std::tanh(2.0f + 0.7f)}, {1, 2, 1}));
}

TEST(RNN, ActivationsWithAlphaBeta) {
  // LeakyRelu(alpha=0.5) in forward, Affine(alpha=2, beta=1)... one per direction.
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 1)
                 .attr("direction", "bidirectional")
                 .attr("activations", vector<std::string>{"LeakyRelu", "affine"})
                 .attr("activation_alpha", vector<float>{0.5f, 2.0f})
                 .attr("activation_beta", vector<float>{1.0f})
                 .input(T_({-2.0f}, {1, 1, 1}))
                 .input(T_({1.0f, 1.0f}, {2, 1, 1}))
                 .input(T_({0.0f, 0.0f}, {2, 1, 1}))
                 .outputs(2)
                 .run();
  expect_near(out[1], T_({-1.0f, -3.0f}, {2, 1, 1}));
}

TEST(RNN, DefaultAlphaOfHardSigmoidAndSingleListForBothDirections) {
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 1)
                 .attr("direction", "bidirectional")
                 .attr("activations", vector<std::string>{"HardSigmoid"})
                 .input(T_({1.0f}, {1, 1, 1}))
                 .input(T_({1.0f, 2.0f}, {2, 1, 1}))
                 .input(T_({0.0f, 0.0f}, {2, 1, 1}))
                 .outputs(2)
                 .run();
  expect_near(out[1], T_({0.2f * 1 + 0.5f, 0.2f * 2 + 0.5f}, {2, 1, 1}));
}

TEST(RNN, ClipBoundsPreActivation) {
  auto out = OpTester("RNN", 14)
                 .attr("hidden_size", 1)
                 .attr("clip", 0.5f)
                 .attr("activations", vector<std::string>{"Relu"})
                 .input(T_({3.0f, -3.0f}, {1, 2, 1}))
                 .input(T_({1.0f}, {1, 1, 1}))
                 .input(T_({0.0f}, {1, 1, 1}))
                 .outputs(2)
                 .run();
  expect_near(out[1], T_({0.5f, 0.0f}, {1, 2, 1}));
}

TEST(RNN, LayoutOneIsBatchFirst) {
  const Tensor X = lin({3, 2, 2}, 0.37), W = lin({2, 3, 2}, 0.29, 0.1), R = lin({2, 3, 3}, 0.23, 0.3);
  const Tensor B = lin({2, 6}, 0.31, 0.5), h0 = lin({2, 2, 3}, 0.17, 0.4);
  auto a = OpTester("RNN", 14).attr("hidden_size", 3).attr("direction", "bidirectional")
               .input(X).input(W).input(R).input(B).no_input().input(h0).outputs(2).run();
  // Batch-first copies: X [S,B,I] -> [B,S,I], h0 [D,B,H] -> [B,D,H].
  vector<float> xb(12), hb(12);
  for (int s = 0; s < 3; ++s)
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 2; ++i) xb[(b * 3 + s) * 2 + i] = X.data<float>()[(s * 2 + b) * 2 + i];
  for (int d = 0; d < 2; ++d)
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 3; ++h) hb[(b * 2 + d) * 3 + h] = h0.data<float>()[(d * 2 + b) * 3 + h];
  auto c = OpTester("RNN", 14).attr("hidden_size", 3).attr("direction", "bidirectional").attr("layout", 1)
               .input(T_(xb, {2, 3, 2})).input(W).input(R).input(B).no_input().input(T_(hb, {2, 2, 3})).outputs(2).run();
  ASSERT_EQ(c[0].dims(), (vector<int64_t>{2, 3, 2, 3}));
  ASSERT_EQ(c[1].dims(), (vector<int64_t>{2, 2, 3}));
  for (int s = 0; s < 3; ++s)
    for (int d = 0; d < 2; ++d)
      for (int b = 0; b < 2; ++b)
        for (int h = 0; h < 3; ++h)
          EXPECT_FLOAT_EQ(c[0].data<float>()[((b * 3 + s) * 2 + d) * 3 + h], a[0].data<float>()[((s * 2 + d) * 2 + b) * 3 + h]);
  for (int d = 0; d < 2; ++d)
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 3; ++h)
        EXPECT_FLOAT_EQ(c[1].data<float>()[(b * 2 + d) * 3 + h], a[1].data<float>()[(d * 2 + b) * 3 + h]);
}

TEST(LSTM, BidirectionalPeepholesSequenceLensInitialStateClip) {
  const int64_t S = 3, B = 2, I = 2, H = 2, D = 2;
  auto out = OpTester("LSTM", 14)
                 .attr("hidden_size", H)
                 .attr("direction", "bidirectional")
                 .attr("clip", 0.9f)
                 .input(lin({S, B, I}, 0.37))
                 .input(lin({D, 4 * H, I}, 0.29, 0.1))
                 .input(lin({D, 4 * H, H}, 0.23, 0.3))
                 .input(lin({D, 8 * H}, 0.31, 0.5, 0.5))
                 .input(Tensor::from_vector<int32_t>({3, 2}, {2}))
                 .input(lin({D, B, H}, 0.17, 0.4))
                 .input(lin({D, B, H}, 0.13, 0.7))
                 .input(lin({D, 3 * H}, 0.41, 0.2))
                 .outputs(3)
                 .run();
  expect_near(out[0], T_({-0.2210747f, 0.08777231f, -0.1491974f, -0.02126624f, 0.1445766f, 0.02176678f, 0.1787655f,
                          0.07569242f, -0.0004417085f, -0.1327571f, -0.2762664f, 0.1970815f, 0.002945683f, 0.03324165f,
                          0.1815428f, 0.185101f, -0.04377851f, -0.1419161f, 0.0f, 0.0f, 0.1001495f, 0.1018509f, 0.0f, 0.0f},
                         {S, D, B, H}),
              2e-5);
  expect_near(out[1], T_({-0.04377851f, -0.1419161f, -0.2762664f, 0.1970815f, 0.1445766f, 0.02176678f, 0.1787655f,
                          0.07569242f},
                         {D, B, H}),
              2e-5);
  expect_near(out[2], T_({-0.07126504f, -0.2758999f, -0.6762445f, 0.3422368f, 0.5133984f, 0.03714365f, 0.6056921f,
                          0.1489973f},
                         {D, B, H}),
              2e-5);
}

TEST(LSTM, InputForgetCouplesGates) {
  auto out = OpTester("LSTM", 14)
                 .attr("hidden_size", 2)
                 .attr("input_forget", 1)
                 .input(lin({3, 2, 2}, 0.37))
                 .input(lin({1, 8, 2}, 0.29, 0.1))
                 .input(lin({1, 8, 2}, 0.23, 0.3))
                 .input(lin({1, 16}, 0.31, 0.5, 0.5))
                 .run();
  expect_near(out[0], T_({-0.2565236f, 0.263075f, -0.1176889f, 0.02121725f, -0.2582353f, -0.05863059f, -0.269007f,
                          0.2115336f, -0.1654636f, -0.132064f, -0.2909134f, 0.1148642f},
                         {3, 1, 2, 2}),
              2e-5);
}

TEST(LSTM, SingleStepByHand) {
  // H=1, I=1, all weights 1, no bias: gates i=o=f=sigmoid(x), c~=tanh(x), c = i*c~, h = o*tanh(c).
  auto out = OpTester("LSTM", 14)
                 .attr("hidden_size", 1)
                 .input(T_({0.5f}, {1, 1, 1}))
                 .input(T_({1, 1, 1, 1}, {1, 4, 1}))
                 .input(T_({1, 1, 1, 1}, {1, 4, 1}))
                 .outputs(3)
                 .run();
  const float s = sigm(0.5f), c = s * std::tanh(0.5f), h = s * std::tanh(c);
  expect_near(out[1], T_({h}, {1, 1, 1}));
  expect_near(out[2], T_({c}, {1, 1, 1}));
}

TEST(LSTM, Float64AndFloat16) {
  Tensor x = Tensor::from_vector<double>({0.5}, {1, 1, 1});
  Tensor w = Tensor::from_vector<double>({1, 1, 1, 1}, {1, 4, 1});
  auto out = OpTester("LSTM", 14).attr("hidden_size", 1).input(x).input(w).input(w).outputs(2).run();
  const double s = 1 / (1 + std::exp(-0.5)), c = s * std::tanh(0.5), h = s * std::tanh(c);
  ASSERT_EQ(out[1].dtype(), DType::kF64);
  EXPECT_NEAR(out[1].get_double(0), h, 1e-12);
  Tensor xh = Tensor::allocate(DType::kF16, {1, 1, 1});
  xh.mutable_data<uint16_t>()[0] = f32_to_f16(0.5f);
  Tensor wh = Tensor::allocate(DType::kF16, {1, 4, 1});
  for (int i = 0; i < 4; ++i) wh.mutable_data<uint16_t>()[i] = f32_to_f16(1.0f);
  auto o16 = OpTester("LSTM", 14).attr("hidden_size", 1).input(xh).input(wh).input(wh).outputs(2).run();
  ASSERT_EQ(o16[1].dtype(), DType::kF16);
  EXPECT_NEAR(o16[1].get_double(0), h, 1e-3);
}

TEST(GRU, ReverseWithSequenceLensBothResetModes) {
  const vector<float> y0 = {0.8032037f, -0.1334345f, 0.8249996f, -0.1836276f, 0.5984148f, 0.1360118f,
                            0.8318418f, -0.2258781f, 0.0f, 0.0f, 0.6419496f, -0.2016346f};
  const vector<float> y1 = {0.7203539f, -0.3733773f, 0.7506382f, -0.4436112f, 0.4873761f, -0.1074488f,
                            0.7547083f, -0.4247811f, 0.0f, 0.0f, 0.5391354f, -0.2595144f};
  for (int lbr : {0, 1}) {
    auto out = OpTester("GRU", 14)
                   .attr("hidden_size", 2)
                   .attr("direction", "reverse")
                   .attr("linear_before_reset", lbr)
                   .input(lin({3, 2, 2}, 0.37))
                   .input(lin({1, 6, 2}, 0.29, 0.1))
                   .input(lin({1, 6, 2}, 0.23, 0.3))
                   .input(lin({1, 12}, 0.31, 0.5))
                   .input(Tensor::from_vector<int32_t>({2, 3}, {2}))
                   .outputs(2)
                   .run();
    const vector<float>& y = lbr ? y1 : y0;
    expect_near(out[0], T_(y, {3, 1, 2, 2}), 2e-5);
    expect_near(out[1], T_(vector<float>(y.begin(), y.begin() + 4), {1, 2, 2}), 2e-5);
  }
}

TEST(GRU, OpsetSevenRuns) {
  auto out = OpTester("GRU", 7).attr("hidden_size", 1).input(T_({1.0f}, {1, 1, 1})).input(T_({0, 0, 1}, {1, 3, 1}))
                 .input(T_({0, 0, 0}, {1, 3, 1})).outputs(2).run();
  // z = sigmoid(0) = 0.5, h~ = tanh(1): h = 0.5 * tanh(1)
  expect_near(out[1], T_({0.5f * std::tanh(1.0f)}, {1, 1, 1}));
}

TEST(RNN, SymbolicShapes) {
  OpTester t("LSTM", 14);
  t.attr("hidden_size", 2).attr("direction", "bidirectional")
      .input(lin({3, 1, 2}, 0.3)).input(lin({2, 8, 2}, 0.2)).input(lin({2, 8, 2}, 0.1)).outputs(3)
      .symbolic_input_shape(0, Shape({Dim::symbolic("seq"), Dim::symbolic("batch"), Dim(2)}));
  t.run();
  const auto& vt = t.last_model()->graph.value_types;
  EXPECT_EQ(vt.at("out0").shape->to_string(), "[seq,2,batch,2]");
  EXPECT_EQ(vt.at("out1").shape->to_string(), "[2,batch,2]");
  EXPECT_EQ(vt.at("out2").shape->to_string(), "[2,batch,2]");
}

TEST(RNN, HiddenSizeFromRWhenAttributeMissing) {
  auto out = OpTester("RNN", 14).input(T_({1.0f}, {1, 1, 1})).input(T_({1.0f, 1.0f}, {1, 2, 1}))
                 .input(T_({0, 0, 0, 0}, {1, 2, 2})).outputs(2).run();
  EXPECT_EQ(out[1].dims(), (vector<int64_t>{1, 1, 2}));
}

TEST(RNN, Errors) {
  // Bad direction.
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).attr("direction", "sideways").input(T_({1}, {1, 1, 1}))
                   .input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1})).run_status().is_ok());
  // W's second dim does not match gates * hidden_size.
  auto r = OpTester("GRU", 14).attr("hidden_size", 2).input(T_({1}, {1, 1, 1})).input(T_({1, 1}, {1, 2, 1}))
               .input(T_({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 6, 2})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'W'"), std::string::npos) << r.status().message();
  // num_directions mismatch.
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).attr("direction", "bidirectional").input(T_({1}, {1, 1, 1}))
                   .input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1})).run_status().is_ok());
  // sequence_lens out of range (runtime value).
  auto s = OpTester("RNN", 14).attr("hidden_size", 1).input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1}))
               .input(T_({1}, {1, 1, 1})).no_input().input(Tensor::from_vector<int32_t>({5}, {1})).run_status();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("sequence_lens"), std::string::npos) << s.status().message();
  // Unknown activation / wrong count.
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).attr("activations", vector<std::string>{"Swish"})
                   .input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("LSTM", 14).attr("hidden_size", 1).attr("activations", vector<std::string>{"Tanh", "Tanh"})
                   .input(T_({1}, {1, 1, 1})).input(T_({1, 1, 1, 1}, {1, 4, 1})).input(T_({1, 1, 1, 1}, {1, 4, 1}))
                   .run_status().is_ok());
  // Integer X.
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).input(Tensor::from_vector<int32_t>({1}, {1, 1, 1}))
                   .input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1})).run_status().is_ok());
  // Bad layout, rank-2 X.
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).attr("layout", 2).input(T_({1}, {1, 1, 1}))
                   .input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).input(T_({1}, {1, 1})).input(T_({1}, {1, 1, 1}))
                   .input(T_({1}, {1, 1, 1})).run_status().is_ok());
  // initial_h with the wrong batch size.
  EXPECT_FALSE(OpTester("RNN", 14).attr("hidden_size", 1).input(T_({1}, {1, 1, 1})).input(T_({1}, {1, 1, 1}))
                   .input(T_({1}, {1, 1, 1})).no_input().no_input().input(T_({1, 1}, {1, 2, 1})).run_status().is_ok());
}

}  // namespace
}  // namespace ferry::testing
