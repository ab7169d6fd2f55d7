// Gradients of the shape, indexing and reduction ops (src/grad/shape_grads.cpp): finite-difference
// checks in f64 on cpu-ref (grad_check.h) across the opset forms, and the backward ops' shape rules
// and values (src/ops/grad_shape.cpp) through OpTester.
#include "grad_check.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using Attrs = std::map<std::string, Attribute>;

Attribute I(int64_t v) { return GraphBuilder::i(v); }
Attribute Is(std::vector<int64_t> v) { return GraphBuilder::ints(std::move(v)); }

// Checks d op(x, constants...)/dx; `consts` become initializers (shape rules read them).
void check_op(const std::string& op, const Tensor& x, std::vector<Tensor> consts = {}, Attrs attrs = {},
              int64_t opset = 17, int num_outputs = 1) {
  SCOPED_TRACE(op + " opset " + std::to_string(opset) + " x " + dims_to_string(x.dims()));
  GraphBuilder b(opset);
  std::vector<std::string> in = {b.input("x", DType::kF64, x.dims())};
  for (size_t i = 0; i < consts.size(); ++i) {
    if (!consts[i].defined()) {
      in.push_back("");
      continue;
    }
    in.push_back(b.initializer("c" + std::to_string(i), consts[i]));
  }
  std::string y0 = b.node(op, in, std::move(attrs), num_outputs);
  const std::string stem = y0.substr(0, y0.size() - 1);  // "Split_0:"
  for (int k = 0; k < num_outputs; ++k) b.output(stem + std::to_string(k));
  expect_gradients_match(b.build(), {{"x", x}}, {"x"});
}

Tensor ints(std::vector<int64_t> v) { return I64_(v, {static_cast<int64_t>(v.size())}); }

// ---- reshapes and permutations ---------------------------------------------------------------

TEST(GradShape, ReshapeFlattenSqueezeUnsqueeze) {
  const Tensor x = random_f64({2, 1, 3, 2}, 1);
  check_op("Reshape", x, {ints({3, -1})});
  check_op("Reshape", x, {ints({0, 3, -1})}, {}, 13);  // 0 copies the dim
  check_op("Flatten", x, {}, {{"axis", I(2)}});
  check_op("Flatten", x, {}, {{"axis", I(-1)}}, 11);
  check_op("Squeeze", x, {}, {{"axes", Is({1})}}, 11);
  check_op("Squeeze", x, {ints({-3})}, {}, 13);
  check_op("Squeeze", x, {}, {}, 13);  // every 1
  check_op("Unsqueeze", x, {}, {{"axes", Is({0, -1})}}, 11);
  check_op("Unsqueeze", x, {ints({-2, 1})}, {}, 13);
}

TEST(GradShape, TransposeInversePermutation) {
  const Tensor x = random_f64({2, 3, 4}, 2);
  check_op("Transpose", x, {}, {{"perm", Is({2, 0, 1})}});
  check_op("Transpose", x, {}, {{"perm", Is({1, 2, 0})}});
  check_op("Transpose", x, {});  // reversed
}

// ---- concat and split ------------------------------------------------------------------------

TEST(GradShape, ConcatBothSplitForms) {
  for (int64_t opset : {11, 13, 18}) {
    for (int64_t axis : {1, -1, 0}) {
      SCOPED_TRACE("opset " + std::to_string(opset) + " axis " + std::to_string(axis));
      GraphBuilder b(opset);
      const int64_t a = axis < 0 ? axis + 2 : axis;
      std::vector<int64_t> d0 = {2, 3}, d1 = {2, 3}, d2 = {2, 3};
      d0[a] = 1, d1[a] = 2, d2[a] = 4;
      std::string x = b.input("x", DType::kF64, d0);
      std::string y = b.input("y", DType::kF64, d1);
      std::string z = b.input("z", DType::kF64, d2);
      b.output(b.node("Concat", {x, y, z}, {{"axis", I(axis)}}));
      expect_gradients_match(b.build(), {{"x", random_f64(d0, 3)}, {"y", random_f64(d1, 4)}, {"z", random_f64(d2, 5)}},
                             {"x", "z"});  // y not trained: its part of the Split goes unused
    }
  }
}

TEST(GradShape, SplitAttributeInputAndNumOutputs) {
  const Tensor x = random_f64({2, 5}, 6);
  check_op("Split", x, {}, {{"axis", I(1)}, {"split", Is({2, 3})}}, 11, 2);
  check_op("Split", x, {}, {{"axis", I(0)}}, 11, 2);  // equal parts
  check_op("Split", x, {ints({1, 1, 3})}, {{"axis", I(-1)}}, 13, 3);
  check_op("Split", x, {}, {{"axis", I(1)}, {"num_outputs", I(3)}}, 18, 3);  // 2, 2, 1
  check_op("Split", x, {ints({4, 1})}, {{"axis", I(1)}}, 18, 2);
}

