// com.ferry fused ops (src/ops/fused_conv.cpp) against their unfused definitions, and the cpu
// backend's oneDNN kernels (src/backends/cpu/dnnl_*.cpp) against the reference kernels on the
// attributes they must cover: groups, depthwise, dilations, pads, auto_pad, 1-D/3-D, bf16,
// batched/broadcast MatMul, Gemm transB + C, pools with ceil_mode / count_include_pad.
#include <cmath>
#include <random>

#include "backends/cpu/cpu_kernels.h"
#include "cpu_features.h"
#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

using std::vector;

Tensor rnd(vector<int64_t> dims, uint32_t seed, DType dt = DType::kF32) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return dt == DType::kF32 ? t : cast_tensor(t, dt).value();
}

Tensor nchw_to_nhwc(const Tensor& t) {
  Tensor o = Tensor::allocate(t.dtype(), {t.dim(0), t.dim(2), t.dim(3), t.dim(1)});
  for (int64_t n = 0; n < t.dim(0); ++n)
    for (int64_t c = 0; c < t.dim(1); ++c)
      for (int64_t h = 0; h < t.dim(2); ++h)
        for (int64_t w = 0; w < t.dim(3); ++w)
          o.mutable_data<float>()[((n * t.dim(2) + h) * t.dim(3) + w) * t.dim(1) + c] =
              t.data<float>()[((n * t.dim(1) + c) * t.dim(2) + h) * t.dim(3) + w];
  return o;
}

// Whether the cpu backend's optimized factory (not the reference fallback) takes the tester's node.
bool fast_kernel_taken(const OpTester& t) {
  const Model& m = *t.last_model();
  const Node& n = m.graph.nodes[0];
  auto schema = resolve_schema(n, m.opset(n.domain));
  if (!schema.is_ok()) return false;
  const auto* factories = cpu_kernel_table().find(n.domain, n.op_type);
  if (!factories) return false;
  for (const CpuKernelFactory& f : *factories) {
    auto k = f(n, *schema.value(), m.graph);
    if (k.is_ok() && k.value()) return true;
  }
  return false;
}

// The activations written out independently of src/ops/fused_activation.h.
double act(const std::string& name, double x) {
  if (name == "Relu") return std::max(x, 0.0);
  if (name == "LeakyRelu") return x >= 0 ? x : 0.1 * x;
  if (name == "Clip") return std::min(std::max(x, -0.5), 0.25);
  if (name == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "HardSigmoid") return std::max(0.0, std::min(1.0, 0.3 * x + 0.4));
  if (name == "HardSwish") return x * std::max(0.0, std::min(1.0, (x + 3) / 6));
  if (name == "Tanh") return std::tanh(x);
  if (name == "Silu") return x / (1 + std::exp(-x));
  if (name == "Gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (name == "GeluTanh") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return x;
}

vector<float> act_params(const std::string& name) {
  if (name == "LeakyRelu") return {0.1f};
  if (name == "Clip") return {-0.5f, 0.25f};
  if (name == "HardSigmoid") return {0.3f, 0.4f};
  return {};
}

const vector<std::string> kActs = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish",
                                   "Tanh", "Silu", "Gelu", "GeluTanh"};

OpTester conv_attrs(OpTester t) {
  return std::move(t.attr("pads", vector<int64_t>{1, 1, 1, 1}).attr("strides", vector<int64_t>{1, 1}));
}

// act(conv(X, W) + B + Z) on `device`, and the same from plain Conv + loops.
void check_fused_conv(const std::string& a, const std::string& device, bool channels_last) {
  Tensor x = rnd({2, 8, 6, 5}, 1), w = rnd({16, 8, 3, 3}, 2), b = rnd({16}, 3), z = rnd({2, 16, 6, 5}, 4);
  Tensor y0 = conv_attrs(OpTester("Conv")).input(x).const_input(w).const_input(b).run()[0];
  Tensor expect = Tensor::allocate(DType::kF32, y0.dims());
  for (int64_t i = 0; i < y0.numel(); ++i)
    expect.mutable_data<float>()[i] = static_cast<float>(act(a, y0.data<float>()[i] + z.data<float>()[i]));
  OpTester t = conv_attrs(OpTester("FusedConv", 1, "com.ferry"));
  t.attr("activation", a);
  if (!act_params(a).empty()) t.attr("activation_params", act_params(a));
  if (channels_last) t.attr("channels_last", int64_t(1));
  Tensor y = t.input(channels_last ? nchw_to_nhwc(x) : x).const_input(w).const_input(b)
                 .input(channels_last ? nchw_to_nhwc(z) : z).run(device)[0];
  EXPECT_TRUE(fast_kernel_taken(t));
  expect_near(y, channels_last ? nchw_to_nhwc(expect) : expect, 2e-4, 2e-4);
}

