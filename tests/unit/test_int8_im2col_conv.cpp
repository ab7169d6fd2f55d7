// com.ferry.QConvFused on a narrow reduction (src/backends/cpu/int8_im2col_conv.cpp: stems of 1-8
// channels, 1x1s of up to 128): the cpu backend's output against the reference kernel
// (src/ops/quantize_fused.cpp), bit for bit, over stems and odd geometries (3x3/2 and 7x7/2 with
// padding, asymmetric pads, padding wider than the kernel, kernels 1-7 at strides 1 and 2, dilations, 1-8
// channels, batch 2, output rows ending in 1-5 pixels of a tile, output channels not a multiple
// of 16, pixel counts not a multiple of 6), 1x1s of 16-128 channels (7-bit ones up to 512), u8 / s8 sources with zero points, weight zero points, int32 / float biases, conv_relu, a Clip,
// u8 / s8 / f32 outputs, and operands whose byte-product pairs saturate without oneDNN's split. Runs
// where int8_gemm does (AVX2 without VNNI); skipped elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
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

struct StemCase {
  int64_t N = 1, C = 3, H = 11, W = 13, M = 32, KH = 3, KW = 3;
  vector<int64_t> strides = {2, 2}, pads = {1, 1, 1, 1}, dilations = {1, 1};
  bool x_s8 = false;
  int x_zp = 128;
  bool w_zp = false, fbias = false, conv_relu = false, clip = false, extreme = false;
  bool narrow_after_zp = false;  // weights in [66, 126] with zero point 96: w - w_zp in [-30, 30]
  bool seven_bit = false;        // weights in [-64, 64] (the byte path of a 1x1)
  float clip_lo = -0.5f, clip_steps = 60;  // the Clip's bounds: in real units, in output steps
  float ys_factor = 1;                     // y_scale times this
  bool x_tail = false;           // x mostly below 64, ~2% at 200-255 (a Relu's output: few pairs saturate)
  // 1x1 weights at the edge of int8_gemm.h's PairedQuads bound: each quad's channel 0 at +-64 (the sign of the
  // output channel), quad 1's channel 1 at +-1, the rest 0, so two quads' lane sums reach 255 x 128 = 32640 and
  // quad 1's 255 x 129, which int16 cannot hold; with x_half_max half of x is 255.
  bool pair_edge = false, x_half_max = false;
  bool mixed_8bit = false;       // 8-bit weights in [-10, 10] but 1 in 4 of channels 0-3 at +-(100..127): quad 0 single
  DType y_dt = DType::kU8;
  // A residual: z (y's type and shape, a graph input) with z_scale / z_zero_point, the mid Q/DQ (mid_dt, zero point
  // mid_zp) between the convolution and the Add, relu after it where relu_after.
  bool residual = false, relu_after = false;
  DType mid_dt = DType::kI8;
  int mid_zp = 3;
  uint32_t seed = 3;
};

