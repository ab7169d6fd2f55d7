// `ferry quantize`'s weight range choice (src/quant/quantizer.h choose_reduce_range; docs/quantization.md
// "Reduce range") and the 7-bit weight scales (qdq_plan.h weight_scales). The written files:
// tests/quant/check_reduce_range.py.
#include <gtest/gtest.h>

#include "quant/qdq_plan.h"
#include "quant/quantizer.h"

namespace ferry::quant {
namespace {

TEST(ReduceRange, ChoiceRule) {
  // Told: as told, whatever was measured.
  EXPECT_TRUE(choose_reduce_range(ReduceRange::kOn, false, false, 0.5, 0.9));
  EXPECT_FALSE(choose_reduce_range(ReduceRange::kOff, true, true, 0.99, 0.9));
  // Automatic: 7-bit on a host whose pairs saturate, with the floor measured, at or above it.
  EXPECT_TRUE(choose_reduce_range(ReduceRange::kAuto, true, true, 0.97, 0.97));
  EXPECT_TRUE(choose_reduce_range(ReduceRange::kAuto, true, true, 0.98, 0.97));
  EXPECT_FALSE(choose_reduce_range(ReduceRange::kAuto, true, true, 0.96999, 0.97));
  EXPECT_FALSE(choose_reduce_range(ReduceRange::kAuto, false, true, 0.99, 0.97));  // VNNI: 8-bit is exact and fast
  EXPECT_FALSE(choose_reduce_range(ReduceRange::kAuto, true, false, 0.99, 0.97));  // --no-plain-floor: no bar
}

TEST(ReduceRange, WeightScales) {
  Tensor w = Tensor::from_vector<float>({1.0f, -3.2f, 0.5f, 0.0f, 0.0f, 0.0f}, {2, 3});
  const std::vector<float> s8 = weight_scales(w, 0), s7 = weight_scales(w, 0, kReducedWeightMax);
  ASSERT_EQ(s7.size(), 2u);
  EXPECT_FLOAT_EQ(s8[0], 3.2f / 127);
  EXPECT_FLOAT_EQ(s7[0], 3.2f / 64);
  EXPECT_EQ(s7[1], 1.0f);  // an all-zero channel
}

}  // namespace
}  // namespace ferry::quant
