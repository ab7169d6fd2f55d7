// cpu::ConvRows (direct NHWC convolution on panel-packed weights, dnnl_conv.cpp's path for small
// outputs with large weights at 1 thread) against a plain-loop convolution, and through the FusedConv
// kernel against the reference backend (checking that the path is taken).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv_rows.h"
#include "graph_builder.h"
#include "op_tester.h"
#include "runtime/executor.h"

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

struct Shape {
  int64_t n, h, w, cin, cout, k, stride, pad;
};

// Plain loops in double: y = relu?(conv(x, w) + bias + z), NHWC x / y / z, OIHW w.
std::vector<float> reference(const Shape& s, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& bias, const std::vector<float>& z, bool relu) {
  const int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1, ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
  std::vector<float> y(static_cast<size_t>(s.n * oh * ow * s.cout));
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q)
        for (int64_t o = 0; o < s.cout; ++o) {
          const size_t at = static_cast<size_t>(((b * oh + r) * ow + q) * s.cout + o);
          double acc = bias[o] + (z.empty() ? 0.0 : z[at]);
          for (int64_t i = 0; i < s.k; ++i)
            for (int64_t j = 0; j < s.k; ++j) {
              const int64_t ih = r * s.stride - s.pad + i, iw = q * s.stride - s.pad + j;
              if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
              for (int64_t c = 0; c < s.cin; ++c)
                acc += double(x[((b * s.h + ih) * s.w + iw) * s.cin + c]) * w[((o * s.cin + c) * s.k + i) * s.k + j];
            }
          y[at] = relu && acc < 0 ? 0.f : float(acc);
        }
  return y;
}

TEST(CpuConvRows, MatchesPlainLoopConvolution) {
  if (!cpu::ConvRows::available()) GTEST_SKIP() << "no AVX-512F";
  // 3x3 pad 1 with rows of 9 output pixels (blocks of 7 and 2) and a residual; stride 2; a 1x1 on
  // 1024 input channels (two blocks of 512); an odd channel count; two images; a strided 1x1.
  const Shape shapes[] = {{1, 5, 9, 40, 192, 3, 1, 1}, {1, 9, 9, 24, 64, 3, 2, 1}, {1, 3, 3, 1024, 64, 1, 1, 0},
                          {2, 4, 3, 17, 64, 3, 1, 1},
                          {1, 6, 6, 32, 64, 1, 2, 0},
                          // pixel-major 1x1s (conv_rows.h pixel_major): 70 pixels (10 blocks of 7), 15
                          // (a block of 1 last), stride 2 with 20 pixels, 512 channels in one block, 768 KB
                          // of weights on 72 pixels (panel chunks of 4 and 2).
                          {2, 5, 7, 64, 256, 1, 1, 0}, {1, 3, 5, 48, 128, 1, 1, 0}, {1, 7, 9, 64, 192, 1, 2, 0},
                          {1, 2, 4, 512, 128, 1, 1, 0}, {1, 8, 9, 512, 384, 1, 1, 0}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.n << "x" << s.h << "x" << s.w << " " << s.cin << "->" << s.cout << " k" << s.k
                                    << " s" << s.stride);
    const auto x = random_floats(static_cast<size_t>(s.n * s.h * s.w * s.cin), seed++);
    const auto w = random_floats(static_cast<size_t>(s.cout * s.cin * s.k * s.k), seed++);
    const auto bias = random_floats(static_cast<size_t>(s.cout), seed++);
    cpu::ConvRows conv(w.data(), bias.data(), s.cout, s.cin, s.k, s.k, s.stride, s.stride, s.pad, s.pad);
    const int64_t oh = conv.out_h(s.h), ow = conv.out_w(s.w);
    EXPECT_EQ(conv.pixel_major(s.n * oh * ow),
              s.k == 1 && s.cin <= 2048 && (s.cin * s.cout * 4 <= cpu::ConvRows::kPixelMajorWeightBytes || s.n * oh * ow > 49));
    const size_t ny = static_cast<size_t>(s.n * oh * ow * s.cout);
    const auto z = random_floats(ny, seed++);
    // No residual; a residual in z; the residual already in y; then the last on 2 threads (each a
    // range of the 64-channel panels).
    for (int mode = 0; mode < 4; ++mode) {
      SCOPED_TRACE(mode);
      const int saved = omp_get_max_threads();
      if (mode == 3) omp_set_num_threads(2);
      std::vector<float> y(ny, 123.f);
      if (mode >= 2) y = z;
      conv.run(x.data(), s.n, s.h, s.w, mode == 0 ? nullptr : mode == 1 ? z.data() : y.data(), y.data(), mode != 0);
      omp_set_num_threads(saved);
      const auto want = reference(s, x, w, bias, mode == 0 ? std::vector<float>() : z, mode != 0);
      ASSERT_EQ(y.size(), want.size());
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-4) << "at " << i;
    }
  }
}

