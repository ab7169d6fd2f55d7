// Tests for the tensor_shape family (part 1): Reshape, Flatten, Transpose, Squeeze, Unsqueeze,
// Concat, Split, Shape, Size, Expand, Tile, Identity, Constant, ConstantOfShape, SpaceToDepth,
// DepthToSpace, and constant folding of PyTorch-style shape subgraphs.
#include "op_tester.h"

namespace ferry::testing {
namespace {

using V = std::vector<int64_t>;

// ---- Reshape --------------------------------------------------------------------------------

TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  OpTester t("Reshape", 13);
  t.input(iota_f({2, 3, 4})).const_input(I64_({0, -1}, {2}));
  auto out = t.run();
  EXPECT_EQ(out[0].dims(), (V{2, 12}));
  EXPECT_EQ(out[0].get_double(13), 13.0);
  EXPECT_EQ(inferred(t), "[2,12]");
}

TEST(Reshape, AllowZeroMakesZeroLiteral) {
  auto out = OpTester("Reshape", 14).attr("allowzero", 1).input(T_({}, {0, 3})).const_input(I64_({3, 0}, {2})).run();
  EXPECT_EQ(out[0].dims(), (V{3, 0}));
  // Without allowzero, 0 copies the input dim.
  auto copy = OpTester("Reshape", 14).input(T_({}, {0, 3})).const_input(I64_({0, 3}, {2})).run();
  EXPECT_EQ(copy[0].dims(), (V{0, 3}));
}

TEST(Reshape, AllowZeroIgnoredBeforeOpset14) {
  auto out = OpTester("Reshape", 13).attr("allowzero", 1).input(iota_f({2, 3})).const_input(I64_({0, 3}, {2})).run();
  EXPECT_EQ(out[0].dims(), (V{2, 3}));
}

TEST(Reshape, RuntimeShapeGivesRankOnly) {
  OpTester t("Reshape", 13);
  t.input(iota_f({2, 3})).input(I64_({3, 2}, {2}));
  auto out = t.run();
  EXPECT_EQ(out[0].dims(), (V{3, 2}));
  EXPECT_EQ(inferred(t), "[?,?]");
}

TEST(Reshape, TwoMinusOnesIsAnError) {
  expect_error(OpTester("Reshape", 13).input(iota_f({2, 3})).const_input(I64_({-1, -1}, {2})).run_status(),
               {"Reshape_under_test", "more than one -1"});
  expect_error(OpTester("Reshape", 13).input(iota_f({2, 3})).input(I64_({-1, -1}, {2})).run_status(),
               {"Reshape_under_test", "more than one -1"});
}

TEST(Reshape, MismatchedCountNamesBothShapes) {
  expect_error(OpTester("Reshape", 13).input(iota_f({2, 3})).const_input(I64_({4, 2}, {2})).run_status(),
               {"Reshape_under_test", "[2,3]", "[4,2]"});
  expect_error(OpTester("Reshape", 13).input(iota_f({2, 3})).input(I64_({4, -1}, {2})).run_status(),
               {"Reshape_under_test", "[2,3]", "[4,-1]"});
  expect_error(OpTester("Reshape", 14).attr("allowzero", 1).input(iota_f({2, 3})).input(I64_({0, -1}, {2})).run_status(),
               {"allowzero"});
}

TEST(Reshape, SymbolicBatchIsKeptAndMinusOneSolved) {
  OpTester t("Reshape", 13);
  t.input(iota_f({2, 12, 4})).const_input(I64_({0, 0, 2, -1}, {4}));
  t.symbolic_input_shape(0, Shape({Dim::symbolic("batch"), Dim(12), Dim(4)}));
  auto out = t.run();
  EXPECT_EQ(out[0].dims(), (V{2, 12, 2, 2}));
  EXPECT_EQ(inferred(t), "[batch,12,2,2]");
  OpTester t2("Reshape", 13);
  t2.input(iota_f({2, 12, 4})).const_input(I64_({-1, 4}, {2}));
  t2.symbolic_input_shape(0, Shape({Dim::symbolic("batch"), Dim(12), Dim(4)}));
  t2.run();
  EXPECT_EQ(inferred(t2), "[?,4]");
  OpTester t3("Reshape", 13);
  t3.input(iota_f({2, 12, 4})).const_input(I64_({-1, 48}, {2}));
  t3.symbolic_input_shape(0, Shape({Dim::symbolic("batch"), Dim(12), Dim(4)}));
  t3.run();
  EXPECT_EQ(inferred(t3), "[batch,48]");
}

// ---- Flatten / Transpose --------------------------------------------------------------------

TEST(Flatten, AxisVariants) {
  EXPECT_EQ(OpTester("Flatten", 13).input(iota_f({2, 3, 4})).run()[0].dims(), (V{2, 12}));
  EXPECT_EQ(OpTester("Flatten", 13).attr("axis", 0).input(iota_f({2, 3, 4})).run()[0].dims(), (V{1, 24}));
  EXPECT_EQ(OpTester("Flatten", 13).attr("axis", 3).input(iota_f({2, 3, 4})).run()[0].dims(), (V{24, 1}));
  EXPECT_EQ(OpTester("Flatten", 13).attr("axis", -1).input(iota_f({2, 3, 4})).run()[0].dims(), (V{6, 4}));
  expect_error(OpTester("Flatten", 13).attr("axis", 4).input(iota_f({2, 3, 4})).run_status(), {"axis=4"});
  OpTester t("Flatten", 13);
  t.input(iota_f({2, 3, 4})).symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3), Dim(4)}));
  t.run();
  EXPECT_EQ(inferred(t), "[n,12]");
}

