// cpu::WinogradConv3x3 (F(2x2, 3x3) on NHWC) against a plain-loop convolution, and through the
// FusedConv kernel against the reference backend. DISABLED_Timing compares it with oneDNN's direct
// NHWC convolution (run with --gtest_also_run_disabled_tests; OMP_NUM_THREADS sets the threads).
#include <gtest/gtest.h>
#include <omp.h>

#include <dnnl.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/winograd.h"
#include "graph_builder.h"
#include "op_tester.h"

namespace ferry {
namespace {

using testing::expect_near;
using testing::OpTester;
using testing::random_tensor;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& f : v) f = d(gen);
  return v;
}

// y = relu?(conv3x3_pad1(x, w) + bias + z), NHWC x/y/z, OIHW w, in double.
std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                             const float* z, int64_t n, int64_t h, int64_t wd, int64_t cin, int64_t cout, bool relu) {
  std::vector<float> y(static_cast<size_t>(n * h * wd * cout));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < h; ++oy)
      for (int64_t ox = 0; ox < wd; ++ox)
        for (int64_t o = 0; o < cout; ++o) {
          double s = bias.empty() ? 0.0 : bias[o];
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = oy + ky - 1, ix = ox + kx - 1;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
              for (int64_t i = 0; i < cin; ++i)
                s += double(x[((b * h + iy) * wd + ix) * cin + i]) * w[((o * cin + i) * 3 + ky) * 3 + kx];
            }
          const size_t at = static_cast<size_t>(((b * h + oy) * wd + ox) * cout + o);
          if (z) s += z[at];
          y[at] = relu && s < 0 ? 0.f : float(s);
        }
  return y;
}

void check(int64_t n, int64_t h, int64_t wd, int64_t cin, int64_t cout, bool bias, bool residual, bool relu,
           int64_t block_tiles = 0, int slices = 0, int tile = 2) {
  SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(h) + "x" + std::to_string(wd) + " " + std::to_string(cin) + "->" +
               std::to_string(cout) + (bias ? " bias" : "") + (residual ? " sum" : "") + (relu ? " relu" : "") +
               " block " + std::to_string(block_tiles) + " slices " + std::to_string(slices) + " tile " + std::to_string(tile) + " threads " +
               std::to_string(omp_get_max_threads()));
  const auto x = random_floats(static_cast<size_t>(n * h * wd * cin), 1);
  const auto w = random_floats(static_cast<size_t>(cout * cin * 9), 2);
  const auto b = bias ? random_floats(static_cast<size_t>(cout), 3) : std::vector<float>();
  const auto z = random_floats(static_cast<size_t>(n * h * wd * cout), 4);
  const auto expect = reference(x, w, b, residual ? z.data() : nullptr, n, h, wd, cin, cout, relu);
  cpu::WinogradConv3x3 conv(w.data(), bias ? b.data() : nullptr, cout, cin);
  cpu::WinogradConv3x3::Plan plan;
  ASSERT_TRUE(conv.make_plan(n, h, wd, &plan, block_tiles, slices, tile).is_ok());
  ASSERT_EQ(plan.tile, tile);
  // The residual is summed in place (y's buffer holds z), as the executor does when z dies here.
  std::vector<float> y = residual ? z : std::vector<float>(expect.size(), 7.f);
  ASSERT_TRUE(conv.run(plan, x.data(), residual ? y.data() : nullptr, y.data(), relu).is_ok());
  double max_err = 0;
  for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, double(std::fabs(y[i] - expect[i])));
  // Sums of 9 * cin products of values in [-1, 1]: rounding of f32 at ~1e-6 relative to sqrt(9 cin);
  // F(4x4, 3x3)'s transforms (coefficients up to 8 and 1/24) round about 10x more.
  EXPECT_LT(max_err, (tile == 4 ? 2e-4 : 2e-5) * std::sqrt(9.0 * cin)) << "max abs error";
}

