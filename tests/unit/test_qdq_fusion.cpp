// QDQ models fused into int8 ops: the qdq_fusion pass (src/passes/qdq_fusion.cpp), com.ferry.QConvFused's
// reference kernel (src/ops/quantize_fused.cpp, built on ConvInteger's) and the cpu backend's oneDNN int8
// kernel (src/backends/cpu/dnnl_int8_conv.cpp). Three-way comparison on small generated QDQ graphs:
//   unfused QDQ graph (reference kernels)  ==  fused graph (reference)  ==  fused graph (oneDNN int8)
// bit for bit with power-of-two scales (every f32 step is then exact, so only the integer math counts),
// and within one quantization step with arbitrary scales (f32 rounding next to a tie; see the op's header).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/prepacked.h"
#include "compiler/compile.h"
#include "compiler/session.h"
#include "cpu_features.h"
#include "format/compiled_model.h"
#include "pass_test_util.h"

namespace ferry::testing {
namespace {

using std::vector;

struct QdqCase {
  int64_t c = 8, m = 16, hw = 7, k = 3, stride = 1, pad = 1, group = 1;
  bool pow2 = true;      // power-of-two scales
  uint8_t x_zp = 0;      // source zero point
  bool conv_relu = true;
  bool residual = false;  // Conv [Relu] -> Q -> DQ -> Add(DQ(z)) -> Relu -> Q
  bool bias = true;
  bool nhwc = false;  // oneDNN side through the nhwc_layout pass (channels_last QConvFused)
  bool pool = false;  // Conv [Relu] -> MaxPool 3x3/2 (pads 1) -> Q (a ResNet stem)
  uint32_t seed = 1;
};

Tensor i8_tensor(vector<int64_t> dims, std::mt19937& rng, int lo, int hi, DType dt) {
  Tensor t = Tensor::allocate(dt, std::move(dims));
  std::uniform_int_distribution<int> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::kU8) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
    else if (dt == DType::kI8) t.mutable_data<int8_t>()[i] = static_cast<int8_t>(d(rng));
    else t.mutable_data<int32_t>()[i] = d(rng);
  }
  return t;
}

Tensor u8_scalar(uint8_t v) {
  Tensor t = Tensor::allocate(DType::kU8, {});
  t.mutable_data<uint8_t>()[0] = v;
  return t;
}

Attribute axis0() { return int_attr(0); }

// A scale: a power of two 2^-e, or that times an awkward factor.
float scale(const QdqCase& qc, int e, float odd) { return std::ldexp(qc.pow2 ? 1.f : odd, -e); }

std::shared_ptr<Model> qdq_conv_model(const QdqCase& qc) {
  std::mt19937 rng(qc.seed);
  ModelBuilder b(13);
  const int64_t out_hw = (qc.hw + 2 * qc.pad - qc.k) / qc.stride + 1;
  auto x = b.input("x", {1, qc.c, qc.hw, qc.hw}, DType::kU8);
  const float sx = scale(qc, 6, 1.37f);
  auto dqx = b.node("DequantizeLinear", {x, b.scalar(sx), b.constant(u8_scalar(qc.x_zp))});
  Tensor ws = Tensor::allocate(DType::kF32, {qc.m});
  Tensor bs = Tensor::allocate(DType::kF32, {qc.m});
  for (int64_t i = 0; i < qc.m; ++i) {
    ws.mutable_data<float>()[i] = scale(qc, 7 + static_cast<int>(i % 3), 1.f + 0.11f * static_cast<float>(i % 5));
    bs.mutable_data<float>()[i] = sx * ws.data<float>()[i];
  }
  Tensor wz = Tensor::allocate(DType::kI8, {qc.m});
  auto dqw = b.node("DequantizeLinear",
                    {b.constant(i8_tensor({qc.m, qc.c / qc.group, qc.k, qc.k}, rng, -127, 127, DType::kI8)), b.constant(ws),
                     b.constant(wz)},
                    {{"axis", axis0()}});
  vector<std::string> conv_in = {dqx, dqw};
  if (qc.bias)
    conv_in.push_back(b.node("DequantizeLinear", {b.constant(i8_tensor({qc.m}, rng, -3000, 3000, DType::kI32)), b.constant(bs)},
                             {{"axis", axis0()}}));
  auto y = b.node("Conv", conv_in,
                  {{"pads", ints_attr({qc.pad, qc.pad, qc.pad, qc.pad})}, {"strides", ints_attr({qc.stride, qc.stride})},
                   {"group", int_attr(qc.group)}});
  if (qc.conv_relu) y = b.node("Relu", {y});
  if (qc.pool)
    y = b.node("MaxPool", {y}, {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}});
  const float s1 = scale(qc, 1, 1.21f);
  auto q1 = b.node("QuantizeLinear", {y, b.scalar(s1), b.constant(u8_scalar(qc.conv_relu ? 0 : 128))});
  if (qc.residual) {
    auto z = b.input("z", {1, qc.m, out_hw, out_hw}, DType::kU8);
    auto d1 = b.node("DequantizeLinear", {q1, b.scalar(s1), b.constant(u8_scalar(qc.conv_relu ? 0 : 128))});
    auto dz = b.node("DequantizeLinear", {z, b.scalar(scale(qc, 2, 1.13f)), b.constant(u8_scalar(7))});
    auto a = b.node("Relu", {b.node("Add", {d1, dz})});
    q1 = b.node("QuantizeLinear", {a, b.scalar(scale(qc, 0, 1.09f)), b.constant(u8_scalar(0))});
  }
  b.output(q1);
  return b.build();
}

NamedTensors u8_feeds(const Model& m, uint32_t seed) {
  std::mt19937 rng(seed);
  NamedTensors feeds;
  for (const ValueInfo& v : m.graph.inputs) feeds.emplace_back(v.name, i8_tensor(v.type.shape->values(), rng, 0, 255, DType::kU8));
  return feeds;
}

bool fast_kernels_taken(const Model& m, int* fused, const std::string& op = "QConvFused") {
  *fused = 0;
  for (const Node& n : m.graph.nodes) {
    if (n.op_type != op) continue;
    ++*fused;
    auto schema = resolve_schema(n, m.opset(n.domain));
    const auto* factories = cpu_kernel_table().find(n.domain, n.op_type);
    if (!schema.is_ok() || !factories) return false;
    bool taken = false;
    for (const CpuKernelFactory& f : *factories) {
      auto k = f(n, *schema.value(), m.graph);
      taken = taken || (k.is_ok() && k.value());
    }
    if (!taken) return false;
  }
  return true;
}

// Max |a - b| over two uint8 tensors; `exact` gets the share of equal elements.
int max_step_diff(const Tensor& a, const Tensor& b, double* exact) {
  EXPECT_EQ(a.dims(), b.dims());
  EXPECT_EQ(a.dtype(), DType::kU8);
  EXPECT_EQ(b.dtype(), DType::kU8);
  int worst = 0;
  int64_t same = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    const int d = std::abs(int(a.data<uint8_t>()[i]) - int(b.data<uint8_t>()[i]));
    worst = std::max(worst, d);
    same += d == 0;
  }
  *exact = a.numel() ? double(same) / double(a.numel()) : 1.0;
  return worst;
}

void check_case(const QdqCase& qc) {
  SCOPED_TRACE(::testing::Message() << "c=" << qc.c << " m=" << qc.m << " k=" << qc.k << " stride=" << qc.stride
                                    << " group=" << qc.group << " pow2=" << qc.pow2 << " x_zp=" << int(qc.x_zp)
                                    << " residual=" << qc.residual);
  auto model = qdq_conv_model(qc);
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  ASSERT_EQ(changes, 1);
  ASSERT_EQ(fused->graph.nodes.size(), 1u);  // every DQ, the Conv, Relu(s), Q(s) and the Add in one node
  EXPECT_EQ(fused->graph.nodes[0].op_type, "QConvFused");
  int n = 0;
  EXPECT_TRUE(fast_kernels_taken(*fused, &n));
  const NamedTensors feeds = u8_feeds(*model, qc.seed + 100);
  const NamedTensors unfused_ref = run_model(model, feeds, "cpu-ref");
  const NamedTensors fused_ref = run_model(fused, feeds, "cpu-ref");
  std::shared_ptr<Model> fast = fused;
  if (qc.nhwc) {
    fast = run_pass(*fused, "nhwc_layout");
    int channels_last = 0;
    for (const Node& node : fast->graph.nodes)
      if (const Attribute* a = node.attr("channels_last"); node.op_type == "QConvFused" && a) channels_last += a->i != 0;
    EXPECT_EQ(channels_last, 1);
    EXPECT_TRUE(fast_kernels_taken(*fast, &n));
  }
  const NamedTensors fused_cpu = run_model(fast, feeds, "cpu");
  ASSERT_EQ(unfused_ref.size(), 1u);
  ASSERT_EQ(fused_ref.size(), 1u);
  ASSERT_EQ(fused_cpu.size(), 1u);
  double e1 = 0, e2 = 0;
  const int d1 = max_step_diff(fused_ref[0].second, unfused_ref[0].second, &e1);
  const int d2 = max_step_diff(fused_cpu[0].second, fused_ref[0].second, &e2);
  // oneDNN computes the op's f32 steps in its order (the scale multiply, round, clip, the residual's fma,
  // rounding before the zero point): bit for bit the reference, whatever the scales.
  EXPECT_EQ(d2, 0) << "oneDNN int8 vs fused reference";
  if (qc.pow2) {
    EXPECT_EQ(d1, 0) << "fused reference vs QDQ graph";
  } else {
    EXPECT_LE(d1, 1) << "fused reference vs QDQ graph";
    EXPECT_GE(e1, 0.98);
    EXPECT_GE(e2, 0.98);
  }
  // The output is not trivially saturated (the comparison means something).
  int64_t interior = 0;
  const Tensor& y = fused_ref[0].second;
  for (int64_t i = 0; i < y.numel(); ++i) interior += y.data<uint8_t>()[i] > 0 && y.data<uint8_t>()[i] < 255;
  EXPECT_GT(interior, y.numel() / 4);
}

TEST(QdqFusion, ConvReluExactWithPowerOfTwoScales) { check_case(QdqCase{}); }

TEST(QdqFusion, ConvWithSourceZeroPointOnPaddedBorder) {
  QdqCase qc;
  qc.x_zp = 131;
  qc.conv_relu = false;
  check_case(qc);
  qc.pow2 = false;
  qc.seed = 2;
  check_case(qc);
}

TEST(QdqFusion, ResidualAddWithMidQuantization) {
  QdqCase qc;
  qc.residual = true;
  check_case(qc);
  qc.pow2 = false;
  qc.x_zp = 17;
  qc.seed = 3;
  check_case(qc);
}

// 1x1 (oneDNN's brgconv_1x1) with the residual: the Relus left to the u8 saturation or to a mid clip
// with lower bound 0, and a mid clip with a negative lower bound (mid zero point 128).
TEST(QdqFusion, PointwiseResidualEpilogues) {
  QdqCase qc;
  qc.k = 1;
  qc.pad = 0;
  qc.c = 16;
  qc.m = 32;
  qc.residual = true;
  check_case(qc);
  qc.conv_relu = false;
  qc.seed = 5;
  check_case(qc);
  qc.pow2 = false;
  qc.x_zp = 9;
  qc.seed = 6;
  check_case(qc);
}

// Few input channels (an image network's first convolution): the kernel's taps packed into channels
// (dnnl_int8_conv.cpp, init_tap_packing), the zero point moved into the bias, padded borders included.
// An image network's conv1: 7x7/2 on 3 channels, uint8 zero point 128, channels-last.
QdqCase conv1_case() {
  QdqCase qc;
  qc.c = 3;
  qc.k = 7;
  qc.pad = 3;
  qc.stride = 2;
  qc.hw = 15;
  qc.x_zp = 128;
  qc.conv_relu = false;
  qc.nhwc = true;
  return qc;
}

TEST(QdqFusion, FewChannelsTapPacking) {
  QdqCase qc = conv1_case();
  check_case(qc);
  qc.pow2 = false;
  qc.seed = 7;
  check_case(qc);
  qc = QdqCase{};
  qc.c = 1;
  qc.x_zp = 3;
  qc.nhwc = true;
  check_case(qc);
}

TEST(QdqFusion, StridedPointwiseGroupedAndDepthwise) {
  QdqCase qc;
  qc.k = 1;
  qc.pad = 0;
  qc.stride = 2;
  qc.pow2 = false;
  check_case(qc);
  qc = QdqCase{};
  qc.group = 2;
  qc.bias = false;
  check_case(qc);
  qc = QdqCase{};
  qc.c = qc.m = qc.group = 8;
  qc.pow2 = false;
  qc.seed = 4;
  check_case(qc);
  qc.conv_relu = false;  // output zero point 128: the round post-op, on oneDNN's depthwise kernel too (NHWC)
  qc.nhwc = true;
  qc.seed = 8;
  check_case(qc);
}

