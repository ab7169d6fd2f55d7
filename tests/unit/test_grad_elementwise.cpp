// Gradients of the elementwise and activation ops (src/grad/elementwise_grads.cpp,
// activation_grads.cpp): finite-difference checks in f64 on cpu-ref (grad_check.h), and the
// backward ops' shape rules and values (src/ops/grad_activation.cpp) through OpTester.
#include <cmath>

#include "grad/registry.h"
#include "grad_check.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using Attrs = std::map<std::string, Attribute>;

// Moves elements within `margin` of any kink to kink +- margin (finite differences straddling a
// kink measure neither side's slope).
Tensor avoid(Tensor t, const std::vector<double>& kinks, double margin = 0.05) {
  double* p = t.mutable_data<double>();
  for (int64_t i = 0; i < t.numel(); ++i)
    for (double k : kinks)
      if (std::fabs(p[i] - k) < margin) p[i] = p[i] >= k ? k + margin : k - margin;
  return t;
}

// Checks dOp(x)/dx for a one-input op on values `x`.
void check_unary(const std::string& op, const Tensor& x, Attrs attrs = {}, int64_t opset = 17, GradCheckOptions opt = {}) {
  SCOPED_TRACE(op + " opset " + std::to_string(opset));
  GraphBuilder b(opset);
  std::string in = b.input("x", DType::kF64, x.dims());
  b.output(b.node(op, {in}, std::move(attrs)));
  expect_gradients_match(b.build(), {{"x", x}}, {"x"}, opt);
}

// Checks both inputs' gradients of a binary op (broadcasting when the dims differ).
void check_binary(const std::string& op, const Tensor& a, const Tensor& b_val, int64_t opset = 17) {
  SCOPED_TRACE(op + " " + dims_to_string(a.dims()) + " x " + dims_to_string(b_val.dims()));
  GraphBuilder b(opset);
  std::string ia = b.input("a", DType::kF64, a.dims());
  std::string ib = b.input("b", DType::kF64, b_val.dims());
  b.output(b.node(op, {ia, ib}));
  expect_gradients_match(b.build(), {{"a", a}, {"b", b_val}}, {"a", "b"});
}

// ---- arithmetic ------------------------------------------------------------------------------

TEST(GradElementwise, AddSubMulDivWithBroadcasting) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3, 4}, {3, 1}}, {{1, 4}, {3, 1}}, {{2, 3}, {}}, {{3}, {2, 1, 3}}};
  uint32_t seed = 1;
  for (const auto& [da, db] : shapes) {
    for (const char* op : {"Add", "Sub", "Mul"}) {
      check_binary(op, random_f64(da, seed), random_f64(db, seed + 1));
      seed += 2;
    }
    check_binary("Div", random_f64(da, seed), random_f64(db, seed + 1, 0.5, 1.5));
    seed += 2;
  }
}

TEST(GradElementwise, Pow) {
  check_binary("Pow", random_f64({2, 3}, 11, 0.5, 2.0), random_f64({2, 3}, 12, -1.5, 2.5));
  check_binary("Pow", random_f64({2, 3}, 13, 0.5, 2.0), random_f64({3}, 14, -1.5, 2.5));
  check_binary("Pow", random_f64({}, 15, 0.5, 2.0), random_f64({2, 2}, 16, -1.5, 2.5));
}

TEST(GradElementwise, PowWithIntegerExponent) {
  GraphBuilder b(17);
  std::string a = b.input("a", DType::kF64, {2, 3});
  std::string e = b.input("e", DType::kI64, {3});
  b.output(b.node("Pow", {a, e}));
  expect_gradients_match(b.build(), {{"a", random_f64({2, 3}, 17, 0.5, 2.0)}, {"e", I64_({2, 3, -1}, {3})}}, {"a"});
}

TEST(GradElementwise, UnaryMath) {
  check_unary("Sqrt", random_f64({2, 3}, 21, 0.3, 2.0));
  check_unary("Neg", random_f64({2, 3}, 22));
  check_unary("Exp", random_f64({2, 3}, 23));
  check_unary("Log", random_f64({2, 3}, 24, 0.3, 2.0));
  check_unary("Reciprocal", avoid(random_f64({2, 3}, 25, -2.0, 2.0), {0.0}, 0.3));
  check_unary("Identity", random_f64({4}, 26));
}

TEST(GradElementwise, AbsAwayFromZeroBothOpsets) {
  const Tensor x = avoid(random_f64({3, 4}, 31), {0.0}, 0.1);
  check_unary("Abs", x, {}, 17);
  check_unary("Abs", x, {}, 8);  // before Sign (opset 9)
}

