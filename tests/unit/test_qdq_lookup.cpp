// The qdq_lookup pass (src/passes/qdq_lookup.cpp) and com.ferry.QLookup (src/ops/quantize_fused.cpp):
// DQ -> elementwise float op -> Q becomes a 256-entry table, bit for bit the three nodes on cpu-ref,
// over every x value, uint8 and int8 sources and outputs, SiLU / HardSwish as x * gate(x); inside a
// channels-last region with no Transpose around it; the DQ stays where another node reads it;
// per-channel or non-constant parameters and ops outside the list are left alone.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "pass_test_util.h"

namespace ferry {
namespace {

using testing::ModelBuilder;
using testing::run_model;
using testing::run_pass;

Tensor zp_of(DType dt, int v) {
  Tensor t = Tensor::allocate(dt, {});
  static_cast<uint8_t*>(t.mutable_raw())[0] = static_cast<uint8_t>(v);
  return t;
}

// x (2 x 256: every value twice) -> DQ -> op -> Q; `extra`: the DQ's output is a graph output too.
std::shared_ptr<Model> lookup_model(const std::string& op, DType xdt, DType ydt, bool extra = false) {
  ModelBuilder b(14);
  auto x = b.input("x", {2, 256}, xdt);
  auto d = b.node("DequantizeLinear", {x, b.scalar(0.037f), b.constant(zp_of(xdt, xdt == DType::kU8 ? 131 : 5))});
  std::map<std::string, Attribute> attrs;
  if (op == "LeakyRelu") {
    Attribute a;
    a.type = AttrType::kFloat;
    a.f = 0.13f;
    attrs["alpha"] = a;
  }
  auto u = b.node(op, {d}, attrs);
  b.output(b.node("QuantizeLinear", {u, b.scalar(op == "Sigmoid" ? 1.f / 256 : 0.029f),
                                     b.constant(zp_of(ydt, ydt == DType::kU8 ? (op == "Sigmoid" ? 0 : 117) : -9))}));
  if (extra) b.output(d);
  return b.build();
}

Tensor all_values(DType dt) {
  Tensor t = Tensor::allocate(dt, {2, 256});
  for (int i = 0; i < 512; ++i) static_cast<uint8_t*>(t.mutable_raw())[i] = static_cast<uint8_t>(i % 2 ? 255 - i / 2 : i / 2);
  return t;
}

int count(const Model& m, const std::string& op) {
  int n = 0;
  for (const Node& node : m.graph.nodes) n += node.op_type == op;
  return n;
}

TEST(QdqLookup, TableIsTheThreeNodesBitForBit) {
  for (const char* op : {"Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Erf"})
    for (DType xdt : {DType::kU8, DType::kI8})
      for (DType ydt : {DType::kU8, DType::kI8}) {
        SCOPED_TRACE(::testing::Message() << op << " x " << dtype_name(xdt) << " y " << dtype_name(ydt));
        auto model = lookup_model(op, xdt, ydt);
        int changes = 0;
        auto fused = run_pass(*model, "qdq_lookup", &changes);
        ASSERT_EQ(changes, 1);
        ASSERT_EQ(fused->graph.nodes.size(), 1u);
        EXPECT_EQ(fused->graph.nodes[0].op_type, "QLookup");
        const NamedTensors feeds = {{"x", all_values(xdt)}};
        const auto want = run_model(model, feeds, "cpu-ref");
        for (const char* dev : {"cpu-ref", "cpu"}) {
          const auto got = run_model(fused, feeds, dev);
          ASSERT_EQ(got.size(), 1u);
          ASSERT_EQ(want.size(), 1u);
          ASSERT_EQ(got[0].second.dtype(), ydt);
          ASSERT_EQ(got[0].second.dims(), want[0].second.dims());
          EXPECT_EQ(std::memcmp(got[0].second.raw(), want[0].second.raw(), 512), 0) << dev;
        }
        // The outputs are not constant (the case exercises the table).
        const uint8_t* w = static_cast<const uint8_t*>(want[0].second.raw());
        int distinct = 0;
        for (int i = 1; i < 512; ++i) distinct += w[i] != w[0];
        EXPECT_GT(distinct, 100);
      }
}

// x * Sigmoid(x) (SiLU, either operand order) and x * HardSigmoid(x) on a quantized tensor: one table.
TEST(QdqLookup, SiluOfQuantizedTensorIsOneTable) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    ModelBuilder b(14);
    auto x = b.input("x", {2, 256}, DType::kU8);
    auto d = b.node("DequantizeLinear", {x, b.scalar(0.05f), b.constant(zp_of(DType::kU8, 140))});
    auto gate = b.node(variant == 2 ? "HardSigmoid" : "Sigmoid", {d});
    auto m = b.node("Mul", variant == 1 ? std::vector<std::string>{gate, d} : std::vector<std::string>{d, gate});
    b.output(b.node("QuantizeLinear", {m, b.scalar(0.03f), b.constant(zp_of(DType::kU8, 20))}));
    auto model = b.build();
    int changes = 0;
    auto fused = run_pass(*model, "qdq_lookup", &changes);
    ASSERT_EQ(changes, 1);
    ASSERT_EQ(fused->graph.nodes.size(), 1u);
    const NamedTensors feeds = {{"x", all_values(DType::kU8)}};
    const auto want = run_model(model, feeds, "cpu-ref"), got = run_model(fused, feeds, "cpu");
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(want.size(), 1u);
    EXPECT_EQ(std::memcmp(got[0].second.raw(), want[0].second.raw(), 512), 0);
  }
}

