// ONNX import: subgraphs with outer-scope values, opset resolution, topological sorting,
// symbolic shapes, and the executor's input checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "onnx/onnx_import.h"
#include "onnx/onnx_pb.h"
// After onnx_pb.h, which defines ONNX_API.
#include "onnx/onnx-data.pb.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

void set_type(onnx::ValueInfoProto* vi, const std::string& name, int elem, const std::vector<std::string>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out, const std::string& name = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

onnx::ModelProto make_model(int opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("unit-test");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  return m;
}

StatusOr<std::shared_ptr<Model>> parse(const onnx::ModelProto& m) {
  std::string bytes = m.SerializeAsString();
  return parse_onnx_model(bytes.data(), bytes.size(), "", "test model");
}

Tensor f32(std::vector<float> v, std::vector<int64_t> dims) { return Tensor::from_vector<float>(v, dims); }

TEST(OnnxImport, SortsNodesGivenOutOfOrder) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"2"});
  set_type(g->add_output(), "z", 1, {"2"});
  add_node(g, "Mul", {"y", "y"}, {"z"}, "second");
  add_node(g, "Add", {"x", "x"}, {"y"}, "first");
  auto model = parse(m);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model.value()->graph.nodes[0].name, "first");
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok());
  NamedTensors out;
  ASSERT_TRUE(ex.value()->run({{"x", f32({1, 2}, {2})}}, &out).is_ok());
  EXPECT_EQ(out[0].second.data<float>()[1], 16.0f);
}

TEST(OnnxImport, GeneratesUniqueNodeNames) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"2"});
  set_type(g->add_output(), "z", 1, {"2"});
  add_node(g, "Add", {"x", "x"}, {"y"}, "dup");
  add_node(g, "Add", {"y", "y"}, {"z"}, "dup");
  auto model = parse(m);
  ASSERT_TRUE(model.is_ok());
  EXPECT_NE(model.value()->graph.nodes[0].name, model.value()->graph.nodes[1].name);
}

TEST(OnnxImport, SymbolicBatchPropagatesAndBindsConsistently) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "a", 1, {"batch", "3"});
  set_type(g->add_input(), "b", 1, {"batch", "3"});
  set_type(g->add_output(), "c", 1, {});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  add_node(g, "Add", {"a", "b"}, {"c"});
  auto model = parse(m);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model.value()->graph.outputs[0].type.to_string(), "f32[batch,3]");
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  NamedTensors out;
  Status st = ex.value()->run({{"a", f32({1, 2, 3, 4, 5, 6}, {2, 3})}, {"b", f32({1, 2, 3}, {1, 3})}}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("'batch'"), std::string::npos) << st.message();
}

TEST(OnnxImport, IfBranchReadsOuterScopeValue) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "cond", 9, {});
  set_type(g->add_input(), "x", 1, {"2"});
  set_type(g->add_output(), "y", 1, {"2"});
  auto* n = add_node(g, "If", {"cond"}, {"y"}, "if0");
  auto* then_attr = n->add_attribute();
  then_attr->set_name("then_branch");
  then_attr->set_type(onnx::AttributeProto::GRAPH);
  auto* tg = then_attr->mutable_g();
  tg->set_name("then");
  add_node(tg, "Add", {"x", "x"}, {"t_out"});
  set_type(tg->add_output(), "t_out", 1, {"2"});
  auto* else_attr = n->add_attribute();
  else_attr->set_name("else_branch");
  else_attr->set_type(onnx::AttributeProto::GRAPH);
  auto* eg = else_attr->mutable_g();
  eg->set_name("else");
  add_node(eg, "Mul", {"x", "x"}, {"e_out"});
  set_type(eg->add_output(), "e_out", 1, {"2"});
  auto model = parse(m);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model.value()->graph.nodes[0].implicit_inputs, std::vector<std::string>{"x"});
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok());
  for (bool c : {true, false}) {
    NamedTensors out;
    ASSERT_TRUE(ex.value()->run({{"cond", Tensor::scalar<bool>(c)}, {"x", f32({3, 4}, {2})}}, &out).is_ok());
    EXPECT_EQ(out[0].second.data<float>()[1], c ? 8.0f : 16.0f);
  }
}