TEST(GradElementwise, SumOfBroadcastInputs) {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF64, {2, 3});
  std::string y = b.input("y", DType::kF64, {3});
  std::string z = b.input("z", DType::kF64, {2, 1});
  b.output(b.node("Sum", {x, y, z, x}));  // x twice: its two gradients add up
  expect_gradients_match(b.build(), {{"x", random_f64({2, 3}, 41)}, {"y", random_f64({3}, 42)}, {"z", random_f64({2, 1}, 43)}},
                         {"x", "y", "z"});
}

TEST(GradElementwise, CastBackToInputType) {
  check_unary("Cast", random_f64({2, 3}, 51), {{"to", GraphBuilder::i(static_cast<int64_t>(DType::kF64))}});
  // Through f32 and back: the f32 rounding limits what finite differences can resolve.
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF64, {2, 3});
  std::string y = b.node("Cast", {x}, {{"to", GraphBuilder::i(static_cast<int64_t>(DType::kF32))}});
  b.output(b.node("Cast", {b.node("Sigmoid", {y})}, {{"to", GraphBuilder::i(static_cast<int64_t>(DType::kF64))}}));
  expect_gradients_match(b.build(), {{"x", random_f64({2, 3}, 52)}}, {"x"}, {.eps = 1e-2, .rtol = 1e-3, .atol = 1e-4});
}

TEST(GradElementwise, WhereBroadcastsBothBranches) {
  GraphBuilder b(17);
  std::string c = b.input("c", DType::kBool, {2, 3});
  std::string x = b.input("x", DType::kF64, {2, 3});
  std::string y = b.input("y", DType::kF64, {3});
  b.output(b.node("Where", {c, x, y}));
  Tensor cond = Tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  expect_gradients_match(b.build(), {{"c", cond}, {"x", random_f64({2, 3}, 61)}, {"y", random_f64({3}, 62)}}, {"x", "y"});
}

// ---- activations -----------------------------------------------------------------------------

TEST(GradElementwise, ReluLeakyReluAwayFromZero) {
  const Tensor x = avoid(random_f64({3, 4}, 71), {0.0});
  check_unary("Relu", x);
  check_unary("LeakyRelu", x);
  check_unary("LeakyRelu", x, {{"alpha", GraphBuilder::f(0.3f)}});
}

TEST(GradElementwise, ClipInputsAndAttributes) {
  const Tensor x = avoid(random_f64({4, 5}, 81, -2.0, 2.0), {-0.5, 0.75});
  GraphBuilder b(13);
  std::string in = b.input("x", DType::kF64, {4, 5});
  std::string lo = b.input("lo", DType::kF64, {});
  std::string hi = b.input("hi", DType::kF64, {});
  b.output(b.node("Clip", {in, lo, hi}));
  expect_gradients_match(b.build(), {{"x", x}, {"lo", Tensor::scalar<double>(-0.5)}, {"hi", Tensor::scalar<double>(0.75)}},
                         {"x"});
  // Only a min bound, max omitted.
  GraphBuilder b2(13);
  std::string in2 = b2.input("x", DType::kF64, {4, 5});
  b2.initializer("lo", Tensor::scalar<double>(-0.5));
  b2.output(b2.node("Clip", {in2, "lo"}));
  expect_gradients_match(b2.build(), {{"x", x}}, {"x"});
  // Only a max bound: min omitted ("").
  GraphBuilder b3(13);
  std::string in3 = b3.input("x", DType::kF64, {4, 5});
  b3.initializer("hi", Tensor::scalar<double>(0.75));
  b3.output(b3.node("Clip", {in3, "", "hi"}));
  expect_gradients_match(b3.build(), {{"x", x}}, {"x"});
  // Clip-6: attributes.
  check_unary("Clip", x, {{"min", GraphBuilder::f(-0.5f)}, {"max", GraphBuilder::f(0.75f)}}, 10);
  check_unary("Clip", x, {{"max", GraphBuilder::f(0.75f)}}, 10);
}

TEST(GradElementwise, SmoothActivations) {
  const Tensor x = random_f64({3, 4}, 91, -3.0, 3.0);
  check_unary("Sigmoid", x);
  check_unary("Tanh", x);
  check_unary("Erf", x);
}

TEST(GradElementwise, HardSwishHardSigmoidAwayFromKinks) {
  const Tensor x = avoid(random_f64({4, 6}, 101, -5.0, 5.0), {-3.0, 3.0, -2.5, 2.5, -1.0, 4.0});
  check_unary("HardSwish", x);
  check_unary("HardSigmoid", x);  // alpha 0.2, beta 0.5: kinks at +-2.5
  check_unary("HardSigmoid", x, {{"alpha", GraphBuilder::f(0.5f)}, {"beta", GraphBuilder::f(0.5f)}});  // kinks -1, 1
}

