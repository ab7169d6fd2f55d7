// cpu one_thread_rules.h (issue 22): small depthwise convolutions and small row-broadcast binary ops
// (issue 38: small int8 layers, with blocking idle threads) run on one thread of two (and, when asked for, small Concat / Resize outputs). The rules fire only below their byte limit and outside parallel
// regions, and the one-thread runs give the reference's results (depthwise: the one-thread oneDNN
// plan, made apart from the two-thread one of the same shape; binary: the same bits).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/one_thread_rules.h"
#include "graph_builder.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

// Sets the omp thread count and an environment variable for a scope.
struct Setting {
  Setting(int threads, const char* env, const char* value) : saved(omp_get_max_threads()), name(env) {
    omp_set_num_threads(threads);
    if (value) ::setenv(env, value, 1);
    else ::unsetenv(env);
  }
  ~Setting() {
    omp_set_num_threads(saved);
    ::unsetenv(name);
  }
  int saved;
  const char* name;
};

TEST(CpuOneThreadRules, FireBelowTheLimitOnSeveralThreadsOnly) {
  {
    Setting s(2, "FERRY_DW_ONE_THREAD_BYTES", "1000");
    EXPECT_TRUE(cpu::depthwise_on_one_thread(999));
    EXPECT_FALSE(cpu::depthwise_on_one_thread(1000));
    bool inside = true;
#pragma omp parallel num_threads(2)
    {
#pragma omp master
      inside = cpu::depthwise_on_one_thread(10);  // already one of a team's threads
    }
    EXPECT_FALSE(inside);
  }
  {
    Setting s(1, "FERRY_DW_ONE_THREAD_BYTES", "1000");
    EXPECT_FALSE(cpu::depthwise_on_one_thread(10));  // one thread anyway
  }
  {
    Setting s(2, "FERRY_ELTWISE_ONE_THREAD_BYTES", "0");
    EXPECT_FALSE(cpu::binary_on_one_thread(10));  // 0: always split
  }
  {
    Setting s(2, "FERRY_ELTWISE_ONE_THREAD_BYTES", "4096");
    EXPECT_TRUE(cpu::binary_on_one_thread(4095));
    EXPECT_FALSE(cpu::binary_on_one_thread(4096));
  }
}

TEST(CpuOneThreadRules, Int8LayersRunOnOneThreadOnlyWithBlockingIdleThreads) {  // issue 38
  {
    Setting policy(2, "OMP_WAIT_POLICY", "PASSIVE");
    Setting s(2, "FERRY_I8_ONE_THREAD_MACS", nullptr);
    EXPECT_TRUE(cpu::int8_on_one_thread(cpu::kInt8OneThreadMacs - 1));
    EXPECT_FALSE(cpu::int8_on_one_thread(cpu::kInt8OneThreadMacs));
  }
  {
    Setting policy(2, "OMP_WAIT_POLICY", "passive");
    Setting s(2, "FERRY_I8_ONE_THREAD_MACS", "0");
    EXPECT_FALSE(cpu::int8_on_one_thread(10));  // 0: always split
  }
  {
    Setting policy(2, "OMP_WAIT_POLICY", "ACTIVE");
    EXPECT_FALSE(cpu::int8_on_one_thread(10));  // spinning idle threads: split
  }
  {
    Setting policy(2, "OMP_WAIT_POLICY", nullptr);
    EXPECT_FALSE(cpu::int8_on_one_thread(10));
  }
  {
    Setting policy(1, "OMP_WAIT_POLICY", "PASSIVE");
    EXPECT_FALSE(cpu::int8_on_one_thread(10));  // one thread anyway
  }
}

