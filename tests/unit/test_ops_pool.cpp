// MaxPool, AveragePool, LpPool and the global pools: hand-computed cases (several from the ONNX
// backend tests) plus randomized N-D cases against a naive implementation written here.
#include <limits>
#include <random>
#include <string>

#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

using std::vector;

bool contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

vector<float> iota_vec(int n, float start = 1.0f) {
  vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// ---- MaxPool --------------------------------------------------------------------------------

TEST(MaxPool, Basic2DWithIndices) {
  auto out = OpTester("MaxPool", 12).outputs(2).attr("kernel_shape", vector<int64_t>{2, 2}).attr("strides", vector<int64_t>{2, 2})
                 .input(T_({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4})).run();
  expect_near(out[0], T_({6, 8, 14, 16}, {1, 1, 2, 2}));
  expect_near(out[1], I64_({5, 7, 13, 15}, {1, 1, 2, 2}));
}

TEST(MaxPool, IndicesIncludeBatchAndChannelAndStorageOrder) {
  // x[n, c, h, w] with the maximum of each 2x3 plane at (h=1, w=0).
  vector<float> v(2 * 2 * 2 * 3, 0.0f);
  for (int p = 0; p < 4; ++p) v[p * 6 + 3] = 10.0f + p;
  Tensor x = T_(v, {2, 2, 2, 3});
  auto rm = OpTester("MaxPool", 12).outputs(2).attr("kernel_shape", vector<int64_t>{2, 3}).input(x).run();
  expect_near(rm[0], T_({10, 11, 12, 13}, {2, 2, 1, 1}));
  expect_near(rm[1], I64_({3, 9, 15, 21}, {2, 2, 1, 1}));  // p*6 + (1*3 + 0)
  auto cm = OpTester("MaxPool", 12).outputs(2).attr("storage_order", 1).attr("kernel_shape", vector<int64_t>{2, 3}).input(x).run();
  expect_near(cm[1], I64_({1, 7, 13, 19}, {2, 2, 1, 1}));  // p*6 + (1 + 0*2)
}

TEST(MaxPool, PaddedIndicesIgnorePadding) {
  // ONNX's maxpool_with_argmax_2d_precomputed_pads: 5x5, k=5, pads 2.
  auto out = OpTester("MaxPool", 12).outputs(2).attr("kernel_shape", vector<int64_t>{5, 5})
                 .attr("pads", vector<int64_t>{2, 2, 2, 2}).input(T_(iota_vec(25), {1, 1, 5, 5})).run();
  expect_near(out[0], T_({13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25},
                         {1, 1, 5, 5}));
  expect_near(out[1], I64_({12, 13, 14, 14, 14, 17, 18, 19, 19, 19, 22, 23, 24, 24, 24, 22, 23, 24, 24, 24, 22, 23, 24, 24, 24},
                           {1, 1, 5, 5}));
}

TEST(MaxPool, CeilMode) {
  // ONNX's maxpool_2d_ceil: 4x4, k=3, s=2.
  auto out = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{3, 3}).attr("strides", vector<int64_t>{2, 2})
                 .attr("ceil_mode", 1).input(T_(iota_vec(16), {1, 1, 4, 4})).run();
  expect_near(out[0], T_({11, 12, 15, 16}, {1, 1, 2, 2}));
  auto floor = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{3, 3}).attr("strides", vector<int64_t>{2, 2})
                   .input(T_(iota_vec(16), {1, 1, 4, 4})).run();
  expect_near(floor[0], T_({11}, {1, 1, 1, 1}));
}

TEST(MaxPool, CeilModeDropsWindowStartingInRightPadding) {
  // in 5, k 2, s 2, pads 1/1: ceil((5+2-2)/2)+1 = 4 windows, but the 4th would start at 5 (right
  // padding), so there are 3 (as PyTorch's max_pool1d(ceil_mode=True, padding=1) gives).
  auto out = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2})
                 .attr("pads", vector<int64_t>{1, 1}).attr("ceil_mode", 1).input(T_({5, 1, 2, 4, 3}, {1, 1, 5})).run();
  expect_near(out[0], T_({5, 2, 4}, {1, 1, 3}));
}

