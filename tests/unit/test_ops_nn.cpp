// Conv, ConvTranspose, Gemm, MatMul, Dropout. Conv and ConvTranspose are checked against deliberately
// naive direct loops written here (with their own output-size arithmetic), over randomized cases.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

using std::vector;

Tensor random_tensor(std::mt19937& rng, vector<int64_t> dims, DType dt = DType::kF32) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor d = Tensor::allocate(DType::kF64, dims);
  for (int64_t i = 0; i < d.numel(); ++i) d.mutable_data<double>()[i] = dist(rng);
  return cast_tensor(d, dt).value();
}

Tensor F64_(const vector<double>& v, vector<int64_t> dims) { return Tensor::from_vector<double>(v, std::move(dims)); }

bool contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// ---- naive Conv -----------------------------------------------------------------------------

struct ConvCase {
  int64_t nd = 2;
  int64_t n = 1, c = 4, m = 4, group = 1;
  vector<int64_t> in, kernel, stride, dilation, pads;  // pads: 2*nd (begin..., end...)
  std::string auto_pad = "NOTSET";
  bool bias = true;
};

// Output sizes and begin pads, computed from the ONNX formulas (independently of the library).
void expected_geometry(const ConvCase& cc, vector<int64_t>* out, vector<int64_t>* pad_begin) {
  out->clear();
  pad_begin->clear();
  for (int64_t i = 0; i < cc.nd; ++i) {
    const int64_t in = cc.in[i], s = cc.stride[i], dk = (cc.kernel[i] - 1) * cc.dilation[i] + 1;
    if (cc.auto_pad == "SAME_UPPER" || cc.auto_pad == "SAME_LOWER") {
      const int64_t o = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (o - 1) * s + dk - in);
      out->push_back(o);
      pad_begin->push_back(cc.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2);
    } else if (cc.auto_pad == "VALID") {
      out->push_back((in - dk) / s + 1);
      pad_begin->push_back(0);
    } else {
      out->push_back((in + cc.pads[i] + cc.pads[i + cc.nd] - dk) / s + 1);
      pad_begin->push_back(cc.pads[i]);
    }
  }
}

// Direct convolution in double: loops over n, m, 3 output axes, c, 3 kernel axes (1D/2D cases use
// size-1 trailing axes).
Tensor naive_conv(const ConvCase& cc, const Tensor& x, const Tensor& w, const Tensor* b) {
  vector<int64_t> out, pb;
  expected_geometry(cc, &out, &pb);
  auto ext = [&](const vector<int64_t>& v, int64_t fill) {
    vector<int64_t> r = v;
    r.resize(3, fill);
    return r;
  };
  const vector<int64_t> I = ext(cc.in, 1), O = ext(out, 1), Kk = ext(cc.kernel, 1), S = ext(cc.stride, 1),
                        D = ext(cc.dilation, 1), P = ext(pb, 0);
  const int64_t cg = cc.c / cc.group, mg = cc.m / cc.group;
  vector<int64_t> ydims = {cc.n, cc.m};
  ydims.insert(ydims.end(), out.begin(), out.end());
  Tensor y = Tensor::allocate(DType::kF64, ydims);
  double* py = y.mutable_data<double>();
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t m = 0; m < cc.m; ++m)
      for (int64_t o0 = 0; o0 < O[0]; ++o0)
        for (int64_t o1 = 0; o1 < O[1]; ++o1)
          for (int64_t o2 = 0; o2 < O[2]; ++o2) {
            double acc = b ? b->get_double(m) : 0.0;
            const int64_t grp = m / mg;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t k0 = 0; k0 < Kk[0]; ++k0)
                for (int64_t k1 = 0; k1 < Kk[1]; ++k1)
                  for (int64_t k2 = 0; k2 < Kk[2]; ++k2) {
                    const int64_t i0 = o0 * S[0] - P[0] + k0 * D[0];
                    const int64_t i1 = o1 * S[1] - P[1] + k1 * D[1];
                    const int64_t i2 = o2 * S[2] - P[2] + k2 * D[2];
                    if (i0 < 0 || i0 >= I[0] || i1 < 0 || i1 >= I[1] || i2 < 0 || i2 >= I[2]) continue;
                    const int64_t xi = (((n * cc.c + grp * cg + c) * I[0] + i0) * I[1] + i1) * I[2] + i2;
                    const int64_t wi = (((m * cg + c) * Kk[0] + k0) * Kk[1] + k1) * Kk[2] + k2;
                    acc += x.get_double(xi) * w.get_double(wi);
                  }
            py[(((n * cc.m + m) * O[0] + o0) * O[1] + o1) * O[2] + o2] = acc;
          }
  return y;
}

Tensor as_f64(const Tensor& t) { return cast_tensor(t, DType::kF64).value(); }