// In a channels-last int8 region (nhwc_layout) the table stays inside it: no Transpose around it.
TEST(QdqLookup, StaysInsideChannelsLastRegion) {
  ModelBuilder b(14);
  auto x = b.input("x", {1, 8, 6, 6}, DType::kU8);
  std::string v = x;
  for (int layer = 0; layer < 2; ++layer) {
    auto dx = b.node("DequantizeLinear", {v, b.scalar(0.02f), b.constant(zp_of(DType::kU8, 128))});
    Tensor w = Tensor::allocate(DType::kI8, {8, 8, 1, 1});
    for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<int8_t>()[i] = static_cast<int8_t>((i * 37) % 101 - 50);
    Tensor ws = Tensor::allocate(DType::kF32, {8});
    for (int64_t i = 0; i < 8; ++i) ws.mutable_data<float>()[i] = 0.01f;
    auto dw = b.node("DequantizeLinear", {b.constant(w), b.constant(ws)}, {{"axis", testing::int_attr(0)}});
    auto q = b.node("QuantizeLinear", {b.node("Conv", {dx, dw}), b.scalar(0.05f), b.constant(zp_of(DType::kU8, 128))});
    if (layer == 1) {
      v = q;
      break;
    }
    auto d = b.node("DequantizeLinear", {q, b.scalar(0.05f), b.constant(zp_of(DType::kU8, 128))});
    v = b.node("QuantizeLinear", {b.node("Mul", {d, b.node("Sigmoid", {d})}), b.scalar(0.02f), b.constant(zp_of(DType::kU8, 128))});
  }
  b.output(v);
  auto model = b.build();
  auto fused = run_pass(*run_pass(*run_pass(*model, "qdq_fusion"), "qdq_lookup"), "nhwc_layout");
  EXPECT_EQ(count(*fused, "QConvFused"), 2);
  EXPECT_EQ(count(*fused, "QLookup"), 1);
  EXPECT_EQ(count(*fused, "Transpose"), 2);  // into the region and out of it
  Tensor xt = Tensor::allocate(DType::kU8, {1, 8, 6, 6});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.mutable_data<uint8_t>()[i] = static_cast<uint8_t>((i * 53) % 256);
  const NamedTensors feeds = {{"x", xt}};
  const auto want = run_model(model, feeds, "cpu-ref"), got = run_model(fused, feeds, "cpu-ref");
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_EQ(std::memcmp(got[0].second.raw(), want[0].second.raw(), static_cast<size_t>(want[0].second.nbytes())), 0);
}

TEST(QdqLookup, SharedDequantizeStaysAndOthersAreLeftAlone) {
  auto model = lookup_model("Tanh", DType::kU8, DType::kU8, /*extra=*/true);
  int changes = 0;
  auto fused = run_pass(*model, "qdq_lookup", &changes);
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(count(*fused, "QLookup"), 1);
  EXPECT_EQ(count(*fused, "DequantizeLinear"), 1);  // the graph output reads it
  const NamedTensors feeds = {{"x", all_values(DType::kU8)}};
  const auto want = run_model(model, feeds, "cpu-ref"), got = run_model(fused, feeds, "cpu");
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(std::memcmp(got[k].second.raw(), want[k].second.raw(), static_cast<size_t>(want[k].second.nbytes())), 0);

  // Softmax is not elementwise; a per-channel Q has no single table.
  auto softmax = lookup_model("Softmax", DType::kU8, DType::kU8);
  run_pass(*softmax, "qdq_lookup", &changes);
  EXPECT_EQ(changes, 0);
  ModelBuilder b(14);
  auto x = b.input("x", {2, 3}, DType::kU8);
  auto d = b.node("DequantizeLinear", {x, b.scalar(0.1f), b.constant(zp_of(DType::kU8, 128))});
  Tensor s = Tensor::allocate(DType::kF32, {3});
  Tensor z = Tensor::allocate(DType::kU8, {3});
  for (int i = 0; i < 3; ++i) s.mutable_data<float>()[i] = 0.01f * static_cast<float>(i + 1), z.mutable_data<uint8_t>()[i] = 100;
  b.output(b.node("QuantizeLinear", {b.node("Sigmoid", {d}), b.constant(s), b.constant(z)}, {{"axis", testing::int_attr(1)}}));
  auto per_channel = b.build();
  run_pass(*per_channel, "qdq_lookup", &changes);
  EXPECT_EQ(changes, 0);
}

}  // namespace
}  // namespace ferry