TEST(OnnxImport, LoopAccumulatesAndStacksScanOutputs) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "trip", 7, {});
  set_type(g->add_input(), "x", 1, {"1"});
  set_type(g->add_output(), "final", 1, {"1"});
  set_type(g->add_output(), "history", 1, {"?", "1"});
  g->mutable_output(1)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto* n = add_node(g, "Loop", {"trip", "", "x"}, {"final", "history"}, "loop0");
  auto* a = n->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  auto* body = a->mutable_g();
  body->set_name("body");
  set_type(body->add_input(), "i", 7, {});
  set_type(body->add_input(), "c_in", 9, {});
  set_type(body->add_input(), "acc", 1, {"1"});
  add_node(body, "Add", {"acc", "x"}, {"acc_out"});  // x from the outer scope
  add_node(body, "Or", {"c_in", "c_in"}, {"c_out"});
  set_type(body->add_output(), "c_out", 9, {});
  set_type(body->add_output(), "acc_out", 1, {"1"});
  set_type(body->add_output(), "scan", 1, {"1"});
  add_node(body, "Mul", {"acc_out", "acc_out"}, {"scan"});
  auto model = parse(m);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors out;
  Status st = ex.value()->run({{"trip", Tensor::scalar<int64_t>(3)}, {"x", f32({2}, {1})}}, &out);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(out[0].second.data<float>()[0], 8.0f);  // 2 + 2 + 2 + 2
  ASSERT_EQ(out[1].second.dims(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(out[1].second.data<float>()[2], 64.0f);
}

TEST(OnnxImport, OpsetResolutionPicksNewestDefinitionNotAfterModelOpset) {
  // Reduce families change at 13/18; elementwise Add is defined from 7: at opset 7 it resolves.
  onnx::ModelProto m = make_model(7);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"2"});
  set_type(g->add_output(), "y", 1, {"2"});
  add_node(g, "Add", {"x", "x"}, {"y"});
  EXPECT_TRUE(parse(m).is_ok());
  // Mod is defined from 10: a model at opset 9 (new enough not to be upgraded) is refused.
  onnx::ModelProto m2 = make_model(9);
  auto* g2 = m2.mutable_graph();
  set_type(g2->add_input(), "x", 1, {"2"});
  set_type(g2->add_output(), "y", 1, {"2"});
  add_node(g2, "Mod", {"x", "x"}, {"y"});
  auto r = parse(m2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("from opset 10"), std::string::npos) << r.status().message();
  // Opsets 1-6 are upgraded at import (onnx/opset_upgrade.h): Add at opset 5 loads as opset 8.
  onnx::ModelProto m3 = make_model(5);
  *m3.mutable_graph() = m.graph();
  auto up = parse(m3);
  ASSERT_TRUE(up.is_ok()) << up.status().to_string();
  EXPECT_EQ(up.value()->upgraded_from_opset, 5);
  EXPECT_EQ(up.value()->opset(), 8);
}

TEST(OnnxImport, DeclaredShapeConflictIsReported) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"2", "3"});
  set_type(g->add_output(), "y", 1, {"2", "3"});
  set_type(g->add_value_info(), "y", 1, {"5", "3"});
  add_node(g, "Add", {"x", "x"}, {"y"}, "adder");
  auto r = parse(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("adder"), std::string::npos) << r.status().message();
}

TEST(OnnxImport, TensorPbRoundTrip) {
  char tmpl[] = "/tmp/ferry_pb_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/t.pb";
  Tensor t = Tensor::from_vector<int64_t>({1, -2, 3, 4, 5, 6}, {2, 3});
  ASSERT_TRUE(write_tensor_pb(path, t, "named").is_ok());
  std::string name;
  auto back = read_tensor_pb(path, &name);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(name, "named");
  EXPECT_EQ(back.value().dims(), t.dims());
  EXPECT_EQ(back.value().to_int64_vector(), t.to_int64_vector());
  std::filesystem::remove_all(tmpl);
}

TEST(OnnxImport, SequencePbIsRead) {
  char tmpl[] = "/tmp/ferry_seq_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/s.pb";
  onnx::SequenceProto sp;
  sp.set_elem_type(onnx::SequenceProto::TENSOR);
  for (int i = 0; i < 3; ++i) {
    auto* tp = sp.add_tensor_values();
    tp->set_data_type(1);
    tp->add_dims(1);
    tp->add_float_data(static_cast<float>(i));
  }
  std::ofstream(path, std::ios::binary) << sp.SerializeAsString();
  auto v = read_value_pb(path, ValueKind::kSequence);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  ASSERT_EQ(v.value().sequence.size(), 3u);
  EXPECT_EQ(v.value().sequence[2].data<float>()[0], 2.0f);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace ferry