TEST(FusedConv, EveryActivationWithResidualMatchesConvThenOps) {
  for (const std::string& a : kActs) {
    SCOPED_TRACE(a);
    check_fused_conv(a, "cpu-ref", false);
    check_fused_conv(a, "cpu-ref", true);
  }
}

TEST(FusedConv, CpuKernelMatchesReferenceForEveryActivation) {
  for (const std::string& a : kActs) {
    SCOPED_TRACE(a);
    check_fused_conv(a, "cpu", false);
    check_fused_conv(a, "cpu", true);
  }
}

// A channels-last region's entry: X stays NCHW (nchw_input = 1), Z and Y are NHWC.
// A 1x1 kernel on a 1x1 image (squeeze-excitation after a global pool) takes the cpu kernel's
// small-GEMM path: every activation, 1 to 9 rows (the register blocks hold up to 8), 70 output
// channels (a 64-wide panel and a tail), NCHW and channels-last, with and without a bias.
TEST(FusedConv, PointwiseOnOnePixelMatchesReference) {
  for (const std::string& a : kActs) {
    for (int64_t rows : {1, 3, 9}) {
      for (bool channels_last : {false, true}) {
        for (bool bias : {true, false}) {
          SCOPED_TRACE(a + " rows " + std::to_string(rows) + (channels_last ? " nhwc" : " nchw") + (bias ? " bias" : ""));
          Tensor x = rnd({rows, 37, 1, 1}, 11), w = rnd({70, 37, 1, 1}, 12), b = rnd({70}, 13);
          OpTester c("Conv");
          c.input(x).const_input(w);
          if (bias) c.const_input(b);
          Tensor y0 = c.run("cpu-ref")[0];
          Tensor expect = Tensor::allocate(DType::kF32, y0.dims());
          for (int64_t i = 0; i < y0.numel(); ++i)
            expect.mutable_data<float>()[i] = static_cast<float>(act(a, y0.data<float>()[i]));
          OpTester t("FusedConv", 1, "com.ferry");
          t.attr("activation", a);
          if (!act_params(a).empty()) t.attr("activation_params", act_params(a));
          if (channels_last) t.attr("channels_last", int64_t(1));
          t.input(channels_last ? nchw_to_nhwc(x) : x).const_input(w);
          if (bias) t.const_input(b);
          Tensor y = t.run("cpu")[0];
          EXPECT_TRUE(fast_kernel_taken(t));
          expect_near(y, channels_last ? nchw_to_nhwc(expect) : expect, 2e-5, 2e-5);
        }
      }
    }
  }
}

TEST(FusedConv, NchwInputWithChannelsLastOutput) {
  Tensor x = rnd({2, 3, 9, 7}, 1), w = rnd({16, 3, 3, 3}, 2), b = rnd({16}, 3), z = rnd({2, 16, 9, 7}, 4);
  Tensor y0 = conv_attrs(OpTester("Conv")).input(x).const_input(w).const_input(b).run()[0];
  Tensor expect = Tensor::allocate(DType::kF32, y0.dims());
  for (int64_t i = 0; i < y0.numel(); ++i)
    expect.mutable_data<float>()[i] = std::max(y0.data<float>()[i] + z.data<float>()[i], 0.f);
  for (const char* dev : {"cpu-ref", "cpu"}) {
    SCOPED_TRACE(dev);
    OpTester t = conv_attrs(OpTester("FusedConv", 1, "com.ferry"));
    t.attr("activation", std::string("Relu")).attr("channels_last", int64_t(1)).attr("nchw_input", int64_t(1));
    Tensor y = t.input(x).const_input(w).const_input(b).input(nchw_to_nhwc(z)).run(dev)[0];
    EXPECT_TRUE(fast_kernel_taken(t));
    expect_near(y, nchw_to_nhwc(expect), 2e-4, 2e-4);
  }
}

TEST(FusedConv, RejectsUnknownActivationAndBadResidual) {
  auto r = OpTester("FusedConv", 1, "com.ferry").attr("activation", "Softsign").input(rnd({1, 2, 4, 4}, 1))
               .const_input(rnd({2, 2, 1, 1}, 2)).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("Softsign"), std::string::npos) << r.status().to_string();
  r = OpTester("FusedConv", 1, "com.ferry").input(rnd({1, 2, 4, 4}, 1)).const_input(rnd({2, 2, 1, 1}, 2)).no_input()
          .input(rnd({1, 2, 5, 4}, 3)).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'Z'"), std::string::npos) << r.status().to_string();
}

