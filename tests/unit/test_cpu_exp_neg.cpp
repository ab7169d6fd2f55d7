// cpu::one_plus_exp_neg8 (AVX2 + FMA) and one_plus_exp_neg16 (AVX-512F), the 1 + e^-x behind the cpu
// convolution's SiLU and the LSTM's sigmoid (backends/cpu/exp_neg.h), bit for bit against a scalar
// model of their operations (FMA for FMA, the 2^n scaling correctly rounded once, as scalef): a
// sweep over [-160, 160], dense over [-30, 30], the clamp edge 104, where 2^n overflows (x near
// -88.7) and goes subnormal, +-0, denormals, +-inf and NaN. So the two ISAs' paths agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include "backends/cpu/exp_neg.h"

namespace ferry {
namespace {

std::vector<float> sweep() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.f,    -0.f,    1e-40f, -1e-40f, inf,     -inf,   std::numeric_limits<float>::quiet_NaN(),
                          -88.3f, -88.7f,  -88.8f, -89.f,   -103.f,  103.9f, 104.f,  104.1f,
                          -1e30f, 1e30f,   87.3f,  88.5f,   -150.f,  150.f,  -0.5f,  0.5f};
  for (float x = -160.f; x <= 160.f; x += 0.77f) v.push_back(x);
  for (float x = -30.f; x <= 30.f; x += 0.0137f) v.push_back(x);
  while (v.size() % 16) v.push_back(0.f);
  return v;
}

// one_plus_exp_neg16 / _8 in scalar float: the same roundings.
float model(float x) {
  if (std::isnan(x)) return x;
  const float xc = x < 104.f ? x : 104.f;
  const float n = std::nearbyint(xc * -1.44269504088896341f);
  float f = std::fma(-xc, 1.4426950216293335f, -n);
  f = std::fma(-xc, 1.925963033500011e-08f, f);
  float p = 1.3308821944519877e-3f;
  for (float c : {9.67151764780283e-3f, 5.550582334399223e-2f, 0.24022242426872253f, 0.6931470632553101f, 1.f})
    p = std::fma(p, f, c);
  if (std::isnan(p)) return p;
  return std::ldexp(p, static_cast<int>(std::fmax(std::fmin(n, 1000.f), -1000.f))) + 1.f;
}

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

__attribute__((target("avx2,fma"))) void run8(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, cpu::one_plus_exp_neg8(_mm256_loadu_ps(x + i)));
}

__attribute__((target("avx512f"))) void run16(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, cpu::one_plus_exp_neg16(_mm512_loadu_ps(x + i)));
}

TEST(CpuExpNeg, EveryIsaGivesTheSameBitsAsItsScalarModel) {
  const std::vector<float> x = sweep();
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = model(x[i]);
  bool ran = false;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    std::vector<float> y(x.size());
    run8(x.data(), y.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(y[i], want[i])) << "AVX2 at x = " << x[i] << ": " << y[i] << " vs " << want[i];
    ran = true;
  }
  if (__builtin_cpu_supports("avx512f")) {
    std::vector<float> y(x.size());
    run16(x.data(), y.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(y[i], want[i])) << "AVX-512 at x = " << x[i] << ": " << y[i] << " vs " << want[i];
    ran = true;
  }
  if (!ran) GTEST_SKIP() << "no AVX2 + FMA nor AVX-512F";
  // The model is e^-x + 1 itself, within the polynomial's error (a model that drifted would not be).
  for (float v : {-20.f, -3.f, -0.5f, 0.f, 0.5f, 3.f, 20.f, 80.f})
    EXPECT_NEAR(model(v), 1.0 + std::exp(-double(v)), 3e-7 * (1.0 + std::exp(-double(v)))) << v;
}

}  // namespace
}  // namespace ferry
#endif
