// CNN passes, each alone: conv_bn_fold, conv_fusion, nhwc_layout. Each test builds the subgraph
// PyTorch exports, checks the rewrite (node kinds, origin, Transposes only at region edges) and
// that the rewritten model computes what the original did (reference kernels, both sides).
#include <random>

#include "backends/backend.h"
#include "ops/op_util.h"
#include "pass_test_util.h"

namespace ferry::testing {
namespace {

using std::vector;

Tensor rnd(vector<int64_t> dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

Attribute float_attr(float v) {
  Attribute a;
  a.type = AttrType::kFloat;
  a.f = v;
  return a;
}

// conv(x) -> BatchNormalization with random statistics.
std::string conv_bn(ModelBuilder& b, const std::string& x, int64_t c, int64_t m, uint32_t seed, int64_t group = 1) {
  auto y = b.node("Conv", {x, b.constant(rnd({m, c / group, 3, 3}, seed)), b.constant(rnd({m}, seed + 1))},
                  {{"pads", ints_attr({1, 1, 1, 1})}, {"group", int_attr(group)}});
  return b.node("BatchNormalization", {y, b.constant(rnd({m}, seed + 2, 0.5f, 2.f)), b.constant(rnd({m}, seed + 3)),
                                       b.constant(rnd({m}, seed + 4)), b.constant(rnd({m}, seed + 5, 0.1f, 2.f))},
                {{"epsilon", float_attr(1e-3f)}});
}

TEST(ConvBnFold, FoldsIntoWeightsAndBias) {
  ModelBuilder b(13);
  auto x = b.input("x", {2, 4, 6, 6});
  b.output(conv_bn(b, conv_bn(b, x, 4, 6, 10), 6, 6, 20, 3));
  auto model = b.build();
  int changes = 0;
  auto opt = run_pass(*model, "conv_bn_fold", &changes);
  EXPECT_EQ(changes, 2);
  EXPECT_EQ(count_ops(*opt, "BatchNormalization"), 0);
  ASSERT_EQ(opt->graph.nodes.size(), 2u);
  EXPECT_EQ(opt->graph.nodes[0].origin.size(), 2u);
  expect_same_outputs(model, opt, 1e-4);
}

TEST(ConvBnFold, FoldsAfterGroupedConvTranspose) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 4, 5, 5});
  auto y = b.node("ConvTranspose", {x, b.constant(rnd({4, 3, 2, 2}, 1))},
                  {{"strides", ints_attr({2, 2})}, {"group", int_attr(2)}});
  b.output(b.node("BatchNormalization", {y, b.constant(rnd({6}, 2, 0.5f, 2.f)), b.constant(rnd({6}, 3)),
                                         b.constant(rnd({6}, 4)), b.constant(rnd({6}, 5, 0.1f, 2.f))}));
  auto model = b.build();
  auto opt = run_pass(*model, "conv_bn_fold");
  EXPECT_EQ(count_ops(*opt, "BatchNormalization"), 0);
  expect_same_outputs(model, opt, 1e-4);
}

TEST(ConvBnFold, KeepsBatchNormWhoseInputIsAlsoAnOutput) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 2, 4, 4});
  auto y = b.node("Conv", {x, b.constant(rnd({2, 2, 1, 1}, 1))});
  b.output(b.node("BatchNormalization", {y, b.constant(rnd({2}, 2)), b.constant(rnd({2}, 3)), b.constant(rnd({2}, 4)),
                                         b.constant(rnd({2}, 5, 0.1f, 1.f))}));
  b.output(y);
  EXPECT_EQ(count_ops(*run_pass(*b.build(), "conv_bn_fold"), "BatchNormalization"), 1);
}