std::shared_ptr<Model> stem_model(const StemCase& sc, std::mt19937& rng) {
  auto m = std::make_shared<Model>();
  m->opset_imports[""] = 13;
  m->opset_imports["com.ferry"] = 1;
  Graph& g = m->graph;
  const DType xdt = sc.x_s8 ? DType::kI8 : DType::kU8;
  const vector<int64_t> xd = {sc.N, sc.H, sc.W, sc.C};
  g.inputs.push_back(ValueInfo{"x", TensorType{xdt, Shape::of(xd)}});
  g.value_types["x"] = TensorType{xdt, Shape::of(xd)};
  if (sc.residual) {  // (a 1x1: the output's shape)
    const vector<int64_t> zd = {sc.N, sc.H, sc.W, sc.M};
    g.inputs.push_back(ValueInfo{"z", TensorType{sc.y_dt, Shape::of(zd)}});
    g.value_types["z"] = TensorType{sc.y_dt, Shape::of(zd)};
  }
  const auto init = [&](const std::string& name, Tensor t) {
    g.initializers[name] = t;
    g.value_types[name] = t.type();
    return name;
  };
  Tensor w = Tensor::allocate(DType::kI8, {sc.M, sc.C, sc.KH, sc.KW});
  for (int64_t i = 0; i < w.numel(); ++i) {
    // extreme: one sign per output channel at magnitude 127..128, so every pair saturates vpmaddubsw
    int v = sc.extreme ? (i / (w.numel() / sc.M) % 2 ? -128 + static_cast<int>(rng() % 2) : 127)
                       : static_cast<int>(rng() % 256) - 128;
    if (sc.narrow_after_zp) v = 96 + static_cast<int>(rng() % 61) - 30;
    if (sc.seven_bit) v = sc.extreme ? (i / (w.numel() / sc.M) % 2 ? -64 : 64) : static_cast<int>(rng() % 129) - 64;
    if (sc.pair_edge) {
      const int64_t c = i / (sc.KH * sc.KW) % sc.C, sign = i / (w.numel() / sc.M) % 2 ? -1 : 1;
      v = static_cast<int>(sign * (c % 4 == 0 ? 64 : c == 5 ? 1 : 0));
    }
    if (sc.mixed_8bit) {
      const int64_t c = i / (sc.KH * sc.KW) % sc.C;
      v = c < 4 && rng() % 4 == 0 ? (rng() % 2 ? 1 : -1) * (100 + static_cast<int>(rng() % 28)) : static_cast<int>(rng() % 21) - 10;
    }
    w.mutable_data<int8_t>()[i] = static_cast<int8_t>(v);
  }
  Tensor ws = Tensor::allocate(DType::kF32, {sc.M});
  for (int64_t n = 0; n < sc.M; ++n) ws.mutable_data<float>()[n] = 0.011f * (1.f + 0.29f * static_cast<float>(n % 5));
  const double k = static_cast<double>(sc.C * sc.KH * sc.KW);
  const float xs = 0.017f;
  const double wmag = sc.seven_bit ? (sc.extreme ? 4.0 : 0.5) : 1.0;
  const float ys = static_cast<float>(xs * 0.015 * wmag * (sc.extreme ? 128.0 * 128 * k / 2 : 74.0 * 74 * std::sqrt(k)) / 40) * sc.ys_factor;
  vector<std::string> in = {"x", init("xs", Tensor::scalar<float>(xs)), init("xz", scalar_of(xdt, sc.x_zp)), init("w", w),
                            init("ws", ws)};
  if (sc.w_zp) {
    Tensor wz = Tensor::allocate(DType::kI8, {sc.M});
    for (int64_t n = 0; n < sc.M; ++n) wz.mutable_data<int8_t>()[n] = static_cast<int8_t>(sc.narrow_after_zp ? 96 : n % 7 - 3);
    in.push_back(init("wz", wz));
  } else {
    in.push_back("");
  }
  if (sc.y_dt == DType::kF32) {
    in.push_back("");
    in.push_back("");
  } else {
    in.push_back(init("ys", Tensor::scalar<float>(sc.residual ? ys * 1.3f : ys)));
    in.push_back(init("yz", scalar_of(sc.y_dt, sc.y_dt == DType::kU8 ? (sc.conv_relu ? 0 : 128) : -5)));
  }
  Tensor b = Tensor::allocate(sc.fbias ? DType::kF32 : DType::kI32, {sc.M});
  for (int64_t n = 0; n < sc.M; ++n) {
    const int r = static_cast<int>(rng() % 2001) - 1000;
    if (sc.fbias) b.mutable_data<float>()[n] = static_cast<float>(r) * 0.0041f;
    else b.mutable_data<int32_t>()[n] = r * 17;
  }
  in.push_back(init("b", b));
  if (sc.residual) {
    in.push_back("z");
    in.push_back(init("zs", Tensor::scalar<float>(ys * 0.9f)));
    in.push_back(init("zz", scalar_of(sc.y_dt, sc.y_dt == DType::kU8 ? 121 : 4)));
    in.push_back(init("ms", Tensor::scalar<float>(ys)));
    in.push_back(init("mz", scalar_of(sc.mid_dt, sc.mid_zp)));
  }
  Node n;
  n.op_type = "QConvFused";
  n.domain = "com.ferry";
  n.name = "stem";
  n.inputs = in;
  n.outputs = {"y"};
  n.attrs["channels_last"] = int_attr(1);
  n.attrs["kernel_shape"] = ints_attr({sc.KH, sc.KW});
  n.attrs["strides"] = ints_attr(sc.strides);
  n.attrs["pads"] = ints_attr(sc.pads);
  n.attrs["dilations"] = ints_attr(sc.dilations);
  if (sc.conv_relu) n.attrs["conv_relu"] = int_attr(1);
  if (sc.relu_after) n.attrs["relu"] = int_attr(1);
  if (sc.clip) {
    Attribute lo, hi;
    lo.type = hi.type = AttrType::kFloat;
    lo.f = sc.clip_lo;
    hi.f = sc.clip_steps * ys;
    n.attrs["conv_min"] = lo;
    n.attrs["conv_max"] = hi;
  }
  g.nodes.push_back(n);
  g.outputs.push_back(ValueInfo{"y", {}});
  Status s = infer_shapes(m.get());
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return m;
}

// Whether the first factory taking the node is the im2col kernel's.
bool im2col_takes(const Model& m) {
  const Node& n = m.graph.nodes[0];
  auto schema = resolve_schema(n, m.opset(n.domain));
  const auto* factories = cpu_kernel_table().find(n.domain, n.op_type);
  if (!schema.is_ok() || !factories) return false;
  for (const CpuKernelFactory& f : *factories) {
    auto k = f(n, *schema.value(), m.graph);
    if (k.is_ok() && k.value()) return std::string(typeid(*k.value()).name()).find("Im2col") != std::string::npos;
  }
  return false;
}

// How many (output, channel pair) products of a 1x1 on x saturate vpmaddubsw's int16 pair sum: a case meant to
// exercise the byte path's repair must have some.
int64_t saturating_pairs(const Model& m, const Tensor& x) {
  const Tensor& w = m.graph.initializers.at("w");
  const int64_t M = w.dim(0), C = w.dim(1), pixels = x.numel() / C;
  int64_t n = 0;
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t o = 0; o < M; ++o)
      for (int64_t c = 0; c + 1 < C; c += 2) {
        const int s = x.data<uint8_t>()[p * C + c] * w.data<int8_t>()[o * C + c] +
                      x.data<uint8_t>()[p * C + c + 1] * w.data<int8_t>()[o * C + c + 1];
        n += s > 32767 || s < -32768;
      }
  return n;
}

