// The cpu backend's bf16 kernels (src/backends/cpu/bf16.cpp) against the reference kernels, bit for
// bit: Add/Sub/Mul/Div with numpy broadcasting (the squeeze-excitation scale, a residual, scalars,
// middle-axis broadcasts) and Cast f32 <-> bf16 with NaN, infinities, ties and denormals.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

using std::vector;

Tensor rnd_bf16(vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return cast_tensor(t, DType::kBF16).value();
}

void expect_same_bits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(want.nbytes())), 0);
}

TEST(CpuBf16, BinaryOpsWithBroadcastingMatchReferenceBits) {
  const vector<std::pair<vector<int64_t>, vector<int64_t>>> shapes = {
      {{2, 5, 6, 24}, {2, 1, 1, 24}},  // squeeze-excitation scale, NHWC
      {{1, 1, 1, 24}, {1, 5, 6, 24}},  // the small operand first
      {{3, 7, 40}, {3, 7, 40}},        // residual
      {{4, 33}, {}},                   // scalar
      {{2, 3, 4, 5}, {3, 1, 1}},       // middle-axis broadcast
      {{5, 1, 4}, {1, 6, 1}},          // both broadcast
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      SCOPED_TRACE(std::string(op) + " case " + std::to_string(i));
      const Tensor a = rnd_bf16(shapes[i].first, 1 + static_cast<uint32_t>(i));
      const Tensor b = rnd_bf16(shapes[i].second, 100 + static_cast<uint32_t>(i));
      const Tensor ref = OpTester(op).input(a).input(b).run("cpu-ref")[0];
      expect_same_bits(OpTester(op).input(a).input(b).run("cpu")[0], ref);
    }
  }
}

TEST(CpuBf16, CastBothWaysMatchesReferenceBits) {
  const float inf = std::numeric_limits<float>::infinity();
  vector<float> v = {0.f, -0.f, 1.f, -1.5f, 3.14159f, 1e-40f, -1e-42f, 3.4e38f, inf, -inf,
                     std::numeric_limits<float>::quiet_NaN(), 1.00390625f /* a tie */, 1.01171875f};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 100.f);
  for (int i = 0; i < 1000; ++i) v.push_back(nd(rng));
  const Tensor x = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  const auto cast = [](const Tensor& t, DType to, const char* dev) {
    return OpTester("Cast").attr("to", static_cast<int64_t>(to)).input(t).run(dev)[0];
  };
  const Tensor down = cast(x, DType::kBF16, "cpu-ref");
  expect_same_bits(cast(x, DType::kBF16, "cpu"), down);
  expect_same_bits(cast(down, DType::kF32, "cpu"), cast(down, DType::kF32, "cpu-ref"));
}

}  // namespace
}  // namespace ferry::testing
