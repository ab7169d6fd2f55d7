// The cpu convolution's SiLU pass (dnnl_conv.cpp: activate_in_place, the AVX-512 silu16 loop where
// the CPU has it) against the reference kernel, on values chosen for it: a 1x1 convolution with one
// channel and weight 1 passes its input through unchanged, so the activation sees a sweep over
// [-95, 95] (dense over [-30, 30], where an error in the exponent's reduction would show), the
// clamp edge 104 and the old ones (-88.38, 87.34), +-0, denormals, +-inf and NaN, with a 13-float tail.
#include <cmath>
#include <limits>
#include <string>

#include "graph_builder.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

TEST(CpuConvSilu, SpecialValuesAndSweepMatchReference) {
  const float inf = std::numeric_limits<float>::infinity();
  vector<float> v = {0.f, -0.f, 1e-40f, -1e-40f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                     -88.3f, -88.4f, -88.5f, 87.3f, 87.4f, 88.5f, 103.9f, 104.f, 104.1f, -1e30f, 1e30f};
  for (float x = -95.f; x <= 95.f; x += 6.1f) v.push_back(x);
  for (float x = -3.f; x <= 3.f; x += 0.4f) v.push_back(x);
  for (float x = -30.f; x <= 30.f; x += 0.0137f) v.push_back(x);  // dense where the polynomial's error shows
  while (v.size() % 16 != 13) v.push_back(0.37f * static_cast<float>(v.size()) - 9.f);  // a masked tail
  for (bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "nhwc" : "nchw");
    const int64_t n = static_cast<int64_t>(v.size());
    Tensor x = Tensor::allocate(DType::kF32, channels_last ? vector<int64_t>{1, 1, n, 1} : vector<int64_t>{1, 1, 1, n});
    for (int64_t i = 0; i < n; ++i) x.mutable_data<float>()[i] = v[static_cast<size_t>(i)];
    Tensor w = Tensor::allocate(DType::kF32, {1, 1, 1, 1});
    w.mutable_data<float>()[0] = 1.f;
    const auto run = [&](const char* device) {
      OpTester t("FusedConv", 1, "com.ferry");
      t.attr("activation", std::string("Silu"));
      if (channels_last) t.attr("channels_last", int64_t(1));
      return t.input(x).const_input(w).run(device)[0];
    };
    const Tensor got = run("cpu"), want = run("cpu-ref");
    expect_near(got, want, 1e-30, 1e-6);
    for (int64_t i = 0; i < n; ++i) {  // the signs of zeros too (x * 0 below the clamp, as x * sigmoid(x))
      if (want.data<float>()[i] == 0.f) {
        EXPECT_EQ(std::signbit(got.data<float>()[i]), std::signbit(want.data<float>()[i])) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ferry::testing