// How many quads of a 1x1's weights PairedQuads puts in pairs (the byte path's packing, int8_gemm.h).
int64_t paired_quads(const Model& m) {
  const Tensor& w = m.graph.initializers.at("w");
  const int64_t M = w.dim(0), C = w.dim(1), quads = C / 4, panels = (M + 15) / 16;
  std::vector<int8_t> data8(static_cast<size_t>(panels * quads * 16 * 4), 0);
  for (int64_t o = 0; o < M; ++o)
    for (int64_t k = 0; k < C; ++k)
      data8[static_cast<size_t>(((o / 16 * quads + k / 4) * 16 + o % 16) * 4 + k % 4)] = w.data<int8_t>()[o * C + k];
  cpu::PairedQuads pq;
  pq.plan(data8.data(), panels, quads);
  int64_t n = 0;
  for (int32_t p : pq.pairs) n += 2 * p;
  return n;
}

void check(const StemCase& sc, bool taken = true, int64_t* saturating = nullptr) {
  SCOPED_TRACE(::testing::Message() << "C=" << sc.C << " k=" << sc.KH << "x" << sc.KW << " s8=" << sc.x_s8 << " x_zp=" << sc.x_zp
                                    << " w_zp=" << sc.w_zp << " fbias=" << sc.fbias << " y=" << dtype_name(sc.y_dt)
                                    << " extreme=" << sc.extreme);
  std::mt19937 rng(sc.seed);
  auto model = stem_model(sc, rng);
  EXPECT_EQ(im2col_takes(*model), taken);
  Tensor x = Tensor::allocate(sc.x_s8 ? DType::kI8 : DType::kU8, {sc.N, sc.H, sc.W, sc.C});
  for (int64_t i = 0; i < x.numel(); ++i) {
    int v = static_cast<int>(rng() % 256);
    if (sc.extreme) v = sc.x_zp >= 128 ? 0 : 255;  // |x - x_zp| at its largest
    if (sc.x_tail) v = rng() % 50 == 0 ? 200 + static_cast<int>(rng() % 56) : static_cast<int>(rng() % 64);
    if (sc.x_half_max && rng() % 2) v = 255;
    x.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(v);
  }
  if (saturating) *saturating = saturating_pairs(*model, x);
  if (sc.pair_edge || sc.mixed_8bit) {
    EXPECT_GT(paired_quads(*model), 0) << "the case does not exercise the int16 pairs";
  }
  NamedTensors feeds = {{"x", x}};
  if (sc.residual) {
    Tensor z = Tensor::allocate(sc.y_dt, {sc.N, sc.H, sc.W, sc.M});
    for (int64_t i = 0; i < z.numel(); ++i) z.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
    feeds.push_back({"z", z});
  }
  const NamedTensors ref = run_model(model, feeds, "cpu-ref");
  const NamedTensors cpu = run_model(model, feeds, "cpu");
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(cpu.size(), 1u);
  const Tensor &r = ref[0].second, &c = cpu[0].second;
  ASSERT_EQ(r.dims(), c.dims());
  ASSERT_EQ(r.dtype(), c.dtype());
  const auto [diff, interior] = testing::byte_diff(r, c);
  if (taken) {
    EXPECT_EQ(diff, 0) << "of " << r.numel() << " outputs";
  }
  EXPECT_GT(interior, r.numel() / 4);  // the case is not all clamped
}

class Int8Im2colConv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::int8_gemm_available()) GTEST_SKIP() << "int8_gemm runs on AVX2 hosts without VNNI only";
  }
};

TEST_F(Int8Im2colConv, MobileNetStemBitExact) {
  StemCase sc;  // 3x3/2, pads 1, 3 -> 32 channels, u8 source with zero point 128, int32 bias
  check(sc);
  sc.clip = true;  // ReLU6 as a Clip on the convolution's result
  sc.conv_relu = true;
  sc.N = 2;
  check(sc);
}

TEST_F(Int8Im2colConv, ResNetStemAndOddGeometries) {
  StemCase sc;
  sc.KH = sc.KW = 7;  // 7x7/2, pads 3, 20 outputs (two panels, the second partial), weight zero points,
  sc.pads = {3, 3, 3, 3};  // a float bias, a float output
  sc.M = 20;
  sc.w_zp = true;
  sc.fbias = true;
  sc.y_dt = DType::kF32;
  check(sc);
  sc = StemCase{};  // 5x3, strides (1, 2), asymmetric pads, 4 channels (runs of 12 bytes), s8 source and output
  sc.C = 4;
  sc.KH = 5;
  sc.strides = {1, 2};
  sc.pads = {0, 2, 2, 0};
  sc.x_s8 = true;
  sc.x_zp = -3;
  sc.y_dt = DType::kI8;
  sc.M = 17;
  check(sc);
  sc = StemCase{};  // one channel, dilation 2 (patch taps copied one at a time), 8 channels (runs of 24 bytes)
  sc.C = 1;
  sc.dilations = {2, 2};
  sc.pads = {2, 2, 2, 2};
  sc.strides = {1, 1};
  check(sc);
  sc.C = 8;
  sc.dilations = {1, 1};
  sc.x_zp = 255;
  check(sc);
}