TEST(GradShape, SplitOutputWithoutGradientGetsZeros) {
  for (int64_t opset : {11, 13}) {
    SCOPED_TRACE(opset);
    GraphBuilder b(opset);
    std::string x = b.input("x", DType::kF64, {6, 2});
    std::string y0 = b.node("Split", {x}, {{"axis", I(0)}}, 3);
    b.output(b.node("Tanh", {y0}));
    b.output("Split_0:2");  // Split_0:1 leads nowhere
    expect_gradients_match(b.build(), {{"x", random_f64({6, 2}, 7)}}, {"x"});
  }
}

// ---- slice and gather ------------------------------------------------------------------------

TEST(GradShape, SliceInputsNegativeStepsAndAxes) {
  const Tensor x = random_f64({4, 5, 3}, 8);
  check_op("Slice", x, {ints({1, 0}), ints({3, 5}), ints({0, 1}), ints({1, 2})}, {}, 13);
  check_op("Slice", x, {ints({-1, 4}), ints({-100, 0}), ints({-1, 1}), ints({-1, -2})}, {}, 13);
  check_op("Slice", x, {ints({1}), ints({1000})}, {}, 13);  // axes, steps omitted
  check_op("Slice", x, {ints({0}), ints({2}), Tensor(), ints({1})}, {}, 13);  // axes omitted, steps given
  check_op("Slice", x, {ints({2, 1}), ints({2, 3}), ints({1, 2})}, {}, 13);  // an empty slice
}

TEST(GradShape, SliceAttributesBeforeOpset10) {
  const Tensor x = random_f64({4, 5}, 9);
  check_op("Slice", x, {}, {{"starts", Is({1, -3})}, {"ends", Is({3, 1000})}, {"axes", Is({0, 1})}}, 9);
  check_op("Slice", x, {}, {{"starts", Is({1})}, {"ends", Is({-1})}}, 9);
}

TEST(GradShape, GatherRepeatedAndNegativeIndices) {
  const Tensor x = random_f64({4, 3, 2}, 10);
  check_op("Gather", x, {I64_({0, -1, 3, 0}, {2, 2})});                     // axis 0, index 3 twice
  check_op("Gather", x, {I64_({2, -3, 2}, {3})}, {{"axis", I(1)}});         // repeated
  check_op("Gather", x, {Tensor::from_vector<int32_t>({1}, {})}, {{"axis", I(-1)}});  // scalar index
}

// ---- broadcasts and reductions ---------------------------------------------------------------

TEST(GradShape, ExpandAndTile) {
  check_op("Expand", random_f64({3, 1}, 11), {ints({2, 3, 4})});
  check_op("Expand", random_f64({1, 4}, 12), {ints({3, 1})});
  check_op("Tile", random_f64({2, 3}, 13), {ints({2, 1})});
  check_op("Tile", random_f64({2, 1, 3}, 14), {ints({1, 3, 2})});
}

TEST(GradShape, ReduceSumAttributeAndInputForms) {
  const Tensor x = random_f64({2, 3, 4}, 15);
  for (int64_t keep : {0, 1}) {
    SCOPED_TRACE(keep);
    check_op("ReduceSum", x, {}, {{"axes", Is({1})}, {"keepdims", I(keep)}}, 11);
    check_op("ReduceSum", x, {}, {{"axes", Is({-1, 0})}, {"keepdims", I(keep)}}, 11);
    check_op("ReduceSum", x, {}, {{"keepdims", I(keep)}}, 11);  // every axis
    check_op("ReduceSum", x, {ints({-2})}, {{"keepdims", I(keep)}}, 13);
    check_op("ReduceSum", x, {ints({0, 2})}, {{"keepdims", I(keep)}}, 13);
    check_op("ReduceSum", x, {}, {{"keepdims", I(keep)}}, 13);  // no axes: every axis
  }
  check_op("ReduceSum", x, {ints({})}, {{"noop_with_empty_axes", I(1)}}, 13);  // passes through
}