// On large images with few channels a 1x1 residual convolution (ResNet-50's layer1/layer2 conv3) runs on
// oneDNN's jit_int8_1x1 and a 3x3 (conv2) on jit_int8 (dnnl_int8_conv.cpp, preferred_impl), the others on
// brgconv_1x1 / brgconv: each, forced with FERRY_QCONV_IMPL (a name oneDNN does not offer leaves the node
// to the reference: the fast-kernel check fails), is the reference bit for bit, with and without the mid
// Relu (and for the 1x1 a source zero point); the tap-packed few-channel convolution too.
TEST(QdqFusion, ConvolutionOnEitherOneDnnKernel) {
  struct Restore {
    ~Restore() { unsetenv("FERRY_QCONV_IMPL"); }
  } restore;
  for (int k : {1, 3})
    for (const char* impl : {"auto", "jit_int8", "brgconv"}) {
      // jit_int8 and brgconv are oneDNN's AVX-512 kernels: an AVX2 host offers neither (only
      // jit_uni_int8:avx2), so forcing them there is refused by design; "auto" runs everywhere.
      if (std::string(impl) != "auto" && !test::cpu_has_avx512_core()) continue;
      SCOPED_TRACE(::testing::Message() << k << "x" << k << " " << impl);
      ASSERT_EQ(setenv("FERRY_QCONV_IMPL", impl, 1), 0);
      QdqCase qc;
      qc.k = k;
      qc.pad = k / 2;
      qc.c = 64;
      qc.m = 64;
      qc.hw = 28;
      qc.residual = k == 1;
      qc.nhwc = true;
      qc.pow2 = false;
      qc.seed = 11;
      check_case(qc);
      qc.conv_relu = false;
      qc.x_zp = k == 1 ? 9 : 0;  // (oneDNN 2.6's brgconv has no source zero point with padding)
      qc.seed = 12;
      check_case(qc);
      if (k == 3) {  // conv1 of an image network: taps packed into channels, a 7x1 on 24 (jit_int8 by the rule;
        // oneDNN's first choice there is brgconv, which has no 7x7 with a source zero point for the unpacked
        // NCHW graph that check_case also runs)
        if (std::string(impl) == "brgconv") {
          ASSERT_EQ(setenv("FERRY_QCONV_IMPL", "first", 1), 0);
        }
        qc = conv1_case();
        qc.pow2 = false;
        qc.seed = 13;
        check_case(qc);
      }
    }
}

// The plain structure (bench/int8_baseline.py; `ferry quantize`'s floor): DQ(x), DQ(w) and a FLOAT bias
// -> Conv [-> Relu | Clip(lo, hi)] [-> Q]: with the Q, QConvFused with a u8 output; without, QConvFused
// with a float output (the dequantization in oneDNN's epilogue, f32 destination). A Clip's bounds come
// from a Constant node as the PyTorch exporter writes ReLU6's.
struct PlainCase {
  int64_t c = 8, m = 16, hw = 9, k = 3, stride = 1, group = 1;
  int act = 1;  // 0 none, 1 Relu, 2 Clip(0, hi), 3 SiLU (x * Sigmoid(x)), 4 Sigmoid
  int residual = 0;  // 1: -> Add(z, a float32 input of the output's shape); 2: that and a Relu after it
  int block_q = 0;  // 1: the float output read by a QuantizeLinear too, both graph outputs; 2: and by a Neg before the Q
  bool quantized_out = false, pow2 = true, nhwc = false, bias = true;
  uint8_t x_zp = 0;
  uint32_t seed = 31;
};

std::shared_ptr<Model> plain_conv_model(const PlainCase& pc) {
  std::mt19937 rng(pc.seed);
  QdqCase sc;
  sc.pow2 = pc.pow2;
  ModelBuilder b(13);
  auto x = b.input("x", {1, pc.c, pc.hw, pc.hw}, DType::kU8);
  const float sx = scale(sc, 6, 1.37f);
  auto dqx = b.node("DequantizeLinear", {x, b.scalar(sx), b.constant(u8_scalar(pc.x_zp))});
  Tensor ws = Tensor::allocate(DType::kF32, {pc.m});
  Tensor bias = Tensor::allocate(DType::kF32, {pc.m});
  std::uniform_int_distribution<int> bd(-3000, 3000);
  for (int64_t i = 0; i < pc.m; ++i) {
    ws.mutable_data<float>()[i] = scale(sc, 7 + static_cast<int>(i % 3), 1.f + 0.11f * static_cast<float>(i % 5));
    // power-of-two scales: a multiple of x_scale * w_scale (every f32 step exact); else any float
    bias.mutable_data<float>()[i] = static_cast<float>(bd(rng)) * sx * ws.data<float>()[i] * (pc.pow2 ? 1.f : 1.013f);
  }
  auto dqw = b.node("DequantizeLinear",
                    {b.constant(i8_tensor({pc.m, pc.c / pc.group, pc.k, pc.k}, rng, -127, 127, DType::kI8)), b.constant(ws),
                     b.constant(Tensor::allocate(DType::kI8, {pc.m}))},
                    {{"axis", axis0()}});
  vector<std::string> in = {dqx, dqw};
  if (pc.bias) in.push_back(b.constant(bias));
  const int64_t pad = pc.k / 2;
  auto y = b.node("Conv", in,
                  {{"pads", ints_attr({pad, pad, pad, pad})}, {"strides", ints_attr({pc.stride, pc.stride})},
                   {"group", int_attr(pc.group)}});
  if (pc.act == 1) y = b.node("Relu", {y});
  if (pc.act == 2) {
    Attribute lo, hi;
    lo.type = hi.type = AttrType::kTensor;
    lo.t = Tensor::scalar<float>(0.f);
    hi.t = Tensor::scalar<float>(scale(sc, -2, 1.19f));  // inside the outputs' range: both bounds bite
    y = b.node("Clip", {y, b.node("Constant", {}, {{"value", lo}}), b.node("Constant", {}, {{"value", hi}})});
  }
  if (pc.act == 3) y = b.node("Mul", {y, b.node("Sigmoid", {y})});
  if (pc.act == 4) y = b.node("Sigmoid", {y});
  if (pc.residual > 0) {
    const int64_t ohw = (pc.hw + 2 * pad - pc.k) / pc.stride + 1;
    y = b.node("Add", {b.input("z", {1, pc.m, ohw, ohw}), y});
    if (pc.residual == 2) y = b.node("Relu", {y});
  }
  if (pc.quantized_out) y = b.node("QuantizeLinear", {y, b.scalar(scale(sc, 1, 1.21f)), b.constant(u8_scalar(0))});
  b.output(y);
  if (pc.block_q > 0) {  // the plain structure's block output: float for the next residual, its Q for the next conv
    if (pc.block_q == 2) b.output(b.node("Neg", {y}));
    b.output(b.node("QuantizeLinear", {y, b.scalar(scale(sc, 5, 1.13f)), b.constant(u8_scalar(3))}));
  }
  return b.build();
}

// Max |a - b| of two f32 tensors over max |b|.
double rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dims(), b.dims());
  EXPECT_EQ(a.dtype(), DType::kF32);
  EXPECT_EQ(b.dtype(), DType::kF32);
  double worst = 0, peak = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    worst = std::max(worst, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    peak = std::max(peak, std::fabs(double(b.data<float>()[i])));
  }
  return peak > 0 ? worst / peak : worst;
}

void check_plain_case(const PlainCase& pc) {
  SCOPED_TRACE(::testing::Message() << "c=" << pc.c << " m=" << pc.m << " k=" << pc.k << " group=" << pc.group
                                    << " act=" << pc.act << " quantized_out=" << pc.quantized_out << " pow2=" << pc.pow2
                                    << " nhwc=" << pc.nhwc << " x_zp=" << int(pc.x_zp));
  auto model = plain_conv_model(pc);
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  ASSERT_EQ(changes, 1);
  int qconv = 0, left = 0;
  for (const Node& n : fused->graph.nodes) {
    qconv += n.op_type == "QConvFused";
    left += n.op_type != "QConvFused" && n.op_type != "Constant";
  }
  ASSERT_EQ(qconv, 1);
  EXPECT_EQ(left, 0);  // the DQs, the Conv, its Relu / Clip and the Q in one node
  int n = 0;
  EXPECT_TRUE(fast_kernels_taken(*fused, &n));
  std::shared_ptr<Model> fast = fused;
  if (pc.nhwc) {
    fast = run_pass(*fused, "nhwc_layout");
    EXPECT_TRUE(fast_kernels_taken(*fast, &n));
  }
  NamedTensors feeds = u8_feeds(*model, pc.seed + 100);
  for (auto& [name, t] : feeds) {
    if (name != "z") continue;  // the float residual: multiples of 2^-6 in [-4, 4] (exact sums with pow2 scales)
    std::mt19937 rng(pc.seed + 7);
    t = Tensor::allocate(DType::kF32, t.dims());
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 513) - 256) / 64.f;
  }
  const Tensor unfused_ref = run_model(model, feeds, "cpu-ref")[0].second;
  const Tensor fused_ref = run_model(fused, feeds, "cpu-ref")[0].second;
  const Tensor fused_cpu = run_model(fast, feeds, "cpu")[0].second;
  if (pc.quantized_out) {
    double e1 = 0, e2 = 0;
    EXPECT_LE(max_step_diff(fused_ref, unfused_ref, &e1), pc.pow2 ? 0 : 1) << "fused reference vs QDQ graph";
    EXPECT_LE(max_step_diff(fused_cpu, fused_ref, &e2), pc.pow2 ? 0 : 1) << "oneDNN int8 vs fused reference";
    EXPECT_GE(e1, 0.98);
    EXPECT_GE(e2, 0.98);
    return;
  }
  ASSERT_EQ(fused_cpu.dtype(), DType::kF32);
  // Power-of-two scales and a bias of whole accumulator steps: every f32 step is exact, so the three agree
  // bit for bit (the integer math alone counts). Otherwise f32 rounding in another order: a few ulp of the
  // largest output (the float convolution sums in f32, the int8 kernel in int32 then scales once).
  // SiLU / Sigmoid: the reference in double, rounded once (the QDQ graph rounds Sigmoid, then the Mul);
  // oneDNN's exp is a polynomial a few ulp off.
  const double tol = pc.act >= 3 ? 1e-6 : pc.pow2 ? 0 : 2e-6;
  EXPECT_LE(rel_diff(fused_ref, unfused_ref), tol) << "fused reference vs QDQ graph";
  EXPECT_LE(rel_diff(fused_cpu, fused_ref), pc.act >= 3 ? 1e-5 : tol) << "oneDNN int8 vs fused reference";
  // Not trivially clipped: the comparison means something.
  int64_t interior = 0;
  QdqCase sc;
  sc.pow2 = pc.pow2;
  const float hi = pc.act == 2 ? scale(sc, -2, 1.19f) : INFINITY;
  for (int64_t i = 0; i < fused_ref.numel(); ++i) {
    const float v = fused_ref.data<float>()[i];
    interior += v != 0.f && v < hi && (pc.act != 4 || (v > 0.01f && v < 0.99f));  // a Sigmoid not saturated
  }
  EXPECT_GT(interior, fused_ref.numel() / 4);
}

// The plain structure's residual block: DQ -> Conv [-> Relu] -> Add(float32 z) [-> Relu] as one QConvFused with a
// float output, z as its residual and relu (oneDNN's sum post-op on the f32 destination): the same values as the
// QDQ graph's float Add and Relu (bit for bit with power-of-two scales), NCHW and channels last.
TEST(QdqFusion, FloatOutputTakesFloatResidualAndRelu) {
  PlainCase pc;
  pc.act = 0;
  pc.k = 1;
  pc.residual = 2;
  check_plain_case(pc);
  pc.nhwc = true;
  check_plain_case(pc);
  pc.act = 1;  // a Relu before the Add too; no Relu after it
  pc.residual = 1;
  pc.k = 3;
  pc.pow2 = false;
  pc.seed = 34;
  check_plain_case(pc);
}

