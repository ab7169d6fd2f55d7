// Sequence and optional ops. These take or produce sequences, so the tests build small graphs
// directly (OpTester handles tensor-in/tensor-out nodes only) and run them with run_values.
#include "op_tester.h"

namespace ferry::testing {
namespace {

// A small multi-node graph builder: tensor graph inputs, initializers, nodes, named outputs.
class SeqGraph {
 public:
  explicit SeqGraph(int64_t opset = 18) : model_(std::make_shared<Model>()) { model_->opset_imports[""] = opset; }

  SeqGraph& input(const std::string& name, Tensor t) {
    model_->graph.inputs.push_back(ValueInfo{name, t.type()});
    model_->graph.value_types[name] = t.type();
    feeds_.emplace_back(name, Value(std::move(t)));
    return *this;
  }
  SeqGraph& constant(const std::string& name, Tensor t) {
    model_->graph.value_types[name] = t.type();
    model_->graph.initializers[name] = std::move(t);
    return *this;
  }
  Node& node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs) {
    Node n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(model_->graph.nodes.size());
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    model_->graph.nodes.push_back(std::move(n));
    return model_->graph.nodes.back();
  }
  SeqGraph& output(const std::string& name) {
    model_->graph.outputs.push_back(ValueInfo{name, {}});
    return *this;
  }
  /// Shape inference then execution; outputs in declaration order.
  StatusOr<std::vector<Value>> run() {
    RETURN_IF_ERROR(infer_shapes(model_.get()));
    ASSIGN_OR_RETURN(auto ex, Executor::create(model_, ExecutorOptions{"cpu-ref"}));
    NamedValues outs;
    RETURN_IF_ERROR(ex->run_values(feeds_, &outs));
    std::vector<Value> r;
    for (auto& [name, v] : outs) r.push_back(std::move(v));
    return r;
  }
  const TensorType& type_of(const std::string& name) { return model_->graph.value_types[name]; }
  Model& model() { return *model_; }

 private:
  std::shared_ptr<Model> model_;
  NamedValues feeds_;
};

void set_int(Node& n, const std::string& name, int64_t v) {
  n.attrs[name].type = AttrType::kInt;
  n.attrs[name].i = v;
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<float>(t.get_double(i)));
  return v;
}

TEST(SplitToSequence, ScalarSplitLeavesShorterLastChunk) {
  SeqGraph g;
  g.input("x", T_({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2})).constant("s", Tensor::scalar<int64_t>(2));
  g.node("SplitToSequence", {"x", "s"}, {"seq"});
  g.node("SequenceLength", {"seq"}, {"len"});
  g.output("seq").output("len");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Value& seq = r.value()[0];
  ASSERT_TRUE(seq.is_sequence());
  ASSERT_EQ(seq.sequence.size(), 3u);
  EXPECT_EQ(seq.sequence[0].dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(seq.sequence[2].dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(floats(seq.sequence[2]), (std::vector<float>{8, 9}));
  EXPECT_EQ(r.value()[1].tensor.get_int64(0), 3);
  EXPECT_EQ(g.type_of("seq").kind, ValueKind::kSequence);
  EXPECT_EQ(g.type_of("seq").to_string(), "seq(f32[?,2])");
}

TEST(SplitToSequence, NoSplitKeepdims0SqueezesAxis) {
  SeqGraph g;
  g.input("x", T_({1, 2, 3, 4, 5, 6}, {2, 3}));
  set_int(g.node("SplitToSequence", {"x"}, {"seq"}), "axis", -1);
  set_int(g.model().graph.nodes.back(), "keepdims", 0);
  g.output("seq");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto& s = r.value()[0].sequence;
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].dims(), (std::vector<int64_t>{2}));
  EXPECT_EQ(floats(s[1]), (std::vector<float>{2, 5}));
  EXPECT_EQ(g.type_of("seq").to_string(), "seq(f32[2])");
}

TEST(SplitToSequence, SplitSumMismatchIsAnError) {
  SeqGraph g;
  g.input("x", T_({1, 2, 3}, {3})).constant("s", I64_({1, 1}, {2}));
  g.node("SplitToSequence", {"x", "s"}, {"seq"});
  g.output("seq");
  EXPECT_FALSE(g.run().is_ok());
}