TEST(GradShape, ReduceMeanAttributeAndInputForms) {
  const Tensor x = random_f64({2, 3, 4}, 16);
  for (int64_t keep : {0, 1}) {
    SCOPED_TRACE(keep);
    check_op("ReduceMean", x, {}, {{"axes", Is({1, -1})}, {"keepdims", I(keep)}}, 13);  // attribute until 17
    check_op("ReduceMean", x, {}, {{"keepdims", I(keep)}}, 17);
    check_op("ReduceMean", x, {ints({-3})}, {{"keepdims", I(keep)}}, 18);
  }
  check_op("ReduceMean", x, {}, {{"axes", Is({0})}}, 7);  // before Expand: Tile
  check_op("ReduceMean", x, {ints({})}, {{"noop_with_empty_axes", I(1)}}, 18);
}

TEST(GradShape, ReduceAxesUnknownAtBuildTimeIsAnError) {
  GraphBuilder b(13);
  std::string x = b.input("x", DType::kF64, {2, 3});
  std::string axes = b.input("axes", DType::kI64, {1});
  std::string y = b.node("ReduceSum", {x, axes}, {{"keepdims", I(1)}});
  b.output(y);
  std::shared_ptr<Model> m = b.build();
  Node& n = m->graph.nodes[0];
  m->graph.value_types[y] = TensorType{DType::kF64, Shape(std::vector<Dim>{Dim(1), Dim(1)})};
  m->graph.outputs = {{y, {}}};
  auto grads = build_gradients(m.get(), y, {"x"});
  ASSERT_FALSE(grads.is_ok());
  EXPECT_NE(grads.status().message().find(n.name), std::string::npos) << grads.status().message();
  EXPECT_NE(grads.status().message().find("axes"), std::string::npos) << grads.status().message();
}

TEST(GradShape, MixedGraph) {
  // Softmax(Transpose(Reshape(Gather(x)))) summed over an axis, then concatenated with a slice.
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF64, {5, 6});
  b.initializer("idx", I64_({4, 0, 4}, {3}));
  b.initializer("shape", ints({3, 2, 3}));
  b.initializer("axes", ints({1}));
  std::string g = b.node("Gather", {x, "idx"});
  std::string t = b.node("Transpose", {b.node("Reshape", {g, "shape"})}, {{"perm", Is({1, 0, 2})}});
  std::string s = b.node("ReduceSum", {b.node("Softmax", {t}), "axes"}, {{"keepdims", I(0)}});
  b.initializer("st", ints({1}));
  b.initializer("en", ints({4}));
  std::string sl = b.node("Slice", {x, "st", "en", "axes"});
  b.initializer("shape2", ints({-1, 3}));
  b.output(b.node("Concat", {b.node("Mul", {s, s}), b.node("Reshape", {sl, "shape2"})}, {{"axis", I(0)}}));
  expect_gradients_match(b.build(), {{"x", random_f64({5, 6}, 17)}}, {"x"});
}

// ---- backward ops ----------------------------------------------------------------------------

TEST(GradShapeOps, SliceGradScattersIntoZeros) {
  // Rows 1..2, columns 2, 1, 0 (step -1 from 2 to the front).
  auto out = OpTester("SliceGrad", 1, "com.ferry").input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).const_input(ints({4, 3}))
                 .input(ints({1, 2})).input(ints({3, -10})).input(ints({0, 1})).input(ints({1, -1})).run();
  expect_near(out[0], T_({0, 0, 0, 3, 2, 1, 6, 5, 4, 0, 0, 0}, {4, 3}));
  // Shape unknown until run time: only the rank is inferred.
  auto sym = OpTester("SliceGrad", 1, "com.ferry").input(T_({7}, {1})).input(ints({3})).input(ints({-1})).input(ints({3})).run();
  expect_near(sym[0], T_({0, 0, 7}, {3}));
}

TEST(GradShapeOps, SliceGradRejectsMismatchedGradient) {
  auto r = OpTester("SliceGrad", 1, "com.ferry").input(T_({1, 2}, {2})).const_input(ints({4})).input(ints({0}))
               .input(ints({3})).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("SliceGrad_under_test"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("[3]"), std::string::npos) << r.status().message();
}

TEST(GradShapeOps, GatherGradAddsRepeatedIndices) {
  // shape [2, 4], axis 1, indices [3, -1, 0]: columns 3 and -1 are one column.
  auto out = OpTester("GatherGrad", 1, "com.ferry").attr("axis", 1).input(T_({1, 2, 3, 4, 5, 6}, {2, 3}))
                 .input(I64_({3, -1, 0}, {3})).const_input(ints({2, 4})).run();
  expect_near(out[0], T_({3, 0, 0, 3, 6, 0, 0, 9}, {2, 4}));
  auto bad = OpTester("GatherGrad", 1, "com.ferry").input(T_({1}, {1})).input(I64_({4}, {1})).const_input(ints({4})).run_status();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("out of range"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace ferry::testing