// The plain structure's residual block output read by the next residual (float) and, through a QuantizeLinear,
// by the next convolution: the Q becomes the QConvFused's output 1 (yq), which the cpu kernel writes after its
// run (cpu::quantize_f32_8bit). yq is bit for bit the Q of the node's own float output on both backends (the
// QDQ graph's Q node on the float, round half to even: power-of-two scales put many values on ties), and with
// power-of-two scales the float and yq are the QDQ graph's own. A float reader before the Q keeps the Q a node.
void check_block_q(PlainCase pc) {
  SCOPED_TRACE(::testing::Message() << "c=" << pc.c << " m=" << pc.m << " k=" << pc.k << " pow2=" << pc.pow2 << " nhwc=" << pc.nhwc
                                    << " block_q=" << pc.block_q);
  auto model = plain_conv_model(pc);
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  ASSERT_EQ(changes, 1);
  ASSERT_EQ(count_ops(*fused, "QConvFused"), 1);
  EXPECT_EQ(count_ops(*fused, "QuantizeLinear"), pc.block_q == 2 ? 1 : 0);
  for (const Node& n : fused->graph.nodes) {
    if (n.op_type == "QConvFused") {
      EXPECT_EQ(n.outputs.size(), pc.block_q == 2 ? 1u : 2u);
    }
  }
  int n = 0;
  std::shared_ptr<Model> fast = pc.nhwc ? run_pass(*fused, "nhwc_layout") : fused;
  EXPECT_TRUE(fast_kernels_taken(*fast, &n));
  NamedTensors feeds = u8_feeds(*model, pc.seed + 100);
  for (auto& [name, t] : feeds) {
    if (name != "z") continue;  // multiples of 2^-6 in [-4, 4], as check_plain_case's
    std::mt19937 rng(pc.seed + 7);
    t = Tensor::allocate(DType::kF32, t.dims());
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 513) - 256) / 64.f;
  }
  const NamedTensors unfused_ref = run_model(model, feeds, "cpu-ref"), fused_ref = run_model(fused, feeds, "cpu-ref"),
                     fused_cpu = run_model(fast, feeds, "cpu");
  const size_t q = pc.block_q == 2 ? 2 : 1;
  ASSERT_EQ(fused_cpu.size(), q + 1);
  ASSERT_EQ(fused_ref.size(), q + 1);
  QdqCase sc;
  sc.pow2 = pc.pow2;
  const float qs = scale(sc, 5, 1.13f);
  for (const NamedTensors* run : {&fused_ref, &fused_cpu}) {
    const Tensor &y = (*run)[0].second, &yq = (*run)[q].second;
    ASSERT_EQ(yq.dtype(), DType::kU8);
    ASSERT_EQ(yq.numel(), y.numel());
    int64_t differ = 0, ties = 0, saturated = 0;
    std::set<int> codes;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const float v = y.data<float>()[i] / qs;
      const uint8_t want = static_cast<uint8_t>(std::min(std::max(std::nearbyint(v) + 3.f, 0.f), 255.f));
      differ += yq.data<uint8_t>()[i] != want;
      ties += v - std::floor(v) == 0.5f;
      saturated += want == 0 || want == 255;
      codes.insert(want);
    }
    EXPECT_EQ(differ, 0) << (run == &fused_cpu ? "cpu" : "cpu-ref") << ": yq is not the Q of the float output";
    EXPECT_GT(codes.size(), 60u);  // not trivially clipped
    EXPECT_LT(saturated, y.numel() / 4);
    if (pc.pow2) {
      EXPECT_GT(ties, 0);
    }
  }
  if (!pc.pow2) return;
  EXPECT_EQ(rel_diff(fused_cpu[0].second, unfused_ref[0].second), 0.0);
  double exact = 0;
  EXPECT_EQ(max_step_diff(fused_cpu[q].second, unfused_ref[q].second, &exact), 0);
}

TEST(QdqFusion, FloatResidualOutputWritesItsQuantizedCopy) {
  PlainCase pc;
  pc.act = 1;
  pc.residual = 2;
  pc.block_q = 1;
  check_block_q(pc);  // 3x3, NCHW: the reference kernel on the cpu too
  pc.nhwc = true;
  check_block_q(pc);
  pc.k = 1;  // ResNet-50's conv3: a 1x1 on oneDNN's 1x1 kernel with the sum post-op
  pc.c = 64;
  pc.m = 48;
  pc.hw = 11;  // 5808 outputs: the vector loop's tail, split over threads
  check_block_q(pc);
  pc.pow2 = false;
  pc.seed = 35;
  check_block_q(pc);
  pc.block_q = 2;
  check_block_q(pc);
}

TEST(QdqFusion, FloatOutputConvolutionDequantizesInEpilogue) {
  PlainCase pc;
  check_plain_case(pc);  // Relu, NCHW
  pc.act = 0;
  pc.x_zp = 77;
  pc.nhwc = true;
  check_plain_case(pc);
  pc.pow2 = false;
  pc.seed = 32;
  check_plain_case(pc);
  pc = PlainCase{};
  pc.act = 2;  // Clip (ReLU6) from Constant nodes
  pc.nhwc = true;
  pc.pow2 = false;
  check_plain_case(pc);
  pc = PlainCase{};  // depthwise (MobileNet's), strided
  pc.c = pc.m = pc.group = 16;
  pc.stride = 2;
  pc.act = 2;
  pc.nhwc = true;
  check_plain_case(pc);
  pc = PlainCase{};  // 1x1 on enough channels for oneDNN's 1x1 kernels, no bias
  pc.k = 1;
  pc.c = 64;
  pc.m = 32;
  pc.bias = false;
  pc.nhwc = true;
  pc.pow2 = false;
  check_plain_case(pc);
  pc = PlainCase{};  // conv1 of an image network: 7x7/2 on 3 channels, the taps packed (the float bias takes the zero point)
  pc.c = 3;
  pc.k = 7;
  pc.stride = 2;
  pc.hw = 15;
  pc.x_zp = 128;
  pc.nhwc = true;
  check_plain_case(pc);
  pc.pow2 = false;
  check_plain_case(pc);
}

// EfficientNet's SiLU (x * Sigmoid(x)) and squeeze-excitation gate (Sigmoid) on the float output: oneDNN's
// swish / logistic post-ops.
TEST(QdqFusion, FloatOutputSiluAndSigmoidInEpilogue) {
  PlainCase pc;
  pc.act = 3;
  pc.nhwc = true;
  pc.x_zp = 128;
  check_plain_case(pc);
  pc.pow2 = false;
  pc.c = pc.m = pc.group = 16;  // depthwise
  check_plain_case(pc);
  pc = PlainCase{};
  pc.act = 4;
  pc.k = 1;
  pc.hw = 1;  // the gate: a 1x1 on the pooled vector
  pc.c = 32;
  pc.m = 64;
  pc.pow2 = false;
  check_plain_case(pc);
}

TEST(QdqFusion, FloatBiasAndClipWithQuantizedOutput) {
  PlainCase pc;
  pc.quantized_out = true;
  check_plain_case(pc);
  pc.act = 2;
  pc.nhwc = true;
  check_plain_case(pc);
  pc.pow2 = false;
  pc.x_zp = 5;
  pc.seed = 33;
  check_plain_case(pc);
  pc.c = pc.m = pc.group = 16;  // depthwise
  check_plain_case(pc);
}

// A float Conv output read by two nodes (Tanh and Add, not a SiLU): the fused node ends at the Conv and both
// read its float output.
TEST(QdqFusion, FloatOutputWithSeveralReaders) {
  PlainCase pc;
  pc.act = 0;
  auto model = plain_conv_model(pc);
  const std::string y = model->graph.outputs[0].name;
  Node sig;
  sig.op_type = "Tanh";
  sig.name = "sig";
  sig.inputs = {y};
  sig.outputs = {"sig_out"};
  model->graph.nodes.push_back(sig);
  Node mul;
  mul.op_type = "Add";
  mul.name = "mul";
  mul.inputs = {y, "sig_out"};
  mul.outputs = {"silu"};
  model->graph.nodes.push_back(mul);
  model->graph.outputs[0].name = "silu";
  ASSERT_TRUE(infer_shapes(model.get()).is_ok());
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(count_ops(*fused, "QConvFused"), 1);
  EXPECT_EQ(count_ops(*fused, "Tanh"), 1);
  EXPECT_EQ(count_ops(*fused, "Add"), 1);
  const NamedTensors feeds = u8_feeds(*model, 3);
  EXPECT_LE(rel_diff(run_model(fused, feeds, "cpu")[0].second, run_model(model, feeds, "cpu-ref")[0].second), 1e-6);  // (Tanh: a vector tanh on cpu)
}

// DQ(a), DQ(W) -> MatMul -> Add(float bias) [-> Relu] with no Q, and Gemm(DQ, DQ, float C): QMatMulFused with
// a float output (ONNX Runtime's MatMulIntegerToFloat); with a Q after, a u8 output.
TEST(QdqFusion, FloatOutputMatMulAndGemm) {
  for (int variant = 0; variant < 6; ++variant) {
    const bool gemm = variant >= 3, pow2 = variant % 3 != 1, quantized = variant % 3 == 2, relu = variant % 2 == 0;
    SCOPED_TRACE(::testing::Message() << "gemm=" << gemm << " pow2=" << pow2 << " quantized_out=" << quantized);
    std::mt19937 rng(40 + variant);
    const int64_t K = 40, N = 24;
    QdqCase sc;
    sc.pow2 = pow2;
    ModelBuilder b(13);
    auto a = b.input("a", gemm ? vector<int64_t>{6, K} : vector<int64_t>{2, 5, K}, DType::kU8);
    const float sa = scale(sc, 6, 1.37f);
    auto dqa = b.node("DequantizeLinear", {a, b.scalar(sa), b.constant(u8_scalar(pow2 ? 0 : 100))});
    Tensor ws = Tensor::allocate(DType::kF32, {N}), bias = Tensor::allocate(DType::kF32, {N});
    std::uniform_int_distribution<int> bd(-3000, 3000);
    for (int64_t i = 0; i < N; ++i) {
      ws.mutable_data<float>()[i] = scale(sc, 7 + static_cast<int>(i % 3), 1.f + 0.11f * static_cast<float>(i % 5));
      bias.mutable_data<float>()[i] = static_cast<float>(bd(rng)) * sa * ws.data<float>()[i] * (pow2 ? 1.f : 1.013f);
    }
    auto dqw = b.node("DequantizeLinear",
                      {b.constant(i8_tensor(gemm ? vector<int64_t>{N, K} : vector<int64_t>{K, N}, rng, -127, 127, DType::kI8)),
                       b.constant(ws), b.constant(Tensor::allocate(DType::kI8, {N}))},
                      {{"axis", int_attr(gemm ? 0 : 1)}});
    std::string y = gemm ? b.node("Gemm", {dqa, dqw, b.constant(bias)}, {{"transB", int_attr(1)}})
                         : b.node("Add", {b.node("MatMul", {dqa, dqw}), b.constant(bias)});
    if (relu) y = b.node("Relu", {y});
    if (quantized) y = b.node("QuantizeLinear", {y, b.scalar(scale(sc, 1, 1.21f)), b.constant(u8_scalar(relu ? 0 : 128))});
    b.output(y);
    auto model = b.build();
    int changes = 0;
    auto fused = run_pass(*model, "qdq_fusion", &changes);
    ASSERT_EQ(changes, 1);
    ASSERT_EQ(fused->graph.nodes.size(), 1u);
    int n = 0;
    EXPECT_TRUE(fast_kernels_taken(*fused, &n, "QMatMulFused"));
    const NamedTensors feeds = u8_feeds(*model, 50 + variant);
    const Tensor unfused_ref = run_model(model, feeds, "cpu-ref")[0].second;
    const Tensor fused_ref = run_model(fused, feeds, "cpu-ref")[0].second;
    const Tensor fused_cpu = run_model(fused, feeds, "cpu")[0].second;
    if (quantized) {
      double e = 0;
      EXPECT_LE(max_step_diff(fused_ref, unfused_ref, &e), 0);
      EXPECT_LE(max_step_diff(fused_cpu, fused_ref, &e), 0);
      continue;
    }
    const double tol = pow2 ? 0 : 2e-6;
    EXPECT_LE(rel_diff(fused_ref, unfused_ref), tol) << "fused reference vs QDQ graph";
    EXPECT_LE(rel_diff(fused_cpu, fused_ref), tol) << "oneDNN int8 vs fused reference";
  }
}