// The stems' windows read in place from widened source rows (run_stem): kernels 1-7 at strides 1 and 2, no
// padding, centred padding, padding on one side only and padding wider than the kernel (whole windows of
// padding), images whose last columns no window reaches, output widths leaving 1-5 pixels in a row's last tile,
// 1-4 channels (odd kernel rows: the last pair's zero weight), batch 2, u8 and s8 sources with zero points,
// weight zero points, every output type; and dilations (a tap per segment where the taps are apart).
TEST_F(Int8Im2colConv, StemWindowsAtEveryEdge) {
  uint32_t seed = 40;
  for (int64_t k : {1, 3, 5, 7})
    for (int64_t s : {1, 2})
      for (const vector<int64_t>& pads : {vector<int64_t>{0, 0, 0, 0}, vector<int64_t>{k / 2, k / 2, k / 2, k / 2},
                                          vector<int64_t>{k - 1, 0, 0, k - 1}, vector<int64_t>{0, k + 1, k, 1}}) {
        StemCase sc;
        sc.seed = seed++;
        sc.N = 2;
        sc.C = 1 + sc.seed % 4;
        sc.KH = sc.KW = k;
        sc.strides = {s, s};
        sc.pads = pads;
        sc.H = 6 + k + sc.seed % 3;
        sc.W = 7 + k + sc.seed % 5;
        sc.M = sc.seed % 2 ? 24 : 40;
        sc.x_s8 = sc.seed % 3 == 0;
        sc.x_zp = sc.x_s8 ? static_cast<int>(sc.seed % 7) - 3 : 100 + static_cast<int>(sc.seed % 60);
        sc.w_zp = sc.seed % 2 == 0;
        sc.y_dt = sc.seed % 4 == 0 ? DType::kF32 : sc.seed % 4 == 1 ? DType::kI8 : DType::kU8;
        sc.fbias = sc.seed % 5 == 0;
        check(sc);
      }
  for (const vector<int64_t>& d : {vector<int64_t>{2, 1}, vector<int64_t>{1, 2}, vector<int64_t>{3, 2}}) {
    StemCase sc;  // 3x5/(1, 2) on 3 channels
    sc.seed = seed++;
    sc.N = 2;
    sc.KW = 5;
    sc.H = 15;
    sc.W = 19;
    sc.strides = {1, 2};
    sc.pads = {2, 3, 1, 4};
    sc.dilations = d;
    check(sc);
  }
}

TEST_F(Int8Im2colConv, PointwiseUpTo128Channels) {
  StemCase sc;  // MobileNetV2's expansions: 16, 24, 32, 64, 96 channels -> 6x, a Clip (ReLU6), a zero point ~128
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.clip = true;
  sc.conv_relu = true;
  sc.x_zp = 131;
  for (int64_t c : {16, 24, 32, 64, 96}) {
    sc.C = c;
    sc.M = 6 * c;
    check(sc);
  }
  sc.C = 63;  // odd: the last pair's second element meets a zero weight; an s8 output, no Clip
  sc.M = 40;
  sc.clip = sc.conv_relu = false;
  sc.y_dt = DType::kI8;
  check(sc);
  sc.C = 128;  // the widest taken
  check(sc);
  sc.C = 130;  // wider: int8_gemm's own 1x1 rule
  check(sc, false);
  sc.C = 16;  // a strided 1x1 on 16 channels is no stem: oneDNN
  sc.strides = {2, 2};
  check(sc, false);
}

// The 1x1s' tiles with the integer epilogue (tile_pointwise on int16 pairs, tile_bytes on 7-bit weights) for every
// row count of a tile (1-6 pixels left in the last block), the int16 path's block widened at once (rows C int16
// apart; at the tensor's end from a copy: 15 and 24 channels), with the clamp kept and left out (int_implied),
// u8 and s8 outputs.
TEST_F(Int8Im2colConv, PointwiseTilesEveryRowCount) {
  for (int64_t tail = 0; tail < 6; ++tail)
    for (int64_t c : {15, 16, 24})
      for (bool seven : {false, true}) {
        if (seven && c % 4 != 0) continue;
        StemCase sc;
        sc.KH = sc.KW = 1;
        sc.strides = {1, 1};
        sc.pads = {0, 0, 0, 0};
        sc.H = 1;
        sc.W = 12 + tail;  // the last block holds 6, 1, 2, 3, 4, 5 pixels
        sc.C = c;
        sc.M = 48;
        sc.x_zp = 131;
        sc.seven_bit = seven;
        sc.clip = sc.conv_relu = true;
        sc.clip_lo = 0;
        sc.clip_steps = tail < 3 ? 255.f : 254.4f;  // the clamp implied by the saturation, then not
        sc.ys_factor = 0.3f;
        sc.y_dt = tail % 3 == 2 ? DType::kI8 : DType::kU8;
        sc.seed = static_cast<uint32_t>(11 + tail);
        check(sc);
      }
}

