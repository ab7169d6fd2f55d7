// `ferry quantize`'s weight range choice (src/quant/quantizer.h choose_reduce_range, search_8bit_layers; docs/quantization.md
// "Reduce range") and the 7-bit weight scales (qdq_plan.h weight_scales, weight_scales_mse). The written files:
// tests/quant/check_reduce_range.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "pass_test_util.h"
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

// An additive stand-in for the file's output cosine: the 7-bit candidate's plus each 8-bit layer's gain.
struct AdditiveCosine {
  double base;
  std::map<std::string, double> gain;
  int calls = 0;
  StatusOr<double> operator()(const std::vector<std::string>& eight) {
    ++calls;
    double c = base;
    for (const std::string& n : eight) c += gain.at(n);
    return c;
  }
};

TEST(ReduceRange, LayerSearchForwardThenBackward) {
  // "fc" is first in the forward order (its tiny cost makes its gain per multiply-add large) but its gain is noise;
  // "stem" alone reaches the bar. Forward puts both back; backward returns fc to 7 bits, then tries stem.
  AdditiveCosine m{0.9836, {{"fc", 0.00002}, {"stem", 0.0009}, {"mid", 0.0003}}};
  const std::map<std::string, int64_t> macs = {{"fc", 2'000'000}, {"stem", 118'000'000}, {"mid", 50'000'000}};
  auto f = [&](const std::vector<std::string>& s) { return m(s); };
  StatusOr<LayerSearch> r = search_8bit_layers(0.9836, 0.9844, {"fc", "stem", "mid"}, macs, 16, f);
  ASSERT_TRUE(r.is_ok());
  ASSERT_EQ(r.value().restored.size(), 2u);
  EXPECT_EQ(r.value().restored[0].first, "fc");
  EXPECT_EQ(r.value().restored[1].first, "stem");
  EXPECT_EQ(r.value().tried_back, (std::vector<std::string>{"stem", "fc"}));  // the most multiply-adds first
  ASSERT_EQ(r.value().released.size(), 1u);
  EXPECT_EQ(r.value().released[0].first, "fc");
  EXPECT_EQ(r.value().eight_bit, std::vector<std::string>{"stem"});
  EXPECT_TRUE(r.value().reached);
  EXPECT_NEAR(r.value().cosine, 0.9845, 1e-12);
  EXPECT_EQ(m.calls, 4);  // 2 forward, 2 backward
}

TEST(ReduceRange, LayerSearchStopRules) {
  AdditiveCosine m{0.97, {{"a", 0.001}, {"b", 0.001}, {"c", 0.001}}};
  auto f = [&](const std::vector<std::string>& s) { return m(s); };
  // Already at the bar: nothing measured, nothing put back.
  StatusOr<LayerSearch> r = search_8bit_layers(0.97, 0.97, {"a", "b"}, {}, 16, f);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().reached);
  EXPECT_TRUE(r.value().eight_bit.empty());
  EXPECT_EQ(m.calls, 0);
  // The cap: two put back, still below, no backward pass.
  r = search_8bit_layers(0.97, 0.975, {"a", "b", "c"}, {}, 2, f);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r.value().reached);
  EXPECT_EQ(r.value().restored.size(), 2u);
  EXPECT_TRUE(r.value().tried_back.empty());
  // Every layer needed: the backward pass releases none.
  r = search_8bit_layers(0.97, 0.9725, {"a", "b", "c"}, {}, 16, f);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().reached);
  EXPECT_EQ(r.value().eight_bit.size(), 3u);
  EXPECT_TRUE(r.value().released.empty());
  EXPECT_EQ(r.value().tried_back.size(), 3u);
  // A failed measurement is passed on.
  r = search_8bit_layers(0.97, 0.98, {"a"}, {}, 16,
                         [](const std::vector<std::string>&) -> StatusOr<double> { return invalid_argument("boom"); });
  EXPECT_FALSE(r.is_ok());
}

// Squared rounding-and-clipping error of channel values `v` at scale s in [-qmax, qmax].
double weight_error(const std::vector<float>& v, float s, int qmax) {
  double e = 0;
  for (float x : v) {
    const double r = s * std::clamp(std::nearbyint(x / s), -float(qmax), float(qmax)) - x;
    e += r * r;
  }
  return e;
}

