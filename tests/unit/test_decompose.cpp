// Decompositions compute what the op computes: each decomposed graph is run on cpu-ref and
// compared with the op's reference kernel; the decompose pass uses them for a device that lacks
// the op (instead of falling back to the CPU).
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "op_tester.h"
#include "ops/shape_inference.h"
#include "partial_backend.h"
#include "passes/decompositions.h"
#include "runtime/executor.h"

namespace ferry::testing {
namespace {

Tensor wide_range(std::vector<int64_t> dims, DType dtype = DType::kF32) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i)  // -12 .. 12, with large values (softplus overflow) at the ends
    t.mutable_data<float>()[i] = -12.0f + 24.0f * static_cast<float>(i) / static_cast<float>(t.numel() - 1);
  if (t.numel() > 2) {
    t.mutable_data<float>()[0] = -100.0f;
    t.mutable_data<float>()[t.numel() - 1] = 100.0f;
  }
  if (dtype == DType::kF32) return t;
  Tensor h = Tensor::allocate(dtype, dims);
  for (int64_t i = 0; i < t.numel(); ++i) h.mutable_data<uint16_t>()[i] = f32_to_f16(t.data<float>()[i]);
  return h;
}

StatusOr<Tensor> run_model(std::shared_ptr<Model> m, const NamedTensors& feeds) {
  ASSIGN_OR_RETURN(auto ex, Executor::create(m, ExecutorOptions{.device = "cpu-ref"}));
  NamedTensors out;
  RETURN_IF_ERROR(ex->run(feeds, &out));
  return out[0].second;
}

/// Runs `m` as is and with its node 0 decomposed; expects equal outputs within the tolerance.
void expect_decomposition_matches(std::shared_ptr<Model> m, const NamedTensors& feeds, double atol, double rtol,
                                  size_t min_nodes = 2) {
  auto expected = run_model(m, feeds);
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  std::shared_ptr<Model> d = m->clone();
  const Node node = d->graph.nodes[0];
  std::string why;
  ASSERT_TRUE(can_decompose(*d, d->graph, node, &why)) << why;
  auto parts = decompose_node(*d, &d->graph, node);
  ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
  ASSERT_GE(parts.value().size(), min_nodes);
  for (const Node& p : parts.value()) {
    EXPECT_NE(p.op_type, node.op_type);
    EXPECT_EQ(p.origin, std::vector<std::string>{node.name});
  }
  d->graph.nodes.erase(d->graph.nodes.begin());
  d->graph.nodes.insert(d->graph.nodes.begin(), parts.value().begin(), parts.value().end());
  Status inferred = infer_shapes(d.get());
  ASSERT_TRUE(inferred.is_ok()) << inferred.to_string();
  auto got = run_model(d, feeds);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  expect_near(got.value(), expected.value(), atol, rtol);
}

std::shared_ptr<Model> unary(const std::string& op, int64_t opset, std::map<std::string, Attribute> attrs = {},
                             DType dtype = DType::kF32) {
  GraphBuilder b(opset);
  b.output(b.node(op, {b.input("x", dtype, {3, 40})}, std::move(attrs)));
  return b.build();
}

TEST(Decompose, HardSwish) { expect_decomposition_matches(unary("HardSwish", 14), {{"x", wide_range({3, 40})}}, 1e-6, 1e-6); }
TEST(Decompose, HardSigmoidWithAttributes) {
  expect_decomposition_matches(unary("HardSigmoid", 13, {{"alpha", GraphBuilder::f(0.3f)}, {"beta", GraphBuilder::f(0.4f)}}),
                               {{"x", wide_range({3, 40})}}, 1e-6, 1e-6);
}
TEST(Decompose, SoftplusIsStableForLargeInputs) {
  expect_decomposition_matches(unary("Softplus", 13), {{"x", wide_range({3, 40})}}, 1e-6, 1e-6);
}
TEST(Decompose, Softsign) { expect_decomposition_matches(unary("Softsign", 13), {{"x", wide_range({3, 40})}}, 1e-6, 1e-6); }
TEST(Decompose, Mish) { expect_decomposition_matches(unary("Mish", 18), {{"x", wide_range({3, 40})}}, 1e-6, 1e-5); }
TEST(Decompose, GeluErf) { expect_decomposition_matches(unary("Gelu", 20), {{"x", wide_range({3, 40})}}, 1e-6, 1e-5); }
TEST(Decompose, GeluTanh) {
  expect_decomposition_matches(unary("Gelu", 20, {{"approximate", GraphBuilder::s("tanh")}}), {{"x", wide_range({3, 40})}},
                               1e-6, 1e-5);
}
TEST(Decompose, HardSwishFloat16) {
  expect_decomposition_matches(unary("HardSwish", 14, {}, DType::kF16), {{"x", wide_range({3, 40}, DType::kF16)}}, 2e-2, 2e-3);
}