// A Relu's output (u8, zero point 0) into a 1x1 of <= 64 channels with >= 64 outputs (ResNet-50's layer1.0
// conv1 and downsample): this kernel, bit for bit, saturating values included (255 against weights of one
// sign at 127..128, where oneDNN's unsplit pairs saturate); fewer outputs or more channels: oneDNN's repair.
TEST_F(Int8Im2colConv, ZeroPointZeroPointwiseOf64Channels) {
  StemCase sc;
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.x_zp = 0;
  sc.C = 64;
  sc.M = 70;  // five panels, the last partial
  sc.conv_relu = true;
  check(sc);
  sc.conv_relu = false;
  sc.extreme = true;
  sc.y_dt = DType::kF32;
  check(sc);
  sc.extreme = false;
  sc.y_dt = DType::kU8;
  sc.C = 30;  // fewer channels (odd pairs count)
  check(sc);
  sc.M = 16;  // 16 outputs over 30 channels (not in quads): oneDNN
  check(sc, false);
  sc.M = 64;
  sc.C = 96;  // wider, float bias: oneDNN (the integer epilogue's case: EightBitPointwiseBytePathWithRepair)
  sc.fbias = true;
  check(sc, false);
}

// 7-bit weights (w - w_zp in [-64, 64]) on a 1x1 over a u8 source: the byte path (vpmaddubsw, no pair can
// saturate), bit for bit, on MobileNetV2's 7-bit expansions (24-320 channels, a zero point ~128, a Clip) and
// the largest products (255 against weights of one sign at 64); other 7-bit shapes: oneDNN's unsplit kernel.
TEST_F(Int8Im2colConv, SevenBitPointwiseBytePath) {
  StemCase sc;
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.seven_bit = true;
  sc.clip = true;
  sc.conv_relu = true;
  sc.x_zp = 131;
  for (int64_t c : {24, 32, 64, 96, 160, 320}) {
    sc.C = c;
    sc.M = 6 * c;
    check(sc);
  }
  sc.C = 32;  // a last panel of 4 outputs (the half tile, 4 bytes a row)
  sc.M = 20;
  check(sc);
  sc.C = 36;  // a partial last panel (the half tile), an s8 output, no Clip, a weight zero point
  sc.M = 40;
  sc.clip = sc.conv_relu = false;
  sc.w_zp = true;
  sc.y_dt = DType::kI8;
  check(sc);
  sc.w_zp = false;
  sc.y_dt = DType::kU8;
  sc.x_zp = 0;  // a Relu's output, zero point 0, and the largest products
  sc.extreme = true;
  check(sc);
  sc.extreme = false;
  sc.x_zp = 131;
  sc.N = 2;  // two images, pixels not a multiple of the 6-row tile
  sc.H = 5;
  check(sc);
  sc.N = 1;
  sc.H = 11;
  sc.C = 30;  // not whole quads of channels: oneDNN
  check(sc, false);
  sc.C = 32;
  sc.x_s8 = true;  // an s8 source: oneDNN
  sc.x_zp = 3;
  check(sc, false);
  sc.x_s8 = false;
  sc.x_zp = 131;
  sc.y_dt = DType::kF32;  // a float output: oneDNN
  check(sc, false);
  sc.y_dt = DType::kU8;
  sc.C = 640;  // wider than the byte path takes
  check(sc, false);
  sc.C = 32;
  sc.strides = {2, 2};  // a strided 1x1: oneDNN
  check(sc, false);
  sc = StemCase{};  // a 7-bit stem: oneDNN
  sc.seven_bit = true;
  check(sc, false);
}

// 7-bit weights with a weight zero point (w - w_zp past [-64, 64]: the int16 pairs, not the byte path) on the widest
// 1x1 taken, 512 channels, and 510 (the last block of 5 pixels, 2550 bytes, copied into the per-thread buffer before
// it is widened: a buffer once sized 800 bytes overflowed there, which the ASan build of these tests catches).
TEST_F(Int8Im2colConv, SevenBitPointwiseOf512ChannelsWithWeightZeroPoint) {
  StemCase sc;
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.seven_bit = true;
  sc.w_zp = true;
  sc.x_zp = 131;
  sc.M = 40;
  sc.H = 11;  // 143 pixels: 23 blocks of 6, then 5
  for (int64_t c : {512, 510}) {
    sc.C = c;
    check(sc);
  }
  sc.C = 514;  // past the longest patch taken
  check(sc, false);
}

// ReLU6 on a calibrated [0, 6] range (Clip from 0 to 255 output steps or more, u8 zero point 0): the u8 saturation
// implies the clamp and the tiles leave it out (int8_epilogue.h int_clamp_implied); at 254.4 steps it does not (254
// is the largest output). The 8-bit stem and 1x1 (int16 pairs) and the 7-bit 1x1 (bytes), outputs past both ends.
TEST_F(Int8Im2colConv, ClampImpliedBySaturation) {
  for (float steps : {255.f, 254.6f, 254.4f}) {
    StemCase sc;  // the stem, u8 source with zero point 128
    sc.clip = true;
    sc.conv_relu = true;
    sc.clip_lo = 0;
    sc.clip_steps = steps;
    sc.ys_factor = 0.3f;
    check(sc);
    sc.KH = sc.KW = 1;  // 1x1s of 32 -> 96, int16 pairs and bytes
    sc.strides = {1, 1};
    sc.pads = {0, 0, 0, 0};
    sc.C = 32;
    sc.M = 96;
    sc.x_zp = 131;
    check(sc);
    sc.seven_bit = true;
    check(sc);
  }
}