TEST(ConvFusion, ResidualAddAndReluBecomeOneFusedConv) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 4, 5, 5});
  auto c1 = b.node("Conv", {x, b.constant(rnd({4, 4, 3, 3}, 1))}, {{"pads", ints_attr({1, 1, 1, 1})}});
  auto r = b.node("Relu", {b.node("Add", {c1, x})});
  b.output(r);
  auto model = b.build();
  auto opt = run_pass(*model, "conv_fusion");
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  const Node& f = opt->graph.nodes[0];
  EXPECT_EQ(f.op_type, "FusedConv");
  EXPECT_EQ(f.domain, "com.ferry");
  ASSERT_EQ(f.inputs.size(), 4u);
  EXPECT_EQ(f.inputs[2], "");
  EXPECT_EQ(f.inputs[3], x);
  EXPECT_EQ(f.attr("activation")->s, "Relu");
  EXPECT_EQ(f.origin.size(), 3u);
  EXPECT_EQ(opt->opset("com.ferry"), 1);
  expect_same_outputs(model, opt, 1e-5);
}

TEST(ConvFusion, SiluHardSwishAndClipForms) {
  for (const char* form : {"silu", "hardswish", "clip"}) {
    SCOPED_TRACE(form);
    ModelBuilder b(13);
    auto x = b.input("x", {1, 3, 6, 6});
    auto c = b.node("Conv", {x, b.constant(rnd({5, 3, 3, 3}, 1)), b.constant(rnd({5}, 2))});
    std::string y;
    if (std::string(form) == "silu") y = b.node("Mul", {c, b.node("Sigmoid", {c})});
    else if (std::string(form) == "hardswish")
      y = b.node("Mul", {c, b.node("HardSigmoid", {c}, {{"alpha", float_attr(1.f / 6)}, {"beta", float_attr(0.5f)}})});
    else y = b.node("Clip", {c, b.scalar(0.f), b.scalar(6.f)});
    b.output(y);
    auto model = b.build();
    auto opt = run_pass(*model, "conv_fusion");
    ASSERT_EQ(opt->graph.nodes.size(), 1u);
    expect_same_outputs(model, opt, 1e-5);
  }
}

TEST(ConvFusion, MatMulBiasResidualGelu) {
  ModelBuilder b(17);
  auto x = b.input("x", {2, 3, 8});
  auto mm = b.node("MatMul", {x, b.constant(rnd({8, 8}, 1))});
  auto a = b.node("Add", {b.constant(rnd({8}, 2)), mm});
  auto r = b.node("Add", {a, x});
  b.output(b.node("Relu", {r}));
  auto model = b.build();
  auto opt = run_pass(*model, "conv_fusion");
  ASSERT_EQ(opt->graph.nodes.size(), 1u);
  EXPECT_EQ(opt->graph.nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(opt->graph.nodes[0].inputs.size(), 4u);
  expect_same_outputs(model, opt, 1e-5);
}

// A Reshape whose target is built at run time from Shape(x) of a dynamic batch (as PyTorch exports
// transformers): shape inference proves its output [batch, 4, 8], so the residual Add after the
// MatMul sees the same shape on both sides and becomes the FusedMatMul's sum input.
TEST(ConvFusion, MatMulResidualAfterDynamicBatchReshape) {
  ModelBuilder b(17);
  const Shape xs({Dim::symbolic("batch"), Dim(4), Dim(8)});
  b.graph().inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, xs}});
  b.graph().value_types["x"] = TensorType{DType::kF32, xs};
  auto n = b.node("Gather", {b.node("Shape", {"x"}), b.constant(Tensor::scalar<int64_t>(0))});
  auto u = b.node("Unsqueeze", {n, b.constant(Tensor::from_vector<int64_t>({0}, {1}))});
  auto target = b.node("Concat", {u, b.constant(Tensor::from_vector<int64_t>({-1}, {1})),
                                  b.constant(Tensor::from_vector<int64_t>({8}, {1}))},
                       {{"axis", int_attr(0)}});
  auto h = b.node("Reshape", {"x", target});
  auto mm = b.node("MatMul", {h, b.constant(rnd({8, 8}, 1))});
  auto a = b.node("Add", {b.constant(rnd({8}, 2)), mm});
  b.output(b.node("Add", {a, "x"}));
  auto model = b.build();
  const TensorType* ht = model->graph.find_type(h);
  ASSERT_TRUE(ht && ht->shape);
  EXPECT_EQ(ht->shape->to_string(), xs.to_string());
  auto opt = run_pass(*model, "conv_fusion");
  ASSERT_EQ(count_ops(*opt, "FusedMatMul"), 1);
  EXPECT_EQ(count_ops(*opt, "Add"), 0);
  for (const Node& node : opt->graph.nodes)
    if (node.op_type == "FusedMatMul") {
      EXPECT_EQ(node.inputs.size(), 4u);
    }
  const NamedTensors feeds = {{"x", rnd({3, 4, 8}, 3)}};
  const NamedTensors want = run_model(model, feeds);
  for (const auto& [device, level] : {std::pair<std::string, int>{"cpu-ref", 0}, {"cpu", 2}}) {
    const NamedTensors got = run_model(device == "cpu" ? model : opt, feeds, device, level);
    ASSERT_EQ(got.size(), want.size());
    expect_near(got[0].second, want[0].second, 1e-5, 1e-5);
  }
}

