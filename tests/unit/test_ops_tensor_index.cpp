// Tests for the tensor_index family: Gather, GatherElements, GatherND, Scatter, ScatterElements,
// ScatterND, Slice, TopK, NonZero, OneHot, Compress, ReverseSequence, Unique.
#include <limits>

#include "op_tester.h"

namespace ferry::testing {
namespace {

using V = std::vector<int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// ---- Gather ---------------------------------------------------------------------------------

TEST(Gather, AxisZeroAndNegativeIndices) {
  OpTester t("Gather", 13);
  t.input(iota_f({3, 2})).const_input(I64_({2, -3, 1, 1}, {2, 2}));
  auto out = t.run();
  expect_near(out[0], T_({4, 5, 0, 1, 2, 3, 2, 3}, {2, 2, 2}));
  EXPECT_EQ(inferred(t), "[2,2,2]");
}

TEST(Gather, InnerAxisScalarIndexAndInt32) {
  auto out = OpTester("Gather", 13).attr("axis", -1).input(iota_f({2, 3})).input(Tensor::scalar<int32_t>(2)).run();
  expect_near(out[0], T_({2, 5}, {2}));
  auto s = OpTester("Gather", 13).input(Tensor::from_vector<std::string>({"a", "b", "c"}, {3})).input(I64_({2, 0}, {2})).run();
  EXPECT_EQ(s[0].strings(), (std::vector<std::string>{"c", "a"}));
  auto e = OpTester("Gather", 13).input(iota_f({3, 2})).input(I64_({}, {0})).run();
  EXPECT_EQ(e[0].dims(), (V{0, 2}));
}

TEST(Gather, OutOfRangeNamesIndexAndBound) {
  expect_error(OpTester("Gather", 13).input(iota_f({3, 2})).input(I64_({0, 3}, {2})).run_status(),
               {"Gather_under_test", "index 3", "size 3"});
  expect_error(OpTester("Gather", 13).input(iota_f({3, 2})).const_input(I64_({-4}, {1})).run_status(),
               {"Gather_under_test", "index -4", "size 3"});
  expect_error(OpTester("Gather", 13).attr("axis", 2).input(iota_f({3, 2})).input(I64_({0}, {1})).run_status(), {"axis=2"});
}

TEST(Gather, SymbolicDims) {
  OpTester t("Gather", 13);
  t.attr("axis", 1).input(iota_f({2, 5, 3})).input(I64_({0, 1, 2, 3}, {4}));
  t.symbolic_input_shape(0, Shape({Dim::symbolic("b"), Dim(5), Dim(3)}));
  t.symbolic_input_shape(1, Shape({Dim::symbolic("k")}));
  t.run();
  EXPECT_EQ(inferred(t), "[b,k,3]");
}

// ---- GatherElements / GatherND --------------------------------------------------------------

TEST(GatherElements, Axis1AndNegative) {
  auto out = OpTester("GatherElements", 13).attr("axis", 1).input(T_({1, 2, 3, 4}, {2, 2})).input(I64_({0, 0, 1, 0}, {2, 2})).run();
  expect_near(out[0], T_({1, 1, 4, 3}, {2, 2}));
  auto o2 = OpTester("GatherElements", 13).input(iota_f({3, 3})).input(I64_({1, 2, 0, 2, -3, -1}, {2, 3})).run();
  expect_near(o2[0], T_({3, 7, 2, 6, 1, 8}, {2, 3}));
  expect_error(OpTester("GatherElements", 13).input(iota_f({2, 2})).input(I64_({2}, {1, 1})).run_status(),
               {"GatherElements_under_test", "index 2"});
}

TEST(GatherND, BasicAndBatchDims) {
  auto a = OpTester("GatherND", 13).input(T_({0, 1, 2, 3}, {2, 2})).input(I64_({0, 0, 1, 1}, {2, 2})).run();
  expect_near(a[0], T_({0, 3}, {2}));
  auto b = OpTester("GatherND", 13).input(T_({0, 1, 2, 3}, {2, 2})).input(I64_({1, 0}, {2, 1})).run();
  expect_near(b[0], T_({2, 3, 0, 1}, {2, 2}));
  // batch_dims = 1: data [2,2,2], indices [2,1] -> [2,2]
  OpTester t("GatherND", 13);
  t.attr("batch_dims", 1).input(iota_f({2, 2, 2})).input(I64_({1, 0}, {2, 1}));
  auto c = t.run();
  expect_near(c[0], T_({2, 3, 4, 5}, {2, 2}));
  EXPECT_EQ(inferred(t), "[2,2]");
  expect_error(OpTester("GatherND", 13).input(iota_f({2, 2})).input(I64_({0, 2}, {1, 2})).run_status(), {"index 2"});
}

// ---- Scatter family -------------------------------------------------------------------------

TEST(ScatterElements, NoneAndReductions) {
  Tensor data = T_({1, 2, 3, 4, 5}, {1, 5});
  Tensor idx = I64_({1, 3, 1}, {1, 3});
  Tensor upd = T_({10, 20, 30}, {1, 3});
  auto none = OpTester("ScatterElements", 13).attr("axis", 1).input(data).input(idx).input(upd).run();
  expect_near(none[0], T_({1, 30, 3, 20, 5}, {1, 5}));
  auto add = OpTester("ScatterElements", 16).attr("axis", 1).attr("reduction", "add").input(data).input(idx).input(upd).run();
  expect_near(add[0], T_({1, 42, 3, 24, 5}, {1, 5}));
  auto mul = OpTester("ScatterElements", 16).attr("axis", 1).attr("reduction", "mul").input(data).input(idx).input(upd).run();
  expect_near(mul[0], T_({1, 600, 3, 80, 5}, {1, 5}));
  auto mx = OpTester("ScatterElements", 18).attr("axis", 1).attr("reduction", "max").input(data).input(idx).input(T_({0, 20, 1}, {1, 3})).run();
  expect_near(mx[0], T_({1, 2, 3, 20, 5}, {1, 5}));
  auto mn = OpTester("ScatterElements", 18).attr("axis", -1).attr("reduction", "min").input(data).input(I64_({-1}, {1, 1})).input(T_({-5}, {1, 1})).run();
  expect_near(mn[0], T_({1, 2, 3, 4, -5}, {1, 5}));
  expect_error(OpTester("ScatterElements", 16).attr("reduction", "max").input(data).input(idx).input(upd).run_status(),
               {"reduction='max'"});
  expect_error(OpTester("ScatterElements", 13).attr("axis", 1).input(data).input(I64_({5}, {1, 1})).input(T_({1}, {1, 1})).run_status(),
               {"ScatterElements_under_test", "index 5", "size 5"});
}

TEST(Scatter, DeprecatedAlias) {
  auto out = OpTester("Scatter", 10).input(iota_f({3, 2})).input(I64_({2, 0}, {1, 2})).input(T_({-1, -2}, {1, 2})).run();
  expect_near(out[0], T_({0, -2, 2, 3, -1, 5}, {3, 2}));
}

TEST(ScatterND, SlicesAndReduction) {
  Tensor data = T_({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  auto a = OpTester("ScatterND", 13).input(data).input(I64_({4, 3, 1, 7}, {4, 1})).input(T_({9, 10, 11, 12}, {4})).run();
  expect_near(a[0], T_({1, 11, 3, 10, 9, 6, 7, 12}, {8}));
  auto b = OpTester("ScatterND", 13).input(iota_f({2, 2})).input(I64_({1}, {1, 1})).input(T_({7, 8}, {1, 2})).run();
  expect_near(b[0], T_({0, 1, 7, 8}, {2, 2}));
  auto c = OpTester("ScatterND", 16).attr("reduction", "add").input(data).input(I64_({0, 0}, {2, 1})).input(T_({1, 1}, {2})).run();
  EXPECT_EQ(c[0].get_double(0), 3.0);
  expect_error(OpTester("ScatterND", 13).input(data).input(I64_({0}, {1, 1})).input(T_({1, 2}, {2})).run_status(),
               {"updates shape"});
}

// ---- Slice ----------------------------------------------------------------------------------

TEST(Slice, Opset1Attributes) {
  auto out = OpTester("Slice", 9).attr("starts", V{1, 0}).attr("ends", V{2, 3}).attr("axes", V{0, 1}).input(iota_f({3, 4})).run();
  expect_near(out[0], T_({4, 5, 6}, {1, 3}));
  auto d = OpTester("Slice", 9).attr("starts", V{1}).attr("ends", V{kMax}).input(iota_f({3, 2})).run();
  expect_near(d[0], T_({2, 3, 4, 5}, {2, 2}));
}

TEST(Slice, InputsStepsAndStaticShape) {
  OpTester t("Slice", 13);
  t.input(iota_f({3, 10})).const_input(I64_({1}, {1})).const_input(I64_({kMax}, {1})).const_input(I64_({-1}, {1})).const_input(I64_({3}, {1}));
  auto out = t.run();
  expect_near(out[0], T_({1, 4, 7, 11, 14, 17, 21, 24, 27}, {3, 3}));
  EXPECT_EQ(inferred(t), "[3,3]");
}

TEST(Slice, NegativeStepsAndClamping) {
  Tensor x = iota_f({5});
  auto rev = OpTester("Slice", 13).input(x).input(I64_({-1}, {1})).input(I64_({kMin}, {1})).no_input().input(I64_({-1}, {1})).run();
  expect_near(rev[0], T_({4, 3, 2, 1, 0}, {5}));
  auto r2 = OpTester("Slice", 13).input(x).input(I64_({10}, {1})).input(I64_({0}, {1})).no_input().input(I64_({-2}, {1})).run();
  expect_near(r2[0], T_({4, 2}, {2}));
  auto e = OpTester("Slice", 13).input(x).input(I64_({3}, {1})).input(I64_({1}, {1})).run();
  EXPECT_EQ(e[0].dims(), (V{0}));
  auto c = OpTester("Slice", 13).input(x).input(I64_({-100}, {1})).input(I64_({100}, {1})).run();
  expect_near(c[0], x);
  auto z = OpTester("Slice", 13).input(T_({}, {0, 2})).input(I64_({0}, {1})).input(I64_({1}, {1})).run();
  EXPECT_EQ(z[0].dims(), (V{0, 2}));
  auto zr = OpTester("Slice", 13).input(T_({}, {0})).input(I64_({-1}, {1})).input(I64_({kMin}, {1})).no_input().input(I64_({-1}, {1})).run();
  EXPECT_EQ(zr[0].dims(), (V{0}));
}

TEST(Slice, Errors) {
  expect_error(OpTester("Slice", 13).input(iota_f({5})).input(I64_({0}, {1})).input(I64_({3}, {1})).no_input().input(I64_({0}, {1})).run_status(),
               {"Slice_under_test", "steps"});
  expect_error(OpTester("Slice", 13).input(iota_f({5})).input(I64_({0, 0}, {2})).input(I64_({3}, {1})).run_status(),
               {"differ in length"});
  expect_error(OpTester("Slice", 13).input(iota_f({5, 2})).input(I64_({0, 0}, {2})).input(I64_({1, 1}, {2})).input(I64_({0, -2}, {2})).run_status(),
               {"repeated"});
}

TEST(Slice, SymbolicAndRuntimeShapes) {
  OpTester t("Slice", 13);
  t.input(iota_f({2, 6})).const_input(I64_({0, 1}, {2})).const_input(I64_({kMax, 3}, {2}));
  t.symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(6)}));
  t.run();
  EXPECT_EQ(inferred(t), "[n,2]");
  OpTester rt("Slice", 13);
  rt.input(iota_f({2, 6})).input(I64_({1}, {1})).input(I64_({3}, {1})).const_input(I64_({1}, {1}));
  EXPECT_EQ(rt.run()[0].dims(), (V{2, 2}));
  EXPECT_EQ(inferred(rt), "[2,?]");
}

// ---- TopK -----------------------------------------------------------------------------------

TEST(TopK, LargestSmallestTiesAndAxis) {
  OpTester t("TopK", 11);
  t.outputs(2).input(T_({1, 3, 3, 2, 5, 4, 4, 0}, {2, 4})).const_input(I64_({2}, {1}));
  auto out = t.run();
  expect_near(out[0], T_({3, 3, 5, 4}, {2, 2}));
  EXPECT_EQ(out[1].dtype(), DType::kI64);
  EXPECT_EQ(out[1].to_int64_vector(), (V{1, 2, 0, 1}));
  EXPECT_EQ(inferred(t, "out1"), "[2,2]");
  auto s = OpTester("TopK", 11).attr("largest", 0).outputs(2).input(T_({1, 3, 3, 2, 5, 4, 4, 0}, {2, 4})).input(I64_({3}, {1})).run();
  expect_near(s[0], T_({1, 2, 3, 0, 4, 4}, {2, 3}));
  EXPECT_EQ(s[1].to_int64_vector(), (V{0, 3, 1, 3, 1, 2}));
  auto ax = OpTester("TopK", 11).attr("axis", 0).outputs(2).input(T_({1, 5, 3, 2}, {2, 2})).input(I64_({1}, {1})).run();
  expect_near(ax[0], T_({3, 5}, {1, 2}));
  EXPECT_EQ(ax[1].to_int64_vector(), (V{1, 0}));
  auto v1 = OpTester("TopK", 9).attr("k", int64_t(1)).outputs(2).input(T_({1, 5, 3}, {3})).run();
  expect_near(v1[0], T_({5}, {1}));
  auto nan = OpTester("TopK", 11).outputs(2).input(T_({1, NAN, 3}, {3})).input(I64_({2}, {1})).run();
  EXPECT_TRUE(std::isnan(nan[0].get_double(0)));
  EXPECT_EQ(nan[0].get_double(1), 3.0);
  expect_error(OpTester("TopK", 11).outputs(2).input(T_({1, 2}, {2})).input(I64_({3}, {1})).run_status(),
               {"TopK_under_test", "K=3"});
}

// ---- NonZero / OneHot / Compress / ReverseSequence / Unique ----------------------------------

TEST(NonZero, Coordinates) {
  auto out = OpTester("NonZero", 13).input(T_({1, 0, 0, 2, 3, 0}, {2, 3})).run();
  EXPECT_EQ(out[0].dims(), (V{2, 3}));
  EXPECT_EQ(out[0].to_int64_vector(), (V{0, 1, 1, 0, 0, 1}));
  auto b = OpTester("NonZero", 13).input(Tensor::from_vector<bool>({false, false}, {2})).run();
  EXPECT_EQ(b[0].dims(), (V{1, 0}));
}

TEST(OneHot, AxisNegativeIndicesAndOutOfRange) {
  OpTester t("OneHot", 11);
  t.input(I64_({0, -1, 5, 2}, {4})).const_input(Tensor::scalar<float>(3)).input(T_({0, 1}, {2}));
  auto out = t.run();
  expect_near(out[0], T_({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}, {4, 3}));
  EXPECT_EQ(inferred(t), "[4,3]");
  auto a0 = OpTester("OneHot", 11).attr("axis", 0).input(I64_({1, 0}, {2})).input(I64_({2}, {1})).input(I64_({-1, 7}, {2})).run();
  EXPECT_EQ(a0[0].to_int64_vector(), (V{-1, 7, 7, -1}));
}

TEST(Compress, AxisAndFlattened) {
  Tensor cond = Tensor::from_vector<bool>({false, true, true}, {3});
  auto a = OpTester("Compress").attr("axis", 0).input(T_({1, 2, 3, 4, 5, 6}, {3, 2})).input(cond).run();
  expect_near(a[0], T_({3, 4, 5, 6}, {2, 2}));
  auto f = OpTester("Compress").input(T_({1, 2, 3, 4, 5, 6}, {3, 2})).input(cond).run();
  expect_near(f[0], T_({2, 3}, {2}));
  auto neg = OpTester("Compress").attr("axis", -1).input(T_({1, 2, 3, 4, 5, 6}, {3, 2})).input(Tensor::from_vector<bool>({false, true}, {2})).run();
  expect_near(neg[0], T_({2, 4, 6}, {3, 1}));
  expect_error(OpTester("Compress").attr("axis", 1).input(T_({1, 2}, {1, 2})).input(cond).run_status(), {"condition"});
}

TEST(ReverseSequence, BatchAndTimeAxes) {
  // time_axis=0, batch_axis=1: x[t][b]
  auto a = OpTester("ReverseSequence").input(iota_f({4, 2})).input(I64_({4, 2}, {2})).run();
  expect_near(a[0], T_({6, 3, 4, 1, 2, 5, 0, 7}, {4, 2}));
  auto b = OpTester("ReverseSequence").attr("batch_axis", 0).attr("time_axis", 1).input(iota_f({2, 3})).input(I64_({1, 3}, {2})).run();
  expect_near(b[0], T_({0, 1, 2, 5, 4, 3}, {2, 3}));
  expect_error(OpTester("ReverseSequence").input(iota_f({4, 2})).input(I64_({5, 1}, {2})).run_status(), {"sequence length 5"});
}

TEST(Unique, SortedUnsortedAndAxis) {
  auto s = OpTester("Unique").outputs(4).input(T_({2, 1, 1, 3, 4, 3}, {6})).run();
  expect_near(s[0], T_({1, 2, 3, 4}, {4}));
  EXPECT_EQ(s[1].to_int64_vector(), (V{1, 0, 3, 4}));
  EXPECT_EQ(s[2].to_int64_vector(), (V{1, 0, 0, 2, 3, 2}));
  EXPECT_EQ(s[3].to_int64_vector(), (V{2, 1, 2, 1}));
  auto u = OpTester("Unique").attr("sorted", 0).outputs(4).input(T_({2, 1, 1, 3, 4, 3}, {6})).run();
  expect_near(u[0], T_({2, 1, 3, 4}, {4}));
  EXPECT_EQ(u[2].to_int64_vector(), (V{0, 1, 1, 2, 3, 2}));
  auto ax = OpTester("Unique").attr("axis", 0).input(T_({1, 0, 1, 0, 0, 1}, {3, 2})).run();
  expect_near(ax[0], T_({0, 1, 1, 0}, {2, 2}));
}

}  // namespace
}  // namespace ferry::testing
