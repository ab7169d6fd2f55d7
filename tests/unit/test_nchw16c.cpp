// backends/cpu/nchw16c.h: NCHW <-> nChw16c (f32, and bf16 on the blocked side) against a plain
// index loop, with a spatial size that is not a multiple of 16 (the masked tail) and f32 values
// that round both ways, ties to even, infinities and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cpu/nchw16c.h"
#include "ir/dtype.h"

namespace ferry::cpu {
namespace {

TEST(Nchw16c, BothDirectionsF32AndBf16MatchTheIndexLoop) {
  if (!nchw16c_supported(16)) GTEST_SKIP() << "no AVX-512 here";
  EXPECT_FALSE(nchw16c_supported(24));
  for (const auto& [n, c, hw] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{2, 32, 49}, {1, 16, 3}, {3, 48, 64}}) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(hw));
    const int64_t total = n * c * hw;
    std::vector<float> x(total);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 3.f);
    for (auto& v : x) v = nd(rng);
    x[1] = std::numeric_limits<float>::infinity();
    x[2] = std::numeric_limits<float>::quiet_NaN();
    uint32_t tie = 0x3f808000u;  // exactly between two bf16 values: rounds to the even one
    std::memcpy(&x[3], &tie, 4);
    auto blocked_at = [&](int64_t i, int64_t ch, int64_t p) { return ((i * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16; };
    std::vector<float> bf(total), back(total + 1, -1.f);
    std::vector<uint16_t> bh(total + 2);  // 2 bytes to spare: the bf16 gathers read 32 bits
    nchw_to_nchw16c(x.data(), bf.data(), false, n, c, hw);
    nchw_to_nchw16c(x.data(), bh.data(), true, n, c, hw);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p) {
          const float v = x[(i * c + ch) * hw + p];
          const int64_t b = blocked_at(i, ch, p);
          bad += std::memcmp(&bf[b], &v, 4) != 0;
          bad += bh[b] != f32_to_bf16(v);
        }
    EXPECT_EQ(bad, 0);
    nchw16c_to_nchw(bf.data(), false, back.data(), n, c, hw);
    EXPECT_EQ(std::memcmp(back.data(), x.data(), total * 4), 0);
    EXPECT_EQ(back[total], -1.f);  // nothing written past the end
    nchw16c_to_nchw(bh.data(), true, back.data(), n, c, hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p) {
          const float got = back[(i * c + ch) * hw + p], want = bf16_to_f32(bh[blocked_at(i, ch, p)]);
          bad += std::memcmp(&got, &want, 4) != 0;
        }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(back[total], -1.f);
  }
}

}  // namespace
}  // namespace ferry::cpu