// DQ -> Conv -> Relu -> Q, then DQ -> MaxPool -> Q -> DQ -> Conv -> Relu -> Q on a uint8 input.
std::shared_ptr<Model> int8_region_model() {
  std::mt19937 rng(9);
  ModelBuilder b(13);
  auto x = b.input("x", {1, 4, 8, 8}, DType::kU8);
  std::string v = x;
  float s = 0.02f;
  for (int layer = 0; layer < 2; ++layer) {
    auto dq = b.node("DequantizeLinear", {v, b.scalar(s), b.constant(u8_scalar(0))});
    if (layer == 1) {
      auto mp = b.node("MaxPool", {dq}, {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
      v = b.node("QuantizeLinear", {mp, b.scalar(s), b.constant(u8_scalar(0))});
      dq = b.node("DequantizeLinear", {v, b.scalar(s), b.constant(u8_scalar(0))});
    }
    Tensor ws = Tensor::allocate(DType::kF32, {4});
    for (int i = 0; i < 4; ++i) ws.mutable_data<float>()[i] = 0.01f + 0.002f * i;
    auto dqw = b.node("DequantizeLinear", {b.constant(i8_tensor({4, 4, 3, 3}, rng, -127, 127, DType::kI8)), b.constant(ws)},
                      {{"axis", axis0()}});
    auto r = b.node("Relu", {b.node("Conv", {dq, dqw}, {{"pads", ints_attr({1, 1, 1, 1})}})});
    s = 0.05f;
    v = b.node("QuantizeLinear", {r, b.scalar(s), b.constant(u8_scalar(0))});
  }
  b.output(v);
  return b.build();
}

// Two blocks in a row and a MaxPool between them: after the whole pipeline no float tensor is left
// between the int8 ops (Q followed by DQ is gone; the pool runs on uint8).
TEST(QdqFusion, Int8RegionStaysInt8) {
  auto model = int8_region_model();
  auto opt = model->clone();
  OptimizeOptions oo;
  oo.device_traits = device_graph_traits("cpu");
  ASSERT_TRUE(optimize_model(opt.get(), oo).is_ok());
  // On cpu the region runs channels-last: Transposes only where the uint8 tensors enter and leave it.
  EXPECT_EQ(count_ops(*opt, "QConvFused"), 2);
  EXPECT_EQ(count_ops(*opt, "NhwcMaxPool"), 1);
  EXPECT_EQ(count_ops(*opt, "Transpose"), 2);
  EXPECT_EQ(opt->graph.nodes.size(), 5u);
  EXPECT_EQ(count_ops(*opt, "DequantizeLinear") + count_ops(*opt, "QuantizeLinear"), 0);
  for (const Node& n : opt->graph.nodes)
    for (const std::string& o : n.outputs) EXPECT_EQ(opt->graph.find_type(o)->dtype, DType::kU8) << o;
  const NamedTensors feeds = u8_feeds(*model, 5);
  double exact = 0;
  const int d = max_step_diff(run_model(opt, feeds, "cpu")[0].second, run_model(model, feeds, "cpu-ref")[0].second, &exact);
  EXPECT_LE(d, 2);  // one step per layer at most (f32 rounding next to ties), usually none
  EXPECT_GE(exact, 0.95);
  // The channels-last reference kernels (QConvFused channels_last = 1, NhwcMaxPool on uint8) too.
  const int dr = max_step_diff(run_model(opt, feeds, "cpu-ref")[0].second, run_model(model, feeds, "cpu-ref")[0].second,
                               &exact);
  EXPECT_LE(dr, 2);
  EXPECT_GE(exact, 0.95);
}

// DQ -> Conv (power-of-two scales: exact) -> Q -> DQ -> GlobalAveragePool -> Q (awkward scales, zero points
// on both sides): qdq_fusion makes the pool a QGlobalAveragePool, nhwc_layout an NhwcQGlobalAveragePool on
// the region's uint8 tensor. The cpu kernels (NCHW and NHWC) are bit for bit the reference's integer
// semantics; the QDQ nodes' f32 mean is within one step.
TEST(QdqFusion, GlobalAveragePoolRunsOnUint8) {
  std::mt19937 rng(31);
  ModelBuilder b(13);
  auto x = b.input("x", {2, 16, 6, 5}, DType::kU8);
  auto dqx = b.node("DequantizeLinear", {x, b.scalar(std::ldexp(1.f, -6)), b.constant(u8_scalar(3))});
  Tensor ws = Tensor::allocate(DType::kF32, {24});
  for (int64_t i = 0; i < 24; ++i) ws.mutable_data<float>()[i] = std::ldexp(1.f, -7 - static_cast<int>(i % 2));
  auto dqw = b.node("DequantizeLinear", {b.constant(i8_tensor({24, 16, 1, 1}, rng, -127, 127, DType::kI8)), b.constant(ws)},
                    {{"axis", axis0()}});
  const float s1 = std::ldexp(1.f, -2);
  auto q1 = b.node("QuantizeLinear", {b.node("Conv", {dqx, dqw}), b.scalar(s1), b.constant(u8_scalar(128))});
  auto gap = b.node("GlobalAveragePool", {b.node("DequantizeLinear", {q1, b.scalar(s1), b.constant(u8_scalar(128))})});
  b.output(b.node("QuantizeLinear", {gap, b.scalar(0.0137f), b.constant(u8_scalar(120))}));
  auto model = b.build();
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  EXPECT_EQ(changes, 2);
  EXPECT_EQ(count_ops(*fused, "QGlobalAveragePool"), 1);
  EXPECT_EQ(count_ops(*fused, "GlobalAveragePool"), 0);
  auto opt = model->clone();
  OptimizeOptions oo;
  oo.device_traits = device_graph_traits("cpu");
  ASSERT_TRUE(optimize_model(opt.get(), oo).is_ok());
  EXPECT_EQ(count_ops(*opt, "NhwcQGlobalAveragePool"), 1);
  EXPECT_EQ(count_ops(*opt, "DequantizeLinear") + count_ops(*opt, "QuantizeLinear"), 0);
  const NamedTensors feeds = u8_feeds(*model, 32);
  const Tensor unfused_ref = run_model(model, feeds, "cpu-ref")[0].second;
  const Tensor fused_ref = run_model(fused, feeds, "cpu-ref")[0].second;
  double exact = 0;
  EXPECT_EQ(max_step_diff(run_model(fused, feeds, "cpu")[0].second, fused_ref, &exact), 0) << "QGlobalAveragePool (NCHW)";
  EXPECT_EQ(max_step_diff(run_model(opt, feeds, "cpu")[0].second, fused_ref, &exact), 0) << "NhwcQGlobalAveragePool";
  EXPECT_EQ(max_step_diff(run_model(opt, feeds, "cpu-ref")[0].second, fused_ref, &exact), 0) << "its reference kernel";
  EXPECT_LE(max_step_diff(fused_ref, unfused_ref, &exact), 1) << "the QDQ nodes";
  EXPECT_GE(exact, 0.9);
  int64_t interior = 0;
  for (int64_t i = 0; i < fused_ref.numel(); ++i) interior += fused_ref.data<uint8_t>()[i] > 0 && fused_ref.data<uint8_t>()[i] < 255;
  EXPECT_GT(interior, fused_ref.numel() / 2);
}

// The cpu NhwcQGlobalAveragePool (AVX2: 32 channels a vector, int16 sums of up to 255 rows, a vector
// requantization) is its reference bit for bit: u8 and s8, channel counts with a tail (1283, 37) and without
// (64), fewer than 32 channels (5), 300 rows (two int16 rounds), all-extreme images (the largest sums), and a
// y_scale that saturates most outputs.
TEST(QdqFusion, NhwcQGlobalAveragePoolKernelIsTheReferenceBitForBit) {
  struct Case {
    int64_t h, w, c;
  };
  for (DType dt : {DType::kU8, DType::kI8})
    for (const Case& k : {Case{15, 20, 1283}, Case{7, 7, 64}, Case{3, 3, 5}, Case{17, 16, 37}})
      for (float ys : {0.05f, 0.0031f}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << k.h << "x" << k.w << "x" << k.c << " y_scale " << ys);
        const bool u8 = dt == DType::kU8;
        ModelBuilder b(13);
        b.import_opset("com.ferry", 1);
        auto x = b.input("x", {3, k.h, k.w, k.c}, dt);
        Tensor xz = Tensor::allocate(dt, {}), yz = Tensor::allocate(dt, {});
        if (u8) {
          xz.mutable_data<uint8_t>()[0] = 3;
          yz.mutable_data<uint8_t>()[0] = 120;
        } else {
          xz.mutable_data<int8_t>()[0] = -2;
          yz.mutable_data<int8_t>()[0] = -7;
        }
        b.output(b.node("NhwcQGlobalAveragePool", {x, b.scalar(0.02f), b.constant(xz), b.scalar(ys), b.constant(yz)}, {}, 1,
                        "com.ferry"));
        auto model = b.build();
        std::mt19937 rng(5);
        Tensor xt = i8_tensor({3, k.h, k.w, k.c}, rng, u8 ? 0 : -128, u8 ? 255 : 127, dt);
        const int64_t image = k.h * k.w * k.c;
        for (int64_t i = 0; i < image; ++i) {  // image 0 at the top of the range, image 1 at the bottom
          if (u8) {
            xt.mutable_data<uint8_t>()[i] = 255;
            xt.mutable_data<uint8_t>()[image + i] = 0;
          } else {
            xt.mutable_data<int8_t>()[i] = 127;
            xt.mutable_data<int8_t>()[image + i] = -128;
          }
        }
        const NamedTensors feeds = {{"x", xt}};
        const NamedTensors ref = run_model(model, feeds, "cpu-ref"), cpu = run_model(model, feeds, "cpu");
        ASSERT_EQ(ref.size(), 1u);
        ASSERT_EQ(cpu.size(), 1u);
        ASSERT_EQ(cpu[0].second.dims(), ref[0].second.dims());
        const auto* pc = static_cast<const uint8_t*>(cpu[0].second.raw());
        const auto* pr = static_cast<const uint8_t*>(ref[0].second.raw());
        int64_t differ = 0;
        for (int64_t i = 0; i < 3 * k.c; ++i) differ += pc[i] != pr[i];
        EXPECT_EQ(differ, 0);
      }
}

// A float island between int8 convolutions (SiLU of EfficientNet: DQ -> Sigmoid, Mul -> Q): per-tensor
// QuantizeLinear / DequantizeLinear are elementwise, so the island stays channels-last with the
// convolutions and the only Transposes are at the model's edges; the bytes are those of the NCHW run.
TEST(QdqFusion, FloatIslandStaysChannelsLast) {
  std::mt19937 rng(41);
  ModelBuilder b(13);
  auto x = b.input("x", {1, 8, 6, 6}, DType::kU8);
  std::string v = x;
  float s = 0.031f;
  uint8_t zp = 3;
  for (int layer = 0; layer < 2; ++layer) {
    auto dq = b.node("DequantizeLinear", {v, b.scalar(s), b.constant(u8_scalar(zp))});
    Tensor ws = Tensor::allocate(DType::kF32, {8});
    for (int i = 0; i < 8; ++i) ws.mutable_data<float>()[i] = 0.004f + 0.0007f * i;
    auto dqw = b.node("DequantizeLinear", {b.constant(i8_tensor({8, 8, 3, 3}, rng, -127, 127, DType::kI8)), b.constant(ws)},
                      {{"axis", axis0()}});
    auto y = b.node("Conv", {dq, dqw}, {{"pads", ints_attr({1, 1, 1, 1})}});
    s = 0.043f;
    zp = 128;
    v = b.node("QuantizeLinear", {y, b.scalar(s), b.constant(u8_scalar(zp))});
    if (layer == 0) {  // SiLU in float
      auto d = b.node("DequantizeLinear", {v, b.scalar(s), b.constant(u8_scalar(zp))});
      s = 0.021f;
      zp = 17;
      v = b.node("QuantizeLinear", {b.node("Mul", {d, b.node("Sigmoid", {d})}), b.scalar(s), b.constant(u8_scalar(zp))});
    }
  }
  b.output(v);
  auto model = b.build();
  auto opt = model->clone();
  OptimizeOptions oo;
  oo.device_traits = device_graph_traits("cpu");
  ASSERT_TRUE(optimize_model(opt.get(), oo).is_ok());
  EXPECT_EQ(count_ops(*opt, "QConvFused"), 2);
  EXPECT_EQ(count_ops(*opt, "Transpose"), 2);
  for (const Node& n : opt->graph.nodes) {
    if (n.op_type == "QConvFused") {
      EXPECT_NE(n.attr("channels_last"), nullptr);
    }
  }
  const NamedTensors feeds = u8_feeds(*model, 42);
  const Tensor nchw = run_model(run_pass(*model, "qdq_fusion"), feeds, "cpu")[0].second;  // opt level 0: NCHW
  const Tensor nhwc = run_model(opt, feeds, "cpu")[0].second;
  double exact = 0;
  EXPECT_EQ(max_step_diff(nhwc, nchw, &exact), 0);
}

// DQ(a), DQ(W) -> MatMul -> Add(DQ(B)) [-> Relu] -> Q, or the Gemm form (transB: W is [N, K]).
struct QdqMatMulCase {
  bool gemm = false, trans_b = false, relu = true, bias = true, pow2 = true;
  uint8_t a_zp = 0;
  uint32_t seed = 21;
};

std::shared_ptr<Model> qdq_matmul_model(const QdqMatMulCase& mc) {
  std::mt19937 rng(mc.seed);
  const int64_t K = 24, N = 20;
  QdqCase sc;
  sc.pow2 = mc.pow2;
  ModelBuilder b(13);
  auto a = b.input("a", mc.gemm ? vector<int64_t>{6, K} : vector<int64_t>{2, 5, K}, DType::kU8);
  const float sa = scale(sc, 6, 1.37f);
  auto dqa = b.node("DequantizeLinear", {a, b.scalar(sa), b.constant(u8_scalar(mc.a_zp))});
  Tensor ws = Tensor::allocate(DType::kF32, {N});
  Tensor bs = Tensor::allocate(DType::kF32, {N});
  for (int64_t i = 0; i < N; ++i) {
    ws.mutable_data<float>()[i] = scale(sc, 7 + static_cast<int>(i % 3), 1.f + 0.11f * static_cast<float>(i % 5));
    bs.mutable_data<float>()[i] = sa * ws.data<float>()[i];
  }
  const bool n_first = mc.gemm && mc.trans_b;
  auto dqw = b.node("DequantizeLinear",
                    {b.constant(i8_tensor(n_first ? vector<int64_t>{N, K} : vector<int64_t>{K, N}, rng, -127, 127, DType::kI8)),
                     b.constant(ws), b.constant(Tensor::allocate(DType::kI8, {N}))},
                    {{"axis", int_attr(n_first ? 0 : 1)}});
  std::string y;
  auto dqb = mc.bias ? b.node("DequantizeLinear", {b.constant(i8_tensor({N}, rng, -3000, 3000, DType::kI32)), b.constant(bs)},
                              {{"axis", axis0()}})
                     : "";
  if (mc.gemm) {
    vector<std::string> in = {dqa, dqw};
    if (mc.bias) in.push_back(dqb);
    y = b.node("Gemm", in, {{"transB", int_attr(mc.trans_b ? 1 : 0)}});
  } else {
    y = b.node("MatMul", {dqa, dqw});
    if (mc.bias) y = b.node("Add", {y, dqb});
  }
  if (mc.relu) y = b.node("Relu", {y});
  b.output(b.node("QuantizeLinear", {y, b.scalar(scale(sc, 1, 1.21f)), b.constant(u8_scalar(mc.relu ? 0 : 128))}));
  return b.build();
}

void check_matmul_case(const QdqMatMulCase& mc) {
  SCOPED_TRACE(::testing::Message() << "gemm=" << mc.gemm << " transB=" << mc.trans_b << " relu=" << mc.relu
                                    << " bias=" << mc.bias << " pow2=" << mc.pow2 << " a_zp=" << int(mc.a_zp));
  auto model = qdq_matmul_model(mc);
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  ASSERT_EQ(changes, 1);
  ASSERT_EQ(fused->graph.nodes.size(), 1u);
  EXPECT_EQ(fused->graph.nodes[0].op_type, "QMatMulFused");
  const Node& n = fused->graph.nodes[0];
  auto schema = resolve_schema(n, fused->opset(n.domain));
  ASSERT_TRUE(schema.is_ok());
  bool taken = false;
  for (const CpuKernelFactory& f : *cpu_kernel_table().find(n.domain, n.op_type)) {
    auto k = f(n, *schema.value(), fused->graph);
    taken = taken || (k.is_ok() && k.value());
  }
  EXPECT_TRUE(taken);
  const NamedTensors feeds = u8_feeds(*model, mc.seed + 1);
  const NamedTensors unfused_ref = run_model(model, feeds, "cpu-ref");
  const NamedTensors fused_ref = run_model(fused, feeds, "cpu-ref");
  const NamedTensors fused_cpu = run_model(fused, feeds, "cpu");
  ASSERT_EQ(fused_cpu.size(), 1u);
  ASSERT_EQ(fused_ref.size(), 1u);
  ASSERT_EQ(unfused_ref.size(), 1u);
  double e1 = 0, e2 = 0;
  const int d1 = max_step_diff(fused_ref[0].second, unfused_ref[0].second, &e1);
  const int d2 = max_step_diff(fused_cpu[0].second, fused_ref[0].second, &e2);
  EXPECT_LE(d1, mc.pow2 ? 0 : 1);
  EXPECT_LE(d2, mc.pow2 ? 0 : 1);
  EXPECT_GE(e1, 0.95);
  EXPECT_GE(e2, 0.95);
  int64_t interior = 0;
  const Tensor& y = fused_ref[0].second;
  for (int64_t i = 0; i < y.numel(); ++i) interior += y.data<uint8_t>()[i] > 0 && y.data<uint8_t>()[i] < 255;
  EXPECT_GT(interior, y.numel() / 4);
}

TEST(QdqFusion, MatMulAndGemmBecomeQMatMulFused) {
  check_matmul_case(QdqMatMulCase{});
  QdqMatMulCase mc;
  mc.pow2 = false;
  mc.a_zp = 120;
  mc.relu = false;
  check_matmul_case(mc);
  mc = QdqMatMulCase{};
  mc.gemm = true;
  mc.trans_b = true;
  check_matmul_case(mc);
  mc.trans_b = false;
  mc.pow2 = false;
  mc.bias = false;
  mc.seed = 5;
  check_matmul_case(mc);
}

// Full-range weights on large inputs. Without VNNI (AVX2; AVX-512 before VNNI) oneDNN's u8 x s8 kernels
// add each pair of products in int16 with saturation (255 * 127 * 2 > 32767); the cpu kernels then split
// the weights into two halves in [-64, 64] over a doubled reduction (int8_pairs_saturate), which keeps the
// integer sums exact: QConvFused (NCHW and NHWC, grouped, padded, with a source zero point; depthwise, which
// oneDNN multiplies in 32 bits and is not split) and QMatMulFused, oneDNN against the reference, bit for
// bit (power-of-two scales); u8 and s8 sources (oneDNN's s8 x s8 convolution without VNNI halves the
// weights, rounded; the split runs an s8 source as u8). Inputs 192..255 (s8: 64..127) on weights of
// magnitude 100..128, one sign per output channel, saturate every pair without the split: on an AVX2
// EPYC without it the u8 cases were off by 122-183 steps and the s8 convolution by 1. On a host with
// VNNI this passes with or without the split (nothing saturates there).
TEST(QdqFusion, FullRangeWeightsExactWithoutVnni) {
  // conv NCHW, conv NHWC, matmul; conv and matmul on s8; depthwise NCHW and NHWC; conv NHWC of one group
  // (unsplit with repair, init_fixup: here every output saturates, more than 1/256, so the split runs)
  for (int variant = 0; variant < 8; ++variant) {
    const bool matmul = variant == 2 || variant == 4, s8 = variant == 3 || variant == 4, dw = variant == 5 || variant == 6;
    SCOPED_TRACE(::testing::Message() << (matmul ? "QMatMulFused" : variant % 2 ? "QConvFused NHWC" : "QConvFused NCHW")
                                      << (s8 ? " s8" : " u8") << (dw ? " depthwise" : ""));
    std::mt19937 rng(31 + variant);
    const int64_t C = 8, M = dw ? 8 : 16, G = matmul || variant == 7 ? 1 : dw ? 8 : 2, K = matmul ? 24 : C / G * 9;
    ModelBuilder b(13);
    const DType xdt = s8 ? DType::kI8 : DType::kU8;
    auto x = b.input("x", matmul ? vector<int64_t>{2, 3, K} : vector<int64_t>{1, C, 6, 6}, xdt);
    Tensor xz = Tensor::allocate(xdt, {});
    if (s8) xz.mutable_data<int8_t>()[0] = 72;
    else xz.mutable_data<uint8_t>()[0] = 200;
    auto dqx = b.node("DequantizeLinear", {x, b.scalar(1.f), b.constant(xz)});
    // Weights +-(100..127) (and the extremes -128, 127), the sign by output channel: the sums stay large.
    Tensor w = Tensor::allocate(DType::kI8, matmul ? vector<int64_t>{K, M} : vector<int64_t>{M, C / G, 3, 3});
    std::uniform_int_distribution<int> mag(100, 128);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const int64_t m = matmul ? i % M : i / K;
      const int v = mag(rng);
      w.mutable_data<int8_t>()[i] = static_cast<int8_t>(m % 2 ? -v : std::min(v, 127));
    }
    Tensor ws = Tensor::allocate(DType::kF32, {M});
    for (int64_t m = 0; m < M; ++m) ws.mutable_data<float>()[m] = 1.f;
    auto dqw = b.node("DequantizeLinear", {b.constant(w), b.constant(ws)}, {{"axis", int_attr(matmul ? 1 : 0)}});
    auto y = matmul ? b.node("MatMul", {dqx, dqw})
                    : b.node("Conv", {dqx, dqw},
                             {{"pads", ints_attr({1, 1, 1, 1})}, {"group", int_attr(G)}});
    // (x - zp) in [-8, 55]: |acc| <= 36 * 55 * 128; y_scale 2^11 keeps the outputs inside u8 around 128.
    b.output(b.node("QuantizeLinear", {y, b.scalar(2048.f), b.constant(u8_scalar(128))}));
    auto model = b.build();
    int changes = 0;
    auto fused = run_pass(*model, "qdq_fusion", &changes);
    ASSERT_EQ(changes, 1);
    const char* op = matmul ? "QMatMulFused" : "QConvFused";
    ASSERT_EQ(count_ops(*fused, op), 1);
    std::shared_ptr<Model> fast = !matmul && variant % 2 ? run_pass(*fused, "nhwc_layout") : fused;
    int n = 0;
    EXPECT_TRUE(fast_kernels_taken(*fast, &n, op));
    EXPECT_EQ(n, 1);
    Tensor xt = i8_tensor(model->graph.inputs[0].type.shape->values(), rng, s8 ? 64 : 192, s8 ? 127 : 255, xdt);
    const NamedTensors feeds = {{"x", xt}};
    const NamedTensors ref = run_model(fused, feeds, "cpu-ref");
    const NamedTensors cpu = run_model(fast, feeds, "cpu");
    ASSERT_EQ(ref.size(), 1u);
    ASSERT_EQ(cpu.size(), 1u);
    double exact = 0;
    EXPECT_EQ(max_step_diff(cpu[0].second, ref[0].second, &exact), 0);
    int64_t interior = 0;
    const Tensor& r = ref[0].second;
    for (int64_t i = 0; i < r.numel(); ++i) interior += r.data<uint8_t>()[i] > 0 && r.data<uint8_t>()[i] < 255;
    EXPECT_GT(interior, r.numel() / 2);
  }
}

