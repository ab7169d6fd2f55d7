// Level-1 graph passes, each alone: shape_folding, constant_folding, identity_removal,
// transpose_elimination, dead_node_removal. Every test also checks the rewritten model computes
// the same outputs as the original.
#include "pass_test_util.h"

namespace ferry::testing {
namespace {

TEST(ShapeFolding, FoldsShapeGatherConcatReshapeChain) {
  ModelBuilder b;
  auto x = b.input("x", {2, 3, 4});
  auto shape = b.node("Shape", {x});
  auto d0 = b.node("Gather", {shape, b.constant(I64_({0}, {}))}, {{"axis", int_attr(0)}});
  auto u = b.node("Unsqueeze", {d0, b.constant(I64_({0}, {1}))});
  auto cat = b.node("Concat", {u, b.constant(I64_({-1}, {1}))}, {{"axis", int_attr(0)}});
  auto y = b.node("Reshape", {x, cat});
  b.output(y);
  auto m = b.build();
  int changes = 0;
  auto opt = run_pass(*m, "shape_folding", &changes);
  EXPECT_EQ(changes, 4);
  EXPECT_EQ(opt->graph.nodes.size(), 1u);
  EXPECT_EQ(opt->graph.nodes[0].op_type, "Reshape");
  ASSERT_TRUE(opt->graph.initializers.count(cat));
  EXPECT_EQ(opt->graph.initializers.at(cat).to_int64_vector(), (std::vector<int64_t>{2, -1}));
  expect_same_outputs(m, opt);
}

TEST(ShapeFolding, KeepsShapesOfDynamicDims) {
  ModelBuilder b;
  b.graph().inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape({Dim::symbolic("n"), Dim(4)})}});
  auto shape = b.node("Shape", {"x"});
  b.output(shape);
  auto m = b.build();
  auto opt = run_pass(*m, "shape_folding");
  EXPECT_EQ(count_ops(*opt, "Shape"), 1);
}

TEST(ConstantFolding, FoldsWeightTransposeAndKeepsRuntimeNodes) {
  ModelBuilder b;
  auto x = b.input("x", {2, 3});
  auto w = b.constant(T_({1, 2, 3, 4, 5, 6}, {2, 3}));
  auto wt = b.node("Transpose", {w}, {{"perm", ints_attr({1, 0})}});
  auto y = b.node("MatMul", {x, wt});
  b.output(y);
  auto m = b.build();
  int changes = 0;
  auto opt = run_pass(*m, "constant_folding", &changes);
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(count_ops(*opt, "Transpose"), 0);
  EXPECT_EQ(count_ops(*opt, "MatMul"), 1);
  ASSERT_TRUE(opt->graph.initializers.count(wt));
  EXPECT_EQ(opt->graph.initializers.at(wt).dims(), (std::vector<int64_t>{3, 2}));
  expect_same_outputs(m, opt);
}

TEST(ConstantFolding, NeverFoldsRandomOpsOrGraphOutputs) {
  ModelBuilder b;
  auto x = b.input("x", {2});
  auto r = b.node("RandomNormalLike", {b.constant(T_({0, 0}, {2}))});
  auto c = b.node("Neg", {b.constant(T_({1, 2}, {2}))});
  b.output(b.node("Add", {x, r}));
  b.output(c);
  auto m = b.build();
  int changes = 0;
  auto opt = run_pass(*m, "constant_folding", &changes);
  EXPECT_EQ(changes, 0);
  EXPECT_EQ(count_ops(*opt, "RandomNormalLike"), 1);
  EXPECT_EQ(count_ops(*opt, "Neg"), 1);
}

TEST(IdentityRemoval, RemovesIdentityDropoutCastAndSameShapeReshape) {
  ModelBuilder b;
  auto x = b.input("x", {2, 3});
  auto a = b.node("Identity", {x});
  auto d = b.node("Dropout", {a});
  auto c = b.node("Cast", {d}, {{"to", int_attr(1)}});
  auto r = b.node("Reshape", {c, b.constant(I64_({2, 3}, {2}))});
  auto y = b.node("Relu", {r});
  b.output(y);
  auto m = b.build();
  int changes = 0;
  auto opt = run_pass(*m, "identity_removal", &changes);
  EXPECT_EQ(changes, 4);
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  EXPECT_EQ(opt->graph.nodes[0].inputs[0], x);
  expect_same_outputs(m, opt);
}

