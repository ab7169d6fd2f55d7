// com.ferry.QConvFused as a depthwise 3x3 (src/backends/cpu/int8_depthwise_conv.cpp): the
// cpu backend's output against the reference kernel (src/ops/quantize_fused.cpp), bit for bit, over
// MobileNetV2's shape (u8 source with zero point 0, ReLU6 as a Clip, int32 bias), channel counts not a
// multiple of 8 or 16 (1-48), widths of 1-11 (odd: a pixel left after the pairs), pads 0-2 and
// asymmetric, batch 2, u8 / s8 sources with zero points, weight zero points, full-range weights,
// conv_relu and relu, u8 / s8 outputs, scales that push v past 2^31 (the integer epilogue's clamp),
// stride 2 on one or both axes, a Clip whose bound the u8 saturation implies or not (int_clamp_implied),
// two output rows per pass at stride 1 (split over threads, odd row counts, batch 3), small images a chunk
// of channel blocks at a time,
// and the cases it declines (stride 2 past 1.5 MiB, stride 3, 5x5, grouped,
// float bias or output, an infinite scale). Also a 1x1 -> depthwise -> 1x1 chain.
// Runs where int8_gemm does (AVX2 without VNNI); skipped elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/int8_gemm.h"
#include "ops/shape_inference.h"
#include "int8_test_util.h"
#include "pass_test_util.h"