TEST(CpuWinograd, MatchesPlainLoopConvolution) {
  check(1, 8, 8, 16, 16, false, false, false);
  check(1, 7, 7, 32, 24, true, false, true);     // odd size: partial tiles on the right and bottom
  check(2, 5, 9, 16, 48, true, true, true);      // batch 2, bias + residual + relu
  check(2, 14, 14, 32, 32, true, true, false, 10);  // 98 tiles in blocks of at most 10 (9 or 10 rows)
  check(1, 1, 1, 8, 8, true, false, false);      // one pixel: only the kernel's centre counts
}

TEST(CpuWinograd, BlocksOfTilesGiveTheSameResult) {
  check(2, 7, 6, 16, 16, true, true, true, 5);
  check(1, 6, 6, 16, 16, false, false, true, 9);
}

// Two threads: the tiles split in two ranges, or the output channels in two slices (48 = 16 + 32).
TEST(CpuWinograd, ThreadsSplitTilesOrOutputChannels) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  check(2, 7, 7, 16, 48, true, true, true, 0, 1);
  check(2, 7, 7, 16, 48, true, true, true, 7, 2);
  check(1, 5, 5, 16, 32, false, false, false, 0, 2);
  omp_set_num_threads(saved);
}

// F(4x4, 3x3): 6x6 patches with stride 4; sizes not a multiple of 4 leave partial tiles (1 to 3
// rows / columns of a tile outside the image), blocks and both thread splits as for F(2x2).
TEST(CpuWinograd, Tile4MatchesPlainLoopConvolution) {
  check(1, 8, 8, 16, 16, false, false, false, 0, 0, 4);
  check(1, 7, 9, 32, 24, true, false, true, 0, 0, 4);
  check(2, 5, 6, 16, 48, true, true, true, 0, 0, 4);
  check(2, 13, 14, 32, 32, true, true, false, 5, 0, 4);  // 32 tiles in blocks of at most 5
  check(1, 1, 1, 8, 8, true, false, false, 0, 0, 4);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  check(2, 11, 10, 16, 48, true, true, true, 0, 1, 4);
  check(1, 10, 10, 16, 32, true, true, true, 0, 2, 4);
  omp_set_num_threads(saved);
}

// make_plan's default: F(4x4) on images of 12x12 and more with up to 256x256 channels where its
// tiles save 1.5x the products, F(2x2) elsewhere (FERRY_WINOGRAD_TILE unset in the tests).
TEST(CpuWinograd, DefaultTileFollowsShape) {
  if (std::getenv("FERRY_WINOGRAD_TILE")) GTEST_SKIP() << "FERRY_WINOGRAD_TILE is set";
  using W = cpu::WinogradConv3x3;
  EXPECT_EQ(W::default_tile(64, 64, 1, 56, 56), 4);
  EXPECT_EQ(W::default_tile(128, 128, 1, 28, 28), 4);
  EXPECT_EQ(W::default_tile(384, 128, 1, 12, 16), 4);
  EXPECT_EQ(W::default_tile(64, 64, 2, 14, 14), 2);   // 4x4 tiles cover 16x16: too little saved
  EXPECT_EQ(W::default_tile(256, 256, 1, 14, 14), 2);
  EXPECT_EQ(W::default_tile(64, 64, 1, 8, 8), 2);
  EXPECT_EQ(W::default_tile(512, 512, 8, 7, 7), 2);
  EXPECT_EQ(W::default_tile(512, 512, 1, 14, 14), 2);
  // A batch of 8 on 14x14 (128 tiles of 4x4, 1.36x fewer products) takes F(4x4) at 1 thread only.
  const int saved = omp_get_max_threads();
  const char* e = std::getenv("FERRY_WINOGRAD_TILE4_BATCH");
  omp_set_num_threads(1);
  EXPECT_EQ(W::default_tile(256, 256, 8, 14, 14), e && std::string(e) == "0" ? 2 : 4);
  EXPECT_EQ(W::default_tile(256, 256, 4, 14, 14), 2);
  omp_set_num_threads(2);
  EXPECT_EQ(W::default_tile(256, 256, 8, 14, 14), 2);
  omp_set_num_threads(saved);
}

