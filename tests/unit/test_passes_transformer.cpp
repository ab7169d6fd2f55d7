// Level-2 transformer fusions, each alone: layernorm_fusion, gelu_fusion, attention_fusion.
// Each test builds the subgraph the PyTorch exporter writes, checks the fused node replaced it
// (with origin filled) and that the fused model computes the same outputs.
#include <cmath>

#include "pass_test_util.h"

namespace ferry::testing {
namespace {

Attribute axes_attr(std::vector<int64_t> v) { return ints_attr(std::move(v)); }

TEST(LayerNormFusion, FusesOpset13DecompositionWithAffine) {
  ModelBuilder b(13);
  auto x = b.input("x", {2, 3, 8});
  auto m = b.node("ReduceMean", {x}, {{"axes", axes_attr({-1})}});
  auto d = b.node("Sub", {x, m});
  auto p = b.node("Pow", {d, b.scalar(2.0f)});
  auto v = b.node("ReduceMean", {p}, {{"axes", axes_attr({-1})}});
  auto s = b.node("Sqrt", {b.node("Add", {v, b.scalar(1e-5f)})});
  auto n = b.node("Div", {d, s});
  auto y = b.node("Add", {b.node("Mul", {n, b.constant(T_({1, 2, 3, 4, 5, 6, 7, 8}, {8}))}),
                          b.constant(T_({0, 1, 0, 1, 0, 1, 0, 1}, {8}))});
  b.output(y);
  auto model = b.build();
  auto opt = run_pass(*model, "layernorm_fusion");
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  const Node& f = opt->graph.nodes[0];
  EXPECT_EQ(f.op_type, "LayerNorm");
  EXPECT_EQ(f.domain, "com.ferry");
  EXPECT_EQ(f.inputs.size(), 3u);
  EXPECT_EQ(f.origin.size(), 9u);
  EXPECT_EQ(f.outputs[0], y);
  EXPECT_EQ(opt->opset("com.ferry"), 1);
  expect_same_outputs(model, opt, 1e-4);
}

TEST(LayerNormFusion, LeavesPatternWhoseIntermediateIsAlsoAnOutput) {
  ModelBuilder b(13);
  auto x = b.input("x", {2, 8});
  auto m = b.node("ReduceMean", {x}, {{"axes", axes_attr({-1})}});
  auto d = b.node("Sub", {x, m});
  auto v = b.node("ReduceMean", {b.node("Pow", {d, b.scalar(2.0f)})}, {{"axes", axes_attr({-1})}});
  auto n = b.node("Div", {d, b.node("Sqrt", {b.node("Add", {v, b.scalar(1e-5f)})})});
  b.output(n);
  b.output(m);  // the mean is read outside the pattern
  auto opt = run_pass(*b.build(), "layernorm_fusion");
  EXPECT_EQ(count_ops(*opt, "LayerNorm"), 0);
}

TEST(LayerNormFusion, MapsOnnxLayerNormalization) {
  ModelBuilder b(17);
  auto x = b.input("x", {2, 4});
  b.output(b.node("LayerNormalization", {x, b.constant(T_({1, 2, 3, 4}, {4}))}));
  auto model = b.build();
  auto opt = run_pass(*model, "layernorm_fusion");
  EXPECT_EQ(count_ops(*opt, "LayerNorm"), 1);
  expect_same_outputs(model, opt, 1e-4);
}

TEST(GeluFusion, FusesErfForm) {
  ModelBuilder b(13);
  auto x = b.input("x", {3, 5});
  auto e = b.node("Erf", {b.node("Div", {x, b.scalar(1.4142135f)})});
  auto g = b.node("Mul", {x, b.node("Add", {e, b.scalar(1.0f)})});
  auto y = b.node("Mul", {g, b.scalar(0.5f)});
  b.output(y);
  auto model = b.build();
  auto opt = run_pass(*model, "gelu_fusion");
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  EXPECT_EQ(opt->graph.nodes[0].op_type, "Gelu");
  EXPECT_EQ(opt->graph.nodes[0].origin.size(), 5u);
  expect_same_outputs(model, opt, 1e-5);
}

TEST(GeluFusion, FusesTanhForm) {
  ModelBuilder b(13);
  auto x = b.input("x", {3, 5});
  auto cube = b.node("Mul", {b.node("Pow", {x, b.scalar(3.0f)}), b.scalar(0.044715f)});
  auto inner = b.node("Mul", {b.node("Add", {x, cube}), b.scalar(std::sqrt(2.0f / static_cast<float>(M_PI)))});
  auto gate = b.node("Add", {b.node("Tanh", {inner}), b.scalar(1.0f)});
  auto y = b.node("Mul", {b.node("Mul", {x, b.scalar(0.5f)}), gate});
  b.output(y);
  auto model = b.build();
  auto opt = run_pass(*model, "gelu_fusion");
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  EXPECT_EQ(opt->graph.nodes[0].attr("approximate")->s, "tanh");
  expect_same_outputs(model, opt, 1e-5);
}

TEST(GeluFusion, KeepsErfWithOtherConstants) {
  ModelBuilder b(13);
  auto x = b.input("x", {4});
  auto e = b.node("Erf", {b.node("Div", {x, b.scalar(2.0f)})});
  b.output(b.node("Mul", {b.node("Mul", {x, b.node("Add", {e, b.scalar(1.0f)})}), b.scalar(0.5f)}));
  auto opt = run_pass(*b.build(), "gelu_fusion");
  EXPECT_EQ(count_ops(*opt, "Gelu"), 0);
}

// The torch 1.13 nn.MultiheadAttention export: [S, B*H, D] heads, Q scaled before the MatMul,
// baddbmm's "* 1" on scores and mask, Transposes around the batched MatMuls.
std::shared_ptr<Model> torch_attention(bool with_mask) {
  ModelBuilder b(13);
  auto q = b.input("q", {5, 2, 4});
  auto k = b.input("k", {5, 2, 4});
  auto v = b.input("v", {5, 2, 4});
  auto qt = b.node("Div", {b.node("Transpose", {q}, {{"perm", ints_attr({1, 0, 2})}}), b.scalar(2.0f)});
  auto kt = b.node("Transpose", {k}, {{"perm", ints_attr({1, 2, 0})}});
  auto s = b.node("Mul", {b.node("MatMul", {qt, kt}), b.scalar(1.0f)});
  if (with_mask) {
    auto mask = b.input("mask", {2, 1, 5});
    s = b.node("Add", {s, b.node("Mul", {mask, b.scalar(1.0f)})});
  }
  auto p = b.node("Softmax", {s}, {{"axis", int_attr(-1)}});
  auto o = b.node("MatMul", {p, b.node("Transpose", {v}, {{"perm", ints_attr({1, 0, 2})}})});
  b.output(b.node("Transpose", {o}, {{"perm", ints_attr({1, 0, 2})}}));
  return b.build();
}

TEST(AttentionFusion, FusesTorchMultiheadAttentionWithMask) {
  auto model = torch_attention(true);
  auto opt = run_pass(*model, "attention_fusion");
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  const Node& a = opt->graph.nodes[0];
  EXPECT_EQ(a.op_type, "Attention");
  EXPECT_EQ(a.inputs, (std::vector<std::string>{"q", "k", "v", "mask"}));
  EXPECT_FLOAT_EQ(a.attr("scale")->f, 0.5f);
  EXPECT_EQ(a.attr("k_perm")->ints, (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(a.attr("out_perm")->ints, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(a.origin.size(), 11u);  // 3 input Transposes, Div, MatMul, 2 Muls, Add, Softmax, MatMul, Transpose
  expect_same_outputs(model, opt, 1e-5);
}

TEST(AttentionFusion, FusesWithoutMask) {
  auto model = torch_attention(false);
  auto opt = run_pass(*model, "attention_fusion");
  EXPECT_EQ(opt->graph.nodes.size(), 1u);
  expect_same_outputs(model, opt, 1e-5);
}

// The same model with dim `axis` of every input made symbolic (a dynamic-batch export), re-inferred.
std::shared_ptr<Model> with_symbolic_dim(const Model& m, const std::vector<int64_t>& axes) {
  std::shared_ptr<Model> d = m.clone();
  for (size_t i = 0; i < d->graph.inputs.size(); ++i) {
    ValueInfo& in = d->graph.inputs[i];
    in.type.shape->dims[axes[i]] = Dim::symbolic("bh");
    d->graph.value_types[in.name] = in.type;
  }
  for (const Node& n : d->graph.nodes)
    for (const std::string& o : n.outputs) d->graph.value_types.erase(o);
  Status s = infer_shapes(d.get());
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return d;
}

TEST(AttentionFusion, FusesWithSymbolicBatchDims) {
  auto model = torch_attention(true);
  auto dynamic = with_symbolic_dim(*model, {1, 1, 1, 0});
  auto opt = run_pass(*dynamic, "attention_fusion");
  ASSERT_EQ(count_ops(*opt, "Attention"), 1);
  EXPECT_EQ(opt->graph.nodes.size(), 1u);
  NamedTensors feeds = random_feeds(*model);
  NamedTensors want = run_model(model, feeds), got = run_model(opt, feeds), got_cpu = run_model(opt, feeds, "cpu");
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got_cpu.size(), 1u);
  expect_near(got[0].second, want[0].second, 1e-5, 1e-5);
  expect_near(got_cpu[0].second, want[0].second, 1e-5, 1e-4);
}

TEST(AttentionFusion, BroadcastBatchDimsMatchMatMul) {
  // K shared by both heads: MatMul broadcasts [2,3,4] x [1,4,3]; the fused node must too.
  ModelBuilder b(13);
  auto q = b.input("q", {2, 3, 4});
  auto k = b.input("k", {1, 4, 3});
  auto v = b.input("v", {2, 3, 4});
  auto p = b.node("Softmax", {b.node("MatMul", {q, k})}, {{"axis", int_attr(-1)}});
  b.output(b.node("MatMul", {p, v}));
  auto model = b.build();
  auto opt = run_pass(*model, "attention_fusion");
  ASSERT_EQ(count_ops(*opt, "Attention"), 1);
  expect_same_outputs(model, opt, 1e-5);
  NamedTensors feeds = random_feeds(*model);
  NamedTensors ref = run_model(opt, feeds), cpu = run_model(opt, feeds, "cpu");
  ASSERT_EQ(cpu.size(), 1u);
  expect_near(cpu[0].second, ref[0].second, 1e-5, 1e-4);
}

TEST(ShapeFolding, GathersKnownDimsOfPartlySymbolicShapes) {
  // Shape(x)[2] of x [batch, 3, 8] is 8 at load time even though the batch is symbolic.
  ModelBuilder b(13);
  auto x = b.input("x", {2, 3, 8});
  auto known = b.node("Gather", {b.node("Shape", {x}), b.constant(Tensor::scalar<int64_t>(2))}, {{"axis", int_attr(0)}});
  auto batch = b.node("Gather", {b.node("Shape", {x}), b.constant(Tensor::scalar<int64_t>(0))}, {{"axis", int_attr(0)}});
  b.output(b.node("Add", {known, batch}));
  auto dynamic = with_symbolic_dim(*b.build(), {0});
  auto opt = run_pass(*dynamic, "shape_folding");
  EXPECT_EQ(count_ops(*opt, "Gather"), 1);  // the batch dim stays computed
  ASSERT_TRUE(opt->graph.initializers.count(known));
  EXPECT_EQ(opt->graph.initializers.at(known).data<int64_t>()[0], 8);
}

TEST(AttentionFusion, KeepsSoftmaxWhoseProbabilitiesAreAnOutput) {
  ModelBuilder b(13);
  auto q = b.input("q", {2, 3, 4});
  auto k = b.input("k", {2, 4, 3});
  auto v = b.input("v", {2, 3, 4});
  auto p = b.node("Softmax", {b.node("MatMul", {q, k})}, {{"axis", int_attr(-1)}});
  b.output(b.node("MatMul", {p, v}));
  b.output(p);
  auto opt = run_pass(*b.build(), "attention_fusion");
  EXPECT_EQ(count_ops(*opt, "Attention"), 0);
}

}  // namespace
}  // namespace ferry::testing