void run_conv_case(const ConvCase& cc, std::mt19937& rng, DType dt, double tol, const std::string& label) {
  vector<int64_t> xd = {cc.n, cc.c}, wd = {cc.m, cc.c / cc.group};
  xd.insert(xd.end(), cc.in.begin(), cc.in.end());
  wd.insert(wd.end(), cc.kernel.begin(), cc.kernel.end());
  Tensor x = random_tensor(rng, xd, dt), w = random_tensor(rng, wd, dt), b = random_tensor(rng, {cc.m}, dt);
  OpTester t("Conv", 11);
  t.attr("strides", cc.stride).attr("dilations", cc.dilation).attr("group", cc.group);
  if (cc.auto_pad == "NOTSET") t.attr("pads", cc.pads);
  else t.attr("auto_pad", cc.auto_pad);
  t.input(x).input(w);
  if (cc.bias) t.input(b);
  auto r = t.run_status();
  ASSERT_TRUE(r.is_ok()) << label << ": " << r.status().to_string();
  Tensor bf = as_f64(b);
  Tensor expected = naive_conv(cc, as_f64(x), as_f64(w), cc.bias ? &bf : nullptr);
  SCOPED_TRACE(label);
  expect_near(as_f64(r.value()[0]), expected, tol, tol);
}

std::string describe(const ConvCase& cc) {
  std::string s = std::to_string(cc.nd) + "D auto_pad=" + cc.auto_pad + " in=" + dims_to_string(cc.in) +
                  " k=" + dims_to_string(cc.kernel) + " s=" + dims_to_string(cc.stride) +
                  " d=" + dims_to_string(cc.dilation) + " pads=" + dims_to_string(cc.pads) +
                  " group=" + std::to_string(cc.group) + " C=" + std::to_string(cc.c) + " M=" + std::to_string(cc.m) +
                  " N=" + std::to_string(cc.n) + (cc.bias ? " bias" : "");
  return s;
}

// Every auto_pad x stride x dilation x group kind x rank combination, with random asymmetric pads,
// kernel and input sizes.
TEST(Conv, MatchesNaiveConvolutionOverAllAttributeCombinations) {
  std::mt19937 rng(1234);
  int cases = 0;
  for (const char* auto_pad : {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})
    for (int64_t nd : {1, 2, 3})
      for (int64_t stride : {1, 2, 3})
        for (int64_t dilation : {1, 2})
          for (int group_kind : {0, 1, 2}) {  // 0: group 1, 1: group 2, 2: depthwise (group = C)
            ConvCase cc;
            cc.nd = nd;
            cc.auto_pad = auto_pad;
            cc.n = 1 + rng() % 2;
            cc.c = group_kind == 2 ? 3 : 4;
            cc.group = group_kind == 0 ? 1 : group_kind == 1 ? 2 : cc.c;
            cc.m = cc.group * (1 + rng() % 2);
            if (group_kind == 0) cc.m = 1 + rng() % 5;
            cc.bias = rng() % 2 == 0;
            const int64_t max_in = nd == 3 ? 6 : 9;
            for (int64_t i = 0; i < nd; ++i) {
              cc.kernel.push_back(1 + rng() % 3);
              cc.stride.push_back(i == 0 ? stride : 1 + rng() % 3);
              cc.dilation.push_back(i == 0 ? dilation : 1 + rng() % 2);
              const int64_t dk = (cc.kernel[i] - 1) * cc.dilation[i] + 1;
              cc.in.push_back(dk + rng() % (max_in - std::min(dk, max_in) + 1));
            }
            for (int64_t i = 0; i < 2 * nd; ++i) cc.pads.push_back(rng() % 3);
            run_conv_case(cc, rng, DType::kF32, 1e-5, describe(cc));
            ++cases;
          }
  EXPECT_EQ(cases, 4 * 3 * 3 * 2 * 3);
}

TEST(Conv, DoubleAndHalfPrecision) {
  std::mt19937 rng(7);
  ConvCase cc;
  cc.nd = 2;
  cc.c = 6;
  cc.m = 4;
  cc.group = 2;
  cc.in = {7, 6};
  cc.kernel = {3, 2};
  cc.stride = {2, 1};
  cc.dilation = {1, 2};
  cc.pads = {1, 0, 2, 1};
  run_conv_case(cc, rng, DType::kF64, 1e-12, "f64");
  run_conv_case(cc, rng, DType::kF16, 2e-2, "f16");
  run_conv_case(cc, rng, DType::kBF16, 8e-2, "bf16");
}

// Larger than one im2col chunk / gemm block in every direction, and a pointwise (1x1) conv.
TEST(Conv, LargerLayersMatchNaive) {
  std::mt19937 rng(99);
  ConvCase cc;
  cc.nd = 2;
  cc.n = 1;
  cc.c = 40;
  cc.m = 9;
  cc.in = {37, 41};
  cc.kernel = {3, 3};
  cc.stride = {1, 1};
  cc.dilation = {1, 1};
  cc.pads = {1, 1, 1, 1};
  run_conv_case(cc, rng, DType::kF32, 1e-4, "3x3");
  cc.kernel = {1, 1};
  cc.pads = {0, 0, 0, 0};
  run_conv_case(cc, rng, DType::kF32, 1e-4, "1x1");
  cc.stride = {2, 2};
  run_conv_case(cc, rng, DType::kF32, 1e-4, "1x1 stride 2");
}