TEST(IdentityRemoval, GraphOutputKeepsItsName) {
  ModelBuilder b;
  auto x = b.input("x", {2, 3});
  auto r = b.node("Relu", {x});
  auto y = b.node("Identity", {r});
  b.output(y);
  b.output(b.node("Identity", {x}));  // input straight to output: must stay
  auto m = b.build();
  auto opt = run_pass(*m, "identity_removal");
  EXPECT_EQ(count_ops(*opt, "Identity"), 1);
  EXPECT_EQ(opt->graph.nodes[0].op_type, "Relu");
  EXPECT_EQ(opt->graph.nodes[0].outputs[0], y);
  expect_same_outputs(m, opt);
}

TEST(IdentityRemoval, KeepsCastThatChangesType) {
  ModelBuilder b;
  auto x = b.input("x", {2});
  b.output(b.node("Cast", {x}, {{"to", int_attr(7)}}));
  auto opt = run_pass(*b.build(), "identity_removal");
  EXPECT_EQ(count_ops(*opt, "Cast"), 1);
}

TEST(IdentityRemoval, KeepsValueReadBySubgraph) {
  ModelBuilder b;
  auto x = b.input("x", {2});
  auto cond = b.input("cond", {}, DType::kBool);
  auto id = b.node("Identity", {x});
  auto body = std::make_shared<Graph>();
  Node neg;
  neg.op_type = "Neg";
  neg.name = "body_neg";
  neg.inputs = {id};
  neg.outputs = {"body_out"};
  body->nodes.push_back(neg);
  body->outputs.push_back(ValueInfo{"body_out", {}});
  body->parent = &b.graph();
  Attribute ga;
  ga.type = AttrType::kGraph;
  ga.g = body;
  auto else_body = std::make_shared<Graph>(*body);
  Attribute ea = ga;
  ea.g = else_body;
  b.node("If", {cond}, {{"then_branch", ga}, {"else_branch", ea}});
  b.graph().nodes.back().implicit_inputs = {id};
  b.output(b.graph().nodes.back().outputs[0]);
  auto m = b.build();
  auto opt = run_pass(*m, "identity_removal");
  EXPECT_EQ(count_ops(*opt, "Identity"), 1);  // the body reads it by name
}

TEST(TransposeElimination, ComposesAndCancelsInversePairs) {
  ModelBuilder b;
  auto x = b.input("x", {2, 3, 4});
  auto t1 = b.node("Transpose", {x}, {{"perm", ints_attr({1, 0, 2})}});
  auto t2 = b.node("Transpose", {t1}, {{"perm", ints_attr({1, 0, 2})}});
  auto y = b.node("Relu", {t2});
  auto t3 = b.node("Transpose", {y}, {{"perm", ints_attr({2, 0, 1})}});
  auto t4 = b.node("Transpose", {t3}, {{"perm", ints_attr({0, 2, 1})}});
  b.output(t4);
  auto m = b.build();
  auto opt = run_pass(*m, "transpose_elimination");
  EXPECT_EQ(count_ops(*opt, "Transpose"), 1);
  EXPECT_EQ(opt->graph.nodes[0].inputs[0], x);
  expect_same_outputs(m, opt);
}

TEST(DeadNodeRemoval, RemovesUnreadNodesOnly) {
  ModelBuilder b;
  auto x = b.input("x", {2});
  auto unused = b.node("Exp", {x});
  b.node("Neg", {unused});
  auto y = b.node("Relu", {x});
  b.output(y);
  auto m = b.build();
  int changes = 0;
  auto opt = run_pass(*m, "dead_node_removal", &changes);
  EXPECT_EQ(changes, 2);
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  EXPECT_EQ(opt->graph.nodes[0].op_type, "Relu");
  expect_same_outputs(m, opt);
}

}  // namespace
}  // namespace ferry::testing