TEST(Sequence, ConstructInsertEraseAtConcat) {
  SeqGraph g;
  g.input("a", T_({1, 2}, {1, 2})).input("b", T_({3, 4}, {1, 2})).input("c", T_({5, 6}, {1, 2}));
  g.constant("neg1", Tensor::scalar<int64_t>(-1)).constant("zero", Tensor::scalar<int32_t>(0));
  g.node("SequenceConstruct", {"a", "b"}, {"s1"});
  g.node("SequenceInsert", {"s1", "c", "neg1"}, {"s2"});  // [a, c, b]
  g.node("SequenceErase", {"s2", "zero"}, {"s3"});        // [c, b]
  g.node("SequenceAt", {"s3", "neg1"}, {"last"});         // b
  Node& cat = g.node("ConcatFromSequence", {"s2"}, {"cat"});
  set_int(cat, "axis", 0);
  Node& stk = g.node("ConcatFromSequence", {"s3"}, {"stack"});
  set_int(stk, "axis", -1);
  set_int(stk, "new_axis", 1);
  g.output("last").output("cat").output("stack");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_near(r.value()[0].tensor, T_({3, 4}, {1, 2}));
  expect_near(r.value()[1].tensor, T_({1, 2, 5, 6, 3, 4}, {3, 2}));
  expect_near(r.value()[2].tensor, T_({5, 3, 6, 4}, {1, 2, 2}));
  EXPECT_EQ(g.type_of("stack").to_string(), "f32[1,2,?]");
  EXPECT_EQ(g.type_of("last").to_string(), "f32[1,2]");
}

TEST(Sequence, ConcatAlongInnerAxisWithDifferentLengths) {
  SeqGraph g;
  g.input("a", T_({1, 2, 3, 4}, {2, 2})).input("b", T_({5, 6}, {2, 1}));
  g.node("SequenceConstruct", {"a", "b"}, {"s"});
  set_int(g.node("ConcatFromSequence", {"s"}, {"cat"}), "axis", 1);
  g.output("cat");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_near(r.value()[0].tensor, T_({1, 2, 5, 3, 4, 6}, {2, 3}));
}

TEST(Sequence, EmptyThenInsert) {
  SeqGraph g;
  g.input("x", I64_({7, 8}, {2}));
  set_int(g.node("SequenceEmpty", {}, {"e"}), "dtype", 7);  // int64
  g.node("SequenceInsert", {"e", "x"}, {"s"});
  g.node("SequenceInsert", {"s", "x"}, {"s2"});
  set_int(g.node("ConcatFromSequence", {"s2"}, {"cat"}), "axis", 0);
  g.output("e").output("cat");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r.value()[0].is_sequence());
  EXPECT_TRUE(r.value()[0].sequence.empty());
  EXPECT_EQ(r.value()[1].tensor.to_int64_vector(), (std::vector<int64_t>{7, 8, 7, 8}));
  EXPECT_EQ(g.type_of("e").dtype, DType::kI64);
}

TEST(Sequence, OutOfRangePositionIsAnError) {
  SeqGraph g;
  g.input("a", T_({1}, {1})).constant("p", Tensor::scalar<int64_t>(1));
  g.node("SequenceConstruct", {"a"}, {"s"});
  g.node("SequenceAt", {"s", "p"}, {"y"});
  g.output("y");
  auto r = g.run();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << r.status().message();
}

TEST(Sequence, EraseFromEmptyIsAnError) {
  SeqGraph g;
  g.node("SequenceEmpty", {}, {"e"});
  g.node("SequenceErase", {"e"}, {"s"});
  g.output("s");
  EXPECT_FALSE(g.run().is_ok());
}

TEST(Sequence, ConstructWithMixedTypesIsAnError) {
  SeqGraph g;
  g.input("a", T_({1}, {1})).input("b", I64_({1}, {1}));
  g.node("SequenceConstruct", {"a", "b"}, {"s"});
  g.output("s");
  EXPECT_FALSE(g.run().is_ok());
}

TEST(Sequence, ConcatMismatchedShapesIsAnError) {
  SeqGraph g;
  g.input("a", T_({1, 2}, {1, 2})).input("b", T_({1, 2, 3}, {1, 3}));
  g.node("SequenceConstruct", {"a", "b"}, {"s"});
  set_int(g.node("ConcatFromSequence", {"s"}, {"cat"}), "axis", 0);
  g.output("cat");
  EXPECT_FALSE(g.run().is_ok());
}