// ViT's class token: Expand(token, Where(Equal(shape, -1), 1, shape)) with shape [batch, -1, -1],
// concatenated in front of the patches. Shape inference proves [batch, 5, 8] for the sequence, so
// the residual Add after the MatMul fuses.
TEST(ConvFusion, MatMulResidualAfterExpandToDynamicBatch) {
  ModelBuilder b(17);
  const Shape xs({Dim::symbolic("batch"), Dim(4), Dim(8)});
  b.graph().inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, xs}});
  b.graph().value_types["x"] = TensorType{DType::kF32, xs};
  auto ints = [&](std::vector<int64_t> v) { return b.constant(Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())})); };
  auto n = b.node("Unsqueeze", {b.node("Gather", {b.node("Shape", {"x"}), b.constant(Tensor::scalar<int64_t>(0))}), ints({0})});
  auto target = b.node("Concat", {n, ints({-1}), ints({-1})}, {{"axis", int_attr(0)}});
  auto shape = b.node("Where", {b.node("Equal", {target, ints({-1, -1, -1})}), ints({1, 1, 1}), target});
  auto seq = b.node("Concat", {b.node("Expand", {b.constant(rnd({1, 1, 8}, 4)), shape}), "x"}, {{"axis", int_attr(1)}});
  auto mm = b.node("MatMul", {seq, b.constant(rnd({8, 8}, 1))});
  b.output(b.node("Add", {b.node("Add", {b.constant(rnd({8}, 2)), mm}), seq}));
  auto model = b.build();
  const TensorType* st = model->graph.find_type(seq);
  ASSERT_TRUE(st && st->shape);
  EXPECT_EQ(st->shape->to_string(), "[batch,5,8]");
  auto opt = run_pass(*model, "conv_fusion");
  EXPECT_EQ(count_ops(*opt, "FusedMatMul"), 1);
  EXPECT_EQ(count_ops(*opt, "Add"), 0);
  const NamedTensors feeds = {{"x", rnd({2, 4, 8}, 3)}};
  const NamedTensors want = run_model(model, feeds);
  for (const auto& [device, level] : {std::pair<std::string, int>{"cpu-ref", 0}, {"cpu", 2}}) {
    const NamedTensors got = run_model(device == "cpu" ? model : opt, feeds, device, level);
    ASSERT_EQ(got.size(), want.size());
    expect_near(got[0].second, want[0].second, 1e-5, 1e-5);
  }
}

TEST(ConvFusion, LeavesConvWhoseOutputIsReadTwice) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 2, 4, 4});
  auto c = b.node("Conv", {x, b.constant(rnd({2, 2, 1, 1}, 1))});
  b.output(b.node("Relu", {c}));
  b.output(c);
  EXPECT_EQ(count_ops(*run_pass(*b.build(), "conv_fusion"), "FusedConv"), 0);
}