TEST(CpuOneThreadRules, DepthwiseConvolutionMatchesReferenceEitherWay) {
  struct Case {
    vector<int64_t> x;  // NHWC
    int64_t k, stride;
  };
  const vector<Case> cases = {{{1, 7, 7, 64}, 5, 1}, {{1, 14, 14, 48}, 3, 2}, {{2, 9, 10, 32}, 3, 1}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    const int64_t ch = c.x[3], p = c.k / 2;
    const Tensor x = random_tensor(c.x, 40 + static_cast<uint32_t>(i));
    const Tensor w = random_tensor({ch, 1, c.k, c.k}, 50), b = random_tensor({ch}, 51);
    const auto run = [&](const char* device) {
      OpTester t("FusedConv", 1, "com.ferry");
      t.attr("group", ch).attr("pads", vector<int64_t>{p, p, p, p}).attr("strides", vector<int64_t>{c.stride, c.stride});
      t.attr("channels_last", int64_t(1)).attr("activation", std::string("Silu"));
      return t.input(x).const_input(w).const_input(b).run(device)[0];
    };
    const Tensor want = run("cpu-ref");
    for (const char* limit : {"0", "1073741824"}) {  // split over two threads, then one thread
      SCOPED_TRACE(std::string("FERRY_DW_ONE_THREAD_BYTES=") + limit);
      Setting s(2, "FERRY_DW_ONE_THREAD_BYTES", limit);
      expect_near(run("cpu"), want, 1e-5, 1e-5);
    }
  }
}

TEST(CpuOneThreadRules, RowBroadcastMulMatchesReferenceBitsEitherWay) {
  const vector<std::pair<vector<int64_t>, vector<int64_t>>> shapes = {
      {{1, 14, 14, 96}, {1, 1, 1, 96}}, {{1, 1, 1, 96}, {1, 14, 14, 96}}, {{2, 7, 7, 64}, {2, 1, 1, 64}}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const Tensor a = random_tensor(shapes[i].first, 60 + static_cast<uint32_t>(i));
    const Tensor b = random_tensor(shapes[i].second, 70 + static_cast<uint32_t>(i));
    const Tensor want = OpTester("Mul").input(a).input(b).run("cpu-ref")[0];
    for (const char* limit : {"0", "1073741824"}) {
      SCOPED_TRACE(std::string("FERRY_ELTWISE_ONE_THREAD_BYTES=") + limit);
      Setting s(2, "FERRY_ELTWISE_ONE_THREAD_BYTES", limit);
      const Tensor got = OpTester("Mul").input(a).input(b).run("cpu")[0];
      ASSERT_EQ(got.dims(), want.dims());
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(want.nbytes())), 0);
    }
  }
}

// FERRY_MOVE_ONE_THREAD_BYTES (off by default): UNet's NHWC bilinear 2x Resize and its channel Concat.
TEST(CpuOneThreadRules, ResizeAndConcatMatchReferenceEitherWay) {
  {
    Setting s(2, "FERRY_MOVE_ONE_THREAD_BYTES", nullptr);
    EXPECT_FALSE(cpu::move_on_one_thread(10));  // off unless asked for
  }
  {
    Setting s(2, "FERRY_MOVE_ONE_THREAD_BYTES", "100");
    EXPECT_TRUE(cpu::move_on_one_thread(99));
  }
  const Tensor x = random_tensor({1, 12, 16, 64}, 80), skip = random_tensor({1, 24, 32, 32}, 81);
  const Tensor scales = T_({1, 2, 2, 1}, {4});
  const auto resize = [&](const char* device) {
    OpTester t("Resize", 13);
    t.attr("mode", std::string("linear")).input(x).no_input().const_input(scales);
    return t.run(device)[0];
  };
  const Tensor up_want = resize("cpu-ref");
  const auto concat = [&](const char* device) {
    return OpTester("Concat").attr("axis", int64_t(3)).input(up_want).input(skip).run(device)[0];
  };
  const Tensor cat_want = concat("cpu-ref");
  for (const char* limit : {"0", "1073741824"}) {
    SCOPED_TRACE(std::string("FERRY_MOVE_ONE_THREAD_BYTES=") + limit);
    Setting s(2, "FERRY_MOVE_ONE_THREAD_BYTES", limit);
    expect_near(resize("cpu"), up_want, 1e-6, 1e-6);
    const Tensor cat = concat("cpu");
    ASSERT_EQ(cat.dims(), (vector<int64_t>{1, 24, 32, 96}));
    EXPECT_EQ(std::memcmp(cat.raw(), cat_want.raw(), static_cast<size_t>(cat_want.nbytes())), 0);
  }
}

}  // namespace
}  // namespace ferry::testing