// Without VNNI an NHWC u8 convolution of one group runs unsplit and repairs the outputs a saturated pair
// touched (dnnl_int8_conv.cpp, init_fixup): weights small but for one violating pair (same sign, |w0| + |w1| >
// 128) of the centre tap in 4 of the 16 output channels, inputs small but for two pixels whose channels
// 2..5 are 250..255, so 8 outputs saturate (counted here: the case must exercise it), fewer than 1/256 of
// them (the repair, not the split), on a source with zero point 0 (the repair's condition: a Relu's
// output). 3x3 stride 1 with the residual (the output may be z's own buffer: z read before the run) and
// a Relu; 3x3 stride 2 with a mid Q/DQ and an output zero point; 1x1 on 8 channels; 1x1 on 40 (the
// scan in 32-byte blocks and a tail, a violating pair in each, 12 outputs). Power-of-two scales: oneDNN against the reference, bit for bit. On a
// host with VNNI nothing is repaired and this passes the same.
TEST(QdqFusion, SaturatedPairsRepairedExactlyWithoutVnni) {
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    const int64_t C = variant == 3 ? 40 : 8, M = 16, HW = 40, K = variant >= 2 ? 1 : 3, S = variant == 1 ? 2 : 1, P = K / 2;
    const int64_t OHW = (HW + 2 * P - K) / S + 1;
    std::mt19937 rng(77 + variant);
    ModelBuilder b(13);
    auto x = b.input("x", {1, C, HW, HW}, DType::kU8);
    auto dqx = b.node("DequantizeLinear", {x, b.scalar(std::ldexp(1.f, -6)), b.constant(u8_scalar(0))});
    Tensor w = i8_tensor({M, C, K, K}, rng, -30, 30, DType::kI8);
    const int64_t centre = (K / 2) * K + K / 2;
    for (int64_t m = 0; m < M; ++m) {  // the violating pairs: channels (2, 3) or (4, 5) of the centre tap
      int8_t* wm = w.mutable_data<int8_t>() + m * C * K * K + centre;
      if (m % 8 == 0) wm[2 * K * K] = 127, wm[3 * K * K] = 100;
      if (m % 8 == 4) wm[4 * K * K] = -128, wm[5 * K * K] = -90;
      if (m % 8 == 2 && C == 40) wm[34 * K * K] = 90, wm[35 * K * K] = 110;  // past the 32-byte blocks
    }
    Tensor ws = Tensor::allocate(DType::kF32, {M});
    for (int64_t m = 0; m < M; ++m) ws.mutable_data<float>()[m] = std::ldexp(1.f, -7 - static_cast<int>(m % 3));
    auto dqw = b.node("DequantizeLinear", {b.constant(w), b.constant(ws)}, {{"axis", axis0()}});
    auto y = b.node("Conv", {dqx, dqw},
                    {{"pads", ints_attr({P, P, P, P})}, {"strides", ints_attr({S, S})}, {"kernel_shape", ints_attr({K, K})}});
    if (variant == 0) y = b.node("Relu", {y});
    std::string q = b.node("QuantizeLinear", {y, b.scalar(std::ldexp(1.f, -2)), b.constant(u8_scalar(variant == 0 ? 0 : 128))});
    if (variant == 0) {  // the residual
      auto z = b.input("z", {1, M, OHW, OHW}, DType::kU8);
      auto d1 = b.node("DequantizeLinear", {q, b.scalar(std::ldexp(1.f, -2)), b.constant(u8_scalar(0))});
      auto dz = b.node("DequantizeLinear", {z, b.scalar(std::ldexp(1.f, -3)), b.constant(u8_scalar(7))});
      q = b.node("QuantizeLinear", {b.node("Relu", {b.node("Add", {d1, dz})}), b.scalar(0.5f), b.constant(u8_scalar(0))});
    } else if (variant == 1) {  // a mid Q/DQ before the output's Q (another scale)
      auto d1 = b.node("DequantizeLinear", {q, b.scalar(std::ldexp(1.f, -2)), b.constant(u8_scalar(128))});
      q = b.node("QuantizeLinear", {d1, b.scalar(std::ldexp(1.f, -1)), b.constant(u8_scalar(128))});
    }
    b.output(q);
    auto model = b.build();
    auto fused = run_pass(*model, "qdq_fusion");
    ASSERT_EQ(count_ops(*fused, "QConvFused"), 1);
    auto fast = run_pass(*fused, "nhwc_layout");
    int n = 0;
    EXPECT_TRUE(fast_kernels_taken(*fast, &n));
    EXPECT_EQ(n, 1);
    Tensor xt = i8_tensor({1, C, HW, HW}, rng, 0, 60, DType::kU8);
    const int64_t hot[2][2] = {{4, 6}, {HW - 2, 0}};  // (h, w): one inside, one on the border; even (stride 2)
    for (const auto& h : hot)
      for (int64_t c = 2; c < C; ++c)
        if (c < 6 || c == 34 || c == 35) xt.mutable_data<uint8_t>()[(c * HW + h[0]) * HW + h[1]] = static_cast<uint8_t>(250 + c % 6);
    // Saturating (pixel, pair, output channel) products of the centre tap: a0 * w0 + a1 * w1 outside int16
    // (each touches one output: the hot pixels are even, the other taps' pairs cannot saturate).
    int64_t saturating = 0;
    for (int64_t i = 0; i < HW * HW; ++i)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < C / 2; ++j) {
          const int a0 = xt.data<uint8_t>()[2 * j * HW * HW + i], a1 = xt.data<uint8_t>()[(2 * j + 1) * HW * HW + i];
          const int8_t* wm = w.data<int8_t>() + m * C * K * K + centre;
          const int v = a0 * wm[2 * j * K * K] + a1 * wm[(2 * j + 1) * K * K];
          saturating += v > 32767 || v < -32768;
        }
    EXPECT_EQ(saturating, 2 * (C == 40 ? 6 : 4));  // both hot pixels, 4 (6) of the 16 channels
    EXPECT_LE(saturating, M * OHW * OHW / 256);
    NamedTensors feeds = {{"x", xt}};
    if (variant == 0) feeds.emplace_back("z", i8_tensor({1, M, OHW, OHW}, rng, 0, 255, DType::kU8));
    const NamedTensors ref = run_model(fused, feeds, "cpu-ref");
    const NamedTensors cpu = run_model(fast, feeds, "cpu");
    ASSERT_EQ(ref.size(), 1u);
    ASSERT_EQ(cpu.size(), 1u);
    double exact = 0;
    EXPECT_EQ(max_step_diff(cpu[0].second, ref[0].second, &exact), 0);
    int64_t interior = 0;
    const Tensor& r = ref[0].second;
    for (int64_t i = 0; i < r.numel(); ++i) interior += r.data<uint8_t>()[i] > 0 && r.data<uint8_t>()[i] < 255;
    EXPECT_GT(interior, r.numel() / 2);
  }
}