TEST(Conv, HandComputed1D) {
  // x = [1 2 3 4], w = [1 0 -1], pads 1,1: y[i] = x[i-1] - x[i+1]
  auto out = OpTester("Conv").attr("pads", vector<int64_t>{1, 1}).input(T_({1, 2, 3, 4}, {1, 1, 4}))
                 .input(T_({1, 0, -1}, {1, 1, 3})).input(T_({10}, {1})).run();
  expect_near(out[0], T_({8, 8, 8, 13}, {1, 1, 4}));
}

TEST(Conv, KernelShapeAttributeMustMatchWeights) {
  auto ok = OpTester("Conv").attr("kernel_shape", vector<int64_t>{2}).input(T_({1, 2, 3}, {1, 1, 3}))
                .input(T_({1, 1}, {1, 1, 2})).run();
  expect_near(ok[0], T_({3, 5}, {1, 1, 2}));
  auto bad = OpTester("Conv").attr("kernel_shape", vector<int64_t>{3}).input(T_({1, 2, 3}, {1, 1, 3}))
                 .input(T_({1, 1}, {1, 1, 2})).run_status();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(contains(bad.status(), "kernel_shape")) << bad.status().message();
}

TEST(Conv, ZeroSizeBatch) {
  auto out = OpTester("Conv").attr("pads", vector<int64_t>{1, 1, 1, 1}).input(T_({}, {0, 2, 5, 5}))
                 .input(T_(vector<float>(3 * 2 * 9, 1.0f), {3, 2, 3, 3})).run();
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{0, 3, 5, 5}));
}

TEST(Conv, KernelLargerThanInputWithPadding) {
  // 2x2 input, 3x3 kernel of ones, pads 1: every output sums the whole input (out 2x2).
  auto out = OpTester("Conv").attr("pads", vector<int64_t>{1, 1, 1, 1}).input(T_({1, 2, 3, 4}, {1, 1, 2, 2}))
                 .input(T_(vector<float>(9, 1.0f), {1, 1, 3, 3})).run();
  expect_near(out[0], T_({10, 10, 10, 10}, {1, 1, 2, 2}));
  auto bad = OpTester("Conv").input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).input(T_(vector<float>(9, 1.0f), {1, 1, 3, 3})).run_status();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(contains(bad.status(), "larger than the padded input")) << bad.status().message();
}

TEST(Conv, GroupMustDivideChannels) {
  auto r = OpTester("Conv").attr("group", 3).input(T_(vector<float>(4 * 9), {1, 4, 3, 3}))
               .input(T_(vector<float>(3 * 1 * 1), {3, 1, 1, 1})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status(), "input 'X'") && contains(r.status(), "group")) << r.status().message();
  auto r2 = OpTester("Conv").attr("group", 2).input(T_(vector<float>(4 * 9), {1, 4, 3, 3}))
                .input(T_(vector<float>(3 * 2), {3, 2, 1, 1})).run_status();
  ASSERT_FALSE(r2.is_ok());
  EXPECT_TRUE(contains(r2.status(), "input 'W'") && contains(r2.status(), "not divisible")) << r2.status().message();
}

TEST(Conv, WeightChannelMismatchNamesW) {
  auto r = OpTester("Conv").input(T_(vector<float>(3 * 9), {1, 3, 3, 3})).input(T_(vector<float>(2 * 4), {2, 4, 1, 1})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status(), "input 'W'")) << r.status().message();
  EXPECT_TRUE(contains(r.status(), "Conv_under_test")) << r.status().message();
}

TEST(Conv, BadAttributesAreErrors) {
  Tensor x = T_(vector<float>(9), {1, 1, 3, 3}), w = T_(vector<float>(4), {1, 1, 2, 2});
  EXPECT_FALSE(OpTester("Conv").attr("strides", vector<int64_t>{1}).input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").attr("strides", vector<int64_t>{0, 1}).input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").attr("dilations", vector<int64_t>{1, -1}).input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").attr("pads", vector<int64_t>{1, 1}).input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").attr("pads", vector<int64_t>{-1, 0, 0, 0}).input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").attr("auto_pad", "SAME").input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").attr("group", 0).input(x).input(w).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").input(x).input(w).input(T_({1, 2}, {2})).run_status().is_ok());  // bias size
  EXPECT_FALSE(OpTester("Conv").input(T_(vector<float>(3), {1, 3})).input(T_({1}, {1, 3})).run_status().is_ok());  // rank
  EXPECT_FALSE(OpTester("Conv").input(x).input(T_(vector<float>(2), {1, 1, 2})).run_status().is_ok());  // W rank
  EXPECT_FALSE(OpTester("Conv").input(I64_({1, 2, 3, 4}, {1, 1, 2, 2})).input(I64_({1}, {1, 1, 1, 1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("Conv").input(x).input(cast_tensor(w, DType::kF64).value()).run_status().is_ok());
}

TEST(Conv, SymbolicDimsSurvive) {
  OpTester t("Conv");
  t.attr("pads", vector<int64_t>{1, 1, 1, 1})
      .input(T_(vector<float>(2 * 5 * 5), {1, 2, 5, 5}))
      .input(T_(vector<float>(3 * 2 * 9), {3, 2, 3, 3}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("batch"), Dim(2), Dim::symbolic("h"), Dim::symbolic("w")}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[batch,3,h,w]");
  OpTester s("Conv");
  s.attr("strides", vector<int64_t>{2, 2})
      .input(T_(vector<float>(2 * 5 * 5), {1, 2, 5, 5}))
      .input(T_(vector<float>(3 * 2 * 9), {3, 2, 3, 3}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("batch"), Dim(2), Dim::symbolic("h"), Dim(5)}));
  s.run();
  EXPECT_EQ(s.last_model()->graph.value_types["out0"].shape->to_string(), "[batch,3,?,2]");
}

TEST(Conv, ShapeRuleWithUnknownDims) {
  // Unknown X dims and unknown kernel dims in W: the rule keeps what it knows, the kernel still runs.
  OpTester t("Conv");
  t.attr("pads", vector<int64_t>{1, 1, 1, 1})
      .input(T_(vector<float>(2 * 5 * 5, 1.0f), {1, 2, 5, 5}))
      .input(T_(vector<float>(3 * 2 * 9, 1.0f), {3, 2, 3, 3}))
      .symbolic_input_shape(0, Shape({Dim(), Dim(), Dim(), Dim()}))
      .symbolic_input_shape(1, Shape({Dim(3), Dim(), Dim(), Dim()}));
  auto out = t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[?,3,?,?]");
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{1, 3, 5, 5}));
  EXPECT_EQ(out[0].get_double(0), 8.0);   // corner: 2 channels x 2x2 taps inside
  EXPECT_EQ(out[0].get_double(6), 18.0);  // interior: 2 channels x 3x3
  OpTester g("Gemm");
  g.input(T_({1, 2}, {1, 2})).input(T_({3, 4}, {2, 1})).input(T_({0}, {1}))
      .symbolic_input_shape(0, Shape({Dim(), Dim()}));
  g.run();
  EXPECT_EQ(g.last_model()->graph.value_types["out0"].shape->to_string(), "[?,1]");
}

