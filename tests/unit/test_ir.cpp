#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace ferry {
namespace {

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = f16_to_f32(bits);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), bits) << "bits " << h;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);            // rounds up to inf
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(5.96046448e-08f), 0x0001);     // smallest subnormal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // tie -> even (up)
}

TEST(Shape, ElementCountRejectsOverflowAndNegative) {
  EXPECT_EQ(checked_element_count({2, 3, 4}, "t").value(), 24);
  EXPECT_EQ(checked_element_count({}, "t").value(), 1);
  EXPECT_EQ(checked_element_count({5, 0, int64_t(1) << 62}, "t").value(), 0);
  EXPECT_FALSE(checked_element_count({-1, 3}, "t").is_ok());
  EXPECT_FALSE(checked_element_count({int64_t(1) << 20, int64_t(1) << 20, int64_t(1) << 20}, "t").is_ok());
  EXPECT_FALSE(checked_element_count({int64_t(1) << 40}, "t").is_ok());
}

TEST(Shape, SymbolicToString) {
  Shape s({Dim::symbolic("batch"), Dim(3), Dim()});
  EXPECT_EQ(s.to_string(), "[batch,3,?]");
  EXPECT_FALSE(s.is_static());
}

TEST(Tensor, ReshapedSharesStorage) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.raw(), t.raw());
  EXPECT_EQ(r.dim(0), 3);
  Tensor c = t.clone();
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_EQ(c.data<float>()[5], 6.0f);
}

// Out of memory is a Status naming the bytes asked for (not an exception). Sanitizers abort on
// such a request instead of returning null, so the check runs in plain builds only.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(Tensor, TryAllocateReportsTheSizeWhenMemoryIsNotThere) {
  StatusOr<Tensor> t = Tensor::try_allocate(DType::kF32, {int64_t{1} << 42});
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find(std::to_string(int64_t{1} << 44) + " bytes"), std::string::npos)
      << t.status().message();
}
#endif

}  // namespace
}  // namespace ferry