// v = acc * s just above a rounding tie, with a destination zero point: the op rounds v and then adds
// the zero point; v + 128 in f32 would land on the tie (v = k/2 + k * 2^-20 for odd k: 128 + v has no
// bits below 2^-16) and round to even, one step off. QConvFused (1x1, each output channel reading one
// input channel with weight 1) and QMatMulFused, oneDNN against the reference, bit for bit.
TEST(QdqFusion, DestinationZeroPointAddedAfterRounding) {
  const float s = 0.5f + std::ldexp(1.f, -20);  // x_scale; w_scale = y_scale = 1: v = x * s
  for (bool matmul : {false, true}) {
    SCOPED_TRACE(matmul ? "QMatMulFused" : "QConvFused");
    const int64_t C = 4, M = 16;
    ModelBuilder b(13);
    auto x = b.input("x", matmul ? vector<int64_t>{6, C} : vector<int64_t>{1, C, 5, 5}, DType::kU8);
    auto dqx = b.node("DequantizeLinear", {x, b.scalar(s), b.constant(u8_scalar(0))});
    Tensor w = Tensor::allocate(DType::kI8, matmul ? vector<int64_t>{C, M} : vector<int64_t>{M, C, 1, 1});
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c) w.mutable_data<int8_t>()[matmul ? c * M + m : m * C + c] = c == m % C ? 1 : 0;
    Tensor ws = Tensor::allocate(DType::kF32, {M});
    for (int64_t m = 0; m < M; ++m) ws.mutable_data<float>()[m] = 1.f;
    auto dqw = b.node("DequantizeLinear", {b.constant(w), b.constant(ws)}, {{"axis", int_attr(matmul ? 1 : 0)}});
    auto y = matmul ? b.node("MatMul", {dqx, dqw}) : b.node("Conv", {dqx, dqw});
    b.output(b.node("QuantizeLinear", {y, b.scalar(1.f), b.constant(u8_scalar(128))}));
    auto model = b.build();
    int changes = 0;
    auto fused = run_pass(*model, "qdq_fusion", &changes);
    ASSERT_EQ(changes, 1);
    ASSERT_EQ(count_ops(*fused, matmul ? "QMatMulFused" : "QConvFused"), 1);
    int n = 0;
    EXPECT_TRUE(fast_kernels_taken(*fused, &n, matmul ? "QMatMulFused" : "QConvFused"));
    EXPECT_EQ(n, 1);
    // x over 0..255, many small odd values (odd x is next to a tie; for x < 8 oneDNN used to land on it).
    Tensor xt = Tensor::allocate(DType::kU8, model->graph.inputs[0].type.shape->values());
    for (int64_t i = 0; i < xt.numel(); ++i)
      xt.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i % 2 ? (i / 2) % 9 : (i * 37) % 256);
    const NamedTensors feeds = {{"x", xt}};
    const NamedTensors ref = run_model(fused, feeds, "cpu-ref");
    const NamedTensors cpu = run_model(fused, feeds, "cpu");
    ASSERT_EQ(ref.size(), 1u);
    ASSERT_EQ(cpu.size(), 1u);
    double exact = 0;
    EXPECT_EQ(max_step_diff(cpu[0].second, ref[0].second, &exact), 0);
    // The reference rounds x * s up for odd x: y = 128 + (x + 1) / 2 (saturated).
    const Tensor& r = ref[0].second;
    int odd = 0;
    for (int64_t i = 0; i < r.numel(); ++i) {
      const int xv = xt.data<uint8_t>()[matmul ? (i / M) * C + (i % M) % C : ((i / 25) % C) * 25 + i % 25];
      if (xv % 2 == 1 && xv < 253) {
        ++odd;
        EXPECT_EQ(r.data<uint8_t>()[i], 128 + (xv + 1) / 2) << "element " << i << " x " << xv;
      }
    }
    EXPECT_GT(odd, 10);
  }
}

// The cpu backend's QuantizeLinear / DequantizeLinear / 8-bit Transpose kernels: bit for bit the reference
// (ties of x / scale included: inputs on exact half steps).
// The residual step is one fused multiply-add (oneDNN's sum post-op): with these scales, q = 41 and z = 185
// (zero point 7) round to different integers through fma(z_to_y, z - 7, q * mid_to_y) and through the
// separately rounded product (found by search over all pairs); the reference and oneDNN agree on the first.
TEST(QdqFusion, ResidualSumIsOneFusedMultiplyAdd) {
  const float ys = 1.300657868385315f, zs = 0.5697867274284363f;
  const int64_t C = 4, M = 16, HW = 3;
  ModelBuilder b(13);
  auto x = b.input("x", {1, C, HW, HW}, DType::kU8);
  auto z = b.input("z", {1, M, HW, HW}, DType::kU8);
  auto dqx = b.node("DequantizeLinear", {x, b.scalar(1.f), b.constant(u8_scalar(0))});
  Tensor w = Tensor::allocate(DType::kI8, {M, C, 1, 1});
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) w.mutable_data<int8_t>()[m * C + c] = c == m % C ? 1 : 0;
  Tensor ws = Tensor::allocate(DType::kF32, {M});
  for (int64_t m = 0; m < M; ++m) ws.mutable_data<float>()[m] = 1.f;
  auto dqw = b.node("DequantizeLinear", {b.constant(w), b.constant(ws)}, {{"axis", axis0()}});
  auto q1 = b.node("QuantizeLinear", {b.node("Conv", {dqx, dqw}), b.scalar(1.f), b.constant(u8_scalar(0))});
  auto d1 = b.node("DequantizeLinear", {q1, b.scalar(1.f), b.constant(u8_scalar(0))});
  auto dz = b.node("DequantizeLinear", {z, b.scalar(zs), b.constant(u8_scalar(7))});
  b.output(b.node("QuantizeLinear", {b.node("Relu", {b.node("Add", {d1, dz})}), b.scalar(ys), b.constant(u8_scalar(0))}));
  auto model = b.build();
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  ASSERT_EQ(count_ops(*fused, "QConvFused"), 1);
  ASSERT_EQ(fused->graph.nodes.size(), 1u);
  int n = 0;
  EXPECT_TRUE(fast_kernels_taken(*fused, &n));
  Tensor xt = Tensor::allocate(DType::kU8, {1, C, HW, HW}), zt = Tensor::allocate(DType::kU8, {1, M, HW, HW});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.mutable_data<uint8_t>()[i] = i % 2 ? 41 : static_cast<uint8_t>(i * 29 % 256);
  for (int64_t i = 0; i < zt.numel(); ++i) zt.mutable_data<uint8_t>()[i] = i % 3 ? 185 : static_cast<uint8_t>(i * 53 % 256);
  const NamedTensors feeds = {{"x", xt}, {"z", zt}};
  const Tensor ref = run_model(fused, feeds, "cpu-ref")[0].second;
  const Tensor cpu = run_model(fused, feeds, "cpu")[0].second;
  double exact = 0;
  EXPECT_EQ(max_step_diff(cpu, ref, &exact), 0);
  const float a = 41.f * (1.f / ys), zr = zs / ys;
  const volatile float p = zr * 178.f;  // the separately rounded product (volatile: no contraction into an fma)
  ASSERT_NE(std::nearbyint(std::fma(zr, 178.f, a)), std::nearbyint(a + p)) << "the scales no longer separate the two";
  int hits = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t s = 0; s < HW * HW; ++s) {
      const int64_t i = m * HW * HW + s;
      if (xt.data<uint8_t>()[(m % C) * HW * HW + s] != 41 || zt.data<uint8_t>()[i] != 185) continue;
      ++hits;
      EXPECT_EQ(ref.data<uint8_t>()[i], std::nearbyint(std::fma(zr, 178.f, a))) << "element " << i;
    }
  EXPECT_GT(hits, 5);
}