TEST(MaxPool, AutoPadSameAndValid) {
  // ONNX's maxpool_2d_same_upper: 5x5, k=3, s=2.
  auto up = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{3, 3}).attr("strides", vector<int64_t>{2, 2})
                .attr("auto_pad", "SAME_UPPER").input(T_(iota_vec(25), {1, 1, 5, 5})).run();
  expect_near(up[0], T_({7, 9, 10, 17, 19, 20, 22, 24, 25}, {1, 1, 3, 3}));
  // 1-D, k=2, s=1 on [1 3 2 4]: total padding 1 goes to the end (UPPER) or the start (LOWER).
  Tensor x = T_({1, 3, 2, 4}, {1, 1, 4});
  auto u = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).attr("auto_pad", "SAME_UPPER").input(x).run();
  expect_near(u[0], T_({3, 3, 4, 4}, {1, 1, 4}));
  auto l = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).attr("auto_pad", "SAME_LOWER").input(x).run();
  expect_near(l[0], T_({1, 3, 3, 4}, {1, 1, 4}));
  auto v = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2})
               .attr("auto_pad", "VALID").attr("pads", vector<int64_t>{1, 1}).input(T_({1, 3, 2, 4, 9}, {1, 1, 5})).run();
  expect_near(v[0], T_({3, 4}, {1, 1, 2}));
}

TEST(MaxPool, Dilations) {
  // ONNX's maxpool_2d_dilations: 4x4, k=2, dilations 2.
  auto out = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 2}).attr("dilations", vector<int64_t>{2, 2})
                 .input(T_(iota_vec(16), {1, 1, 4, 4})).run();
  expect_near(out[0], T_({11, 12, 15, 16}, {1, 1, 2, 2}));
}

TEST(MaxPool, NaNPropagatesAndFirstMaxWins) {
  auto out = OpTester("MaxPool", 12).outputs(2).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2})
                 .input(T_({1, NAN, 7, 7, -INFINITY, -INFINITY}, {1, 1, 6})).run();
  EXPECT_TRUE(std::isnan(out[0].get_double(0)));
  EXPECT_EQ(out[1].get_int64(0), 1);
  EXPECT_EQ(out[0].get_double(1), 7.0);
  EXPECT_EQ(out[1].get_int64(1), 2);
  EXPECT_EQ(out[0].get_double(2), -INFINITY);
  EXPECT_EQ(out[1].get_int64(2), 4);
}

TEST(MaxPool, Int8FromOpset12) {
  Tensor x = Tensor::from_vector<int8_t>({-128, -5, 3, -128}, {1, 1, 4});
  auto out = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(x).run();
  EXPECT_EQ(out[0].dtype(), DType::kI8);
  EXPECT_EQ(out[0].to_int64_vector(), (vector<int64_t>{-5, 3}));
  Tensor u = Tensor::from_vector<uint8_t>({0, 0, 200, 7}, {1, 1, 4});
  auto uo = OpTester("MaxPool", 12).outputs(2).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(u).run();
  EXPECT_EQ(uo[0].to_int64_vector(), (vector<int64_t>{0, 200}));
  EXPECT_EQ(uo[1].to_int64_vector(), (vector<int64_t>{0, 2}));
  EXPECT_FALSE(OpTester("MaxPool", 11).attr("kernel_shape", vector<int64_t>{2}).input(x).run_status().is_ok());
}

TEST(MaxPool, Half) {
  Tensor x = cast_tensor(T_({1, 5, 2, 3}, {1, 1, 4}), DType::kF16).value();
  auto out = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(x).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  expect_near(cast_tensor(out[0], DType::kF32).value(), T_({5, 3}, {1, 1, 2}));
}