TEST(Transpose, DefaultReversesAndPermMoves) {
  auto out = OpTester("Transpose").input(iota_f({2, 3})).run();
  expect_near(out[0], T_({0, 3, 1, 4, 2, 5}, {3, 2}));
  OpTester t("Transpose");
  t.attr("perm", V{1, 2, 0}).input(iota_f({2, 3, 4}));
  auto o2 = t.run();
  EXPECT_EQ(o2[0].dims(), (V{3, 4, 2}));
  // out[i][j][k] = in[k][i][j]
  EXPECT_EQ(o2[0].get_double((1 * 4 + 2) * 2 + 1), 1 * 12 + 1 * 4 + 2);
  EXPECT_EQ(inferred(t), "[3,4,2]");
  expect_error(OpTester("Transpose").attr("perm", V{0, 0}).input(iota_f({2, 3})).run_status(), {"permutation"});
  expect_error(OpTester("Transpose").attr("perm", V{0}).input(iota_f({2, 3})).run_status(), {"rank 2"});
}

TEST(Transpose, StringsAndUnitAxes) {
  Tensor s = Tensor::from_vector<std::string>({"a", "b", "c", "d", "e", "f"}, {2, 3});
  auto out = OpTester("Transpose").input(s).run();
  EXPECT_EQ(out[0].strings(), (std::vector<std::string>{"a", "d", "b", "e", "c", "f"}));
  auto o2 = OpTester("Transpose").attr("perm", V{1, 0, 2}).input(iota_f({1, 3, 2})).run();
  expect_near(o2[0], iota_f({3, 1, 2}));
}

// ---- Squeeze / Unsqueeze --------------------------------------------------------------------

TEST(Squeeze, AxesAttributeBefore13InputFrom13) {
  auto a = OpTester("Squeeze", 11).attr("axes", V{-1}).input(iota_f({2, 1, 3, 1})).run();
  EXPECT_EQ(a[0].dims(), (V{2, 1, 3}));
  OpTester t("Squeeze", 13);
  t.input(iota_f({2, 1, 3, 1})).const_input(I64_({1, -1}, {2}));
  EXPECT_EQ(t.run()[0].dims(), (V{2, 3}));
  EXPECT_EQ(inferred(t), "[2,3]");
  auto all = OpTester("Squeeze", 13).input(iota_f({1, 2, 1})).run();
  EXPECT_EQ(all[0].dims(), (V{2}));
}