// conv -> relu -> maxpool -> (conv, conv) -> concat -> * per-channel scale -> GAP -> flatten
TEST(NhwcLayout, TransposesOnlyAtRegionEdges) {
  ModelBuilder b(13);
  auto x = b.input("x", {2, 3, 8, 8});
  auto c = b.node("Relu", {b.node("Conv", {x, b.constant(rnd({4, 3, 3, 3}, 1))}, {{"pads", ints_attr({1, 1, 1, 1})}})});
  auto p = b.node("MaxPool", {c}, {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
  auto a1 = b.node("Conv", {p, b.constant(rnd({3, 4, 1, 1}, 2))});
  auto a2 = b.node("Conv", {p, b.constant(rnd({5, 4, 3, 3}, 3))}, {{"pads", ints_attr({1, 1, 1, 1})}});
  auto cat = b.node("Concat", {a1, a2}, {{"axis", int_attr(1)}});
  auto s = b.node("Mul", {cat, b.constant(rnd({8, 1, 1}, 4))});
  auto g = b.node("GlobalAveragePool", {s});
  b.output(b.node("Flatten", {g}));
  b.output(p);  // also a graph output: leaves the region in NCHW under its own name
  auto model = b.build();
  auto opt = run_pass(*model, "nhwc_layout");
  EXPECT_EQ(count_ops(*opt, "FusedConv"), 3);
  EXPECT_EQ(count_ops(*opt, "NhwcMaxPool"), 1);
  EXPECT_EQ(count_ops(*opt, "NhwcGlobalAveragePool"), 1);
  EXPECT_EQ(count_ops(*opt, "Transpose"), 2);  // out: p, the pooled vector (x enters through a conv)
  int nchw_inputs = 0;
  for (const Node& n : opt->graph.nodes)
    if (n.op_type == "FusedConv") {
      EXPECT_EQ(n.attr("channels_last")->i, 1);
      if (n.attr("nchw_input") && n.attr("nchw_input")->i == 1) ++nchw_inputs;
    }
  EXPECT_EQ(nchw_inputs, 1);
  expect_same_outputs(model, opt, 1e-5);
}

// A value entering the region is read by a conv (takes it as NCHW) and by an Add in the region
// (gets one Transpose).
TEST(NhwcLayout, EntryReadByConvAndByAnotherRegionNode) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 4, 6, 6});
  auto c = b.node("Conv", {x, b.constant(rnd({4, 4, 3, 3}, 1))}, {{"pads", ints_attr({1, 1, 1, 1})}});
  b.output(b.node("Add", {c, x}));
  auto model = b.build();
  auto opt = run_pass(*model, "nhwc_layout");
  EXPECT_EQ(count_ops(*opt, "Transpose"), 2);  // x into the Add; the sum out
  expect_same_outputs(model, opt, 1e-5);
  NamedTensors feeds = random_feeds(*model);
  const NamedTensors ref = run_model(model, feeds);
  const NamedTensors got = run_model(opt, feeds, "cpu");
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) expect_near(got[i].second, ref[i].second, 1e-4, 1e-4);
}