TEST(MaxPool, ZeroBatchAndSymbolicDims) {
  auto out = OpTester("MaxPool", 12).outputs(2).attr("kernel_shape", vector<int64_t>{3, 3}).attr("pads", vector<int64_t>{1, 1, 1, 1})
                 .input(T_({}, {0, 3, 5, 5})).run();
  EXPECT_EQ(out[0].dims(), (vector<int64_t>{0, 3, 5, 5}));
  EXPECT_EQ(out[1].dims(), (vector<int64_t>{0, 3, 5, 5}));
  OpTester t("MaxPool", 12);
  t.attr("kernel_shape", vector<int64_t>{3, 3}).attr("pads", vector<int64_t>{1, 1, 1, 1}).attr("strides", vector<int64_t>{1, 2})
      .input(T_(vector<float>(2 * 25), {1, 2, 5, 5}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(2), Dim::symbolic("h"), Dim::symbolic("w")}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[n,2,h,?]");
}

TEST(MaxPool, Errors) {
  Tensor x = T_(vector<float>(16), {1, 1, 4, 4});
  auto nok = OpTester("MaxPool", 12).input(x).run_status();
  ASSERT_FALSE(nok.is_ok());
  EXPECT_TRUE(contains(nok.status(), "kernel_shape")) << nok.status().message();
  auto len = OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 2}).attr("strides", vector<int64_t>{1}).input(x).run_status();
  ASSERT_FALSE(len.is_ok());
  EXPECT_TRUE(contains(len.status(), "strides")) << len.status().message();
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 0}).input(x).run_status().is_ok());
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 2}).attr("pads", vector<int64_t>{0, -1, 0, 0}).input(x).run_status().is_ok());
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{5, 5}).input(x).run_status().is_ok());
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 2}).attr("storage_order", 2).input(x).run_status().is_ok());
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 2}).attr("ceil_mode", 3).input(x).run_status().is_ok());
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2}).input(T_({1, 2}, {1, 2})).run_status().is_ok());
  EXPECT_FALSE(OpTester("MaxPool", 12).attr("kernel_shape", vector<int64_t>{2, 2}).input(I64_(vector<int64_t>(16), {1, 1, 4, 4})).run_status().is_ok());
}

// ---- AveragePool ----------------------------------------------------------------------------

TEST(AveragePool, CountIncludePad) {
  // 3x3 of ones... with values: x = 1..9, k=2, s=1, pads 1 at the start only -> 3x3 outputs.
  Tensor x = T_(iota_vec(9), {1, 1, 3, 3});
  auto ex = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{2, 2}).attr("pads", vector<int64_t>{1, 1, 0, 0}).input(x).run();
  expect_near(ex[0], T_({1, 1.5f, 2.5f, 2.5f, 3, 4, 5.5f, 6, 7}, {1, 1, 3, 3}));
  auto in = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{2, 2}).attr("pads", vector<int64_t>{1, 1, 0, 0})
                .attr("count_include_pad", 1).input(x).run();
  expect_near(in[0], T_({0.25f, 0.75f, 1.25f, 1.25f, 3, 4, 2.75f, 6, 7}, {1, 1, 3, 3}));
}

TEST(AveragePool, CeilModeAndPaddedEnd) {
  // ONNX's averagepool_2d_ceil: 4x4, k=3, s=2.
  auto out = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{3, 3}).attr("strides", vector<int64_t>{2, 2})
                 .attr("ceil_mode", 1).input(T_(iota_vec(16), {1, 1, 4, 4})).run();
  expect_near(out[0], T_({6, 7.5f, 12, 13.5f}, {1, 1, 2, 2}));
  // 1-D in 4, k 3, s 2, pads 1/1, ceil, count_include_pad: windows [-1,1] [1,3] [3,5]; the last
  // counts positions 3 and 4 (4 is right padding) but not 5 (outside the padded input): as PyTorch.
  auto c = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{3}).attr("strides", vector<int64_t>{2})
               .attr("pads", vector<int64_t>{1, 1}).attr("ceil_mode", 1).attr("count_include_pad", 1)
               .input(T_({1, 2, 3, 4}, {1, 1, 4})).run();
  expect_near(c[0], T_({1, 3, 2}, {1, 1, 3}));
}