TEST(ReduceRange, WeightScalesMse) {
  // Channel 0: exact multiples of max / 64, MinMax is exact: kept (ties keep the larger scale). Channel 1: 2000
  // values spread over [-0.1, 0.1] and one outlier 1.0: clipping the outlier costs less than rounding the rest
  // at 1/64 steps, so the scale shrinks. Channel 2: all zero.
  const int64_t k = 2001;
  std::vector<float> w(3 * k, 0.0f);
  for (int64_t i = 0; i < k; ++i) w[i] = 2.0f * static_cast<float>(i % 129 - 64) / 64;
  for (int64_t i = 0; i < k - 1; ++i) w[k + i] = 0.1f * (static_cast<float>(i) / (k - 2) * 2 - 1);
  w[2 * k - 1] = 1.0f;
  const Tensor t = Tensor::from_vector<float>(w, {3, k});
  const std::vector<float> minmax = weight_scales(t, 0, kReducedWeightMax), mse = weight_scales_mse(t, 0, kReducedWeightMax);
  ASSERT_EQ(mse.size(), 3u);
  EXPECT_FLOAT_EQ(mse[0], minmax[0]);
  EXPECT_LT(mse[1], minmax[1]);
  EXPECT_GE(mse[1], 0.5f * minmax[1] * 0.999f);  // the search stops at half the MinMax clip
  EXPECT_EQ(mse[2], 1.0f);
  // The chosen scale is the best of the grid (a = 1, 0.99, ..., 0.5) and strictly better than MinMax here.
  const std::vector<float> c1(w.begin() + k, w.begin() + 2 * k);
  const double chosen = weight_error(c1, mse[1], kReducedWeightMax);
  EXPECT_LT(chosen, weight_error(c1, minmax[1], kReducedWeightMax));
  for (int step = 50; step <= 100; ++step)
    EXPECT_LE(chosen, weight_error(c1, minmax[1] * static_cast<float>(step) / 100.0f, kReducedWeightMax) * (1 + 1e-9));
  // The channel axis is honoured: the transposed [k, n] layout of the same channels gives the same scales.
  std::vector<float> wt(3 * k);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < k; ++i) wt[i * 3 + c] = w[c * k + i];
  EXPECT_EQ(weight_scales_mse(Tensor::from_vector<float>(wt, {k, 3}), 1, kReducedWeightMax), mse);
  // The plan: MinMax at 8 bits (the plain baseline's), the search at 7.
  EXPECT_EQ(plan_weight_scales(t, 0, kFullWeightMax), weight_scales(t, 0, kFullWeightMax));
  EXPECT_EQ(plan_weight_scales(t, 0, kReducedWeightMax), mse);
}

// The plan writes the scales it chose: at 7 bits the squared-error search's (cached across plans where a cache is
// given), at 8 bits MinMax; the int8 values are the weight rounded at those scales, clamped to the range.
TEST(ReduceRange, PlanUsesSearchedScalesAt7Bits) {
  testing::ModelBuilder b(13);
  const std::string x = b.input("x", {1, 2, 3, 3});
  // Channel 0: 17 weights halfway between two steps of MinMax's 7-bit grid and one outlier 1.0 (a scale 2% smaller
  // puts them near a step and clips the outlier by 0.02: less error); channel 1: on the 7-bit grid of its max.
  std::vector<float> wv(2 * 18);
  for (int i = 0; i < 17; ++i) wv[i] = 31.5f / 64;
  wv[17] = 1.0f;
  for (int i = 0; i < 18; ++i) wv[18 + i] = 0.5f * static_cast<float>((i * 7) % 129 - 64) / 64;
  wv[18] = 0.5f;
  const Tensor w = Tensor::from_vector<float>(wv, {2, 2, 3, 3});
  const std::string wn = b.constant(w);
  const std::string y = b.node("Conv", {x, wn, b.constant(Tensor::from_vector<float>({0.1f, -0.2f}, {2}))});
  b.output(y);
  auto model = b.build();
  const RangeFn range = [](const std::string&, float* lo, float* hi) {
    *lo = -1;
    *hi = 1;
    return true;
  };
  auto weight_of = [&](const QdqPlan& p, std::vector<float>* scales, std::vector<int8_t>* q) {
    for (const auto& [name, t] : p.edit.add_initializers) {
      if (name.rfind(wn + "_scale", 0) == 0) *scales = std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
      if (name.rfind(wn + "_quantized", 0) == 0) *q = std::vector<int8_t>(t.data<int8_t>(), t.data<int8_t>() + t.numel());
    }
  };
  std::map<std::string, std::vector<float>> cache;
  PlanOptions po;
  po.weight_qmax = kReducedWeightMax;
  po.weight_scale_cache = &cache;
  StatusOr<QdqPlan> p7 = plan_qdq(*model, range, {}, nullptr, nullptr, &po);
  ASSERT_TRUE(p7.is_ok()) << p7.status().to_string();
  std::vector<float> s7;
  std::vector<int8_t> q7;
  weight_of(p7.value(), &s7, &q7);
  const std::vector<float> mse = weight_scales_mse(w, 0, kReducedWeightMax), minmax = weight_scales(w, 0, kReducedWeightMax);
  EXPECT_EQ(s7, mse);
  EXPECT_LT(s7[0], minmax[0]);       // the outlier clipped
  EXPECT_FLOAT_EQ(s7[1], minmax[1]);  // on the grid: MinMax is exact
  ASSERT_EQ(q7.size(), wv.size());
  for (size_t i = 0; i < wv.size(); ++i)
    EXPECT_EQ(q7[i], static_cast<int8_t>(std::clamp(std::nearbyint(wv[i] / s7[i / 18]), -64.0f, 64.0f))) << i;
  EXPECT_EQ(q7[17], 64);  // the clipped outlier
  EXPECT_EQ(cache.size(), 1u);
  // A second plan reads the cache: a poisoned entry shows.
  cache.begin()->second = {0.5f, 0.25f};
  StatusOr<QdqPlan> again = plan_qdq(*model, range, {}, nullptr, nullptr, &po);
  ASSERT_TRUE(again.is_ok());
  weight_of(again.value(), &s7, &q7);
  EXPECT_EQ(s7, (std::vector<float>{0.5f, 0.25f}));
  // 8 bits: MinMax, the plain baseline's.
  PlanOptions p8;
  StatusOr<QdqPlan> full = plan_qdq(*model, range, {}, nullptr, nullptr, &p8);
  ASSERT_TRUE(full.is_ok());
  std::vector<float> s8;
  std::vector<int8_t> q8;
  weight_of(full.value(), &s8, &q8);
  EXPECT_EQ(s8, weight_scales(w, 0, kFullWeightMax));
}

}  // namespace
}  // namespace ferry::quant