// ---- ConvTranspose --------------------------------------------------------------------------

struct ConvTCase {
  int64_t nd = 2, n = 1, c = 4, mg = 2, group = 1;
  vector<int64_t> in, kernel, stride, dilation, pads, output_padding, output_shape;
  std::string auto_pad = "NOTSET";
  bool bias = true;
};

// Scatter-form transposed convolution with the output size / pads of the ONNX spec.
Tensor naive_conv_transpose(const ConvTCase& cc, const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t nd = cc.nd;
  vector<int64_t> out(nd), pb(nd);
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t dk = (cc.kernel[i] - 1) * cc.dilation[i] + 1;
    const int64_t full = cc.stride[i] * (cc.in[i] - 1) + cc.output_padding[i] + dk;
    if (!cc.output_shape.empty() || cc.auto_pad != "NOTSET") {
      out[i] = cc.output_shape.empty() ? cc.in[i] * cc.stride[i] : cc.output_shape[i];
      const int64_t total = full - out[i];
      // Python floor division, as in the ONNX reference implementation.
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      pb[i] = cc.auto_pad == "SAME_UPPER" ? half : total - half;
    } else {
      out[i] = full - cc.pads[i] - cc.pads[i + nd];
      pb[i] = cc.pads[i];
    }
  }
  auto ext = [](vector<int64_t> v, int64_t fill) {
    v.resize(3, fill);
    return v;
  };
  const vector<int64_t> I = ext(cc.in, 1), O = ext(out, 1), Kk = ext(cc.kernel, 1), S = ext(cc.stride, 1),
                        D = ext(cc.dilation, 1), P = ext(pb, 0);
  const int64_t M = cc.mg * cc.group, cg = cc.c / cc.group;
  vector<int64_t> ydims = {cc.n, M};
  ydims.insert(ydims.end(), out.begin(), out.end());
  Tensor y = Tensor::allocate(DType::kF64, ydims);
  double* py = y.mutable_data<double>();
  const int64_t os = O[0] * O[1] * O[2];
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < os; ++i) py[(n * M + m) * os + i] = b ? b->get_double(m) : 0.0;
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t c = 0; c < cc.c; ++c)
      for (int64_t i0 = 0; i0 < I[0]; ++i0)
        for (int64_t i1 = 0; i1 < I[1]; ++i1)
          for (int64_t i2 = 0; i2 < I[2]; ++i2)
            for (int64_t m = 0; m < cc.mg; ++m)
              for (int64_t k0 = 0; k0 < Kk[0]; ++k0)
                for (int64_t k1 = 0; k1 < Kk[1]; ++k1)
                  for (int64_t k2 = 0; k2 < Kk[2]; ++k2) {
                    const int64_t o0 = i0 * S[0] - P[0] + k0 * D[0];
                    const int64_t o1 = i1 * S[1] - P[1] + k1 * D[1];
                    const int64_t o2 = i2 * S[2] - P[2] + k2 * D[2];
                    if (o0 < 0 || o0 >= O[0] || o1 < 0 || o1 >= O[1] || o2 < 0 || o2 >= O[2]) continue;
                    const int64_t grp = c / cg, om = grp * cc.mg + m;
                    const double xv = x.get_double((((n * cc.c + c) * I[0] + i0) * I[1] + i1) * I[2] + i2);
                    const double wv = w.get_double((((c * cc.mg + m) * Kk[0] + k0) * Kk[1] + k1) * Kk[2] + k2);
                    py[(((n * M + om) * O[0] + o0) * O[1] + o1) * O[2] + o2] += xv * wv;
                  }
  return y;
}