TEST(GradElementwise, SoftmaxAndLogSoftmaxBothForms) {
  const Tensor x = random_f64({2, 3, 4}, 111, -2.0, 2.0);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    // Opset 13: one axis.
    check_unary(op, x, {}, 13);
    check_unary(op, x, {{"axis", GraphBuilder::i(1)}}, 13);
    check_unary(op, x, {{"axis", GraphBuilder::i(-3)}}, 13);
    // Opset 11: coerced to 2-D at axis (default 1).
    check_unary(op, x, {}, 11);
    check_unary(op, x, {{"axis", GraphBuilder::i(0)}}, 11);
    check_unary(op, x, {{"axis", GraphBuilder::i(-1)}}, 11);
  }
}

TEST(GradElementwise, GeluOnnxBothApproximations) {
  const Tensor x = random_f64({3, 4}, 121, -3.0, 3.0);
  check_unary("Gelu", x, {}, 20);
  check_unary("Gelu", x, {{"approximate", GraphBuilder::s("tanh")}}, 20);
}

TEST(GradElementwise, GeluFerryDomain) {
  // com.ferry Gelu's reference kernel takes f16/bf16/f32 (it computes in f32), so the node runs in
  // f32 between Casts; the f32 rounding needs a wider difference step.
  for (const char* mode : {"none", "tanh"}) {
    SCOPED_TRACE(mode);
    GraphBuilder b(20);  // ai.onnx Gelu (opset 20) for shape inference, then the node moves to com.ferry
    std::string x = b.input("x", DType::kF64, {3, 4});
    std::string x32 = b.node("Cast", {x}, {{"to", GraphBuilder::i(static_cast<int64_t>(DType::kF32))}});
    std::string y = b.node("Gelu", {x32}, {{"approximate", GraphBuilder::s(mode)}});
    b.output(b.node("Cast", {y}, {{"to", GraphBuilder::i(static_cast<int64_t>(DType::kF64))}}));
    std::shared_ptr<Model> m = b.build();
    m->graph.nodes[1].domain = "com.ferry";
    m->opset_imports["com.ferry"] = 1;
    ASSERT_TRUE(infer_shapes(m.get()).is_ok());
    expect_gradients_match(m, {{"x", random_f64({3, 4}, 122, -3.0, 3.0)}}, {"x"}, {.eps = 3e-3, .rtol = 1e-3, .atol = 1e-4});
  }
}

TEST(GradElementwise, ChainOfActivationsReusesValues) {
  // y = Tanh(x) * Sigmoid(x) + Exp(x): x feeds three nodes; its gradients are summed.
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF64, {2, 5});
  std::string t = b.node("Mul", {b.node("Tanh", {x}), b.node("Sigmoid", {x})});
  b.output(b.node("Add", {t, b.node("Exp", {x})}));
  expect_gradients_match(b.build(), {{"x", random_f64({2, 5}, 131)}}, {"x"});
}

TEST(GradElementwise, DefinitionsNameRegisteredOps) {
  // Every op a definition of this family says it emits exists (com.ferry ops at version 1).
  const char* ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Neg", "Exp", "Log", "Sum", "Identity", "Cast", "Where",
                       "Reciprocal", "Abs", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "HardSwish",
                       "HardSigmoid", "Softmax", "LogSoftmax", "Gelu", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                       "Transpose", "Concat", "Split", "Slice", "Gather", "Expand", "Tile", "ReduceSum", "ReduceMean"};
  for (const char* op : ops) {
    const GradDef* def = grad_registry().find("", op, kMaxOpset);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_NE(std::string(def->formula), "") << op;
    for (const char* e : def->emits) {
      const std::string name = e;
      const bool ferry = name.rfind("com.ferry.", 0) == 0;
      const std::string domain = ferry ? "com.ferry" : "";
      const std::string op_name = ferry ? name.substr(10) : name;
      EXPECT_NE(op_registry().find(domain, op_name, ferry ? 1 : kMaxOpset), nullptr) << op << " emits " << name;
    }
  }
  EXPECT_NE(grad_registry().find("com.ferry", "Gelu", 1), nullptr);
}

// ---- backward ops ----------------------------------------------------------------------------

