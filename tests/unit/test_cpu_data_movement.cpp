// The cpu backend's data-movement kernels (src/backends/cpu/data_movement.cpp) against the
// reference kernels. Slice: f32, bf16 and int64 data, negative and out-of-range bounds, axes given
// or implied, whole trailing dims merged into one run, and steps other than 1 (reference kernel).
// Concat: bit-identical on every axis, empty inputs, mismatched shapes (same error as the
// reference). Resize: nearest / linear / cubic, every coordinate mode, NCHW and NHWC-like shapes,
// up and down, one or two axes; tf_crop_and_resize and three resized axes go to the reference.
#include <random>

#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

Tensor iota(DType dt, std::vector<int64_t> dims) {
  Tensor f = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < f.numel(); ++i) f.mutable_data<float>()[i] = static_cast<float>(i % 251) - 100.f;
  return cast_tensor(f, dt).value();
}

Tensor ints(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

void expect_same_slice(const Tensor& x, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes,
                       std::vector<int64_t> steps = {}) {
  auto run = [&](const char* dev) {
    OpTester t("Slice", 13);
    t.input(x).const_input(ints(starts)).const_input(ints(ends));
    if (!axes.empty()) t.const_input(ints(axes));
    if (!steps.empty()) t.const_input(ints(steps));
    return t.run(dev);
  };
  auto ref = run("cpu-ref"), cpu = run("cpu");
  ASSERT_EQ(cpu[0].dims(), ref[0].dims());
  ASSERT_EQ(cpu[0].dtype(), ref[0].dtype());
  EXPECT_EQ(0, std::memcmp(cpu[0].raw(), ref[0].raw(), static_cast<size_t>(ref[0].nbytes())));
}

TEST(CpuSlice, MatchesReferenceOnBoxes) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI64}) {
    Tensor x = iota(dt, {7, 2, 24});
    expect_same_slice(x, {8}, {16}, {2});                    // one third of the last axis (q/k/v split)
    expect_same_slice(x, {1, -10}, {100, -2}, {0, 2});       // negative and clamped bounds
    expect_same_slice(x, {2}, {5}, {});                      // axes implied; trailing dims whole
    expect_same_slice(x, {0, 1, 0}, {7, 2, 24}, {0, 1, 2});  // inner box
    expect_same_slice(x, {5}, {3}, {0});                     // empty
    expect_same_slice(x, {0}, {24}, {-1}, {2});              // step 2: reference kernel
  }
}

void expect_same_concat(const std::vector<Tensor>& xs, int64_t axis) {
  auto run = [&](const char* dev) {
    OpTester t("Concat", 13);
    t.attr("axis", axis);
    for (const Tensor& x : xs) t.input(x);
    return t.run(dev);
  };
  auto ref = run("cpu-ref"), cpu = run("cpu");
  ASSERT_EQ(cpu[0].dims(), ref[0].dims());
  EXPECT_EQ(0, std::memcmp(cpu[0].raw(), ref[0].raw(), static_cast<size_t>(ref[0].nbytes())));
}

TEST(CpuConcat, MatchesReferenceBitForBit) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI64, DType::kU8}) {
    expect_same_concat({iota(dt, {2, 3, 4, 5}), iota(dt, {2, 1, 4, 5}), iota(dt, {2, 6, 4, 5})}, 1);
    expect_same_concat({iota(dt, {2, 3, 4, 5}), iota(dt, {2, 3, 4, 2})}, -1);
    expect_same_concat({iota(dt, {2, 3}), iota(dt, {4, 3})}, 0);
    expect_same_concat({iota(dt, {2, 0, 3}), iota(dt, {2, 2, 3})}, 1);  // an empty input
    expect_same_concat({iota(dt, {1, 16, 8, 8})}, 1);                     // one input
  }
}

TEST(CpuConcat, MismatchedShapesFailLikeTheReference) {
  // Unknown dims at load time, so the mismatch reaches the kernel.
  OpTester t("Concat", 13);
  t.attr("axis", int64_t{1}).input(iota(DType::kF32, {2, 3})).input(iota(DType::kF32, {3, 3}));
  t.symbolic_input_shape(0, Shape{{Dim(), Dim()}}).symbolic_input_shape(1, Shape{{Dim(), Dim()}});
  auto r = t.run_status("cpu");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("Concat"), std::string::npos) << r.status().to_string();
}

Tensor floats(std::vector<float> v) { return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}); }

Tensor random_f32(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
  return t;
}

void expect_close_resize(const Tensor& x, const std::string& mode, const std::string& coord, std::vector<float> scales,
                         std::vector<int64_t> sizes = {}) {
  SCOPED_TRACE(mode + " " + coord + " input " + x.type().to_string());
  auto run = [&](const char* dev) {
    OpTester t("Resize", 13);
    t.attr("mode", mode).attr("coordinate_transformation_mode", coord).input(x);
    if (coord == "tf_crop_and_resize") {
      std::vector<float> roi(2 * x.rank(), 0.f);
      for (int64_t d = 0; d < x.rank(); ++d) roi[x.rank() + d] = 1.f;
      roi[2] = -0.25f;  // one axis reads outside: extrapolation
      t.const_input(floats(roi));
    } else {
      t.no_input();
    }
    if (!sizes.empty()) t.no_input().const_input(ints(sizes));
    else t.const_input(floats(scales));
    return t.run(dev);
  };
  auto ref = run("cpu-ref"), cpu = run("cpu");
  ASSERT_EQ(cpu[0].dims(), ref[0].dims());
  const float* a = cpu[0].data<float>();
  const float* b = ref[0].data<float>();
  for (int64_t i = 0; i < ref[0].numel(); ++i) ASSERT_NEAR(a[i], b[i], 2e-5f * (1.f + std::fabs(b[i]))) << "at " << i;
}

TEST(CpuResize, MatchesReferenceAcrossModes) {
  const Tensor nchw = random_f32({2, 3, 7, 9}, 1);
  const Tensor nhwc = random_f32({2, 7, 9, 19}, 2);
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      expect_close_resize(nchw, mode, coord, {1.f, 1.f, 2.f, 2.f});      // NCHW upsample
      expect_close_resize(nhwc, mode, coord, {1.f, 2.f, 2.f, 1.f});      // NHWC (layout pass) upsample
      expect_close_resize(nchw, mode, coord, {1.f, 1.f, 0.6f, 1.5f});    // down on H, up on W
      expect_close_resize(nhwc, mode, coord, {1.f, 1.f, 3.f, 1.f});      // one axis
      expect_close_resize(nchw, mode, coord, {1.f, 1.f, 1.f, 1.f});      // no change
      expect_close_resize(nhwc, mode, coord, {}, {2, 11, 4, 19});       // sizes
    }
  }
  expect_close_resize(random_f32({2, 5, 6}, 3), "linear", "half_pixel", {1.f, 2.f, 2.f});  // rank 3
  expect_close_resize(random_f32({3, 5}, 4), "linear", "half_pixel", {2.f, 1.f});          // rank 2
  expect_close_resize(nchw, "linear", "half_pixel", {1.f, 2.f, 2.f, 2.f});                   // 3 axes: reference
  expect_close_resize(nchw, "linear", "tf_crop_and_resize", {1.f, 1.f, 2.f, 2.f});           // reference
}

}  // namespace
}  // namespace ferry::testing