void run_convt_case(const ConvTCase& cc, std::mt19937& rng, const std::string& label) {
  vector<int64_t> xd = {cc.n, cc.c}, wd = {cc.c, cc.mg};
  xd.insert(xd.end(), cc.in.begin(), cc.in.end());
  wd.insert(wd.end(), cc.kernel.begin(), cc.kernel.end());
  const int64_t M = cc.mg * cc.group;
  Tensor x = random_tensor(rng, xd), w = random_tensor(rng, wd), b = random_tensor(rng, {M});
  OpTester t("ConvTranspose", 11);
  t.attr("strides", cc.stride).attr("dilations", cc.dilation).attr("group", cc.group).attr("output_padding", cc.output_padding);
  if (!cc.output_shape.empty()) t.attr("output_shape", cc.output_shape);
  if (cc.auto_pad != "NOTSET") t.attr("auto_pad", cc.auto_pad);
  else t.attr("pads", cc.pads);
  t.input(x).input(w);
  if (cc.bias) t.input(b);
  auto r = t.run_status();
  ASSERT_TRUE(r.is_ok()) << label << ": " << r.status().to_string();
  Tensor bf = as_f64(b);
  Tensor expected = naive_conv_transpose(cc, as_f64(x), as_f64(w), cc.bias ? &bf : nullptr);
  SCOPED_TRACE(label);
  expect_near(as_f64(r.value()[0]), expected, 1e-5, 1e-5);
}

TEST(ConvTranspose, MatchesNaiveOverAttributeCombinations) {
  std::mt19937 rng(42);
  int cases = 0;
  for (int mode = 0; mode < 4; ++mode)  // 0: pads, 1: SAME_UPPER, 2: SAME_LOWER, 3: output_shape
    for (int64_t nd : {1, 2, 3})
      for (int64_t stride : {1, 2, 3})
        for (int64_t dilation : {1, 2})
          for (int64_t group : {1, 2}) {
            ConvTCase cc;
            cc.nd = nd;
            cc.group = group;
            cc.c = 2 * (1 + rng() % 2);
            cc.mg = 1 + rng() % 3;
            cc.n = 1 + rng() % 2;
            cc.bias = rng() % 2 == 0;
            cc.auto_pad = mode == 1 ? "SAME_UPPER" : mode == 2 ? "SAME_LOWER" : "NOTSET";
            for (int64_t i = 0; i < nd; ++i) {
              cc.in.push_back(1 + rng() % (nd == 3 ? 4 : 6));
              cc.kernel.push_back(1 + rng() % 3);
              cc.stride.push_back(i == 0 ? stride : 1 + rng() % 3);
              cc.dilation.push_back(i == 0 ? dilation : 1 + rng() % 2);
              const int64_t limit = std::max(cc.stride[i], cc.dilation[i]);
              cc.output_padding.push_back(rng() % limit);
            }
            for (int64_t i = 0; i < 2 * nd; ++i) cc.pads.push_back(rng() % 2);
            if (mode == 0) {  // keep the output non-empty
              for (int64_t i = 0; i < nd; ++i) {
                const int64_t full = cc.stride[i] * (cc.in[i] - 1) + cc.output_padding[i] +
                                     (cc.kernel[i] - 1) * cc.dilation[i] + 1;
                if (full - cc.pads[i] - cc.pads[i + nd] < 1) cc.pads[i] = cc.pads[i + nd] = 0;
              }
            }
            if (mode == 3)
              for (int64_t i = 0; i < nd; ++i) cc.output_shape.push_back(cc.in[i] * cc.stride[i] + rng() % 3);
            run_convt_case(cc, rng, "mode " + std::to_string(mode) + " nd " + std::to_string(nd) + " stride " +
                                        std::to_string(stride) + " dilation " + std::to_string(dilation) +
                                        " group " + std::to_string(group));
            ++cases;
          }
  EXPECT_EQ(cases, 4 * 3 * 3 * 2 * 2);
}

TEST(ConvTranspose, HandComputed1D) {
  // x = [1 2 3], w = [1 1], stride 2: every input spreads over two outputs.
  auto out = OpTester("ConvTranspose").attr("strides", vector<int64_t>{2}).input(T_({1, 2, 3}, {1, 1, 3}))
                 .input(T_({1, 1}, {1, 1, 2})).run();
  expect_near(out[0], T_({1, 1, 2, 2, 3, 3}, {1, 1, 6}));
  // Overlapping taps add; pads crop; output_padding extends at the end.
  auto o2 = OpTester("ConvTranspose").attr("pads", vector<int64_t>{1, 0}).attr("output_padding", vector<int64_t>{0})
                .input(T_({1, 2, 3}, {1, 1, 3})).input(T_({1, 10, 100}, {1, 1, 3})).input(T_({0.5f}, {1})).run();
  // full: [1, 12, 123, 230, 300]; crop 1 at the start.
  expect_near(o2[0], T_({12.5f, 123.5f, 230.5f, 300.5f}, {1, 1, 4}));
  auto o3 = OpTester("ConvTranspose").attr("strides", vector<int64_t>{2}).attr("output_padding", vector<int64_t>{1})
                .input(T_({1, 2}, {1, 1, 2})).input(T_({1, 1}, {1, 1, 2})).run();
  expect_near(o3[0], T_({1, 1, 2, 2, 0}, {1, 1, 5}));
}

