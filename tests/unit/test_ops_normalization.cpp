#include <cmath>
#include <limits>

#include "op_tester.h"

namespace ferry::testing {
namespace {

Tensor F16_(const std::vector<float>& v, std::vector<int64_t> dims) {
  Tensor t = Tensor::allocate(DType::kF16, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<uint16_t>()[i] = f32_to_f16(v[i]);
  return t;
}

bool message_has(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// ---- BatchNormalization ---------------------------------------------------------------------

// X [1, 2, 2]: channel 0 = [1, 2], channel 1 = [3, 4]; scale [1, 2], B [0, 1], mean [1.5, 3.5], var 0.25.
OpTester bn(int64_t opset) {
  OpTester t("BatchNormalization", opset);
  t.input(T_({1, 2, 3, 4}, {1, 2, 2}))
      .const_input(T_({1, 2}, {2}))
      .const_input(T_({0, 1}, {2}))
      .const_input(T_({1.5f, 3.5f}, {2}))
      .const_input(T_({0.25f, 0.25f}, {2}));
  return t;
}
const Tensor kBnExpected = T_({-0.9999800006f, 0.9999800006f, -0.9999600012f, 2.9999600012f}, {1, 2, 2});

TEST(BatchNormalization, InferenceAllOpsets) {
  for (int64_t opset : {7, 9, 14, 15}) {
    SCOPED_TRACE(opset);
    expect_near(bn(opset).run()[0], kBnExpected);
  }
}

TEST(BatchNormalization, Epsilon) {
  auto out = bn(15).attr("epsilon", 0.75f).run();
  // var + eps = 1: y = (x - mean) * scale + B.
  expect_near(out[0], T_({-0.5f, 0.5f, 0.0f, 2.0f}, {1, 2, 2}));
}

TEST(BatchNormalization, TrainingModeIsUnsupported) {
  auto r = bn(15).attr("training_mode", 1).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "training mode is not supported")) << r.status().message();
  EXPECT_TRUE(message_has(r.status(), "BatchNormalization_under_test")) << r.status().message();
}

TEST(BatchNormalization, ExtraOutputsPassRunningStatsThrough) {
  auto out = bn(15).outputs(3).run();
  ASSERT_EQ(out.size(), 3u);
  expect_near(out[0], kBnExpected);
  expect_near(out[1], T_({1.5f, 3.5f}, {2}));
  expect_near(out[2], T_({0.25f, 0.25f}, {2}));
}

TEST(BatchNormalization, Opset15MixedParamTypes) {
  // X f16 with f32 scale/B/mean/var.
  OpTester t("BatchNormalization", 15);
  t.input(F16_({1, 2, 3, 4}, {1, 2, 2}))
      .const_input(T_({1, 2}, {2}))
      .const_input(T_({0, 1}, {2}))
      .const_input(T_({1.5f, 3.5f}, {2}))
      .const_input(T_({0.25f, 0.25f}, {2}));
  auto out = t.run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  expect_near(out[0], F16_({-1, 1, -1, 3}, {1, 2, 2}), 2e-3);
}

TEST(BatchNormalization, Rank2Input) {
  OpTester t("BatchNormalization", 15);
  t.input(T_({1, 3, 2, 4}, {2, 2}))
      .const_input(T_({1, 2}, {2}))
      .const_input(T_({0, 1}, {2}))
      .const_input(T_({1.5f, 3.5f}, {2}))
      .const_input(T_({0.25f, 0.25f}, {2}));
  expect_near(t.run()[0], T_({-0.9999800006f, -0.9999600012f, 0.9999800006f, 2.9999600012f}, {2, 2}));
}

TEST(BatchNormalization, WrongParamLengthIsAnError) {
  OpTester t("BatchNormalization", 15);
  t.input(T_({1, 2, 3, 4}, {1, 2, 2}))
      .const_input(T_({1, 2, 3}, {3}))
      .const_input(T_({0, 1}, {2}))
      .const_input(T_({1.5f, 3.5f}, {2}))
      .const_input(T_({0.25f, 0.25f}, {2}));
  auto r = t.run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "scale")) << r.status().message();
}

// ---- LayerNormalization ---------------------------------------------------------------------

TEST(LayerNormalization, LastAxisWithBias) {
  auto out = OpTester("LayerNormalization", 17)
                 .input(T_({1, 2, 3, 4, 2, 4, 6, 8}, {2, 4}))
                 .input(T_({1, 1, 2, 2}, {4}))
                 .input(T_({0, 0, 0, 1}, {4}))
                 .run();
  expect_near(out[0], T_({-1.3416354200f, -0.4472118067f, 0.8944236133f, 3.6832708399f, -1.3416394449f,
                          -0.4472131483f, 0.8944262966f, 3.6832788897f},
                         {2, 4}));
}

