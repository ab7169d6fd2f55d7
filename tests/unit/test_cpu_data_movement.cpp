// The cpu backend's Slice kernel (src/backends/cpu/data_movement.cpp) against the reference kernel:
// f32, bf16 and int64 data, negative and out-of-range bounds, axes given or implied, whole trailing
// dims merged into one run, and steps other than 1 (which go to the reference kernel).
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

}  // namespace
}  // namespace ferry::testing