// Transposes: oneDNN's reorder (6 channels), the image interleave (3 channels), a copy (only dims of
// size 1 move: an NHWC pooled [N,1,1,C] leaving the region).
TEST(QdqFusion, QuantizeDequantizeTransposeKernelsMatchReference) {
  for (const vector<int64_t>& shape : {vector<int64_t>{2, 3, 5, 7}, vector<int64_t>{2, 6, 5, 7}, vector<int64_t>{2, 9, 1, 1}})
  for (DType dt : {DType::kU8, DType::kI8}) {
    SCOPED_TRACE(dims_to_string(shape));
    ModelBuilder b(13);
    auto x = b.input("x", shape);
    Tensor zp = Tensor::allocate(dt, {});
    if (dt == DType::kU8) zp.mutable_data<uint8_t>()[0] = 100;
    else zp.mutable_data<int8_t>()[0] = -3;
    const std::string s = b.scalar(0.25f), z = b.constant(zp);
    auto q = b.node("QuantizeLinear", {x, s, z});
    auto t = b.node("Transpose", {q}, {{"perm", ints_attr({0, 2, 3, 1})}});
    b.output(t);
    b.output(b.node("DequantizeLinear", {t, s, z}));
    auto model = b.build();
    NamedTensors feeds = random_feeds(*model, 3);
    float* px = feeds[0].second.mutable_data<float>();
    for (int64_t i = 0; i < feeds[0].second.numel(); ++i) px[i] = std::round(px[i] * 40.f) / 8.f;  // many ties, some saturate
    const NamedTensors ref = run_model(model, feeds, "cpu-ref"), cpu = run_model(model, feeds, "cpu");
    ASSERT_EQ(ref.size(), 2u);
    ASSERT_EQ(cpu.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(cpu[i].second.dims(), ref[i].second.dims());
      ASSERT_EQ(cpu[i].second.dtype(), ref[i].second.dtype());
      EXPECT_EQ(std::memcmp(cpu[i].second.raw(), ref[i].second.raw(), static_cast<size_t>(ref[i].second.nbytes())), 0);
    }
  }
}

// The cpu QuantizeLinear multiplies by 1 / scale where that rounds like the division: values on, next
// to and between half steps of awkward scales, large, infinite and NaN values: bit for bit the reference.
TEST(QdqFusion, QuantizeLinearNextToTies) {
  for (float scale : {0.0173f, 0.3f, 1.f / 3.f, 7.1e-5f})
    for (DType dt : {DType::kU8, DType::kI8}) {
      SCOPED_TRACE(::testing::Message() << "scale " << scale << " " << dtype_name(dt));
      const int64_t n = 4099;
      ModelBuilder b(13);
      auto x = b.input("x", {n});
      Tensor zp = Tensor::allocate(dt, {});
      if (dt == DType::kU8) zp.mutable_data<uint8_t>()[0] = 7;
      else zp.mutable_data<int8_t>()[0] = -5;
      b.output(b.node("QuantizeLinear", {x, b.scalar(scale), b.constant(zp)}));
      auto model = b.build();
      Tensor xt = Tensor::allocate(DType::kF32, {n});
      float* px = xt.mutable_data<float>();
      std::mt19937 rng(11);
      std::normal_distribution<float> nd(0.f, 60.f * scale);
      for (int64_t i = 0; i < n; ++i) {
        const float k = static_cast<float>(i % 300) - 150.f;
        const float tie = (k + 0.5f) * scale;
        switch (i % 5) {
          case 0: px[i] = tie; break;
          case 1: px[i] = std::nextafter(tie, 1e30f); break;
          case 2: px[i] = std::nextafter(tie, -1e30f); break;
          case 3: px[i] = nd(rng); break;
          default: px[i] = k * scale; break;
        }
      }
      px[7] = std::numeric_limits<float>::quiet_NaN();
      px[8] = std::numeric_limits<float>::infinity();
      px[9] = -1e30f;
      px[10] = 3e9f * scale;
      const NamedTensors feeds = {{"x", xt}};
      const NamedTensors ref = run_model(model, feeds, "cpu-ref"), cpu = run_model(model, feeds, "cpu");
      ASSERT_EQ(ref.size(), 1u);
      ASSERT_EQ(cpu.size(), 1u);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i)
        differ += static_cast<const uint8_t*>(cpu[0].second.raw())[i] != static_cast<const uint8_t*>(ref[0].second.raw())[i];
      EXPECT_EQ(differ, 0);
    }
}

// com.ferry.QuantizeLinearToNhwc (the nhwc_layout pass's QuantizeLinear of an image entering an NHWC region)
// against QuantizeLinear -> Transpose to NHWC on the reference device: its cpu kernel (three planes by shuffles,
// five by the generic interleave; 1073 pixels: two whole blocks of 512 and a tail, none a multiple of 16 at the
// end) and its reference kernel bit for bit, next to rounding ties, NaN and infinities.
TEST(QdqFusion, QuantizeLinearToNhwcMatchesQuantizeThenTranspose) {
  for (int64_t C : {3, 5})
    for (DType dt : {DType::kU8, DType::kI8}) {
      SCOPED_TRACE(::testing::Message() << C << " channels " << dtype_name(dt));
      const int64_t N = 2, H = 37, W = 29, n = N * C * H * W;
      const float scale = 0.0173f;
      Tensor zp = Tensor::allocate(dt, {});
      if (dt == DType::kU8) zp.mutable_data<uint8_t>()[0] = 114;
      else zp.mutable_data<int8_t>()[0] = -5;
      ModelBuilder a(13);
      auto xa = a.input("x", {N, C, H, W});
      a.output(a.node("Transpose", {a.node("QuantizeLinear", {xa, a.scalar(scale), a.constant(zp)})}, {{"perm", ints_attr({0, 2, 3, 1})}}));
      auto unfused = a.build();
      ModelBuilder b(13);
      b.import_opset("com.ferry", 1);
      auto xb = b.input("x", {N, C, H, W});
      b.output(b.node("QuantizeLinearToNhwc", {xb, b.scalar(scale), b.constant(zp)}, {}, 1, "com.ferry"));
      auto fused = b.build();
      int taken = 0;
      EXPECT_TRUE(fast_kernels_taken(*fused, &taken, "QuantizeLinearToNhwc"));
      EXPECT_EQ(taken, 1);
      Tensor xt = Tensor::allocate(DType::kF32, {N, C, H, W});
      float* px = xt.mutable_data<float>();
      std::mt19937 rng(13);
      std::normal_distribution<float> nd(0.f, 60.f * scale);
      for (int64_t i = 0; i < n; ++i) {
        const float k = static_cast<float>(i % 300) - 150.f, tie = (k + 0.5f) * scale;
        switch (i % 4) {
          case 0: px[i] = tie; break;
          case 1: px[i] = std::nextafter(tie, 1e30f); break;
          case 2: px[i] = std::nextafter(tie, -1e30f); break;
          default: px[i] = nd(rng); break;
        }
      }
      px[17] = std::numeric_limits<float>::quiet_NaN();
      px[H * W + 40] = std::numeric_limits<float>::infinity();
      px[2 * H * W + 600] = -std::numeric_limits<float>::infinity();
      px[n - 3] = 3e9f * scale;
      const NamedTensors feeds = {{"x", xt}};
      const Tensor want = run_model(unfused, feeds, "cpu-ref")[0].second;
      for (const char* device : {"cpu", "cpu-ref"}) {
        const Tensor got = run_model(fused, feeds, device)[0].second;
        ASSERT_EQ(got.dims(), want.dims()) << device;
        ASSERT_EQ(got.dtype(), dt) << device;
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(n)), 0) << device;
      }
    }
}

// An int8 model's image: QuantizeLinear of the float input -> DQ -> 3x3/2 Conv -> Relu -> Q. On cpu the region runs
// channels-last and the QuantizeLinear, which only the region reads, writes NHWC itself (no Transpose into the
// region); its cpu kernels compute what the reference kernels of the optimized graph do, bit for bit. Where the
// quantized image is also a graph output, it stays a QuantizeLinear with a Transpose after it.
TEST(QdqFusion, ImageQuantizeLinearWritesNhwc) {
  for (bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "quantized image also an output" : "quantized image read by the region only");
    std::mt19937 rng(21);
    ModelBuilder b(13);
    auto x = b.input("x", {1, 3, 20, 18});
    auto q = b.node("QuantizeLinear", {x, b.scalar(0.0187f), b.constant(u8_scalar(114))});
    auto dq = b.node("DequantizeLinear", {q, b.scalar(0.0187f), b.constant(u8_scalar(114))});
    Tensor ws = Tensor::allocate(DType::kF32, {8});
    for (int i = 0; i < 8; ++i) ws.mutable_data<float>()[i] = 0.004f + 0.0005f * i;
    auto dqw = b.node("DequantizeLinear", {b.constant(i8_tensor({8, 3, 3, 3}, rng, -127, 127, DType::kI8)), b.constant(ws)},
                      {{"axis", axis0()}});
    auto conv = b.node("Conv", {dq, dqw}, {{"pads", ints_attr({1, 1, 1, 1})}, {"strides", ints_attr({2, 2})}});
    b.output(b.node("QuantizeLinear", {b.node("Relu", {conv}), b.scalar(0.03f), b.constant(u8_scalar(0))}));
    if (pinned) b.output(q);
    auto model = b.build();
    auto opt = model->clone();
    OptimizeOptions oo;
    oo.device_traits = device_graph_traits("cpu");
    ASSERT_TRUE(optimize_model(opt.get(), oo).is_ok());
    EXPECT_EQ(count_ops(*opt, "QConvFused"), 1);
    EXPECT_EQ(count_ops(*opt, "QuantizeLinearToNhwc"), pinned ? 0 : 1);
    EXPECT_EQ(count_ops(*opt, "QuantizeLinear"), pinned ? 1 : 0);
    EXPECT_EQ(count_ops(*opt, "Transpose"), pinned ? 2 : 1);  // into the region, and out of it
    const NamedTensors feeds = random_feeds(*model, 3);
    const NamedTensors cpu = run_model(opt, feeds, "cpu"), ref = run_model(opt, feeds, "cpu-ref"), qdq = run_model(model, feeds, "cpu-ref");
    ASSERT_EQ(cpu.size(), pinned ? 2u : 1u);
    for (size_t i = 0; i < cpu.size(); ++i) {
      double exact = 0;
      EXPECT_EQ(max_step_diff(cpu[i].second, ref[i].second, &exact), 0) << i;
      EXPECT_LE(max_step_diff(cpu[i].second, qdq[i].second, &exact), 1) << i;
    }
  }
}