TEST(AveragePool, DilationsFromOpset19) {
  // ONNX's averagepool_2d_dilations: 4x4, k=2, s=1, dilations 2, ceil_mode.
  auto out = OpTester("AveragePool", 19).attr("kernel_shape", vector<int64_t>{2, 2}).attr("dilations", vector<int64_t>{2, 2})
                 .attr("ceil_mode", 1).input(T_(iota_vec(16), {1, 1, 4, 4})).run();
  expect_near(out[0], T_({6, 7, 10, 11}, {1, 1, 2, 2}));
}

TEST(AveragePool, SameLowerAnd3D) {
  // ONNX's averagepool_2d_same_lower on 1-D: [1 2 3 4], k 2: pads (1, 0), exclude pad.
  auto l = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{2}).attr("auto_pad", "SAME_LOWER")
               .input(T_({1, 2, 3, 4}, {1, 1, 4})).run();
  expect_near(l[0], T_({1, 1.5f, 2.5f, 3.5f}, {1, 1, 4}));
  auto d3 = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{2, 2, 2}).input(T_(iota_vec(8), {1, 1, 2, 2, 2})).run();
  expect_near(d3[0], T_({4.5f}, {1, 1, 1, 1, 1}));
}

TEST(AveragePool, HalfPrecision) {
  Tensor x = cast_tensor(T_({1, 2, 3, 4}, {1, 1, 4}), DType::kF16).value();
  auto out = OpTester("AveragePool", 11).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(x).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  expect_near(cast_tensor(out[0], DType::kF32).value(), T_({1.5f, 3.5f}, {1, 1, 2}));
}

// ---- LpPool ---------------------------------------------------------------------------------

TEST(LpPool, PNorms) {
  Tensor x = T_({3, -4, 1, 2}, {1, 1, 4});
  auto p2 = OpTester("LpPool", 18).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(x).run();
  expect_near(p2[0], T_({5, std::sqrt(5.0f)}, {1, 1, 2}));
  auto p1 = OpTester("LpPool", 11).attr("p", 1).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(x).run();
  expect_near(p1[0], T_({7, 3}, {1, 1, 2}));
  auto p3 = OpTester("LpPool", 11).attr("p", 3).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2}).input(x).run();
  expect_near(p3[0], T_({std::cbrt(91.0f), std::cbrt(9.0f)}, {1, 1, 2}));
  // padding contributes zeros
  auto pad = OpTester("LpPool", 11).attr("kernel_shape", vector<int64_t>{2}).attr("strides", vector<int64_t>{2})
                 .attr("pads", vector<int64_t>{1, 1}).input(x).run();
  expect_near(pad[0], T_({3, std::sqrt(17.0f), 2}, {1, 1, 3}));
  EXPECT_FALSE(OpTester("LpPool", 11).attr("p", 0).attr("kernel_shape", vector<int64_t>{2}).input(x).run_status().is_ok());
}

// ---- global pools ---------------------------------------------------------------------------

TEST(GlobalPool, AverageMaxLp) {
  Tensor x = T_({1, 2, 3, 4, -5, 6, 7, 8}, {1, 2, 2, 2});
  auto a = OpTester("GlobalAveragePool").input(x).run();
  expect_near(a[0], T_({2.5f, 4}, {1, 2, 1, 1}));
  auto m = OpTester("GlobalMaxPool").input(x).run();
  expect_near(m[0], T_({4, 8}, {1, 2, 1, 1}));
  auto l = OpTester("GlobalLpPool").input(x).run();
  expect_near(l[0], T_({std::sqrt(30.0f), std::sqrt(174.0f)}, {1, 2, 1, 1}));
  auto l1 = OpTester("GlobalLpPool").attr("p", 1).input(x).run();
  expect_near(l1[0], T_({10, 26}, {1, 2, 1, 1}));
  auto d1 = OpTester("GlobalAveragePool").input(T_({1, 2, 3, 4, 5, 6}, {2, 1, 3})).run();
  expect_near(d1[0], T_({2, 5}, {2, 1, 1}));
  auto z = OpTester("GlobalMaxPool").input(T_({}, {0, 3, 4, 4})).run();
  EXPECT_EQ(z[0].dims(), (vector<int64_t>{0, 3, 1, 1}));
  auto mn = OpTester("GlobalMaxPool").input(T_({1, NAN, 2}, {1, 1, 3})).run();
  EXPECT_TRUE(std::isnan(mn[0].get_double(0)));
  EXPECT_FALSE(OpTester("GlobalAveragePool").input(I64_({1, 2}, {1, 1, 2})).run_status().is_ok());
  EXPECT_FALSE(OpTester("GlobalAveragePool").input(T_({1, 2}, {2})).run_status().is_ok());
}