std::shared_ptr<Model> layer_norm(int64_t opset, int64_t axis, bool bias) {
  GraphBuilder b(opset);
  const std::string x = b.input("x", DType::kF32, {2, 3, 8});
  Tensor scale = Tensor::allocate(DType::kF32, axis == 1 || axis == -2 ? std::vector<int64_t>{3, 8} : std::vector<int64_t>{8});
  for (int64_t i = 0; i < scale.numel(); ++i) scale.mutable_data<float>()[i] = 0.5f + 0.1f * static_cast<float>(i % 7);
  std::vector<std::string> in = {x, b.initializer("scale", scale)};
  if (bias) {
    Tensor bt = Tensor::allocate(DType::kF32, scale.dims());
    for (int64_t i = 0; i < bt.numel(); ++i) bt.mutable_data<float>()[i] = -0.2f + 0.05f * static_cast<float>(i % 5);
    in.push_back(b.initializer("bias", bt));
  }
  b.output(b.node("LayerNormalization", in, {{"axis", GraphBuilder::i(axis)}, {"epsilon", GraphBuilder::f(1e-3f)}}));
  return b.build();
}

TEST(Decompose, LayerNormalizationLastAxisOpset17) {
  expect_decomposition_matches(layer_norm(17, -1, true), {{"x", wide_range({2, 3, 8})}}, 1e-5, 1e-5);
}
TEST(Decompose, LayerNormalizationTwoAxesOpset18UsesAxesInput) {
  expect_decomposition_matches(layer_norm(18, 1, false), {{"x", wide_range({2, 3, 8})}}, 1e-5, 1e-5);
}

TEST(Decompose, LayerNormalizationWithMeanOutputIsNotDecomposed) {
  GraphBuilder b(17);
  const std::string x = b.input("x", DType::kF32, {2, 8});
  Tensor scale = Tensor::allocate(DType::kF32, {8});
  const std::string y = b.node("LayerNormalization", {x, b.initializer("scale", scale)}, {}, 2);
  b.output(y);
  auto m = b.build();
  std::string why;
  EXPECT_FALSE(can_decompose(*m, m->graph, m->graph.nodes[0], &why));
  EXPECT_NE(why.find("Mean"), std::string::npos) << why;
}

TEST(Decompose, PassRewritesWhatTheDeviceLacksInsteadOfFallingBack) {
  // HardSwish -> Mul(x, HardSigmoid(x)); the device lacks HardSwish and HardSigmoid, so both levels
  // decompose, down to Mul/Add/Min/Max.
  GraphBuilder b(14);
  const std::string x = b.input("x", DType::kF32, {3, 40});
  b.output(b.node("Relu", {b.node("HardSwish", {x})}));
  auto m = b.build();
  const NamedTensors feeds = {{"x", wide_range({3, 40})}};
  auto expected = run_model(m, feeds);
  ASSERT_TRUE(expected.is_ok());

  auto device = std::make_unique<PartialBackend>(std::set<std::string>{"Relu", "Mul", "Add", "Min", "Max"});
  auto ex = Executor::create(m, std::move(device), ExecutorOptions{.opt_level = 1});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_TRUE(ex.value()->partitions().fallbacks.empty());
  for (const Node& n : ex.value()->model().graph.nodes) EXPECT_NE(n.op_type, "HardSwish");
  int changes = 0;
  for (const PassRecord& r : ex.value()->optimize_report().passes)
    if (r.name == "decompose") changes = r.changes;
  EXPECT_EQ(changes, 2);  // HardSwish, then the HardSigmoid it produced
  NamedTensors out;
  ASSERT_TRUE(ex.value()->run(feeds, &out).is_ok());
  expect_near(out[0].second, expected.value(), 1e-6, 1e-6);
}

TEST(Decompose, PassLeavesNodesWhoseDecompositionTheDeviceCannotRun) {
  GraphBuilder b(14);
  b.output(b.node("HardSwish", {b.input("x", DType::kF32, {4})}));
  auto m = b.build();
  auto ex = Executor::create(m, std::make_unique<PartialBackend>(std::set<std::string>{"Relu"}), ExecutorOptions{.opt_level = 1});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  ASSERT_EQ(ex.value()->partitions().fallbacks.size(), 1u);  // runs on the CPU instead
  EXPECT_EQ(ex.value()->model().graph.nodes[0].op_type, "HardSwish");
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

TEST(Decompose, CastLike) {
  GraphBuilder b(15);
  const std::string x = b.input("x", DType::kF32, {3, 40});
  b.output(b.node("CastLike", {x, b.initializer("like", Tensor::scalar<double>(0.0))}));
  expect_decomposition_matches(b.build(), {{"x", wide_range({3, 40})}}, 0, 0, 1);
}

TEST(Decompose, TriluUpperAndLowerWithK) {
  for (int64_t upper : {0, 1})
    for (int64_t k : {-1, 0, 2}) {
      GraphBuilder b(14);
      const std::string x = b.input("x", DType::kF32, {2, 4, 5});
      b.output(b.node("Trilu", {x, b.initializer("k", I64_({k}, {}))}, {{"upper", GraphBuilder::i(upper)}}));
      expect_decomposition_matches(b.build(), {{"x", wide_range({2, 4, 5})}}, 0, 0, 1);
    }
}

}  // namespace
}  // namespace ferry::testing