TEST(ConvTranspose, OutputShapeWithBatchAndChannelsAccepted) {
  auto out = OpTester("ConvTranspose").attr("strides", vector<int64_t>{2}).attr("output_shape", vector<int64_t>{1, 1, 6})
                 .input(T_({1, 2, 3}, {1, 1, 3})).input(T_({1, 1}, {1, 1, 2})).run();
  expect_near(out[0], T_({1, 1, 2, 2, 3, 3}, {1, 1, 6}));
}

TEST(ConvTranspose, Errors) {
  Tensor x = T_(vector<float>(4 * 9), {1, 4, 3, 3});
  auto r = OpTester("ConvTranspose").input(x).input(T_(vector<float>(3 * 2 * 4), {3, 2, 2, 2})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status(), "input 'W'")) << r.status().message();
  auto g = OpTester("ConvTranspose").attr("group", 3).input(x).input(T_(vector<float>(4 * 2 * 4), {4, 2, 2, 2})).run_status();
  ASSERT_FALSE(g.is_ok());
  EXPECT_TRUE(contains(g.status(), "group")) << g.status().message();
  auto op = OpTester("ConvTranspose").attr("output_padding", vector<int64_t>{1, 0}).input(x)
                .input(T_(vector<float>(4 * 2 * 4), {4, 2, 2, 2})).run_status();
  ASSERT_FALSE(op.is_ok());
  EXPECT_TRUE(contains(op.status(), "output_padding")) << op.status().message();
}

TEST(ConvTranspose, ZeroBatchAndGroupsShape) {
  auto out = OpTester("ConvTranspose").attr("group", 2).attr("strides", vector<int64_t>{2, 2})
                 .input(T_({}, {0, 4, 3, 3})).input(T_(vector<float>(4 * 3 * 4), {4, 3, 2, 2})).run();
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{0, 6, 6, 6}));
}

// ---- Gemm -----------------------------------------------------------------------------------

TEST(Gemm, TransposesAlphaBetaAndBroadcastC) {
  Tensor a = T_({1, 2, 3, 4, 5, 6}, {2, 3});     // A  [2,3]
  Tensor at = T_({1, 4, 2, 5, 3, 6}, {3, 2});    // A^T
  Tensor b = T_({1, 0, 0, 1, 1, 1}, {3, 2});     // B  [3,2]
  Tensor bt = T_({1, 0, 1, 0, 1, 1}, {2, 3});    // B^T
  // A*B = [[4, 5], [10, 11]]
  const vector<float> ab = {4, 5, 10, 11};
  auto check = [&](Tensor aa, Tensor bb, int ta, int tb) {
    auto out = OpTester("Gemm", 13).attr("transA", ta).attr("transB", tb).attr("alpha", 2.0f).attr("beta", 0.5f)
                   .input(aa).input(bb).input(T_({10, 20}, {2})).run();
    expect_near(out[0], T_({2 * ab[0] + 5, 2 * ab[1] + 10, 2 * ab[2] + 5, 2 * ab[3] + 10}, {2, 2}));
  };
  check(a, b, 0, 0);
  check(at, b, 1, 0);
  check(a, bt, 0, 1);
  check(at, bt, 1, 1);
  auto col = OpTester("Gemm").input(a).input(b).input(T_({100, 200}, {2, 1})).run();
  expect_near(col[0], T_({104, 105, 210, 211}, {2, 2}));
  auto scalar = OpTester("Gemm").input(a).input(b).input(T_({1}, {})).run();
  expect_near(scalar[0], T_({5, 6, 11, 12}, {2, 2}));
  auto full = OpTester("Gemm").attr("beta", 2.0f).input(a).input(b).input(T_({1, 2, 3, 4}, {2, 2})).run();
  expect_near(full[0], T_({6, 9, 16, 19}, {2, 2}));
}

TEST(Gemm, OptionalCFromOpset11) {
  auto out = OpTester("Gemm", 11).input(T_({1, 2}, {1, 2})).input(T_({3, 4}, {2, 1})).run();
  expect_near(out[0], T_({11}, {1, 1}));
}

TEST(Gemm, BetaZeroIgnoresC) {
  auto out = OpTester("Gemm").attr("beta", 0.0f).input(T_({1, 2}, {1, 2})).input(T_({3, 4}, {2, 1}))
                 .input(T_({NAN}, {1})).run();
  expect_near(out[0], T_({11}, {1, 1}));
}

TEST(Gemm, IntegerAndDouble) {
  auto i = OpTester("Gemm").input(I64_({1, 2, 3, 4}, {2, 2})).input(I64_({5, 6, 7, 8}, {2, 2})).input(I64_({1}, {1})).run();
  expect_near(i[0], I64_({20, 23, 44, 51}, {2, 2}));
  auto d = OpTester("Gemm").attr("transB", 1).input(F64_({1, 2}, {1, 2})).input(F64_({3, 4, 5, 6}, {2, 2}))
               .input(F64_({0.25}, {1})).run();
  expect_near(d[0], F64_({11.25, 17.25}, {1, 2}));
}