namespace ferry {
namespace {

using testing::int_attr;
using testing::scalar_of;
using testing::ints_attr;
using testing::run_model;
using std::vector;

struct DwCase {
  int64_t N = 1, C = 20, H = 7, W = 9;
  int64_t K = 3, group = -1;  // group -1: C (depthwise)
  vector<int64_t> strides = {1, 1}, pads = {1, 1, 1, 1};
  bool x_s8 = false;
  int x_zp = 0;
  bool w_zp = false, fbias = false, conv_relu = false, clip = true, relu = false;
  float y_scale_factor = 1;  // y_scale times this (tiny: v past int32; 0-ish: infinite)
  float clip_steps = 60;     // the Clip's upper bound in output steps (ReLU6 on a [0, 6] range: 255)
  DType y_dt = DType::kU8;
  uint32_t seed = 5;
};

Attribute float_attr(float v) {
  Attribute a;
  a.type = AttrType::kFloat;
  a.f = v;
  return a;
}

// Adds the QConvFused node `name` (x -> y) to g: C -> M channels, K x K, the case's flags.
void add_qconv(Graph& g, const DwCase& dc, const std::string& name, const std::string& x, DType xdt, int x_zp, int64_t C, int64_t M,
               int64_t K, int64_t group, const std::string& y, DType ydt, std::mt19937& rng) {
  const auto init = [&](const std::string& n, Tensor t) {
    g.initializers[name + n] = t;
    g.value_types[name + n] = t.type();
    return name + n;
  };
  Tensor w = Tensor::allocate(DType::kI8, {M, C / group, K, K});
  for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  if (w.numel() >= 2) {  // the range's ends
    w.mutable_data<int8_t>()[0] = -128;
    w.mutable_data<int8_t>()[1] = 127;
  }
  Tensor ws = Tensor::allocate(DType::kF32, {M});
  for (int64_t n = 0; n < M; ++n) ws.mutable_data<float>()[n] = 0.011f * (1.f + 0.29f * static_cast<float>(n % 5));
  const double taps = static_cast<double>(C / group * K * K);
  const float xs = 0.017f;
  const float ys = static_cast<float>(xs * 0.015 * 74.0 * 128 * std::sqrt(taps) / 40) * dc.y_scale_factor;
  vector<std::string> in = {x, init("_xs", Tensor::scalar<float>(xs)), init("_xz", scalar_of(xdt, x_zp)), init("_w", w),
                            init("_ws", ws)};
  if (dc.w_zp) {
    Tensor wz = Tensor::allocate(DType::kI8, {M});
    for (int64_t n = 0; n < M; ++n) wz.mutable_data<int8_t>()[n] = static_cast<int8_t>(n % 7 - 3);
    in.push_back(init("_wz", wz));
  } else {
    in.push_back("");
  }
  if (ydt == DType::kF32) {
    in.push_back("");
    in.push_back("");
  } else {
    in.push_back(init("_ys", Tensor::scalar<float>(ys)));
    in.push_back(init("_yz", scalar_of(ydt, ydt == DType::kU8 ? (dc.clip || dc.conv_relu || dc.relu ? 0 : 128) : -5)));
  }
  Tensor b = Tensor::allocate(dc.fbias ? DType::kF32 : DType::kI32, {M});
  for (int64_t n = 0; n < M; ++n) {
    const int r = static_cast<int>(rng() % 2001) - 1000;
    if (dc.fbias) b.mutable_data<float>()[n] = static_cast<float>(r) * 0.0041f;
    else b.mutable_data<int32_t>()[n] = r * 17;
  }
  in.push_back(init("_b", b));
  Node n;
  n.op_type = "QConvFused";
  n.domain = "com.ferry";
  n.name = name;
  n.inputs = in;
  n.outputs = {y};
  n.attrs["channels_last"] = int_attr(1);
  n.attrs["kernel_shape"] = ints_attr({K, K});
  n.attrs["strides"] = ints_attr(K == 1 ? vector<int64_t>{1, 1} : dc.strides);
  n.attrs["pads"] = ints_attr(K == 1 ? vector<int64_t>{0, 0, 0, 0} : dc.pads);
  n.attrs["group"] = int_attr(group);
  if (dc.conv_relu) n.attrs["conv_relu"] = int_attr(1);
  if (dc.relu) n.attrs["relu"] = int_attr(1);
  if (dc.clip) {  // ReLU6 in real units: [0, 6], 6 about 60 output steps
    n.attrs["conv_min"] = float_attr(0.f);
    n.attrs["conv_max"] = float_attr(dc.clip_steps * ys);
  }
  g.nodes.push_back(n);
}

std::shared_ptr<Model> dw_model(const DwCase& dc, std::mt19937& rng, bool chain = false) {
  auto m = std::make_shared<Model>();
  m->opset_imports[""] = 13;
  m->opset_imports["com.ferry"] = 1;
  Graph& g = m->graph;
  const DType xdt = dc.x_s8 ? DType::kI8 : DType::kU8;
  const vector<int64_t> xd = {dc.N, dc.H, dc.W, dc.C};
  g.inputs.push_back(ValueInfo{"x", TensorType{xdt, Shape::of(xd)}});
  g.value_types["x"] = TensorType{xdt, Shape::of(xd)};
  const int64_t group = dc.group < 0 ? dc.C : dc.group;
  if (!chain) {
    add_qconv(g, dc, "dw", "x", xdt, dc.x_zp, dc.C, dc.C, dc.K, group, "y", dc.y_dt, rng);
  } else {  // MobileNetV2's block: 1x1 expand (x6, ReLU6) -> depthwise 3x3 (ReLU6) -> 1x1 project
    DwCase e = dc;
    add_qconv(g, e, "expand", "x", xdt, dc.x_zp, dc.C, 6 * dc.C, 1, 1, "e", DType::kU8, rng);
    add_qconv(g, e, "dw", "e", DType::kU8, 0, 6 * dc.C, 6 * dc.C, 3, 6 * dc.C, "d", DType::kU8, rng);
    e.clip = false;
    add_qconv(g, e, "project", "d", DType::kU8, 0, 6 * dc.C, dc.C, 1, 1, "y", dc.y_dt, rng);
  }
  g.outputs.push_back(ValueInfo{"y", {}});
  Status s = infer_shapes(m.get());
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return m;
}

// Whether the first factory taking node `i` is the depthwise kernel's.
bool depthwise_takes(const Model& m, size_t i = 0) {
  const Node& n = m.graph.nodes[i];
  auto schema = resolve_schema(n, m.opset(n.domain));
  const auto* factories = cpu_kernel_table().find(n.domain, n.op_type);
  if (!schema.is_ok() || !factories) return false;
  for (const CpuKernelFactory& f : *factories) {
    auto k = f(n, *schema.value(), m.graph);
    if (k.is_ok() && k.value()) return std::string(typeid(*k.value()).name()).find("Depthwise") != std::string::npos;
  }
  return false;
}

void check(const DwCase& dc, bool taken = true, bool chain = false, bool expect_interior = true) {
  SCOPED_TRACE(::testing::Message() << "N=" << dc.N << " C=" << dc.C << " H=" << dc.H << " W=" << dc.W << " pads=" << dc.pads[0]
                                    << dc.pads[1] << dc.pads[2] << dc.pads[3] << " s8=" << dc.x_s8 << " x_zp=" << dc.x_zp
                                    << " w_zp=" << dc.w_zp << " fbias=" << dc.fbias << " clip=" << dc.clip << " y="
                                    << dtype_name(dc.y_dt) << " yscale*" << dc.y_scale_factor << " clip_steps=" << dc.clip_steps << " chain=" << chain);
  std::mt19937 rng(dc.seed);
  auto model = dw_model(dc, rng, chain);
  EXPECT_EQ(depthwise_takes(*model, chain ? 1 : 0), taken);
  Tensor x = Tensor::allocate(dc.x_s8 ? DType::kI8 : DType::kU8, {dc.N, dc.H, dc.W, dc.C});
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
  if (x.numel() >= 2) {  // |x - x_zp| at its largest
    x.mutable_data<uint8_t>()[0] = dc.x_s8 ? 0x80 : 0;
    x.mutable_data<uint8_t>()[1] = dc.x_s8 ? 0x7f : 255;
  }
  const NamedTensors feeds = {{"x", x}};
  const NamedTensors ref = run_model(model, feeds, "cpu-ref");
  const NamedTensors cpu = run_model(model, feeds, "cpu");
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(cpu.size(), 1u);
  const Tensor &r = ref[0].second, &c = cpu[0].second;
  ASSERT_EQ(r.dims(), c.dims());
  ASSERT_EQ(r.dtype(), c.dtype());
  const auto [diff, interior] = testing::byte_diff(r, c);
  EXPECT_EQ(diff, 0) << "of " << r.numel() << " outputs";
  if (expect_interior) {
    EXPECT_GT(interior, r.numel() / 5);  // the case is not all clamped
  }
}

class Int8DepthwiseConv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::int8_gemm_available()) GTEST_SKIP() << "the int8 depthwise kernel runs on AVX2 hosts without VNNI only";
  }
};