TEST(Squeeze, NonUnitAxisIsAnError) {
  expect_error(OpTester("Squeeze", 13).input(iota_f({2, 3})).const_input(I64_({0}, {1})).run_status(),
               {"Squeeze_under_test", "axis 0 of size 2"});
  expect_error(OpTester("Squeeze", 13).input(iota_f({2, 3})).input(I64_({0}, {1})).run_status(),
               {"Squeeze_under_test", "axis 0 of size 2"});
  expect_error(OpTester("Squeeze", 13).input(iota_f({1, 3})).input(I64_({2}, {1})).run_status(), {"out of range"});
}

TEST(Unsqueeze, NegativeAndMultipleAxes) {
  auto a = OpTester("Unsqueeze", 11).attr("axes", V{0, -1}).input(iota_f({2, 3})).run();
  EXPECT_EQ(a[0].dims(), (V{1, 2, 3, 1}));
  OpTester t("Unsqueeze", 13);
  t.input(iota_f({2, 3})).const_input(I64_({1, 3}, {2}));
  EXPECT_EQ(t.run()[0].dims(), (V{2, 1, 3, 1}));
  EXPECT_EQ(inferred(t), "[2,1,3,1]");
  auto s = OpTester("Unsqueeze", 13).input(Tensor::scalar<float>(5)).const_input(I64_({0}, {1})).run();
  EXPECT_EQ(s[0].dims(), (V{1}));
  OpTester rt("Unsqueeze", 13);
  rt.input(iota_f({2, 3})).input(I64_({0}, {1}));
  rt.run();
  EXPECT_EQ(inferred(rt), "[?,?,?]");
  expect_error(OpTester("Unsqueeze", 13).input(iota_f({2})).input(I64_({0, 0}, {2})).run_status(), {"repeated"});
}

// ---- Concat / Split -------------------------------------------------------------------------

TEST(Concat, AxisNegativeAndZeroSize) {
  auto out = OpTester("Concat").attr("axis", -1).input(T_({1, 2}, {2, 1})).input(T_({}, {2, 0})).input(T_({3, 4, 5, 6}, {2, 2})).run();
  expect_near(out[0], T_({1, 3, 4, 2, 5, 6}, {2, 3}));
  auto o0 = OpTester("Concat").attr("axis", 0).input(I64_({1}, {1})).input(I64_({}, {0})).input(I64_({2, 3}, {2})).run();
  EXPECT_EQ(o0[0].to_int64_vector(), (V{1, 2, 3}));
}

TEST(Concat, MismatchNamesTheInput) {
  expect_error(OpTester("Concat").attr("axis", 0).input(T_({1, 2}, {1, 2})).input(T_({1, 2, 3}, {1, 3})).run_status(),
               {"Concat_under_test", "input 1", "[1,3]"});
  expect_error(OpTester("Concat").attr("axis", 0).input(T_({1}, {1})).input(I64_({1}, {1})).run_status(), {"element type"});
}

TEST(Concat, SymbolicDims) {
  OpTester t("Concat");
  t.attr("axis", 1).input(iota_f({2, 3})).input(iota_f({2, 1}));
  t.symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3)}));
  t.symbolic_input_shape(1, Shape({Dim::symbolic("n"), Dim(1)}));
  t.run();
  EXPECT_EQ(inferred(t), "[n,4]");
  // A known dim elsewhere pins the symbol's value.
  OpTester k("Concat");
  k.attr("axis", 1).input(iota_f({2, 3})).input(iota_f({2, 1}));
  k.symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3)}));
  k.run();
  EXPECT_EQ(inferred(k), "[2,4]");
  // Unknown size along the axis.
  OpTester u("Concat");
  u.attr("axis", 0).input(iota_f({2, 3})).input(iota_f({1, 3}));
  u.symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3)}));
  u.run();
  EXPECT_EQ(inferred(u), "[?,3]");
}

