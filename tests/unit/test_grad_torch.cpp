// The network ops' gradients against PyTorch (float64): the expected values come from
// tests/unit/data/gen_grad_nn_refs.py, which builds the same wave inputs and the loss
// sum(Y * R), R_k = cos(0.91 k). Finite differences (test_grad_nn.cpp, test_grad_norm_pool.cpp)
// check each gradient against its forward op; these check the semantics PyTorch trains with,
// including what differences cannot see (MaxPool's ties).
#include <gtest/gtest.h>

#include "grad_net.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using namespace grad_net;

#include "data/grad_nn_refs.inc"

Tensor as_tensor(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  return Tensor::from_vector<double>(v, dims);
}

// Runs node `op` over fed inputs and compares the cos-weighted gradients with `expected`, in f64
// and (the f32 kernels, looser) in f32.
void expect_torch(const std::string& op, std::vector<std::pair<std::string, Tensor>> inputs, Attrs attrs,
                  const std::vector<std::vector<double>>& expected, int64_t opset = 17,
                  std::vector<std::pair<std::string, Tensor>> constants = {}) {
  for (DType dt : {DType::kF64, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    Net n(opset);
    std::vector<std::string> names, wrt;
    std::vector<std::vector<int64_t>> dims;
    for (auto& [name, t] : inputs) {
      dims.push_back(t.dims());
      wrt.push_back(name);
      names.push_back(n.in(name, dt == DType::kF64 ? t : cast_tensor(t, dt).value()));
    }
    for (auto& [name, t] : constants) names.push_back(name.empty() ? "" : n.init(name, t));
    n.out(n.node(op, names, attrs)[0]);
    std::vector<Tensor> got = cos_weighted_gradients(n.build(), n.feeds, wrt);
    ASSERT_EQ(got.size(), expected.size());
    const double tol = dt == DType::kF64 ? 1e-9 : 2e-5;
    for (size_t k = 0; k < got.size(); ++k) {
      SCOPED_TRACE("gradient of " + wrt[k]);
      expect_near(got[k], cast_tensor(as_tensor(expected[k], dims[k]), dt).value(), tol, tol);
    }
  }
}

TEST(GradNnTorch, Conv2dGroupsStridesDilation) {
  expect_torch("Conv", {{"x", wave({1, 4, 6, 5}, 0.37, 0.0, 1.0)}, {"w", wave({6, 2, 3, 2}, 0.53, 0.3, 0.5)},
                        {"b", wave({6}, 1.1, 0.2, 1.0)}},
               {{"strides", ints({2, 1})}, {"pads", ints({1, 1, 1, 1})}, {"dilations", ints({1, 2})}, {"group", i(2)}},
               {kConvDx, kConvDw, kConvDb});
}

TEST(GradNnTorch, ConvTranspose2dOutputPaddingGroups) {
  expect_torch("ConvTranspose", {{"x", wave({1, 2, 3, 3}, 0.41, 0.1, 1.0)}, {"w", wave({2, 2, 3, 3}, 0.29, 0.7, 0.8)},
                                 {"b", wave({4}, 0.9, 0.0, 1.0)}},
               {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"output_padding", ints({1, 1})}, {"group", i(2)}},
               {kConvTDx, kConvTDw, kConvTDb});
}

TEST(GradNnTorch, InterpolateBilinearAndNearest) {
  const Tensor roi = Tensor::from_vector<float>({}, {0});
  const Tensor x = wave({1, 1, 3, 4}, 0.83, 0.2, 1.0);
  expect_torch("Resize", {{"x", x}}, {{"mode", s("linear")}, {"coordinate_transformation_mode", s("half_pixel")}},
               {kResizeLinearDx}, 13, {{"roi", roi}, {"scales", Tensor::from_vector<float>({1, 1, 2, 2}, {4})}});
  expect_torch("Resize", {{"x", x}}, {{"mode", s("linear")}, {"coordinate_transformation_mode", s("pytorch_half_pixel")}},
               {kResizeLinearDx}, 13, {{"roi", roi}, {"scales", Tensor::from_vector<float>({1, 1, 2, 2}, {4})}});
  expect_torch("Resize", {{"x", x}}, {{"mode", s("linear")}, {"coordinate_transformation_mode", s("align_corners")}},
               {kResizeCornersDx}, 13, {{"roi", roi}, {"", Tensor()}, {"sizes", I64_({1, 1, 5, 7}, {4})}});
  expect_torch("Resize", {{"x", x}},
               {{"mode", s("nearest")}, {"coordinate_transformation_mode", s("asymmetric")}, {"nearest_mode", s("floor")}},
               {kResizeNearestDx}, 13, {{"roi", roi}, {"", Tensor()}, {"sizes", I64_({1, 1, 7, 9}, {4})}});
}

TEST(GradNormPoolTorch, MaxPoolTiesCeilMode) {
  Tensor x = wave({1, 1, 5, 6}, 1.3, 0.0, 2.0);
  for (int64_t k = 0; k < x.numel(); ++k) x.mutable_data<double>()[k] = std::nearbyint(x.data<double>()[k]);
  expect_torch("MaxPool", {{"x", x}},
               {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"ceil_mode", i(1)}},
               {kMaxPoolDx});
}

TEST(GradNormPoolTorch, AvgPoolCeilModeCountIncludePad) {
  const Tensor x = wave({1, 1, 5, 6}, 0.61, 0.4, 1.0);
  for (int cip = 0; cip < 2; ++cip) {
    SCOPED_TRACE("count_include_pad " + std::to_string(cip));
    expect_torch("AveragePool", {{"x", x}},
                 {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})},
                  {"ceil_mode", i(1)}, {"count_include_pad", i(cip)}},
                 {cip ? kAvgPoolDx1 : kAvgPoolDx0});
  }
}

TEST(GradNormPoolTorch, LayerNormLastTwoAxes) {
  expect_torch("LayerNormalization", {{"x", wave({2, 3, 4}, 0.77, 0.0, 1.5)}, {"scale", wave({3, 4}, 0.33, 1.0, 1.0)},
                                      {"b", wave({3, 4}, 0.45, 0.5, 1.0)}},
               {{"axis", i(-2)}}, {kLnDx, kLnDs, kLnDb});
}

}  // namespace
}  // namespace ferry::testing
