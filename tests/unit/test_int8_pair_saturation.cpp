// SaturatingPairs (src/backends/cpu/int8_pair_saturation.h), the scan behind the unsplit-with-repair
// int8 convolutions on hosts without VNNI: the outputs it lists must be exactly those where some
// (tap, channel pair) product sum a0 * w0 + a1 * w1 leaves int16 (what vpmaddubsw saturates), against a
// brute force over every output, tap and pair; shapes with edges (C not a multiple of 32 or of the
// 128-byte step, odd spatial sizes, stride 2, padding, dilation, 1x1 and 3x3, batch 2), sources dense
// or sparse in large values, a source large enough for the threads to split, and the early stop where more than the limit are touched. Pure integer
// code: runs on every host.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/cpu/int8_pair_saturation.h"

namespace ferry {
namespace {

struct ScanCase {
  int64_t N = 1, H = 9, W = 7, C = 36, M = 5, K = 3, S = 1, P = 1, D = 1;
  double large = 0.05;  // share of source values drawn in [128, 255]
  uint32_t seed = 1;
};

// Every NHWC output offset with a saturating pair, sorted.
std::vector<int64_t> brute_force(const ScanCase& c, const std::vector<uint8_t>& x, const std::vector<int8_t>& w, int64_t OH,
                                 int64_t OW) {
  std::vector<int64_t> out;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t m = 0; m < c.M; ++m) {
          bool sat = false;
          for (int64_t kh = 0; kh < c.K && !sat; ++kh)
            for (int64_t kw = 0; kw < c.K && !sat; ++kw) {
              const int64_t ih = oh * c.S - c.P + kh * c.D, iw = ow * c.S - c.P + kw * c.D;
              if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
              const uint8_t* a = x.data() + ((n * c.H + ih) * c.W + iw) * c.C;
              for (int64_t j = 0; j < c.C / 2 && !sat; ++j) {
                const int w0 = w[((m * c.C + 2 * j) * c.K + kh) * c.K + kw], w1 = w[((m * c.C + 2 * j + 1) * c.K + kh) * c.K + kw];
                const int s = a[2 * j] * w0 + a[2 * j + 1] * w1;
                sat = s > 32767 || s < -32768;
              }
            }
          if (sat) out.push_back(((n * OH + oh) * OW + ow) * c.M + m);
        }
  return out;
}

void check(const ScanCase& c) {
  SCOPED_TRACE(::testing::Message() << "C " << c.C << " K " << c.K << " S " << c.S << " P " << c.P << " D " << c.D << " H " << c.H
                                    << " W " << c.W << " N " << c.N << " large " << c.large);
  std::mt19937 rng(c.seed);
  Tensor wt = Tensor::allocate(DType::kI8, {c.M, c.C, c.K, c.K});
  std::vector<int8_t> w(static_cast<size_t>(wt.numel()));
  std::uniform_int_distribution<int> wd(-128, 127), coin(0, 3);
  for (auto& v : w) v = static_cast<int8_t>(coin(rng) == 0 ? (coin(rng) < 2 ? 127 : -128) : wd(rng));
  std::copy(w.begin(), w.end(), wt.mutable_data<int8_t>());
  std::vector<uint8_t> x(static_cast<size_t>(c.N * c.H * c.W * c.C));
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> small(0, 127), big(128, 255);
  for (auto& v : x) v = static_cast<uint8_t>(u(rng) < c.large ? big(rng) : small(rng));
  const int64_t OH = (c.H + 2 * c.P - c.D * (c.K - 1) - 1) / c.S + 1, OW = (c.W + 2 * c.P - c.D * (c.K - 1) - 1) / c.S + 1;
  const std::vector<int64_t> want = brute_force(c, x, w, OH, OW);
  cpu::SaturatingPairs pairs;
  ASSERT_TRUE(pairs.init(wt));
  std::vector<int64_t> got;
  const int64_t all = c.N * OH * OW * c.M;
  ASSERT_TRUE(pairs.find({c.N, c.H, c.W, c.C}, {c.N, OH, OW, c.M}, {c.S, c.S}, {c.D, c.D}, {c.P, c.P}, x.data(), all, &got));
  EXPECT_EQ(got, want);
  EXPECT_FALSE(want.empty());  // the case exercises the listing
  if (want.size() > 2) {       // more touched than the limit: stopped (the caller then splits)
    got.clear();
    EXPECT_FALSE(pairs.find({c.N, c.H, c.W, c.C}, {c.N, OH, OW, c.M}, {c.S, c.S}, {c.D, c.D}, {c.P, c.P}, x.data(),
                            static_cast<int64_t>(want.size()) - 1, &got));
  }
}

TEST(Int8PairSaturation, ScanListsExactlyTheSaturatedOutputs) {
  ScanCase c;
  check(c);  // 3x3, pad 1, C 36: a pixel's pairs cross the 32- and 128-byte steps
  c.C = 64;
  c.large = 0.01;  // sparse, as a Relu's output
  c.H = 25;  // 33.6 KB: threads split the scan (cpu_parallel.h's threshold)
  c.W = 21;
  c.seed = 2;
  check(c);
  c = ScanCase{};
  c.K = 1;
  c.P = 0;
  c.C = 256;
  c.S = 2;  // a strided 1x1: the skipped pixels' pairs list nothing
  c.H = c.W = 11;
  c.seed = 3;
  check(c);
  c = ScanCase{};
  c.N = 2;
  c.C = 4;
  c.D = 2;
  c.P = 2;
  c.large = 0.5;  // dense
  c.seed = 4;
  check(c);
  c = ScanCase{};
  c.C = 130;  // a tail after the last 32-byte step (the tensor's byte count not a multiple of 32)
  c.H = 3;
  c.W = 5;
  c.S = 2;
  c.seed = 5;
  check(c);
}

}  // namespace
}  // namespace ferry