TEST(Sequence, TensorOpRefusesSequenceInput) {
  SeqGraph g;
  g.input("a", T_({1, 2}, {2}));
  g.node("SequenceConstruct", {"a"}, {"s"});
  g.node("Relu", {"s"}, {"y"});
  g.output("y");
  EXPECT_FALSE(g.run().is_ok());
}

TEST(Sequence, IdentityPassesSequencesThrough) {
  SeqGraph g;
  g.input("a", T_({1, 2}, {2}));
  g.node("SequenceConstruct", {"a", "a"}, {"s"});
  g.node("Identity", {"s"}, {"t"});
  g.output("t");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value()[0].sequence.size(), 2u);
  EXPECT_EQ(g.type_of("t").kind, ValueKind::kSequence);
}

TEST(SequenceMap, AppliesBodyWithBroadcastTensorInput) {
  SeqGraph g(17);
  g.input("a", T_({1, 2}, {2})).input("b", T_({3}, {1})).input("k", T_({10}, {1}));
  g.node("SequenceConstruct", {"a", "b"}, {"s"});
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->parent = &g.model().graph;
  body->inputs = {ValueInfo{"x", TensorType{DType::kF32, std::nullopt}}, ValueInfo{"y", TensorType{DType::kF32, Shape({1})}}};
  body->outputs = {ValueInfo{"z", TensorType{DType::kF32, std::nullopt}}};
  for (const auto& v : body->inputs) body->value_types[v.name] = v.type;
  Node add;
  add.op_type = "Add";
  add.name = "body_add";
  add.inputs = {"x", "y"};
  add.outputs = {"z"};
  body->nodes.push_back(add);
  Node& map = g.node("SequenceMap", {"s", "k"}, {"out"});
  map.attrs["body"].type = AttrType::kGraph;
  map.attrs["body"].g = body;
  g.output("out");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto& s = r.value()[0].sequence;
  ASSERT_EQ(s.size(), 2u);
  expect_near(s[0], T_({11, 12}, {2}));
  expect_near(s[1], T_({13}, {1}));
  EXPECT_EQ(g.type_of("out").kind, ValueKind::kSequence);
}

TEST(Optional, WrapUnwrapAndHasElement) {
  SeqGraph g(18);
  g.input("x", T_({1, 2}, {2}));
  g.node("Optional", {"x"}, {"o"});
  g.node("OptionalHasElement", {"o"}, {"has"});
  g.node("OptionalGetElement", {"o"}, {"y"});
  g.node("OptionalHasElement", {}, {"none"});  // opset 18: a missing input has no element
  g.output("o").output("has").output("y").output("none");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value()[0].kind, ValueKind::kOptionalTensor);
  EXPECT_TRUE(r.value()[1].tensor.get_int64(0));
  expect_near(r.value()[2].tensor, T_({1, 2}, {2}));
  EXPECT_FALSE(r.value()[3].tensor.get_int64(0));
  EXPECT_EQ(g.type_of("o").to_string(), "optional(f32[2])");
  EXPECT_EQ(g.type_of("y").to_string(), "f32[2]");
}

TEST(Optional, EmptyFromTypeAttribute) {
  SeqGraph g(15);
  Node& n = g.node("Optional", {}, {"o"});
  n.attrs["type"].type = AttrType::kTypeProto;
  n.attrs["type"].tp = TensorType{DType::kI32, Shape({2}), ValueKind::kSequence};
  g.node("OptionalHasElement", {"o"}, {"has"});
  g.node("OptionalGetElement", {"o"}, {"y"});
  g.output("has").output("y");
  auto r = g.run();
  ASSERT_FALSE(r.is_ok());  // getting the element of an empty optional is an error
  EXPECT_NE(r.status().message().find("empty"), std::string::npos) << r.status().message();
  EXPECT_EQ(g.type_of("o").kind, ValueKind::kOptionalSequence);
}

TEST(Optional, Opset15GetElementRejectsPlainTensorType) {
  SeqGraph g(15);
  g.input("x", T_({1}, {1}));
  g.node("OptionalGetElement", {"x"}, {"y"});
  g.output("y");
  EXPECT_FALSE(g.run().is_ok());
}

TEST(Optional, Opset18GetElementPassesTensor) {
  SeqGraph g(18);
  g.input("x", T_({1}, {1}));
  g.node("OptionalGetElement", {"x"}, {"y"});
  g.output("y");
  auto r = g.run();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_near(r.value()[0].tensor, T_({1}, {1}));
}

}  // namespace
}  // namespace ferry::testing