TEST(GradElementwiseOps, PointwiseValues) {
  const Tensor dy = T_({1, 2, 3, 4}, {2, 2});
  expect_near(OpTester("ReluGrad", 1, "com.ferry").input(dy).input(T_({0, 0.5f, -1, 2}, {2, 2})).run()[0],
              T_({0, 2, 0, 4}, {2, 2}));
  expect_near(OpTester("SigmoidGrad", 1, "com.ferry").input(dy).input(T_({0.5f, 0.25f, 1, 0}, {2, 2})).run()[0],
              T_({0.25f, 0.375f, 0, 0}, {2, 2}));
  expect_near(OpTester("TanhGrad", 1, "com.ferry").input(dy).input(T_({0, 0.5f, 1, -0.5f}, {2, 2})).run()[0],
              T_({1, 1.5f, 0, 3}, {2, 2}));
  expect_near(OpTester("LeakyReluGrad", 1, "com.ferry").attr("alpha", 0.1f).input(dy).input(T_({-1, 1, -2, 0}, {2, 2})).run()[0],
              T_({0.1f, 2, 0.3f, 0.4f}, {2, 2}));  // slope alpha at 0, as PyTorch
  expect_near(OpTester("HardSwishGrad", 1, "com.ferry").input(dy).input(T_({-4, 0, 1.5f, 4}, {2, 2})).run()[0],
              T_({0, 1, 3, 4}, {2, 2}));
  expect_near(OpTester("HardSigmoidGrad", 1, "com.ferry").input(dy).input(T_({-3, 0, 2, 3}, {2, 2})).run()[0],
              T_({0, 0.4f, 0.6f, 0}, {2, 2}));
  expect_near(OpTester("GeluGrad", 1, "com.ferry").input(T_({1, 1}, {2})).input(T_({0, 10}, {2})).run()[0],
              T_({0.5f, 1}, {2}));
}

TEST(GradElementwiseOps, ClipGradBoundsOptional) {
  const Tensor dy = T_({1, 2, 3, 4}, {4});
  const Tensor x = T_({-1, 0, 1, 2}, {4});
  expect_near(OpTester("ClipGrad", 1, "com.ferry").input(dy).input(x).input(T_({0}, {})).input(T_({1}, {})).run()[0],
              T_({0, 2, 3, 0}, {4}));
  expect_near(OpTester("ClipGrad", 1, "com.ferry").input(dy).input(x).no_input().input(T_({0.5f}, {})).run()[0],
              T_({1, 2, 0, 0}, {4}));
  expect_near(OpTester("ClipGrad", 1, "com.ferry").input(dy).input(x).run()[0], dy);
}

TEST(GradElementwiseOps, SoftmaxGradAlongAxis) {
  // Y = [0.5, 0.5] per row, dY = [1, 0]: sum(dY * Y) = 0.5, dX = Y * (dY - 0.5).
  auto out = OpTester("SoftmaxGrad", 1, "com.ferry").attr("axis", 0).input(T_({1, 1, 0, 0}, {2, 2}))
                 .input(T_({0.5f, 0.5f, 0.5f, 0.5f}, {2, 2})).run();
  expect_near(out[0], T_({0.25f, 0.25f, -0.25f, -0.25f}, {2, 2}));
  // LogSoftmax: dX = dY - exp(Y) * sum(dY).
  auto log = OpTester("LogSoftmaxGrad", 1, "com.ferry").input(T_({1, 0}, {1, 2}))
                 .input(T_({std::log(0.25f), std::log(0.75f)}, {1, 2})).run();
  expect_near(log[0], T_({0.75f, -0.75f}, {1, 2}));
}

TEST(GradElementwiseOps, HalfPrecisionAndErrors) {
  auto out = OpTester("ReluGrad", 1, "com.ferry").input(cast_tensor(T_({1, 2}, {2}), DType::kF16).value())
                 .input(cast_tensor(T_({-1, 1}, {2}), DType::kF16).value()).run();
  EXPECT_EQ(out[0].dtype(), DType::kF16);
  EXPECT_EQ(out[0].get_double(1), 2.0);
  auto mismatch = OpTester("TanhGrad", 1, "com.ferry").input(T_({1, 2}, {2})).input(T_({1, 2, 3}, {3})).run_status();
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_NE(mismatch.status().message().find("TanhGrad_under_test"), std::string::npos) << mismatch.status().message();
  auto axis = OpTester("SoftmaxGrad", 1, "com.ferry").attr("axis", 2).input(T_({1, 2}, {2})).input(T_({1, 2}, {2})).run_status();
  ASSERT_FALSE(axis.is_ok());
  EXPECT_NE(axis.status().message().find("axis"), std::string::npos) << axis.status().message();
}

}  // namespace
}  // namespace ferry::testing