TEST(Gemm, Errors) {
  auto k = OpTester("Gemm").input(T_({1, 2, 3}, {1, 3})).input(T_({1, 2}, {2, 1})).input(T_({0}, {1})).run_status();
  ASSERT_FALSE(k.is_ok());
  EXPECT_TRUE(contains(k.status(), "inner dimensions")) << k.status().message();
  auto c = OpTester("Gemm").input(T_({1, 2}, {1, 2})).input(T_({1, 2, 3, 4}, {2, 2})).input(T_({1, 2, 3}, {3})).run_status();
  ASSERT_FALSE(c.is_ok());
  EXPECT_TRUE(contains(c.status(), "input 'C'")) << c.status().message();
  auto r = OpTester("Gemm").input(T_({1, 2}, {2})).input(T_({1, 2}, {2, 1})).input(T_({0}, {1})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status(), "input 'A'")) << r.status().message();
  auto t = OpTester("Gemm").input(T_({1, 2}, {1, 2})).input(F64_({1, 2}, {2, 1})).input(T_({0}, {1})).run_status();
  EXPECT_FALSE(t.is_ok());
}

// ---- MatMul ---------------------------------------------------------------------------------

Tensor naive_matmul_2d(const Tensor& a, const Tensor& b) {
  const int64_t M = a.dim(0), K = a.dim(1), N = b.dim(1);
  Tensor y = Tensor::allocate(DType::kF64, {M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a.get_double(i * K + k) * b.get_double(k * N + j);
      y.mutable_data<double>()[i * N + j] = s;
    }
  return y;
}

TEST(MatMul, VectorPromotion) {
  auto vv = OpTester("MatMul").input(T_({1, 2, 3}, {3})).input(T_({4, 5, 6}, {3})).run();
  expect_near(vv[0], T_({32}, {}));
  auto vm = OpTester("MatMul").input(T_({1, 2}, {2})).input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).run();
  expect_near(vm[0], T_({9, 12, 15}, {3}));
  auto mv = OpTester("MatMul").input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).input(T_({1, 0, -1}, {3})).run();
  expect_near(mv[0], T_({-2, -2}, {2}));
  // 1-D against a batched matrix: [3] x [2, 3, 2] -> [2, 2]
  auto vb = OpTester("MatMul").input(T_({1, 1, 1}, {3})).input(T_({1, 2, 3, 4, 5, 6, 1, 0, 0, 1, 1, 1}, {2, 3, 2})).run();
  expect_near(vb[0], T_({9, 12, 2, 2}, {2, 2}));
}