// One plan run from two threads at once (the executor's concurrent runs share plans): each run's
// V, M and matmul scratchpad are its thread's own.
TEST(CpuWinograd, ConcurrentRunsOfOnePlanAgree) {
  const int64_t n = 1, h = 7, w = 9, cin = 32, cout = 32;
  const auto x = random_floats(static_cast<size_t>(n * h * w * cin), 1);
  const auto wt = random_floats(static_cast<size_t>(cout * cin * 9), 2);
  cpu::WinogradConv3x3 conv(wt.data(), nullptr, cout, cin);
  cpu::WinogradConv3x3::Plan plan;
  ASSERT_TRUE(conv.make_plan(n, h, w, &plan).is_ok());
  std::vector<float> expect(static_cast<size_t>(n * h * w * cout));
  ASSERT_TRUE(conv.run(plan, x.data(), nullptr, expect.data(), true).is_ok());
  std::vector<std::vector<float>> ys(2, std::vector<float>(expect.size()));
  std::vector<std::thread> threads;
  for (auto& y : ys)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) EXPECT_TRUE(conv.run(plan, x.data(), nullptr, y.data(), true).is_ok());
    });
  for (auto& t : threads) t.join();
  for (const auto& y : ys) EXPECT_EQ(y, expect);
}

// Through the conv kernel (FusedConv channels_last, the layout ResNet's convolutions get), against
// the reference backend (64 channels, 32 and 98 tiles: dnnl_conv.cpp's use_own_winograd takes them).
TEST(CpuWinograd, FusedConvChannelsLastMatchesReference) {
  for (int64_t size : {7, 14}) {
    SCOPED_TRACE(size);
    Tensor x = random_tensor({2, size, size, 64}, 11);
    Tensor w = random_tensor({64, 64, 3, 3}, 12);
    Tensor b = random_tensor({64}, 13);
    Tensor z = random_tensor({2, size, size, 64}, 14);
    const auto run = [&](const std::string& device) {
      OpTester t("FusedConv", 1, "com.ferry");
      t.attr("kernel_shape", std::vector<int64_t>{3, 3}).attr("pads", std::vector<int64_t>{1, 1, 1, 1});
      t.attr("activation", std::string("Relu")).attr("channels_last", int64_t(1));
      return t.input(x).const_input(w).const_input(b).input(z).run(device)[0];
    };
    expect_near(run("cpu"), run("cpu-ref"), 1e-4, 1e-4);
  }
}

// The same at 28x28 with 128 channels, where the kernel takes F(4x4, 3x3) (default_tile), on two
// threads (49 tiles: the output channels split in two slices). Outputs are sums of 1152 products of
// standard-normal values (scale ~34): F(4x4)'s rounding is ~1e-5 of that, so 2e-3 absolute.
TEST(CpuWinograd, FusedConvTile4MatchesReference) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  Tensor x = random_tensor({1, 28, 28, 128}, 21);
  Tensor w = random_tensor({128, 128, 3, 3}, 22);
  Tensor b = random_tensor({128}, 23);
  Tensor z = random_tensor({1, 28, 28, 128}, 24);
  const auto run = [&](const std::string& device) {
    OpTester t("FusedConv", 1, "com.ferry");
    t.attr("kernel_shape", std::vector<int64_t>{3, 3}).attr("pads", std::vector<int64_t>{1, 1, 1, 1});
    t.attr("activation", std::string("Relu")).attr("channels_last", int64_t(1));
    return t.input(x).const_input(w).const_input(b).input(z).run(device)[0];
  };
  expect_near(run("cpu"), run("cpu-ref"), 2e-3, 1e-4);
  omp_set_num_threads(saved);
}