// 8-bit weights on a 1x1 of <= 64 channels (whole quads) into >= 64 over a Relu's output (u8, zero point 0;
// ResNet-50's layer1 conv3s, layer1.0 conv1 and downsample): the byte path, whose vpmaddubsw pairs saturate, with
// the outputs they fed recomputed: bit for bit, with a few saturated pairs (the listed repair) and every pair
// saturated (all outputs recomputed), the integer and float epilogues (int32 / float bias; u8, s8, f32 outputs);
// a weight zero point or channels not in quads: the int16 path.
TEST_F(Int8Im2colConv, EightBitPointwiseBytePathWithRepair) {
  StemCase sc;
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.x_zp = 0;
  sc.conv_relu = true;
  sc.x_tail = true;
  for (int64_t c : {64, 32}) {
    sc.C = c;
    sc.M = 72;  // a partial last panel
    int64_t saturating = 0;
    check(sc, true, &saturating);  // int32 bias, u8 output: the integer epilogue
    EXPECT_GT(saturating, 0) << "the case does not exercise the repair";
    sc.fbias = true;  // the plain structure's float bias, an s8 output
    sc.y_dt = DType::kI8;
    sc.conv_relu = false;
    check(sc, true, &saturating);
    EXPECT_GT(saturating, 0);
    sc.y_dt = DType::kF32;  // a float output (ResNet-50's plain-structure conv3s)
    check(sc, true, &saturating);
    EXPECT_GT(saturating, 0);
    sc.fbias = false;
    sc.y_dt = DType::kU8;
    sc.conv_relu = true;
  }
  sc.C = 64;
  sc.M = 256;
  sc.N = 2;  // two images, pixels not a multiple of the 6-row tile
  sc.H = 4;
  check(sc);
  sc.N = 1;
  sc.H = 11;
  sc.x_tail = false;
  sc.extreme = true;  // 255 against weights of one sign at 127..128: every pair saturates
  check(sc);
  sc.y_dt = DType::kF32;
  check(sc);
  sc.extreme = false;
  sc.x_tail = true;
  sc.y_dt = DType::kU8;
  sc.w_zp = true;  // a weight zero point: the int16 path
  check(sc);
  sc.w_zp = false;
  sc.C = 30;  // not whole quads: the int16 path
  check(sc);

  // Wider 1x1s into whole panels with the integer epilogue (MobileNetV2's projections without a residual: 32 -> 16,
  // 144 -> 32, 960 -> 320), or whole panels and a half one (96 -> 24, 144 -> 40: the half tile's 8 columns): the same
  // path, its repair included; a float bias, a weight zero point or outputs in neither (96 -> 20): oneDNN.
  sc.x_tail = true;
  sc.extreme = false;
  for (auto [c, m] : {std::pair<int64_t, int64_t>{32, 16}, {144, 32}, {960, 320}, {96, 24}, {144, 40}}) {
    sc.C = c;
    sc.M = m;
    int64_t saturating = 0;
    check(sc, true, &saturating);
    EXPECT_GT(saturating, 0) << "the case does not exercise the repair";
  }
  sc.C = 144;
  sc.M = 32;
  sc.fbias = true;
  check(sc, false);
  sc.fbias = false;
  sc.w_zp = true;
  check(sc, false);
  sc.w_zp = false;
  sc.C = 96;
  sc.M = 20;
  check(sc, false);
  sc.M = 24;  // the half tile on every pixel count of the last block (1-6), an s8 output
  sc.y_dt = DType::kI8;
  for (int64_t w = 12; w < 18; ++w) {
    sc.H = 1;
    sc.W = w;
    check(sc);
  }
}

// MobileNetV2's projections into a residual Add (the mid Q/DQ, z, no relu after) on the byte path with the repair:
// the residual epilogue (tile_bytes_residual, and the repair's scalar form of it) bit for bit the reference, on whole
// panels, a partial one and a half one, every pixel count of the last block, u8 / s8 outputs and mid types; relu after
// the Add, a source zero point (the int16 path) or 7-bit weights with a source zero point: not taken.
TEST_F(Int8Im2colConv, ResidualPointwiseBytePath) {
  StemCase sc;
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.x_zp = 0;
  sc.x_tail = true;
  sc.residual = true;
  sc.y_dt = DType::kU8;
  // (32 -> 72, 70, 77: <= 64 channels into 64+, last panels of 8, 6 and 13 columns)
  for (auto [c, m] : {std::pair<int64_t, int64_t>{144, 24}, {192, 32}, {384, 64}, {960, 160}, {96, 40}, {32, 72}, {32, 70}, {32, 77}}) {
    sc.C = c;
    sc.M = m;
    int64_t saturating = 0;
    check(sc, true, &saturating);
    EXPECT_GT(saturating, 0) << "the case does not exercise the repair";
  }
  sc.C = 144;
  sc.M = 24;
  sc.y_dt = DType::kI8;  // an s8 output and residual, a u8 mid, each pixel count of the last block
  sc.mid_dt = DType::kU8;
  sc.mid_zp = 131;
  for (int64_t w = 12; w < 18; ++w) {
    sc.H = 1;
    sc.W = w;
    check(sc);
  }
  sc.M = 40;
  for (int64_t w = 12; w < 18; ++w) {
    sc.W = w;
    check(sc);
  }
  sc.H = 11;
  sc.W = 13;
  sc.conv_relu = true;  // a Relu before the mid Q
  check(sc);
  sc.conv_relu = false;
  sc.x_tail = false;
  sc.extreme = true;  // every pair saturates: every output repaired
  check(sc);
  sc.extreme = false;
  sc.x_tail = true;
  sc.seven_bit = true;  // 7-bit weights on a Relu's output: the byte path without the repair (M 40, then 20: 4 columns)
  check(sc);
  sc.M = 20;
  check(sc);
  sc.M = 40;
  sc.relu_after = true;  // declined
  check(sc, false);
  sc.relu_after = false;
  sc.x_zp = 128;  // 7-bit weights, a source zero point: the byte path with the zero point folded into the bias
  check(sc);
  sc.seven_bit = false;  // 8-bit weights, a source zero point: the int16 path, declined with a residual
  check(sc, false);
}