TEST(Split, AttributeInputAndEqual) {
  auto a = OpTester("Split", 11).attr("axis", 1).attr("split", V{1, 2}).outputs(2).input(iota_f({2, 3})).run();
  expect_near(a[0], T_({0, 3}, {2, 1}));
  expect_near(a[1], T_({1, 2, 4, 5}, {2, 2}));
  OpTester t("Split", 13);
  t.attr("axis", -1).outputs(2).input(iota_f({2, 3})).const_input(I64_({2, 1}, {2}));
  auto b = t.run();
  expect_near(b[1], T_({2, 5}, {2, 1}));
  EXPECT_EQ(inferred(t, "out0"), "[2,2]");
  auto e = OpTester("Split", 13).outputs(3).input(iota_f({6})).run();
  expect_near(e[2], T_({4, 5}, {2}));
  expect_error(OpTester("Split", 13).outputs(4).input(iota_f({6})).run_status(), {"evenly"});
  expect_error(OpTester("Split", 13).outputs(2).input(iota_f({6})).input(I64_({2, 3}, {2})).run_status(), {"sums to 5"});
}

TEST(Split, NumOutputsUnevenLastChunk) {
  OpTester t("Split", 18);
  t.attr("num_outputs", 3).outputs(3).input(iota_f({7}));
  auto o = t.run();
  EXPECT_EQ(o[0].dims(), (V{3}));
  EXPECT_EQ(o[1].dims(), (V{3}));
  expect_near(o[2], T_({6}, {1}));
  EXPECT_EQ(inferred(t, "out2"), "[1]");
  expect_error(OpTester("Split", 18).attr("num_outputs", 2).outputs(3).input(iota_f({7})).run_status(), {"num_outputs=2"});
}

TEST(Split, ZeroSizeChunks) {
  auto o = OpTester("Split", 13).outputs(3).input(iota_f({3, 2})).const_input(I64_({0, 3, 0}, {3})).run();
  EXPECT_EQ(o[0].dims(), (V{0, 2}));
  expect_near(o[1], iota_f({3, 2}));
  EXPECT_EQ(o[2].dims(), (V{0, 2}));
}

// ---- Shape / Size ---------------------------------------------------------------------------

TEST(Shape, ValuesAndStartEnd) {
  auto a = OpTester("Shape", 13).input(iota_f({2, 3, 4})).run();
  EXPECT_EQ(a[0].to_int64_vector(), (V{2, 3, 4}));
  EXPECT_EQ(a[0].dtype(), DType::kI64);
  auto b = OpTester("Shape", 15).attr("start", 1).input(iota_f({2, 3, 4})).run();
  EXPECT_EQ(b[0].to_int64_vector(), (V{3, 4}));
  auto c = OpTester("Shape", 15).attr("start", -2).attr("end", -1).input(iota_f({2, 3, 4})).run();
  EXPECT_EQ(c[0].to_int64_vector(), (V{3}));
  auto d = OpTester("Shape", 15).attr("start", 10).attr("end", -10).input(iota_f({2, 3, 4})).run();
  EXPECT_EQ(d[0].dims(), (V{0}));
  auto e = OpTester("Shape", 13).input(Tensor::scalar<float>(1)).run();
  EXPECT_EQ(e[0].dims(), (V{0}));
}

TEST(Size, CountsElements) {
  auto a = OpTester("Size").input(iota_f({2, 3, 4})).run();
  EXPECT_EQ(a[0].rank(), 0);
  EXPECT_EQ(a[0].get_int64(0), 24);
  EXPECT_EQ(OpTester("Size").input(T_({}, {3, 0})).run()[0].get_int64(0), 0);
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch exports x.view(x.size(0), -1).
TEST(ShapeFolding, PyTorchViewChainBecomesStatic) {
  auto model = std::make_shared<Model>();
  model->opset_imports[""] = 13;
  Graph& g = model->graph;
  g.inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape::of({2, 3, 4})}});
  g.value_types["x"] = g.inputs[0].type;
  auto init = [&](const std::string& name, Tensor t) {
    g.value_types[name] = t.type();
    g.initializers[name] = std::move(t);
  };
  init("zero", Tensor::scalar<int64_t>(0));
  init("axes0", I64_({0}, {1}));
  init("minus1", I64_({-1}, {1}));
  auto node = [&](const std::string& op, std::vector<std::string> in, std::string out) -> Node& {
    Node n;
    n.name = op + "_" + out;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    g.nodes.push_back(n);
    return g.nodes.back();
  };
  node("Shape", {"x"}, "s");
  node("Gather", {"s", "zero"}, "d0");
  node("Unsqueeze", {"d0", "axes0"}, "u");
  Node& cat = node("Concat", {"u", "minus1"}, "shape");
  Attribute axis;
  axis.type = AttrType::kInt;
  axis.i = 0;
  cat.attrs["axis"] = axis;
  node("Reshape", {"x", "shape"}, "y");
  g.outputs.push_back(ValueInfo{"y", {}});
  std::unordered_map<std::string, Tensor> constants;
  ASSERT_TRUE(infer_shapes(model.get(), &constants).is_ok());
  EXPECT_EQ(g.value_types["y"].to_string(), "f32[2,12]");
  ASSERT_TRUE(constants.count("shape"));
  EXPECT_EQ(constants["shape"].to_int64_vector(), (V{2, -1}));
  auto ex = Executor::create(model, ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors outs;
  ASSERT_TRUE(ex.value()->run({{"x", iota_f({2, 3, 4})}}, &outs).is_ok());
  EXPECT_EQ(outs[0].second.dims(), (V{2, 12}));
}