TEST(MatMul, BatchedBroadcastMatchesNaive) {
  std::mt19937 rng(5);
  Tensor a = random_tensor(rng, {2, 1, 3, 4}), b = random_tensor(rng, {3, 4, 5});
  auto out = OpTester("MatMul").input(a).input(b).run();
  ASSERT_EQ(out[0].dims(), (vector<int64_t>{2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      Tensor ai = Tensor::from_vector<float>(vector<float>(a.data<float>() + i * 12, a.data<float>() + i * 12 + 12), {3, 4});
      Tensor bj = Tensor::from_vector<float>(vector<float>(b.data<float>() + j * 20, b.data<float>() + j * 20 + 20), {4, 5});
      Tensor e = naive_matmul_2d(ai, bj);
      for (int64_t k = 0; k < 15; ++k)
        EXPECT_NEAR(out[0].get_double((i * 3 + j) * 15 + k), e.get_double(k), 1e-5) << i << "," << j << "," << k;
    }
}

TEST(MatMul, LargeAcrossBlockBoundaries) {
  std::mt19937 rng(11);
  Tensor a = random_tensor(rng, {7, 301}), b = random_tensor(rng, {301, 613});
  auto out = OpTester("MatMul").input(a).input(b).run();
  expect_near(as_f64(out[0]), naive_matmul_2d(a, b), 1e-4, 1e-4);
}

TEST(MatMul, IntegerHalfAndEmpty) {
  auto i = OpTester("MatMul").input(I64_({1, 2, 3, 4}, {2, 2})).input(I64_({1, -1, 2, 0}, {2, 2})).run();
  expect_near(i[0], I64_({5, -1, 11, -3}, {2, 2}));
  Tensor h = cast_tensor(T_({1, 2, 3, 4}, {2, 2}), DType::kF16).value();
  auto hf = OpTester("MatMul").input(h).input(h).run();
  ASSERT_EQ(hf[0].dtype(), DType::kF16);
  expect_near(cast_tensor(hf[0], DType::kF32).value(), T_({7, 10, 15, 22}, {2, 2}));
  auto k0 = OpTester("MatMul").input(T_({}, {2, 0})).input(T_({}, {0, 3})).run();
  expect_near(k0[0], T_({0, 0, 0, 0, 0, 0}, {2, 3}));
  auto b0 = OpTester("MatMul").input(T_({}, {0, 2, 2})).input(T_({1, 2, 3, 4}, {2, 2})).run();
  EXPECT_EQ(b0[0].dims(), (vector<int64_t>{0, 2, 2}));
}

TEST(MatMul, Errors) {
  auto k = OpTester("MatMul").input(T_({1, 2, 3}, {1, 3})).input(T_({1, 2}, {2, 1})).run_status();
  ASSERT_FALSE(k.is_ok());
  EXPECT_TRUE(contains(k.status(), "inner dimensions")) << k.status().message();
  auto bb = OpTester("MatMul").input(T_(vector<float>(12), {3, 2, 2})).input(T_(vector<float>(8), {2, 2, 2})).run_status();
  ASSERT_FALSE(bb.is_ok());
  EXPECT_TRUE(contains(bb.status(), "batch")) << bb.status().message();
  EXPECT_FALSE(OpTester("MatMul").input(T_({1}, {})).input(T_({1}, {1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("MatMul").input(T_({1}, {1})).input(F64_({1}, {1})).run_status().is_ok());
}

TEST(MatMul, SymbolicBatch) {
  OpTester t("MatMul");
  t.input(T_(vector<float>(2 * 3 * 4), {2, 3, 4})).input(T_(vector<float>(4 * 5), {4, 5}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("b"), Dim::symbolic("s"), Dim(4)}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[b,s,5]");
}

// ---- Dropout --------------------------------------------------------------------------------

TEST(Dropout, InferenceIsIdentityWithTrueMask) {
  Tensor x = T_({1, -2, 3}, {3});
  auto o7 = OpTester("Dropout", 7).outputs(2).attr("ratio", 0.3f).input(x).run();
  expect_near(o7[0], x);
  expect_near(o7[1], T_({1, 1, 1}, {3}));  // opsets 7-9: mask of the data's type
  auto o10 = OpTester("Dropout", 10).outputs(2).input(x).run();
  expect_near(o10[0], x);
  EXPECT_EQ(o10[1].dtype(), DType::kBool);
  EXPECT_EQ(o10[1].to_int64_vector(), (vector<int64_t>{1, 1, 1}));
  auto o13 = OpTester("Dropout", 13).outputs(2).input(x).const_input(T_({0.5f}, {}))
                 .const_input(Tensor::scalar<bool>(false)).run();
  expect_near(o13[0], x);
  EXPECT_EQ(o13[1].to_int64_vector(), (vector<int64_t>{1, 1, 1}));
  auto one = OpTester("Dropout", 13).input(x).run();
  expect_near(one[0], x);
}

TEST(Dropout, TrainingModeIsAnError) {
  Tensor x = T_({1, 2}, {2});
  auto c = OpTester("Dropout", 13).input(x).const_input(T_({0.5f}, {})).const_input(Tensor::scalar<bool>(true)).run_status();
  ASSERT_FALSE(c.is_ok());
  EXPECT_TRUE(contains(c.status(), "training mode not supported")) << c.status().message();
  auto d = OpTester("Dropout", 12).input(x).no_input().const_input(Tensor::scalar<bool>(true)).run_status();
  ASSERT_FALSE(d.is_ok());  // ratio defaults to 0.5
  auto rt = OpTester("Dropout", 13).input(x).input(T_({0.5f}, {})).input(Tensor::scalar<bool>(true)).run_status();
  ASSERT_FALSE(rt.is_ok());  // runtime inputs: the kernel refuses
  EXPECT_TRUE(contains(rt.status(), "training mode not supported")) << rt.status().message();
  // Training with ratio 0 is the identity.
  auto z = OpTester("Dropout", 13).input(x).const_input(T_({0.0f}, {})).const_input(Tensor::scalar<bool>(true)).run();
  expect_near(z[0], x);
  EXPECT_FALSE(OpTester("Dropout", 13).input(x).const_input(T_({1.5f}, {})).run_status().is_ok());
}

// ---- speed (run with --gtest_also_run_disabled_tests) ---------------------------------------

TEST(ConvSpeed, DISABLED_ResNetLayer3x3x256) {
  std::mt19937 rng(3);
  Tensor x = random_tensor(rng, {1, 256, 56, 56}), w = random_tensor(rng, {256, 256, 3, 3}), b = random_tensor(rng, {256});
  OpTester t("Conv");
  t.attr("pads", vector<int64_t>{1, 1, 1, 1}).input(x).input(w).input(b);
  t.run();  // warm-up
  const int reps = 3;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) t.run();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  const double flop = 2.0 * 256 * 56 * 56 * 256 * 9;
  std::printf("Conv 1x256x56x56 3x3 -> 256: %.3f s/run, %.1f GFLOP/s\n", s, flop / s / 1e9);
}

TEST(ConvSpeed, DISABLED_BertMatMuls) {
  std::mt19937 rng(3);
  Tensor a = random_tensor(rng, {128, 768}), b1 = random_tensor(rng, {768, 768}), b2 = random_tensor(rng, {768, 3072});
  for (const Tensor* b : {&b1, &b2}) {
    OpTester t("MatMul");
    t.input(a).input(*b);
    t.run();
    const int reps = 5;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) t.run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    const double flop = 2.0 * 128 * 768 * b->dim(1);
    std::printf("MatMul [128,768]x[768,%lld]: %.4f s/run, %.1f GFLOP/s\n", static_cast<long long>(b->dim(1)), s,
                flop / s / 1e9);
  }
}

}  // namespace
}  // namespace ferry::testing