// int8_gemm.h's PairedQuads: two quads go together only where every int16 lane stays within range for any u8
// source (positive and negative weights of the four products each summing to at most 128 in magnitude): at 128
// they pair, at 129 (255 x 129 = 32895) they do not; the order is a permutation of the quads, the data moved with it.
TEST(Int8PairedQuads, PairsExactlyWhereTheLanesHold) {
  constexpr int64_t kCols = 16;
  const auto plan_of = [](const std::vector<int8_t>& data8, int64_t panels, int64_t quads) {
    cpu::PairedQuads pq;
    pq.plan(data8.data(), panels, quads);
    return pq;
  };
  std::vector<int8_t> two(2 * kCols * 4, 0);  // [quad][column][4]
  for (int64_t n = 0; n < kCols; ++n) two[static_cast<size_t>(n * 4 + 2)] = two[static_cast<size_t>((kCols + n) * 4 + 3)] = 64;
  EXPECT_EQ(plan_of(two, 1, 2).pairs[0], 1) << "lane sums of 128 (255 x 128 = 32640 fits int16)";
  std::fill(two.begin(), two.end(), 0);
  for (int64_t n = 0; n < kCols; ++n) two[static_cast<size_t>(n * 4)] = two[static_cast<size_t>((kCols + n) * 4 + 1)] = -64;
  EXPECT_EQ(plan_of(two, 1, 2).pairs[0], 1) << "lane sums of -128";
  two[static_cast<size_t>((kCols + 9) * 4)] = -1;  // column 9's lane 0: -129
  EXPECT_EQ(plan_of(two, 1, 2).pairs[0], 0) << "lane sum -129 (255 x -129 wraps int16)";
  two[static_cast<size_t>((kCols + 9) * 4)] = 1;  // -128 and +1: fits
  EXPECT_EQ(plan_of(two, 1, 2).pairs[0], 1);

  // MobileNetV2-like panels (mostly small weights, a few large): a permutation of the quads, the data moved with
  // it, every pair within the bound, one pair count for all panels, at least 3/4 of the quads paired.
  constexpr int64_t kPanels = 3, kQuads = 12;
  std::mt19937 rng(5);
  std::vector<int8_t> data8(kPanels * kQuads * kCols * 4);
  for (int8_t& v : data8) v = static_cast<int8_t>(rng() % 64 == 0 ? static_cast<int>(rng() % 129) - 64 : static_cast<int>(rng() % 21) - 10);
  const cpu::PairedQuads pq = plan_of(data8, kPanels, kQuads);
  for (int64_t p = 1; p < kPanels; ++p) EXPECT_EQ(pq.pairs[static_cast<size_t>(p)], pq.pairs[0]);
  int64_t paired = 0;
  for (int64_t p = 0; p < kPanels; ++p) {
    std::vector<int32_t> seen;
    for (int64_t t = 0; t < kQuads; ++t) {
      const int32_t j = pq.offsets[static_cast<size_t>(p * kQuads + t)] / 4;
      seen.push_back(j);
      EXPECT_EQ(0, std::memcmp(pq.data.data() + (p * kQuads + t) * kCols * 4, data8.data() + (p * kQuads + j) * kCols * 4, kCols * 4));
    }
    for (int64_t t = 0; t < 2 * pq.pairs[static_cast<size_t>(p)]; t += 2)
      for (int64_t n = 0; n < kCols; ++n)
        for (int64_t l = 0; l < 2; ++l) {
          int up = 0, down = 0;
          for (int64_t q : {seen[static_cast<size_t>(t)], seen[static_cast<size_t>(t + 1)]})
            for (int64_t k = 2 * l; k < 2 * l + 2; ++k) {
              const int w = data8[static_cast<size_t>(((p * kQuads + q) * kCols + n) * 4 + k)];
              (w > 0 ? up : down) += std::abs(w);
            }
          EXPECT_LE(up, 128);
          EXPECT_LE(down, 128);
        }
    std::sort(seen.begin(), seen.end());
    for (int64_t j = 0; j < kQuads; ++j) EXPECT_EQ(seen[static_cast<size_t>(j)], j);
    paired += 2 * pq.pairs[static_cast<size_t>(p)];
  }
  EXPECT_GE(4 * paired, 3 * kPanels * kQuads);

  // Greedy leaves two single: quad 0 (lane load 66) takes quad 1, and 2 and 3 fit neither each other nor the four
  // fillers (column 3's lane 65 + 64, the fillers' 64 + 64 = 128 fit each other). Quad 2 fits 0 and quad 1 fits 3:
  // the exchange pairs all (0, 2), (1, 3) and the fillers, the bound held as above.
  std::vector<int8_t> swap(8 * kCols * 4, 0);
  const auto set = [&](int64_t j, int64_t n, int8_t w0, int8_t w1) {
    swap[static_cast<size_t>((j * kCols + n) * 4)] = w0;
    swap[static_cast<size_t>((j * kCols + n) * 4 + 1)] = w1;
  };
  set(0, 0, 64, 2);
  set(1, 1, 64, 1);
  set(2, 3, 64, 1);
  set(3, 3, 64, 1);
  for (int64_t j = 4; j < 8; ++j) set(j, 3, 64, 0);
  const cpu::PairedQuads all = plan_of(swap, 1, 8);
  EXPECT_EQ(all.pairs[0], 4);
  std::vector<int32_t> partner(8, -1);
  for (int64_t t = 0; t < 8; t += 2) {
    partner[static_cast<size_t>(all.offsets[static_cast<size_t>(t)] / 4)] = all.offsets[static_cast<size_t>(t + 1)] / 4;
    partner[static_cast<size_t>(all.offsets[static_cast<size_t>(t + 1)] / 4)] = all.offsets[static_cast<size_t>(t)] / 4;
  }
  EXPECT_EQ(partner[0], 2);
  EXPECT_EQ(partner[1], 3);
  for (int64_t t = 0; t < 8; t += 2)
    for (int64_t n = 0; n < kCols; ++n)
      for (int64_t l = 0; l < 2; ++l) {
        int up = 0, down = 0;
        for (int64_t i : {t, t + 1})
          for (int64_t k = 2 * l; k < 2 * l + 2; ++k) {
            const int w = all.data[static_cast<size_t>((i * kCols + n) * 4 + k)];
            (w > 0 ? up : down) += std::abs(w);
          }
        EXPECT_LE(up, 128);
        EXPECT_LE(down, 128);
      }

  // Below 3/4 (one pair of 3 quads' worth): no pairs, the quads in their own order.
  std::vector<int8_t> few(3 * kCols * 4, 0);
  for (int64_t n = 0; n < kCols; ++n) few[static_cast<size_t>(n * 4)] = few[static_cast<size_t>((kCols + n) * 4)] = 100;
  for (int64_t n = 0; n < kCols; ++n) few[static_cast<size_t>((2 * kCols + n) * 4 + 1)] = 20;
  const cpu::PairedQuads none = plan_of(few, 1, 3);
  EXPECT_EQ(none.pairs[0], 0);
  EXPECT_EQ(none.offsets, (std::vector<int32_t>{0, 4, 8}));
  EXPECT_EQ(none.data, few);
}