// Through the conv kernel at 1 thread: a 7x7 3x3 256->512 convolution (4.7 MB of weights) with bias,
// residual and ReLU takes cpu::ConvRows (dnnl_conv.cpp use_rows) and equals cpu-ref; so does a 3x3
// stride 2 with as many weights on 98 output pixels (strided_kxk_any_pixels, ResNet-50 b8's layer4.0
// conv2).
TEST(CpuConvRows, FusedConvTakesThePathAndMatchesReference) {
  if (!cpu::ConvRows::available()) GTEST_SKIP() << "no AVX-512F";
  const char* e = std::getenv("FERRY_CONV_ROWS");
  if (e && std::string(e) == "0") GTEST_SKIP() << "FERRY_CONV_ROWS=0";
  const char* s2 = std::getenv("FERRY_CONV_ROWS_S2");
  for (const int64_t stride : {1, 2}) {
    if (stride == 2 && s2 && std::string(s2) == "0") continue;
    SCOPED_TRACE(stride);
    const int64_t n = stride, hw = 7 * stride;
    Tensor x = random_tensor({n, hw, hw, 256}, 31);
    Tensor w = random_tensor({512, 256, 3, 3}, 32);
    Tensor b = random_tensor({512}, 33);
    Tensor z = random_tensor({n, 7, 7, 512}, 34);
    OpTester t("FusedConv", 1, "com.ferry");
    t.attr("kernel_shape", std::vector<int64_t>{3, 3}).attr("pads", std::vector<int64_t>{1, 1, 1, 1});
    t.attr("strides", std::vector<int64_t>{stride, stride});
    t.attr("activation", std::string("Relu")).attr("channels_last", int64_t(1));
    const Tensor want = t.input(x).const_input(w).const_input(b).input(z).run("cpu-ref")[0];
    // The same model on the cpu backend at 1 thread (OpTester's executors take the machine's cores).
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = 1;
    auto ex = Executor::create(t.last_model(), eo);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    const auto& in = t.last_model()->graph.inputs;
    ASSERT_EQ(in.size(), 2u);
    NamedTensors feeds = {{in[0].name, x}, {in[1].name, z}}, outs;
    const int64_t before = cpu::ConvRows::calls();
    const Status st = ex.value()->run(feeds, &outs);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_GT(cpu::ConvRows::calls(), before) << "the FusedConv kernel did not take cpu::ConvRows";
    ASSERT_EQ(outs.size(), 1u);
    // Sums of 2304 products of standard-normal values (scale ~48): 1e-4 relative.
    expect_near(outs[0].second, want, 1e-3, 1e-4);
  }
}

// Through the conv kernel at 1 thread: a 1x1 64->256 expansion with bias, residual and ReLU (ResNet-50's
// layer1 conv3), a stride-2 1x1 512->128 with bias (as layer3.0's projection) and a 128->512 with a
// residual on 2 images take cpu::ConvRows' pixel-major form (dnnl_conv.cpp use_rows_1x1) and equal
// cpu-ref.
TEST(CpuConvRows, Pixel1x1TakesThePathAndMatchesReference) {
  if (!cpu::ConvRows::available()) GTEST_SKIP() << "no AVX-512F";
  for (const char* v : {"FERRY_CONV_ROWS", "FERRY_CONV_ROWS_1X1"}) {
    const char* e = std::getenv(v);
    if (e && std::string(e) == "0") GTEST_SKIP() << v << "=0";
  }
  struct Case {
    std::vector<int64_t> x;
    int64_t cout, stride;
    bool residual;
  };
  for (const Case& c : {Case{{2, 6, 5, 64}, 256, 1, true}, Case{{1, 9, 8, 512}, 128, 2, false},
                        Case{{2, 4, 5, 128}, 512, 1, true}}) {
    SCOPED_TRACE(c.cout);
    const int64_t oh = (c.x[1] - 1) / c.stride + 1, ow = (c.x[2] - 1) / c.stride + 1;
    Tensor x = random_tensor(c.x, 41);
    Tensor w = random_tensor({c.cout, c.x[3], 1, 1}, 42);
    Tensor b = random_tensor({c.cout}, 43);
    Tensor z = random_tensor({c.x[0], oh, ow, c.cout}, 44);
    OpTester t("FusedConv", 1, "com.ferry");
    t.attr("kernel_shape", std::vector<int64_t>{1, 1}).attr("strides", std::vector<int64_t>{c.stride, c.stride});
    t.attr("activation", std::string("Relu")).attr("channels_last", int64_t(1));
    t.input(x).const_input(w).const_input(b);
    if (c.residual) t.input(z);
    const Tensor want = t.run("cpu-ref")[0];
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = 1;
    auto ex = Executor::create(t.last_model(), eo);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    const auto& in = t.last_model()->graph.inputs;
    ASSERT_EQ(in.size(), c.residual ? 2u : 1u);
    NamedTensors feeds = {{in[0].name, x}}, outs;
    if (c.residual) feeds.push_back({in[1].name, z});
    const int64_t before = cpu::ConvRows::calls();
    const Status st = ex.value()->run(feeds, &outs);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_GT(cpu::ConvRows::calls(), before) << "the FusedConv kernel did not take cpu::ConvRows";
    ASSERT_EQ(outs.size(), 1u);
    // Sums of up to 512 products of standard-normal values (scale ~23).
    expect_near(outs[0].second, want, 1e-4, 1e-5);
  }
}

}  // namespace
}  // namespace ferry