TEST(FusedMatMul, BiasResidualAndGeluMatchTheUnfusedOps) {
  Tensor a = rnd({2, 3, 8}, 1), b = rnd({8, 5}, 2), bias = rnd({5}, 3), z = rnd({2, 3, 5}, 4);
  Tensor mm = OpTester("MatMul").input(a).const_input(b).run()[0];
  Tensor expect = Tensor::allocate(DType::kF32, mm.dims());
  for (int64_t i = 0; i < mm.numel(); ++i)
    expect.mutable_data<float>()[i] =
        static_cast<float>(act("Gelu", mm.data<float>()[i] + bias.data<float>()[i % 5] + z.data<float>()[i]));
  for (const char* dev : {"cpu-ref", "cpu"}) {
    SCOPED_TRACE(dev);
    Tensor y = OpTester("FusedMatMul", 1, "com.ferry").attr("activation", "Gelu").input(a).const_input(b)
                   .const_input(bias).input(z).run(dev)[0];
    expect_near(y, expect, 1e-4, 1e-4);
  }
}

TEST(FusedGemm, TransBWithBiasAndRelu) {
  Tensor a = rnd({4, 6}, 1), b = rnd({3, 6}, 2), c = rnd({3}, 3);
  Tensor g = OpTester("Gemm").attr("transB", int64_t(1)).attr("beta", 0.5f).input(a).const_input(b).const_input(c).run()[0];
  for (const char* dev : {"cpu-ref", "cpu"}) {
    SCOPED_TRACE(dev);
    Tensor y = OpTester("FusedGemm", 1, "com.ferry").attr("transB", int64_t(1)).attr("beta", 0.5f).attr("activation", "Relu")
                   .input(a).const_input(b).const_input(c).run(dev)[0];
    Tensor expect = Tensor::allocate(DType::kF32, g.dims());
    for (int64_t i = 0; i < g.numel(); ++i) expect.mutable_data<float>()[i] = std::max(0.f, g.data<float>()[i]);
    expect_near(y, expect, 1e-5, 1e-5);
  }
}

TEST(NhwcPools, MatchTheNchwPools) {
  Tensor x = rnd({2, 5, 7, 6}, 1);
  struct Case { const char* op; bool ceil; };
  for (Case c : {Case{"MaxPool", false}, Case{"MaxPool", true}, Case{"AveragePool", true}, Case{"GlobalAveragePool", false}}) {
    SCOPED_TRACE(c.op);
    auto setup = [&](OpTester t) {
      if (std::string(c.op) != "GlobalAveragePool")
        t.attr("kernel_shape", vector<int64_t>{3, 2}).attr("strides", vector<int64_t>{2, 2})
            .attr("pads", vector<int64_t>{1, 0, 1, 1}).attr("ceil_mode", int64_t(c.ceil));
      return t;
    };
    Tensor ref = setup(OpTester(c.op)).input(x).run()[0];
    for (const char* dev : {"cpu-ref", "cpu"}) {
      OpTester nhwc = setup(OpTester(std::string("Nhwc") + c.op, 1, "com.ferry"));
      expect_near(nhwc.input(nchw_to_nhwc(x)).run(dev)[0], nchw_to_nhwc(ref));
      OpTester nchw = setup(OpTester(c.op));
      expect_near(nchw.input(x).run(dev)[0], ref);
      EXPECT_TRUE(fast_kernel_taken(nhwc) && fast_kernel_taken(nchw));
    }
  }
}

// ---- cpu (oneDNN) vs cpu-ref on plain ONNX ops ---------------------------------------------------

struct ConvSpec {
  vector<int64_t> x, w;
  int64_t group = 1;
  vector<int64_t> strides, dilations, pads;
  std::string auto_pad;
  bool bias = true;
};

void check_conv(const ConvSpec& s, DType dt = DType::kF32, double tol = 1e-4) {
  auto make = [&]() {
    OpTester t("Conv");
    t.attr("group", s.group);
    if (!s.strides.empty()) t.attr("strides", s.strides);
    if (!s.dilations.empty()) t.attr("dilations", s.dilations);
    if (!s.pads.empty()) t.attr("pads", s.pads);
    if (!s.auto_pad.empty()) t.attr("auto_pad", s.auto_pad);
    t.input(rnd(s.x, 11, dt)).const_input(rnd(s.w, 12, dt));
    if (s.bias) t.const_input(rnd({s.w[0]}, 13, dt));
    return t;
  };
  Tensor ref = make().run("cpu-ref")[0];
  OpTester fast = make();
  Tensor got = fast.run("cpu")[0];
  // bf16 has oneDNN kernels on AVX-512 hosts only; elsewhere the reference kernel answers.
  if (dt != DType::kBF16 || test::cpu_has_avx512_core()) {
    EXPECT_TRUE(fast_kernel_taken(fast));
  }
  expect_near(got, ref, tol, tol);
}