double seconds_per_run(const std::function<void()>& f) {
  f();
  int runs = 0;
  const auto start = std::chrono::steady_clock::now();
  double s = 0;
  while (s < 0.2) {
    f();
    ++runs;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return s / runs;
}

TEST(CpuWinograd, DISABLED_Timing) {
  using dnnl::memory;
  using tag = memory::format_tag;
  // n, h, w, cin, cout: ResNet-50's layer3 / layer4, UNet's 12x16 and 6x8 stages, ResNet's layer2 / layer1.
  std::vector<std::vector<int64_t>> shapes = {{1, 14, 14, 256, 256}, {1, 7, 7, 512, 512}, {8, 14, 14, 256, 256},
                                              {8, 7, 7, 512, 512},   {1, 12, 16, 384, 128}, {1, 6, 8, 256, 256},
                                              {1, 28, 28, 128, 128}, {1, 56, 56, 64, 64}};
  if (const char* only = std::getenv("WINOGRAD_SHAPE")) {  // "n,h,w,cin,cout"
    shapes.assign(1, std::vector<int64_t>(5));
    std::sscanf(only, "%ld,%ld,%ld,%ld,%ld", &shapes[0][0], &shapes[0][1], &shapes[0][2], &shapes[0][3], &shapes[0][4]);
  }
  for (const auto& s : shapes) {
    const int64_t n = s[0], hh = s[1], ww = s[2], cin = s[3], cout = s[4];
    const auto x = random_floats(static_cast<size_t>(n * hh * ww * cin), 1);
    const auto w = random_floats(static_cast<size_t>(cout * cin * 9), 2);
    const auto b = random_floats(static_cast<size_t>(cout), 3);
    std::vector<float> y(static_cast<size_t>(n * hh * ww * cout)), y2(y.size());
    auto& eng = cpu::dnnl_engine();
    auto& strm = cpu::dnnl_stream();
    const memory::desc src({n, cin, hh, ww}, memory::data_type::f32, tag::nhwc);
    const memory::desc dst({n, cout, hh, ww}, memory::data_type::f32, tag::nhwc);
    const memory::desc wany({cout, cin, 3, 3}, memory::data_type::f32, tag::any);
    const memory::desc bmd({cout}, memory::data_type::f32, tag::x);
    dnnl::post_ops ops;
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, wany,
                                        bmd, dst, {1, 1}, {0, 0}, {1, 1}, {1, 1}),
        attr, eng);
    memory wu({{cout, cin, 3, 3}, memory::data_type::f32, tag::oihw}, eng, const_cast<float*>(w.data()));
    memory wp(pd.weights_desc(), eng);
    dnnl::reorder(wu, wp).execute(strm, wu, wp);
    dnnl::convolution_forward conv(pd);
    memory xm(src, eng, const_cast<float*>(x.data())), ym(dst, eng, y.data()), bm(bmd, eng, const_cast<float*>(b.data()));
    cpu::WinogradConv3x3 wg(w.data(), b.data(), cout, cin);
    cpu::WinogradConv3x3::Plan plan;
    const char* block = std::getenv("WINOGRAD_BLOCK");  // tiles per matmul call (default: winograd.cpp's rule)
    const char* slices = std::getenv("WINOGRAD_SLICES");  // output-channel slices (default: winograd.cpp's rule)
    ASSERT_TRUE(wg.make_plan(n, hh, ww, &plan, block ? std::atoll(block) : 0, slices ? std::atoi(slices) : 0).is_ok());
    const auto run_direct = [&] {
      conv.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
      strm.wait();
    };
    const auto run_wino = [&] { ASSERT_TRUE(wg.run(plan, x.data(), nullptr, y2.data(), true).is_ok()); };
    double direct = 1e9, wino = 1e9;  // the best of 3 interleaved rounds (a shared, noisy machine)
    for (int round = 0; round < 3; ++round) {
      direct = std::min(direct, seconds_per_run(run_direct));
      wino = std::min(wino, seconds_per_run(run_wino));
    }
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      max_err = std::max(max_err, double(std::fabs(y[i] - y2[i])));
      max_ref = std::max(max_ref, double(std::fabs(y[i])));
    }
    std::printf("n %ld %ldx%ld %ld->%ld block %ld slices %d: direct %.3f ms, winograd %.3f ms (%.2fx), max err %.2e of %.2e\n",
                long(n), long(hh), long(ww), long(cin), long(cout), long(plan.block), plan.slices, direct * 1e3, wino * 1e3,
                direct / wino, max_err, max_ref);
  }
}

}  // namespace
}  // namespace ferry