// UNet decoder step: conv -> Resize(x2, constant scales or sizes) -> Concat with the skip -> conv.
TEST(NhwcLayout, ResizeWithConstantScalesStaysInTheRegion) {
  for (bool sizes : {false, true}) {
    ModelBuilder b(13);
    auto x = b.input("x", {1, 3, 4, 6});
    auto c = b.node("Conv", {x, b.constant(rnd({4, 3, 3, 3}, 1))}, {{"pads", ints_attr({1, 1, 1, 1})}});
    auto p = b.node("MaxPool", {c}, {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
    Attribute mode;
    mode.type = AttrType::kString;
    mode.s = "linear";
    auto r = sizes ? b.node("Resize", {p, "", "", b.constant(Tensor::from_vector<int64_t>({1, 4, 4, 6}, {4}))}, {{"mode", mode}})
                   : b.node("Resize", {p, "", b.constant(T_({1, 1, 2, 2}, {4}))}, {{"mode", mode}});
    auto cat = b.node("Concat", {r, c}, {{"axis", int_attr(1)}});
    b.output(b.node("Conv", {cat, b.constant(rnd({2, 8, 1, 1}, 2))}));
    auto model = b.build();
    auto opt = run_pass(*model, "nhwc_layout");
    EXPECT_EQ(count_ops(*opt, "Transpose"), 1);  // out only: x enters through a conv
    expect_same_outputs(model, opt, 1e-5);
  }
}

// Squeeze-excitation as PyTorch exports it: Mul(scale, x) with the [N,C,1,1] scale first. In the
// region the full operand goes first (so the output can be written over it in place); Sub keeps
// its order.
TEST(NhwcLayout, SqueezeExcitationMulTakesTheFullOperandFirst) {
  ModelBuilder b(13);
  auto x = b.input("x", {2, 3, 6, 6});
  auto c = b.node("Conv", {x, b.constant(rnd({8, 3, 3, 3}, 1))}, {{"pads", ints_attr({1, 1, 1, 1})}});
  auto g = b.node("GlobalAveragePool", {c});
  auto s = b.node("Sigmoid", {b.node("Conv", {g, b.constant(rnd({8, 8, 1, 1}, 2))})});
  auto m = b.node("Mul", {s, c});
  auto d = b.node("Sub", {s, m});
  b.output(b.node("Conv", {d, b.constant(rnd({4, 8, 1, 1}, 3))}));
  auto model = b.build();
  auto opt = run_pass(*model, "nhwc_layout");
  int muls = 0, subs = 0;
  for (const Node& n : opt->graph.nodes) {
    if (n.op_type != "Mul" && n.op_type != "Sub") continue;
    const TensorType* t0 = opt->graph.find_type(n.inputs[0]);
    ASSERT_TRUE(t0 && t0->shape);
    const int64_t h = t0->shape->dims[1].value;  // NHWC: H is 6 for the activation, 1 for the scale
    if (n.op_type == "Mul") {
      ++muls;
      EXPECT_EQ(h, 6) << "Mul input 0 " << n.inputs[0];
    } else {
      ++subs;
      EXPECT_EQ(h, 1) << "Sub input 0 " << n.inputs[0];
    }
  }
  EXPECT_EQ(muls, 1);
  EXPECT_EQ(subs, 1);
  expect_same_outputs(model, opt, 1e-5);
}

TEST(NhwcLayout, OnlyForTheCpuDevice) {
  ModelBuilder b(13);
  auto x = b.input("x", {1, 3, 4, 4});
  b.output(b.node("Conv", {x, b.constant(rnd({2, 3, 1, 1}, 1))}));
  auto model = b.build();
  // The pipeline alone, every other pass off: nhwc_layout needs the trait "channels_last", which
  // the cpu backend lists and cpu-ref does not.
  auto layout_for = [&](const std::string& device, int* changes) {
    std::shared_ptr<Model> copy = model->clone();
    OptimizeOptions oo;
    oo.device_traits = device_graph_traits(device);
    for (const GraphPass& p : graph_passes())
      if (std::string(p.name) != "nhwc_layout") oo.disabled.push_back(p.name);
    OptimizeReport report;
    EXPECT_TRUE(optimize_model(copy.get(), oo, &report).is_ok());
    *changes = -1;  // not run
    for (const PassRecord& r : report.passes)
      if (r.name == "nhwc_layout") *changes = r.changes;
    return copy;
  };
  int changes = 0;
  auto ref = layout_for("cpu-ref", &changes);
  EXPECT_EQ(changes, -1);
  EXPECT_EQ(count_ops(*ref, "Conv"), 1);
  EXPECT_EQ(count_ops(*ref, "Transpose"), 0);
  auto cpu = layout_for("cpu", &changes);
  EXPECT_GT(changes, 0);
  EXPECT_GT(count_ops(*cpu, "Transpose"), 0);
}

}  // namespace
}  // namespace ferry::testing