TEST(CpuConv, MatchesReferenceAcrossAttributes) {
  check_conv({{1, 4, 9, 9}, {6, 4, 3, 3}, 1, {2, 2}, {}, {1, 0, 2, 1}});
  check_conv({{2, 8, 7, 7}, {8, 1, 3, 3}, 8, {1, 1}, {}, {1, 1, 1, 1}});             // depthwise
  check_conv({{1, 6, 8, 8}, {9, 2, 3, 3}, 3, {1, 1}, {2, 2}, {2, 2, 2, 2}});          // groups + dilation
  check_conv({{1, 3, 10, 11}, {5, 3, 4, 3}, 1, {2, 3}, {}, {}, "SAME_UPPER", false});  // auto_pad
  check_conv({{1, 3, 10, 11}, {5, 3, 4, 3}, 1, {2, 1}, {}, {}, "SAME_LOWER"});
  check_conv({{1, 3, 10, 11}, {5, 3, 3, 3}, 1, {}, {}, {}, "VALID"});
  check_conv({{2, 4, 15}, {3, 4, 5}, 1, {2}, {2}, {1, 3}});                           // 1-D
  check_conv({{1, 2, 5, 6, 7}, {4, 2, 3, 2, 3}, 1, {1, 2, 1}, {}, {1, 0, 1, 1, 1, 0}}); // 3-D
}

// Shapes where the kernel picks Winograd (f32 3x3 stride 1, 24x24+ outputs, 32+ channels): same
// results as the reference within f32 rounding.
TEST(CpuConv, WinogradSizesMatchReference) {
  check_conv({{1, 32, 24, 24}, {32, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}});
  check_conv({{2, 48, 26, 30}, {16, 48, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "", false});
}

TEST(CpuConv, Bf16MatchesReferenceWithinBf16Precision) {
  check_conv({{1, 16, 8, 8}, {32, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}}, DType::kBF16, 0.05);
}

TEST(CpuConv, PlansPerShapeForDynamicBatch) {
  Tensor w = rnd({4, 3, 3, 3}, 2);
  for (int64_t n : {1, 3, 2}) {
    OpTester t("Conv");
    t.attr("pads", vector<int64_t>{1, 1, 1, 1}).input(rnd({n, 3, 6, 6}, 1)).const_input(w)
        .symbolic_input_shape(0, Shape({Dim::symbolic("N"), Dim(3), Dim(6), Dim(6)}));
    Tensor ref = t.run("cpu-ref")[0];
    expect_near(t.run("cpu")[0], ref, 1e-4, 1e-4);
  }
}

TEST(CpuMatMul, BatchedBroadcastAndConstantWeights) {
  struct Case { vector<int64_t> a, b; bool b_const; };
  for (const Case& c : {Case{{2, 3, 4, 5}, {5, 6}, true}, Case{{2, 1, 4, 5}, {3, 5, 2}, false},
                        Case{{5}, {2, 5, 3}, false}, Case{{2, 3, 4}, {4}, false}, Case{{7, 5}, {5, 3}, false}}) {
    auto make = [&]() {
      OpTester t("MatMul");
      t.input(rnd(c.a, 1));
      if (c.b_const) t.const_input(rnd(c.b, 2));
      else t.input(rnd(c.b, 2));
      return t;
    };
    OpTester fast = make();
    expect_near(fast.run("cpu")[0], make().run("cpu-ref")[0], 1e-4, 1e-4);
    EXPECT_TRUE(fast_kernel_taken(fast));
  }
}

TEST(CpuMatMul, Bf16WithConstantWeightsMatchesReferenceWithinBf16Precision) {
  auto make = [&]() {
    OpTester t("FusedMatMul", 1, "com.ferry");
    t.attr("activation", "Relu").input(rnd({2, 5, 32}, 1, DType::kBF16)).const_input(rnd({32, 16}, 2, DType::kBF16))
        .const_input(rnd({16}, 3, DType::kBF16));
    return t;
  };
  OpTester fast = make();
  expect_near(fast.run("cpu")[0], make().run("cpu-ref")[0], 0.05, 0.02);
  if (test::cpu_has_avx512_core()) {  // bf16: AVX-512 hosts only
    EXPECT_TRUE(fast_kernel_taken(fast));
  }
}

TEST(CpuGemm, TransBAndCBroadcasts) {
  for (bool tb : {false, true}) {
    auto make = [&]() {
      OpTester t("Gemm");
      t.attr("transB", int64_t(tb)).attr("beta", 2.0f).input(rnd({3, 5}, 1))
          .const_input(rnd(tb ? vector<int64_t>{4, 5} : vector<int64_t>{5, 4}, 2)).const_input(rnd({1, 4}, 3));
      return t;
    };
    OpTester fast = make();
    expect_near(fast.run("cpu")[0], make().run("cpu-ref")[0], 1e-4, 1e-4);
    EXPECT_TRUE(fast_kernel_taken(fast));
  }
}

}  // namespace
}  // namespace ferry::testing