// `ferry compile` keeps the int8 path: the .ferry file holds the QConvFused nodes with their int8
// weights pre-packed by the oneDNN kernel, a load uses them without reordering, and the compiled model
// computes bit for bit what the QDQ model computes when loaded directly.
TEST(QdqFusion, CompiledModelKeepsInt8PathAndPrepackedWeights) {
  auto model = int8_region_model();
  CompileOptions o;
  o.prepack = true;
  CompileReport report;
  auto spec = compile_model(*model, o, &report);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  ASSERT_EQ(spec.value().gears.size(), 1u);
  const Model& compiled = *spec.value().gears[0].model;
  EXPECT_EQ(count_ops(compiled, "QConvFused"), 2);
  int64_t packed = 0;
  for (const Node& n : compiled.graph.nodes) packed += n.op_type == "QConvFused" && n.attr(cpu::kPackedAttr) != nullptr;
  EXPECT_EQ(packed, 2);
  auto bytes = serialize_compiled_model(spec.value());
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto cm = parse_compiled_model_copy(bytes.value().data(), bytes.value().size(), "qdq.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().message();
  const cpu::PackCounts before = cpu::pack_counts();
  auto session = Session::open(std::move(cm).value());
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  const cpu::PackCounts after = cpu::pack_counts();
  EXPECT_EQ(after.stored - before.stored, 2);
  EXPECT_EQ(after.reordered - before.reordered, 0);
  const NamedTensors feeds = u8_feeds(*model, 11);
  NamedTensors got;
  ASSERT_TRUE(session.value()->run(feeds, &got).is_ok());
  const NamedTensors want = run_model(model, feeds, "cpu", -1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got[0].second.dims(), want[0].second.dims());
  EXPECT_EQ(std::memcmp(got[0].second.raw(), want[0].second.raw(), static_cast<size_t>(want[0].second.nbytes())), 0);
}

// The same for the few-channel convolution whose taps are packed into channels from a copy of its
// weights (an image network's first layer): the .ferry file holds that copy's packed layout.
TEST(QdqFusion, CompiledModelStoresPackedTaps) {
  QdqCase qc;
  qc.c = 3;
  qc.k = 7;
  qc.pad = 3;
  qc.stride = 2;
  qc.hw = 15;
  // A source zero point, but for AVX2 without VNNI: there such a stem (full-range weights) runs on
  // int8_gemm through an im2col (int8_im2col_conv.cpp), nothing packed; zero point 0 stays oneDNN's.
  qc.x_zp = cpu::int8_gemm_available() ? 0 : 128;
  qc.conv_relu = false;
  auto model = qdq_conv_model(qc);
  CompileOptions o;
  o.prepack = true;
  CompileReport report;
  auto spec = compile_model(*model, o, &report);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  const Model& compiled = *spec.value().gears[0].model;
  int64_t packed = 0;
  for (const Node& n : compiled.graph.nodes)
    if (const Attribute* k = n.attr(cpu::kPackedKeyAttr); n.op_type == "QConvFused" && k)
      // (on a host without VNNI the weights are split instead of tap-packed: int8_pair_saturation.h)
      packed += k->s.rfind("dnnl_int8_conv_taps|", 0) == 0 || k->s.rfind("dnnl_int8_conv_split|", 0) == 0;
  EXPECT_EQ(packed, 1);
  auto bytes = serialize_compiled_model(spec.value());
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto cm = parse_compiled_model_copy(bytes.value().data(), bytes.value().size(), "taps.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().message();
  const cpu::PackCounts before = cpu::pack_counts();
  auto session = Session::open(std::move(cm).value());
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  const cpu::PackCounts after = cpu::pack_counts();
  EXPECT_EQ(after.stored - before.stored, 1);
  EXPECT_EQ(after.reordered - before.reordered, 0);
  const NamedTensors feeds = u8_feeds(*model, 12);
  NamedTensors got;
  ASSERT_TRUE(session.value()->run(feeds, &got).is_ok());
  const NamedTensors want = run_model(model, feeds, "cpu", -1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got[0].second.dims(), want[0].second.dims());
  EXPECT_EQ(std::memcmp(got[0].second.raw(), want[0].second.raw(), static_cast<size_t>(want[0].second.nbytes())), 0);
}

// DQ -> Flatten / Reshape -> Q with the same parameters run on the uint8 tensor (bit for bit the QDQ graph).
TEST(QdqFusion, FlattenAndReshapeRunOnUint8) {
  ModelBuilder b(13);
  auto x = b.input("x", {2, 3, 4, 5}, DType::kU8);
  const std::string s = b.scalar(0.1f), z = b.constant(u8_scalar(9));
  auto f = b.node("QuantizeLinear", {b.node("Flatten", {b.node("DequantizeLinear", {x, s, z})}), s, z});
  Tensor shape = Tensor::allocate(DType::kI64, {2});
  shape.mutable_data<int64_t>()[0] = 6;
  shape.mutable_data<int64_t>()[1] = 20;
  auto r = b.node("QuantizeLinear", {b.node("Reshape", {b.node("DequantizeLinear", {f, s, z}), b.constant(shape)}), s, z});
  b.output(r);
  auto model = b.build();
  int changes = 0;
  auto fused = run_pass(*model, "qdq_fusion", &changes);
  EXPECT_EQ(changes, 2);
  ASSERT_EQ(fused->graph.nodes.size(), 2u);
  EXPECT_EQ(fused->graph.nodes[0].op_type, "Flatten");
  EXPECT_EQ(fused->graph.nodes[1].op_type, "Reshape");
  const NamedTensors feeds = u8_feeds(*model, 4);
  double exact = 0;
  EXPECT_EQ(max_step_diff(run_model(fused, feeds, "cpu")[0].second, run_model(model, feeds, "cpu-ref")[0].second, &exact), 0);
}

// Bytes (or float bits) of two tensors of the same type: the count of elements that differ.
int64_t differing(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.type().to_string(), b.type().to_string());
  if (a.nbytes() != b.nbytes()) return std::max<int64_t>(a.numel(), 1);
  const int64_t es = a.nbytes() / std::max<int64_t>(a.numel(), 1);
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::memcmp(static_cast<const char*>(a.raw()) + i * es, static_cast<const char*>(b.raw()) + i * es, es) != 0;
  return n;
}

int count_op(const Model& m, const std::string& op) {
  int n = 0;
  for (const Node& node : m.graph.nodes) n += node.op_type == op;
  return n;
}

// Conv -> Relu -> MaxPool -> Q (the plain structure's ResNet stem): QConvFused with an 8-bit output, then the
// MaxPool on it (NhwcMaxPool after nhwc_layout); every output byte that of the QDQ graph on cpu-ref, whatever
// the scales (the Q moved before a maximum changes no value), at a zero point of 0 and of 128 (no Relu).
TEST(QdqFusion, MaxPoolAfterConvRunsOnItsQuantizedOutput) {
  for (int variant = 0; variant < 3; ++variant) {
    QdqCase qc;
    qc.pool = true;
    qc.c = 4;
    qc.hw = 13;
    qc.pow2 = variant != 1;
    qc.conv_relu = variant != 2;
    qc.nhwc = variant != 0;
    qc.seed = 40 + static_cast<uint32_t>(variant);
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    auto model = qdq_conv_model(qc);
    int changes = 0;
    auto fused = run_pass(*model, "qdq_fusion", &changes);
    EXPECT_EQ(changes, 1);
    ASSERT_EQ(fused->graph.nodes.size(), 2u);
    EXPECT_EQ(fused->graph.nodes[0].op_type, "QConvFused");
    EXPECT_EQ(fused->graph.nodes[1].op_type, "MaxPool");
    std::shared_ptr<Model> fast = qc.nhwc ? run_pass(*fused, "nhwc_layout") : fused;
    if (qc.nhwc) {
      EXPECT_EQ(count_op(*fast, "NhwcMaxPool"), 1);
    }
    const NamedTensors feeds = u8_feeds(*model, qc.seed);
    const Tensor ref = run_model(model, feeds, "cpu-ref")[0].second;
    EXPECT_EQ(differing(run_model(fused, feeds, "cpu-ref")[0].second, ref), 0);
    EXPECT_EQ(differing(run_model(fast, feeds, "cpu")[0].second, ref), 0);
    int64_t interior = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) interior += ref.data<uint8_t>()[i] > 0 && ref.data<uint8_t>()[i] < 255;
    EXPECT_GT(interior, ref.numel() / 4);
  }
}

// DQ -> element-wise float ops -> Q as com.ferry.QLookup (EfficientNet's SiLU; qdq_fusion.cpp fuse_qlookup):
//  - SiLU with its float output also read by a squeeze-excitation Mul: the Q becomes a u8 table, the
//    chain a float table (its other reader stays in float), the Mul and its Q as they were;
//  - an s8 input through Clip, HardSwish and a scalar Add to an s8 Q (zero points 0/128/255 across the cases);
// the fused model on the cpu kernels (AVX2 byte shuffles where there) and on cpu-ref against the QDQ
// graph on cpu-ref: every byte and float bit the same.
TEST(QdqFusion, ElementwiseChainsBecomeLookupTables) {
  for (int zp : {0, 128, 255}) {
    SCOPED_TRACE(zp);
    ModelBuilder b(14);  // HardSwish
    auto x = b.input("x", {1, 8, 9, 11}, DType::kU8);  // 792 values: the vector loop and its tail
    auto g = b.input("g", {1, 8, 1, 1});
    auto d = b.node("DequantizeLinear", {x, b.scalar(0.043f), b.constant(u8_scalar(static_cast<uint8_t>(zp)))});
    auto silu = b.node("Mul", {d, b.node("Sigmoid", {d})});
    b.output(b.node("QuantizeLinear", {silu, b.scalar(0.021f), b.constant(u8_scalar(7))}));
    b.output(b.node("QuantizeLinear", {b.node("Mul", {silu, g}), b.scalar(0.017f), b.constant(u8_scalar(3))}));
    auto xs = b.input("xs", {2, 5, 7, 3}, DType::kI8);
    Tensor s8zp = Tensor::allocate(DType::kI8, {});
    s8zp.mutable_data<int8_t>()[0] = static_cast<int8_t>(zp - 128);
    auto ds = b.node("DequantizeLinear", {xs, b.scalar(0.05f), b.constant(s8zp)});
    auto chain = b.node("Add", {b.node("HardSwish", {b.node("Clip", {ds, b.scalar(-3.5f), b.scalar(5.f)})}), b.scalar(0.25f)});
    Tensor s8z2 = Tensor::allocate(DType::kI8, {});
    s8z2.mutable_data<int8_t>()[0] = -9;
    b.output(b.node("QuantizeLinear", {chain, b.scalar(0.031f), b.constant(s8z2)}));
    auto model = b.build();
    auto fused = run_pass(*model, "qdq_fusion");
    EXPECT_EQ(count_op(*fused, "QLookup"), 3);  // SiLU's Q (u8), SiLU itself (f32), the s8 chain
    EXPECT_EQ(count_op(*fused, "Sigmoid"), 0);
    EXPECT_EQ(count_op(*fused, "Mul"), 1);  // the squeeze-excitation scale
    EXPECT_EQ(count_op(*fused, "QuantizeLinear"), 1);
    EXPECT_EQ(count_op(*fused, "DequantizeLinear"), 0);
    int lookups = 0;
    EXPECT_TRUE(fast_kernels_taken(*fused, &lookups, "QLookup"));
    std::mt19937 rng(21);
    NamedTensors feeds = {{"x", i8_tensor({1, 8, 9, 11}, rng, 0, 255, DType::kU8)},
                          {"g", Tensor::allocate(DType::kF32, {1, 8, 1, 1})},
                          {"xs", i8_tensor({2, 5, 7, 3}, rng, -128, 127, DType::kI8)}};
    for (int64_t c = 0; c < 8; ++c) feeds[1].second.mutable_data<float>()[c] = 0.1f + 0.13f * static_cast<float>(c);
    const NamedTensors want = run_model(model, feeds, "cpu-ref");
    for (const char* dev : {"cpu", "cpu-ref"}) {
      const NamedTensors got = run_model(fused, feeds, dev);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(differing(got[i].second, want[i].second), 0) << dev << " output " << i;
    }
    // Not degenerate: the SiLU output takes many values.
    std::set<uint8_t> values(want[0].second.data<uint8_t>(), want[0].second.data<uint8_t>() + want[0].second.numel());
    EXPECT_GT(values.size(), zp == 255 ? 5u : 40u);  // zero point 255: only x <= 0, SiLU in [-0.28, 0]
  }
}

// Chains a table cannot replace stay: a per-channel (non-scalar) constant, two different DQs; a value of a
// chain that is a graph output keeps its name (a float table).
TEST(QdqFusion, LookupLeavesOtherChainsAlone) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 4, 3, 3}, DType::kU8);
  auto y = b.input("y", {1, 4, 3, 3}, DType::kU8);
  const std::string s = b.scalar(0.1f), z = b.constant(u8_scalar(9));
  auto dx = b.node("DequantizeLinear", {x, s, z});
  auto dy = b.node("DequantizeLinear", {y, s, z});
  Tensor per_c = Tensor::allocate(DType::kF32, {1, 4, 1, 1});
  for (int i = 0; i < 4; ++i) per_c.mutable_data<float>()[i] = 1.f + static_cast<float>(i);
  b.output(b.node("QuantizeLinear", {b.node("Mul", {dx, b.constant(per_c)}), s, z}));
  b.output(b.node("QuantizeLinear", {b.node("Add", {dx, dy}), s, z}));
  auto t = b.node("Tanh", {dy});
  b.output(t);
  b.output(b.node("QuantizeLinear", {b.node("Relu", {t}), s, z}));
  auto model = b.build();
  auto fused = run_pass(*model, "qdq_fusion");
  // Q(Relu(Tanh(DQ(y)))) a u8 table and Tanh (a graph output) a float one; the rest as it was.
  EXPECT_EQ(count_op(*fused, "QLookup"), 2);
  EXPECT_EQ(count_op(*fused, "Tanh") + count_op(*fused, "Relu"), 0);
  EXPECT_EQ(count_op(*fused, "Mul") + count_op(*fused, "Add"), 2);
  EXPECT_EQ(count_op(*fused, "QuantizeLinear"), 2);
  EXPECT_EQ(count_op(*fused, "DequantizeLinear"), 2);
  const NamedTensors feeds = u8_feeds(*model, 5);
  const NamedTensors want = run_model(model, feeds, "cpu-ref"), got = run_model(fused, feeds, "cpu");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(differing(got[i].second, want[i].second), 0) << "output " << i;
}

TEST(QdqFusion, LeavesNonMatchingPatternsAlone) {
  // Weights quantized with a nonzero zero point, or a bias whose scale is not x_scale * w_scale: no fusion.
  QdqCase qc;
  auto model = qdq_conv_model(qc);
  for (auto& [name, t] : model->graph.initializers)
    if (t.dtype() == DType::kI8 && t.rank() == 1) t.mutable_data<int8_t>()[0] = 3;  // w zero point
  int changes = -1;
  run_pass(*model, "qdq_fusion", &changes);
  EXPECT_EQ(changes, 0);
}

}  // namespace
}  // namespace ferry::testing
