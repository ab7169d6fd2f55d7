// The cpu backend's CNN fast paths of issue 22 against the reference kernels: f32 Add/Sub/Mul/Div of
// a [rows, C] tensor and a row broadcast over it (elementwise.cpp's row loop: the NHWC
// squeeze-excitation scale, either operand first, and per batch row), and a SiLU convolution large enough that the SiLU
// pass after the oneDNN primitive (dnnl_conv.cpp, act_after_postop) splits over the threads, with a
// residual, NCHW and channels-last; strided 1x1 channels-last convolutions; the f32 NHWC global average pool's own loop (dnnl_pool.cpp).
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "graph_builder.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

TEST(CpuCnnKernels, RowBroadcastBinaryOpsMatchReferenceBits) {
  const vector<std::pair<vector<int64_t>, vector<int64_t>>> shapes = {
      {{1, 40, 40, 32}, {1, 1, 1, 32}},  // SE scale, NHWC, big enough to split over threads
      {{1, 1, 1, 32}, {1, 40, 40, 32}},  // the row first (Sub/Div order)
      {{3, 4, 5}, {5}},                  // a short row
      {{2, 7, 3}, {2, 1, 3}},            // per-sample rows: not a single row broadcast
      {{3, 20, 20, 32}, {3, 1, 1, 32}},  // batched SE scale: rows per batch, split over threads across batches
      {{3, 1, 1, 32}, {3, 20, 20, 32}},  // the same, the rows first
      {{4, 1, 6}, {4, 9, 6}},            // one row per batch, the other operand full
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      SCOPED_TRACE(std::string(op) + " case " + std::to_string(i));
      const Tensor a = random_tensor(shapes[i].first, 1 + static_cast<uint32_t>(i));
      const Tensor b = random_tensor(shapes[i].second, 100 + static_cast<uint32_t>(i));
      const Tensor want = OpTester(op).input(a).input(b).run("cpu-ref")[0];
      const Tensor got = OpTester(op).input(a).input(b).run("cpu")[0];
      ASSERT_EQ(got.dims(), want.dims());
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(want.nbytes())), 0);
    }
  }
}

TEST(CpuCnnKernels, SiluConvolutionOnALargeImageMatchesReference) {
  for (bool channels_last : {false, true}) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE(std::string(channels_last ? "nhwc" : "nchw") + (residual ? " with Z" : ""));
      const int64_t n = 1, c = 16, h = 24, w = 24, k = 32;
      const Tensor x = random_tensor(channels_last ? vector<int64_t>{n, h, w, c} : vector<int64_t>{n, c, h, w}, 1);
      const Tensor wt = random_tensor({k, c, 3, 3}, 2), b = random_tensor({k}, 3);
      const Tensor z = random_tensor(channels_last ? vector<int64_t>{n, h, w, k} : vector<int64_t>{n, k, h, w}, 4);
      const auto run = [&](const char* device) {
        OpTester t("FusedConv", 1, "com.ferry");
        t.attr("pads", vector<int64_t>{1, 1, 1, 1}).attr("activation", std::string("Silu"));
        if (channels_last) t.attr("channels_last", int64_t(1));
        t.input(x).const_input(wt).const_input(b);
        if (residual) t.input(z);
        return t.run(device)[0];
      };
      expect_near(run("cpu"), run("cpu-ref"), 1e-4, 1e-4);
    }
  }
}

// Strided 1x1 convolutions, channels-last: odd sizes so the last row and column are read, unequal
// strides, a residual with ReLU, several images; a one-pixel image (the small-GEMM path) and a
// padded one. (The subsampled-source variant, FERRY_CONV_SUBSAMPLE=1, lost and is gone: issue 39.)
TEST(CpuCnnKernels, StridedPointwiseConvolutionMatchesReference) {
  struct Case {
    vector<int64_t> x, strides, pads;
    bool residual;
  };
  const vector<Case> cases = {{{2, 9, 11, 32}, {2, 2}, {0, 0, 0, 0}, false},
                              {{1, 10, 7, 48}, {3, 2}, {0, 0, 0, 0}, true},
                              {{3, 1, 1, 16}, {2, 2}, {0, 0, 0, 0}, false},
                              {{1, 8, 8, 16}, {2, 2}, {1, 1, 1, 1}, true}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    const int64_t k = 64;
    const auto out = [&](int64_t d, int64_t s, int64_t p) { return (d + p - 1) / s + 1; };
    const vector<int64_t> yd = {c.x[0], out(c.x[1], c.strides[0], c.pads[0] + c.pads[2]),
                                out(c.x[2], c.strides[1], c.pads[1] + c.pads[3]), k};
    const Tensor x = random_tensor(c.x, 20 + static_cast<uint32_t>(i));
    const Tensor wt = random_tensor({k, c.x[3], 1, 1}, 30), b = random_tensor({k}, 31), z = random_tensor(yd, 32);
    const auto run = [&](const char* device) {
      OpTester t("FusedConv", 1, "com.ferry");
      t.attr("strides", c.strides).attr("pads", c.pads).attr("channels_last", int64_t(1));
      if (c.residual) t.attr("activation", std::string("Relu"));
      t.input(x).const_input(wt).const_input(b);
      if (c.residual) t.input(z);
      return t.run(device)[0];
    };
    const Tensor want = run("cpu-ref");
    const Tensor got = run("cpu");
    ASSERT_EQ(got.dims(), yd);
    expect_near(got, want, 1e-4, 1e-4);
  }
}

TEST(CpuCnnKernels, NhwcGlobalAveragePoolMatchesReference) {
  for (const vector<int64_t>& dims : {vector<int64_t>{1, 56, 56, 24}, vector<int64_t>{3, 7, 7, 40}, vector<int64_t>{2, 1, 1, 5}}) {
    SCOPED_TRACE(::testing::PrintToString(dims));
    const Tensor x = random_tensor(dims, 7);
    OpTester t("NhwcGlobalAveragePool", 1, "com.ferry");
    const Tensor got = t.input(x).run("cpu")[0];
    const Tensor want = OpTester("NhwcGlobalAveragePool", 1, "com.ferry").input(x).run("cpu-ref")[0];
    ASSERT_EQ(got.dims(), (vector<int64_t>{dims[0], 1, 1, dims[3]}));
    expect_near(got, want, 1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace ferry::testing
