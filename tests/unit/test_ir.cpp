#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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

// Tensor::try_copy_of (a request's input copied off the wire: serve/'s grpc raw_input_contents, HTTP binary
// data, an unaligned shared-memory slice): its bytes, 64-byte aligned, the padding after them zero as
// Tensor::create's although the buffer is not zero-filled first (a freed tensor's bytes are not left there).
TEST(Tensor, TryCopyOfIsAlignedAndPaddedWithZeros) {
  const std::vector<unsigned char> ones(64, 0xff);
  std::vector<Tensor> dirty;  // freed before the copies below: past malloc's per-thread cache, their memory is reused
  for (int i = 0; i < 256; ++i) dirty.push_back(Tensor::try_copy_of(DType::kU8, {64}, ones.data()).value());
  dirty.clear();
  const float x[5] = {1, 2, 3, 4, 5};
  std::vector<Tensor> copies;
  for (int i = 0; i < 64; ++i) {
    auto t = Tensor::try_copy_of(DType::kF32, {1, 5}, x);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_EQ(t.value().dims(), (std::vector<int64_t>{1, 5}));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.value().raw()) % 64, 0u);
    EXPECT_EQ(std::memcmp(t.value().raw(), x, sizeof(x)), 0);
    const unsigned char* pad = static_cast<const unsigned char*>(t.value().raw()) + sizeof(x);
    for (size_t b = 0; b < 64 - sizeof(x); ++b) ASSERT_EQ(pad[b], 0) << "copy " << i << ", padding byte " << b;
    copies.push_back(std::move(t.value()));
  }
  auto empty = Tensor::try_copy_of(DType::kF32, {0, 3}, nullptr);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(empty.value().numel(), 0);
  EXPECT_FALSE(Tensor::try_copy_of(DType::kString, {1}, x).is_ok());
}

}  // namespace
}  // namespace ferry