TEST(GlobalPool, SymbolicShape) {
  OpTester t("GlobalAveragePool");
  t.input(T_(vector<float>(2 * 9), {1, 2, 3, 3}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(2), Dim::symbolic("h"), Dim::symbolic("w")}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[n,2,1,1]");
}

// ---- randomized N-D cross-check ---------------------------------------------------------------

struct PoolCase {
  int64_t nd;
  vector<int64_t> in, kernel, stride, dilation, pads;
  std::string auto_pad = "NOTSET";
  bool ceil = false, include_pad = false;
};

// Naive pooling over (up to) 3 spatial axes with the output size rule written out here.
void naive_pool(const PoolCase& pc, const Tensor& x, int64_t planes, vector<double>* ymax, vector<int64_t>* imax,
                vector<double>* yavg, vector<double>* ylp2, vector<int64_t>* out) {
  vector<int64_t> pb(3, 0), pe(3, 0), I(3, 1), O(3, 1), K(3, 1), S(3, 1), D(3, 1);
  out->clear();
  for (int64_t i = 0; i < pc.nd; ++i) {
    I[i] = pc.in[i];
    K[i] = pc.kernel[i];
    S[i] = pc.stride[i];
    D[i] = pc.dilation[i];
    const int64_t dk = (K[i] - 1) * D[i] + 1;
    if (pc.auto_pad == "SAME_UPPER" || pc.auto_pad == "SAME_LOWER") {
      O[i] = (I[i] + S[i] - 1) / S[i];
      const int64_t total = std::max<int64_t>(0, (O[i] - 1) * S[i] + dk - I[i]);
      pb[i] = pc.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe[i] = total - pb[i];
    } else {
      if (pc.auto_pad == "NOTSET") {
        pb[i] = pc.pads[i];
        pe[i] = pc.pads[i + pc.nd];
      }
      const int64_t span = I[i] + pb[i] + pe[i] - dk;
      O[i] = (pc.ceil ? (span + S[i] - 1) / S[i] : span / S[i]) + 1;
      if (pc.ceil && (O[i] - 1) * S[i] >= I[i] + pb[i]) O[i] -= 1;
    }
    out->push_back(O[i]);
  }
  const int64_t is = I[0] * I[1] * I[2];
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o0 = 0; o0 < O[0]; ++o0)
      for (int64_t o1 = 0; o1 < O[1]; ++o1)
        for (int64_t o2 = 0; o2 < O[2]; ++o2) {
          double mx = -std::numeric_limits<double>::infinity(), sum = 0, sq = 0;
          int64_t arg = -1, n = 0, npad = 0;
          for (int64_t k0 = 0; k0 < K[0]; ++k0)
            for (int64_t k1 = 0; k1 < K[1]; ++k1)
              for (int64_t k2 = 0; k2 < K[2]; ++k2) {
                const int64_t i0 = o0 * S[0] - pb[0] + k0 * D[0], i1 = o1 * S[1] - pb[1] + k1 * D[1],
                              i2 = o2 * S[2] - pb[2] + k2 * D[2];
                if (i0 >= -pb[0] && i0 < I[0] + pe[0] && i1 >= -pb[1] && i1 < I[1] + pe[1] && i2 >= -pb[2] &&
                    i2 < I[2] + pe[2])
                  ++npad;
                if (i0 < 0 || i0 >= I[0] || i1 < 0 || i1 >= I[1] || i2 < 0 || i2 >= I[2]) continue;
                const int64_t idx = p * is + (i0 * I[1] + i1) * I[2] + i2;
                const double v = x.get_double(idx);
                if (arg < 0 || v > mx) {
                  mx = v;
                  arg = idx;
                }
                sum += v;
                sq += v * v;
                ++n;
              }
          ymax->push_back(mx);
          imax->push_back(arg);
          yavg->push_back(sum / static_cast<double>(pc.include_pad ? npad : n));
          ylp2->push_back(std::sqrt(sq));
        }
}