TEST(ShapeFolding, SymbolicInputGivesOnlyTheRank) {
  OpTester t("Shape", 13);
  t.input(iota_f({2, 3})).symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(3)}));
  t.run();
  EXPECT_EQ(inferred(t), "[2]");
}

// ---- Expand / Tile --------------------------------------------------------------------------

TEST(Expand, BidirectionalBroadcast) {
  OpTester t("Expand");
  t.input(T_({1, 2, 3}, {3, 1})).const_input(I64_({2, 1, 4}, {3}));
  auto out = t.run();
  EXPECT_EQ(out[0].dims(), (V{2, 3, 4}));
  EXPECT_EQ(out[0].get_double(4), 2.0);
  EXPECT_EQ(inferred(t), "[2,3,4]");
  // A target dim of 1 keeps the input's larger dim.
  auto o2 = OpTester("Expand").input(T_({1, 2, 3}, {3})).const_input(I64_({2, 1}, {2})).run();
  EXPECT_EQ(o2[0].dims(), (V{2, 3}));
  expect_error(OpTester("Expand").input(T_({1, 2, 3}, {3})).input(I64_({2}, {1})).run_status(),
               {"Expand_under_test", "[3]", "[2]"});
  OpTester rt("Expand");
  rt.input(T_({1, 2, 3}, {3})).input(I64_({2, 1}, {2}));
  rt.run();
  EXPECT_EQ(inferred(rt), "[?,3]");
}

TEST(Tile, RepeatsEachAxis) {
  OpTester t("Tile");
  t.input(T_({1, 2, 3, 4}, {2, 2})).const_input(I64_({1, 2}, {2}));
  auto out = t.run();
  expect_near(out[0], T_({1, 2, 1, 2, 3, 4, 3, 4}, {2, 4}));
  EXPECT_EQ(inferred(t), "[2,4]");
  auto o2 = OpTester("Tile").input(T_({1, 2}, {2})).input(I64_({3}, {1})).run();
  expect_near(o2[0], T_({1, 2, 1, 2, 1, 2}, {6}));
  auto z = OpTester("Tile").input(T_({1, 2}, {2})).input(I64_({0}, {1})).run();
  EXPECT_EQ(z[0].dims(), (V{0}));
  expect_error(OpTester("Tile").input(T_({1, 2}, {2})).input(I64_({1, 1}, {2})).run_status(), {"repeats"});
}

// ---- Identity / Constant / ConstantOfShape --------------------------------------------------

TEST(Identity, PassesThrough) {
  auto out = OpTester("Identity").input(I64_({1, 2}, {2})).run();
  EXPECT_EQ(out[0].to_int64_vector(), (V{1, 2}));
}