// The byte path on quads paired in int16 (PairedQuads): bit for bit the reference at the bound (half the source 255
// against lane sums of +-128, where a bound of 129 would wrap), on 7-bit 1x1s of 32 and 96 channels with one or more
// panels, and on 8-bit weights over a Relu's output (some quads paired, the rest repaired where pairs saturate).
TEST_F(Int8Im2colConv, PairedQuadsBitExact) {
  StemCase sc;
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.pair_edge = true;
  sc.x_half_max = true;
  sc.x_zp = 0;
  for (int64_t c : {32, 96}) {
    sc.ys_factor = 1.2f * static_cast<float>(c) / 32;  // a wrapped lane (65536 x mul) moves an output ~50 steps
    sc.C = c;
    sc.M = c == 32 ? 20 : 96;
    check(sc);
  }
  sc = StemCase{};
  sc.KH = sc.KW = 1;
  sc.strides = {1, 1};
  sc.pads = {0, 0, 0, 0};
  sc.mixed_8bit = true;
  sc.x_zp = 0;
  sc.conv_relu = true;
  sc.x_tail = true;
  sc.C = 64;
  sc.M = 72;
  int64_t saturating = 0;
  check(sc, true, &saturating);
  EXPECT_GT(saturating, 0) << "the case does not exercise the repair";
  sc.y_dt = DType::kF32;  // the float epilogue's tiles
  check(sc);
}

TEST_F(Int8Im2colConv, SaturatingPairsAndDeclinedCases) {
  StemCase sc;
  sc.extreme = true;  // |x - x_zp| = 128 and weights of one sign at 127..128: every byte pair saturates
  sc.y_dt = DType::kF32;
  check(sc);
  sc.x_zp = 0;  // 255 - 0
  check(sc, false);  // u8 with zero point 0: oneDNN unsplit with the repair, not this kernel
  sc = StemCase{};
  sc.C = 9;  // wider than the stems: oneDNN (or int8_gemm's 1x1 rule)
  check(sc, false);
  sc = StemCase{};  // full-range weights whose w - w_zp fit [-64, 64]: int8_gemm packs them as bytes, which
  sc.narrow_after_zp = true;  // this kernel does not read; oneDNN's unsplit kernel runs them exactly
  sc.w_zp = true;
  check(sc, false);
}

}  // namespace
}  // namespace ferry