TEST_F(Int8DepthwiseConv, MobileNetShapeBitExact) {
  DwCase dc;  // u8 source with zero point 0 (a ReLU6 output), ReLU6 as a Clip, int32 bias, u8 output
  dc.C = 144;
  dc.H = dc.W = 6;
  check(dc);
  dc.C = 32;  // two blocks of 16, batch 2 (the row pairs of two images)
  dc.N = 2;
  dc.H = 5;
  dc.W = 11;
  check(dc);
}

TEST_F(Int8DepthwiseConv, OddChannelsWidthsAndPads) {
  DwCase dc;
  for (int64_t c : {1, 5, 8, 13, 16, 17, 40, 48}) {  // half blocks of 8 partly filled, a lone channel; 16, 48: one run per row
    for (int64_t w : {1, 2, 3, 8}) {         // one pixel, a pair, a pair and one
      dc.C = c;
      dc.W = w;
      dc.H = w == 1 ? 1 : 4;
      check(dc, true, false, c > 1);
    }
  }
  for (int64_t c : {20, 32}) {  // 32: the rows' columns built as one run (channels a multiple of 16)
    dc = DwCase{};
    dc.C = c;
    dc.N = 2;
    dc.pads = {0, 0, 0, 0};  // valid: 5 x 7 outputs
    check(dc);
    dc.pads = {2, 0, 0, 2};  // asymmetric: more padding on top and right
    check(dc);
    dc.pads = {2, 2, 2, 2};  // wider than the kernel's reach on both sides: whole rows / columns of padding
    check(dc);
  }
}

TEST_F(Int8DepthwiseConv, ZeroPointsBiasAndOutputs) {
  DwCase dc;
  dc.x_zp = 131;  // u8 source with a zero point, weight zero points per channel
  dc.w_zp = true;
  dc.clip = false;
  check(dc);
  dc.x_s8 = true;  // s8 source and output, conv_relu and relu, no Clip
  dc.x_zp = -3;
  dc.y_dt = DType::kI8;
  dc.conv_relu = dc.relu = true;
  check(dc);
}

TEST_F(Int8DepthwiseConv, ScalesPastInt32AndInfinity) {
  DwCase dc;  // v up to ~1e30: the integer epilogue's clamp to 2^30 keeps cvtps2dq in range
  dc.clip = false;
  dc.y_scale_factor = 1e-25f;
  check(dc, true, false, false);  // u8 with zero point 128: a wrapped cvtps2dq would read 0 for 255
  dc.y_dt = DType::kI8;
  check(dc, true, false, false);
  dc.y_scale_factor = 1e-45f;  // mul infinite: NaN where acc + bias = 0, no integer form: oneDNN
  check(dc, false, false, false);
}

// ReLU6 on a calibrated [0, 6] range: the Clip's bound 255 output steps or more, so the u8 saturation implies the
// clamp and the kernel leaves it out (int8_epilogue.h int_clamp_implied); at 254.4 steps it does not (254 is the
// largest output, where leaving the clamp out would give 255). Outputs past both ends, bit for bit.
TEST_F(Int8DepthwiseConv, ClampImpliedBySaturation) {
  for (float steps : {255.f, 254.6f, 254.4f, 300.f}) {
    DwCase dc;
    dc.C = 48;
    dc.H = 6;
    dc.W = 9;
    dc.y_scale_factor = 0.25f;  // outputs spread past 255 steps: some clamped at both ends
    dc.clip_steps = steps;
    check(dc);
    dc.x_zp = 131;  // and with a source zero point, batch 2
    dc.N = 2;
    check(dc);
  }
}