TEST(Constant, EveryValueAttribute) {
  auto a = OpTester("Constant").attr("value", T_({1, 2}, {2})).run();
  expect_near(a[0], T_({1, 2}, {2}));
  auto b = OpTester("Constant", 12).attr("value_float", 2.5f).run();
  EXPECT_EQ(b[0].rank(), 0);
  EXPECT_EQ(b[0].get_double(0), 2.5);
  auto c = OpTester("Constant", 12).attr("value_floats", std::vector<float>{1, 2}).run();
  expect_near(c[0], T_({1, 2}, {2}));
  auto d = OpTester("Constant", 12).attr("value_int", int64_t(7)).run();
  EXPECT_EQ(d[0].dtype(), DType::kI64);
  EXPECT_EQ(d[0].get_int64(0), 7);
  auto e = OpTester("Constant", 12).attr("value_ints", V{3, 4}).run();
  EXPECT_EQ(e[0].to_int64_vector(), (V{3, 4}));
  auto f = OpTester("Constant", 12).attr("value_string", "hi").run();
  EXPECT_EQ(f[0].strings()[0], "hi");
  auto g = OpTester("Constant", 12).attr("value_strings", std::vector<std::string>{"a", "b"}).run();
  EXPECT_EQ(g[0].dims(), (V{2}));
  expect_error(OpTester("Constant", 12).run_status(), {"exactly one"});
  expect_error(OpTester("Constant", 12).attr("value_int", int64_t(1)).attr("value_float", 1.0f).run_status(), {"exactly one"});
}

TEST(ConstantOfShape, DefaultAndValue) {
  OpTester t("ConstantOfShape");
  t.const_input(I64_({2, 3}, {2}));
  auto a = t.run();
  expect_near(a[0], T_({0, 0, 0, 0, 0, 0}, {2, 3}));
  EXPECT_EQ(inferred(t), "[2,3]");
  auto b = OpTester("ConstantOfShape").attr("value", I64_({7}, {1})).input(I64_({2}, {1})).run();
  EXPECT_EQ(b[0].to_int64_vector(), (V{7, 7}));
  auto s = OpTester("ConstantOfShape").input(I64_({}, {0})).run();
  EXPECT_EQ(s[0].rank(), 0);
  auto z = OpTester("ConstantOfShape").input(I64_({0, 4}, {2})).run();
  EXPECT_EQ(z[0].dims(), (V{0, 4}));
  expect_error(OpTester("ConstantOfShape").input(I64_({-1}, {1})).run_status(), {"negative"});
}

// ---- SpaceToDepth / DepthToSpace ------------------------------------------------------------

TEST(SpaceToDepth, MatchesReference) {
  // x: [1,1,2,4] -> [1,4,1,2]
  OpTester t("SpaceToDepth");
  t.attr("blocksize", 2).input(iota_f({1, 1, 2, 4}));
  auto out = t.run();
  expect_near(out[0], T_({0, 2, 1, 3, 4, 6, 5, 7}, {1, 4, 1, 2}));
  EXPECT_EQ(inferred(t), "[1,4,1,2]");
}

TEST(DepthToSpace, DcrAndCrd) {
  // numpy reference for x = arange(8).reshape(1,8,1,1), blocksize 2:
  // DCR -> [1,2,2,2] = [[0,2],[4,6]], [[1,3],[5,7]];  CRD -> [[0,1],[2,3]], [[4,5],[6,7]]
  auto dcr = OpTester("DepthToSpace").attr("blocksize", 2).input(iota_f({1, 8, 1, 1})).run();
  expect_near(dcr[0], T_({0, 2, 4, 6, 1, 3, 5, 7}, {1, 2, 2, 2}));
  auto crd = OpTester("DepthToSpace").attr("blocksize", 2).attr("mode", "CRD").input(iota_f({1, 8, 1, 1})).run();
  expect_near(crd[0], T_({0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 2, 2}));
  // Round trip with SpaceToDepth (DCR is its inverse).
  Tensor x = iota_f({1, 2, 4, 6});
  auto s2d = OpTester("SpaceToDepth").attr("blocksize", 2).input(x).run();
  auto back = OpTester("DepthToSpace").attr("blocksize", 2).input(s2d[0]).run();
  expect_near(back[0], x);
  expect_error(OpTester("DepthToSpace").attr("blocksize", 2).input(iota_f({1, 6, 1, 1})).run_status(), {"divisible"});
}

}  // namespace
}  // namespace ferry::testing
