// vec_math.h's branch-free e^x (src/backends/cpu/vec_math.h): its accuracy and range ends, and the cpu
// backend's vectorized loops over it (FERRY_VEC clones: AVX-512, AVX2, baseline) giving the scalar
// function's bits, so a clone that vectorizes (or fails to) cannot change an output.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu/vec_math.h"
#include "pass_test_util.h"

namespace ferry::testing {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

TEST(CpuVecMath, ExpAccuracyAndRangeEnds) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447505531f;
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = kLo + (kHi - kLo) * static_cast<float>(i) / 200000.f;
    const double want = std::exp(static_cast<double>(x));
    if (want < 1.2e-38) continue;  // the subnormal range: relative error not meaningful
    worst = std::max(worst, std::fabs(static_cast<double>(vec::exp(x)) - want) / want);
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(vec::exp(0.f), 1.f);
  EXPECT_EQ(bits(vec::exp(std::nextafter(kLo, -INFINITY))), 0u);  // +0 below the range
  EXPECT_EQ(vec::exp(-1e30f), 0.f);
  EXPECT_EQ(vec::exp(-INFINITY), 0.f);
  EXPECT_EQ(vec::exp(std::nextafter(kHi, INFINITY)), INFINITY);
  EXPECT_EQ(vec::exp(1e30f), INFINITY);
  EXPECT_EQ(vec::exp(INFINITY), INFINITY);
  EXPECT_TRUE(std::isfinite(vec::exp(kHi)));
  EXPECT_GT(vec::exp(kLo), 0.f);
  EXPECT_TRUE(std::isnan(vec::exp(std::numeric_limits<float>::quiet_NaN())));
}

// The cpu backend's Sigmoid and Exp kernels (elementwise.cpp, loops compiled per ISA) against the
// scalar vec:: functions, bit for bit, on values across and beyond both ends of e^x's range.
TEST(CpuVecMath, VectorizedKernelsMatchScalarBits) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-100.f, 100.f);
  const int64_t n = 4099;  // not a multiple of any vector width: the tails run too
  Tensor x = Tensor::allocate(DType::kF32, {n});
  float* xp = x.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) xp[i] = d(rng);
  const float specials[] = {0.f, -0.f, 88.3762626647949f, -87.3365447505531f, 88.38f, -87.34f, 1e30f, -1e30f,
                            INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(), 1e-30f};
  for (size_t i = 0; i < std::size(specials); ++i) xp[i * 7] = specials[i];
  for (const char* op : {"Sigmoid", "Exp"}) {
    SCOPED_TRACE(op);
    ModelBuilder b(13);
    b.output(b.node(op, {b.input("x", {n})}));
    const NamedTensors out = run_model(b.build(), {{"x", x}}, "cpu");
    ASSERT_EQ(out.size(), 1u);
    const float* y = out[0].second.data<float>();
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = std::string(op) == "Sigmoid" ? vec::sigmoid(xp[i]) : vec::exp(xp[i]);
      differ += bits(y[i]) != bits(want) && !(std::isnan(y[i]) && std::isnan(want));
    }
    EXPECT_EQ(differ, 0);
  }
}

}  // namespace
}  // namespace ferry::testing