TEST_F(Int8DepthwiseConv, Stride2) {
  DwCase dc;  // MobileNetV2's downsampling 3x3/2: pads 1, even and odd sizes, one run per row (C = 32)
  dc.strides = {2, 2};
  for (int64_t c : {13, 32}) {
    for (int64_t hw : {7, 8}) {
      dc.C = c;
      dc.H = hw;
      dc.W = hw + 3;
      check(dc);
    }
  }
  dc.strides = {1, 2};  // one axis each
  dc.pads = {0, 1, 2, 0};
  dc.x_zp = 131;
  dc.w_zp = true;
  check(dc);
  dc.strides = {2, 1};
  dc.N = 2;
  check(dc);
  dc = DwCase{};  // MobileNetV2's 112x112x96 -> 56x56 (1.2 MB per image): taken
  dc.strides = {2, 2};
  dc.C = 96;
  dc.H = 112;
  dc.W = 112;
  check(dc);
  dc.C = 64;  // a source over 1.5 MiB per image: oneDNN
  dc.H = 160;
  dc.W = 160;
  check(dc, false);
}

// Stride 1 runs two output rows per pass (row2): an image's odd last row alone, a pass never across two
// images, and, split over two threads (15 rows of 9 x 48: rows 0-6 and 7-14), ranges starting mid-image at
// odd rows; channels not a multiple of 8 (the passes' byte tail), zero points on both sides.
TEST_F(Int8DepthwiseConv, TwoRowsPerPass) {
  DwCase dc;
  dc.N = 3;
  dc.C = 48;
  dc.H = 5;
  dc.W = 9;
  check(dc);
  dc.pads = {0, 1, 0, 1};  // 3 output rows per image
  check(dc);
  dc.pads = {2, 1, 1, 1};  // 6: the first pass's pairs all padding above
  dc.C = 21;
  dc.x_zp = 131;
  dc.w_zp = true;
  check(dc);
}

// Small images (at most 14 x 14 outputs, channels a multiple of 16) run a chunk of channel blocks at a time
// over all their rows: 7 x 7 x 960 in chunks of 14 blocks (the last 4), stride 2 (14 x 14 x 64 -> 7 x 7),
// batch 2, the odd last row, zero points and an s8 source; larger images keep the ring of whole row pairs
// (16 x 16 x 32 at stride 1, 32 x 32 x 48 -> 16 x 16 at stride 2).
TEST_F(Int8DepthwiseConv, SmallImageChunks) {
  DwCase dc;
  dc.C = 960;
  dc.H = dc.W = 7;
  check(dc);
  dc = DwCase{};
  dc.N = 2;
  dc.C = 64;
  dc.H = dc.W = 14;
  dc.strides = {2, 2};
  check(dc);
  dc.pads = {0, 1, 1, 0};  // 6 x 7 outputs, the rows' pairs from row 0
  check(dc);
  dc = DwCase{};
  dc.C = 32;
  dc.H = 6;
  dc.W = 5;
  dc.x_s8 = true;
  dc.x_zp = -3;
  dc.w_zp = true;
  dc.clip = false;
  dc.y_dt = DType::kI8;
  check(dc);
  dc = DwCase{};
  dc.C = 32;
  dc.H = dc.W = 16;
  check(dc);
  dc.C = 48;
  dc.H = dc.W = 32;
  dc.strides = {2, 2};
  check(dc);
}

TEST_F(Int8DepthwiseConv, DeclinedCases) {
  DwCase dc;
  dc.strides = {3, 3};  // stride 3: oneDNN
  check(dc, false);
  dc = DwCase{};
  dc.K = 5;  // 5x5
  dc.pads = {2, 2, 2, 2};
  check(dc, false);
  dc = DwCase{};
  dc.group = 4;  // grouped, not depthwise
  check(dc, false);
  dc = DwCase{};  // a float bias or a float output: the float epilogue made this kernel slower than oneDNN's
  dc.fbias = true;
  check(dc, false);
  dc.fbias = false;
  dc.clip = false;
  dc.y_dt = DType::kF32;
  check(dc, false);
}

TEST_F(Int8DepthwiseConv, InvertedResidualChain) {
  DwCase dc;  // 16 -> 96 (ReLU6) -> depthwise (ReLU6) -> 16, the expansion reading a zero point 131
  dc.C = 16;
  dc.H = 6;
  dc.W = 7;
  dc.x_zp = 131;
  check(dc, true, true);
}

}  // namespace
}  // namespace ferry