TEST(Pool, RandomizedNDMatchesNaive) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int cases = 0;
  for (const char* auto_pad : {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})
    for (int64_t nd : {1, 2, 3})
      for (int ceil : {0, 1})
        for (int rep = 0; rep < 4; ++rep) {
          PoolCase pc;
          pc.nd = nd;
          pc.auto_pad = auto_pad;
          pc.ceil = ceil == 1;
          pc.include_pad = rep % 2 == 1;
          for (int64_t i = 0; i < nd; ++i) {
            pc.kernel.push_back(1 + rng() % 3);
            pc.stride.push_back(1 + rng() % 3);
            pc.dilation.push_back(1 + rng() % 2);
            const int64_t dk = (pc.kernel[i] - 1) * pc.dilation[i] + 1;
            pc.in.push_back(dk + rng() % 5);
          }
          for (int64_t i = 0; i < 2 * nd; ++i) pc.pads.push_back(rng() % 2);
          vector<int64_t> xd = {2, 3};
          xd.insert(xd.end(), pc.in.begin(), pc.in.end());
          int64_t numel = 1;
          for (int64_t d : xd) numel *= d;
          vector<float> xv(static_cast<size_t>(numel));
          for (float& v : xv) v = dist(rng);
          Tensor x = T_(xv, xd);
          vector<double> ymax, yavg, ylp;
          vector<int64_t> imax, od;
          naive_pool(pc, x, 6, &ymax, &imax, &yavg, &ylp, &od);
          vector<int64_t> yd = {2, 3};
          yd.insert(yd.end(), od.begin(), od.end());
          const std::string label = std::string(auto_pad) + " nd=" + std::to_string(nd) + " ceil=" + std::to_string(ceil) +
                                    " in=" + dims_to_string(pc.in) + " k=" + dims_to_string(pc.kernel) +
                                    " s=" + dims_to_string(pc.stride) + " d=" + dims_to_string(pc.dilation) +
                                    " pads=" + dims_to_string(pc.pads);
          SCOPED_TRACE(label);
          auto configure = [&](OpTester& t) {
            t.attr("kernel_shape", pc.kernel).attr("strides", pc.stride).attr("dilations", pc.dilation).attr("ceil_mode", ceil);
            if (pc.auto_pad == std::string("NOTSET")) t.attr("pads", pc.pads);
            else t.attr("auto_pad", pc.auto_pad);
            t.input(x);
          };
          OpTester mp("MaxPool", 12);
          configure(mp);
          auto m = mp.outputs(2).run();
          // Windows entirely in padding (possible with dilation) have no element: -inf / -1 both sides.
          expect_near(cast_tensor(m[0], DType::kF64).value(), Tensor::from_vector<double>(ymax, yd));
          expect_near(m[1], Tensor::from_vector<int64_t>(imax, yd));
          OpTester ap("AveragePool", 19);
          configure(ap);
          ap.attr("count_include_pad", pc.include_pad ? 1 : 0);
          auto a = ap.run();
          expect_near(cast_tensor(a[0], DType::kF64).value(), Tensor::from_vector<double>(yavg, yd));
          OpTester lp("LpPool", 18);
          configure(lp);
          auto l = lp.run();
          expect_near(cast_tensor(l[0], DType::kF64).value(), Tensor::from_vector<double>(ylp, yd));
          ++cases;
        }
  EXPECT_EQ(cases, 4 * 3 * 2 * 4);
}

}  // namespace
}  // namespace ferry::testing