TEST(LayerNormalization, NoBiasAxisAndStatsOutputs) {
  // axis = 1 on [1, 2, 3]: normalize over the last two dims (6 values).
  auto out = OpTester("LayerNormalization", 17)
                 .attr("axis", 1)
                 .input(T_({1, 2, 3, 4, 5, 6}, {1, 2, 3}))
                 .input(T_({1, 1, 1, 1, 1, 1}, {2, 3}))
                 .outputs(3)
                 .run();
  expect_near(out[0], T_({-1.4638476000f, -0.8783085600f, -0.2927695200f, 0.2927695200f, 0.8783085600f, 1.4638476000f},
                         {1, 2, 3}));
  ASSERT_EQ(out[1].dtype(), DType::kF32);
  expect_near(out[1], T_({3.5f}, {1, 1, 1}));
  expect_near(out[2], T_({0.5855390400f}, {1, 1, 1}));
}

TEST(LayerNormalization, StatsShapeAndNegativeAxis) {
  OpTester t("LayerNormalization", 17);
  t.attr("axis", -1).input(T_({1, 2, 3, 4, 2, 4, 6, 8}, {2, 1, 4})).input(T_({1, 1, 1, 1}, {4})).outputs(3);
  auto out = t.run();
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{2, 1, 1}));
  expect_near(out[1], T_({2.5f, 5.0f}, {2, 1, 1}));
  expect_near(out[2], T_({0.8944236133f, 0.4472131483f}, {2, 1, 1}));
  EXPECT_EQ(t.last_model()->graph.value_types["out1"].to_string(), "f32[2,1,1]");
}

TEST(LayerNormalization, StashTypeDouble) {
  auto out = OpTester("LayerNormalization", 17)
                 .attr("stash_type", 11)
                 .input(T_({1, 3}, {1, 2}))
                 .input(T_({1, 1}, {2}))
                 .outputs(2)
                 .run();
  EXPECT_EQ(out[1].dtype(), DType::kF64);
  EXPECT_EQ(out[1].get_double(0), 2.0);
}

TEST(LayerNormalization, Float16) {
  auto out = OpTester("LayerNormalization", 17).input(F16_({1, 3}, {1, 2})).input(F16_({1, 1}, {2})).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  expect_near(out[0], F16_({-1, 1}, {1, 2}), 1e-3);
}

TEST(LayerNormalization, Errors) {
  auto axis = OpTester("LayerNormalization", 17).attr("axis", 2).input(T_({1, 2}, {1, 2})).input(T_({1, 1}, {2})).run_status();
  ASSERT_FALSE(axis.is_ok());
  EXPECT_TRUE(message_has(axis.status(), "LayerNormalization_under_test")) << axis.status().message();
  auto shape = OpTester("LayerNormalization", 17).input(T_({1, 2}, {1, 2})).input(T_({1, 1, 1}, {3})).run_status();
  EXPECT_FALSE(shape.is_ok());
  auto before = OpTester("LayerNormalization", 16).input(T_({1, 2}, {1, 2})).input(T_({1, 1}, {2})).run_status();
  EXPECT_FALSE(before.is_ok());
}

// ---- InstanceNormalization / GroupNormalization ---------------------------------------------

TEST(InstanceNormalization, PerSampleChannel) {
  // X [1, 2, 2]: channel 0 = [1, 3], channel 1 = [2, 6]; scale [1, 2], B [0, 1].
  auto out = OpTester("InstanceNormalization", 6)
                 .input(T_({1, 3, 2, 6}, {1, 2, 2}))
                 .input(T_({1, 2}, {2}))
                 .input(T_({0, 1}, {2}))
                 .run();
  expect_near(out[0], T_({-0.9999950000f, 0.9999950000f, 1 - 2 * 0.9999987500f, 1 + 2 * 0.9999987500f}, {1, 2, 2}));
}

TEST(InstanceNormalization, WrongScaleIsAnError) {
  auto r = OpTester("InstanceNormalization", 6)
               .input(T_({1, 3, 2, 6}, {1, 2, 2}))
               .input(T_({1}, {1}))
               .input(T_({0, 1}, {2}))
               .run_status();
  EXPECT_FALSE(r.is_ok());
}

TEST(GroupNormalization, Opset18PerGroupAffine) {
  // X [1, 4, 1] = 1, 2, 3, 6; 2 groups: [1, 2] and [3, 6]; scale/bias per group.
  auto out = OpTester("GroupNormalization", 18)
                 .attr("num_groups", 2)
                 .input(T_({1, 2, 3, 6}, {1, 4, 1}))
                 .input(T_({1, 2}, {2}))
                 .input(T_({0, 10}, {2}))
                 .run();
  expect_near(out[0], T_({-0.9999800006f, 0.9999800006f, 10 - 2 * 0.9999977778f, 10 + 2 * 0.9999977778f}, {1, 4, 1}));
}

TEST(GroupNormalization, Opset21PerChannelAffine) {
  auto out = OpTester("GroupNormalization", 21)
                 .attr("num_groups", 2)
                 .input(T_({1, 2, 3, 6}, {1, 4, 1}))
                 .input(T_({1, 2, 3, 4}, {4}))
                 .input(T_({0, 1, 2, 3}, {4}))
                 .run();
  expect_near(out[0], T_({-0.9999800006f, 1 + 2 * 0.9999800006f, 2 - 3 * 0.9999977778f, 3 + 4 * 0.9999977778f}, {1, 4, 1}));
}

TEST(GroupNormalization, ParamShapeDependsOnOpset) {
  auto r18 = OpTester("GroupNormalization", 18)
                 .attr("num_groups", 2)
                 .input(T_({1, 2, 3, 6}, {1, 4, 1}))
                 .input(T_({1, 2, 3, 4}, {4}))
                 .input(T_({0, 1, 2, 3}, {4}))
                 .run_status();
  EXPECT_FALSE(r18.is_ok());
  auto indivisible = OpTester("GroupNormalization", 21)
                         .attr("num_groups", 3)
                         .input(T_({1, 2, 3, 6}, {1, 4, 1}))
                         .input(T_({1, 2, 3, 4}, {4}))
                         .input(T_({0, 1, 2, 3}, {4}))
                         .run_status();
  ASSERT_FALSE(indivisible.is_ok());
  EXPECT_TRUE(message_has(indivisible.status(), "num_groups")) << indivisible.status().message();
}

// ---- LpNormalization / MeanVarianceNormalization / LRN --------------------------------------

TEST(LpNormalization, L2AndL1) {
  auto l2 = OpTester("LpNormalization", 1).input(T_({3, 4, 0, 0}, {2, 2})).run();
  expect_near(l2[0], T_({0.6f, 0.8f, 0, 0}, {2, 2}));  // zero norm gives 0
  auto l1 = OpTester("LpNormalization", 1).attr("axis", 0).attr("p", 1).input(T_({1, -2, 3, 2}, {2, 2})).run();
  expect_near(l1[0], T_({0.25f, -0.5f, 0.75f, 0.5f}, {2, 2}));
}

TEST(LpNormalization, BadP) {
  auto r = OpTester("LpNormalization", 1).attr("p", 3).input(T_({1}, {1})).run_status();
  EXPECT_FALSE(r.is_ok());
}

TEST(MeanVarianceNormalization, DefaultAxes) {
  // X [2, 1, 1, 2]: default axes [0, 2, 3] -> one group of 4 values per channel.
  auto out = OpTester("MeanVarianceNormalization", 13).input(T_({1, 2, 3, 5}, {2, 1, 1, 2})).run();
  expect_near(out[0], T_({-1.1832159558f, -0.5070925525f, 0.1690308508f, 1.5212776575f}, {2, 1, 1, 2}));
}

TEST(MeanVarianceNormalization, CustomAxes) {
  auto out = OpTester("MeanVarianceNormalization", 9).attr("axes", std::vector<int64_t>{-1}).input(T_({1, 3, 5, 5}, {2, 2})).run();
  expect_near(out[0], T_({-1, 1, 0, 0}, {2, 2}), 1e-6);
}

TEST(LRN, Values) {
  auto out = OpTester("LRN", 13).attr("size", 3).attr("alpha", 1.0f).attr("beta", 1.0f).attr("bias", 1.0f)
                 .input(T_({1, 2, 3}, {1, 3, 1})).run();
  expect_near(out[0], T_({0.375f, 0.3529411765f, 0.5625f}, {1, 3, 1}));
  // Even size: the window is [c - floor((size-1)/2), c + ceil((size-1)/2)] = [c, c+1].
  auto even = OpTester("LRN", 13).attr("size", 2).attr("alpha", 1.0f).input(T_({1, 2, 3}, {1, 3, 1})).run();
  expect_near(even[0], T_({0.3907949714f, 0.4413001226f, 0.8353129946f}, {1, 3, 1}));
}

TEST(LRN, SizeRequired) {
  auto r = OpTester("LRN", 13).input(T_({1, 2, 3}, {1, 3, 1})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "size")) << r.status().message();
}

}  // namespace
}  // namespace ferry::testing
