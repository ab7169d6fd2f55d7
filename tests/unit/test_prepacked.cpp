// Pre-packed weights in .ferry files (compiler/prepack.h, backends/cpu/prepacked.h): `ferry compile`
// stores the oneDNN kernels' packed weights on the nodes, a load uses them without reordering, and
// any mismatch (another key, a wrong size) falls back to packing at load with the same results.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/prepacked.h"
#include "compiler/compile.h"
#include "compiler/session.h"
#include "format/compiled_model.h"
#include "io/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

const std::string kDemo = std::string(FERRY_SOURCE_DIR) + "/demo/digits_cnn.onnx";
const std::string kBatch = std::string(FERRY_SOURCE_DIR) + "/demo/samples/digits_batch.npy";

Tensor images(int64_t n) {
  auto all = read_npy(kBatch);
  EXPECT_TRUE(all.is_ok());
  Tensor out = Tensor::allocate(DType::kF32, {n, 1, 28, 28});
  std::memcpy(out.mutable_raw(), all.value().raw(), static_cast<size_t>(out.nbytes()));
  return out;
}

struct Compiled {
  std::shared_ptr<Model> onnx;
  CompiledModelSpec spec;
  CompileReport report;
};

Compiled compile_demo(bool prepack) {
  Compiled c;
  auto m = load_onnx_model(kDemo);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  c.onnx = m.value();
  CompileOptions o;
  o.batch_gears = {1, 4};
  o.prepack = prepack;
  auto spec = compile_model(*c.onnx, o, &c.report);
  EXPECT_TRUE(spec.is_ok()) << spec.status().message();
  c.spec = std::move(spec).value();
  return c;
}

int64_t packed_nodes(const Model& m) {
  int64_t n = 0;
  for (const Node& node : m.graph.nodes) n += node.attr(cpu::kPackedAttr) != nullptr;
  return n;
}

// Loads the serialized spec, runs batch 4, and says how many weights were used as stored / reordered.
Tensor load_and_run(const CompiledModelSpec& spec, cpu::PackCounts* delta) {
  auto bytes = serialize_compiled_model(spec);
  EXPECT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto cm = parse_compiled_model_copy(bytes.value().data(), bytes.value().size(), "prepacked.ferry");
  EXPECT_TRUE(cm.is_ok()) << cm.status().message();
  const cpu::PackCounts before = cpu::pack_counts();
  auto s = Session::open(std::move(cm).value());
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  const cpu::PackCounts after = cpu::pack_counts();
  delta->stored = after.stored - before.stored;
  delta->reordered = after.reordered - before.reordered;
  NamedTensors out;
  Status st = s.value()->run({{"image", images(4)}}, &out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out.empty() ? Tensor() : out[0].second;
}

Tensor run_onnx(const std::shared_ptr<Model>& m, const Tensor& x) {
  auto ex = Executor::create(m);
  EXPECT_TRUE(ex.is_ok()) << ex.status().message();
  NamedTensors out;
  EXPECT_TRUE(ex.value()->run({{"image", x}}, &out).is_ok());
  return out[0].second;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

TEST(PrepackedWeights, StoredAtCompileAndUsedAtLoadWithoutReordering) {
  Compiled c = compile_demo(true);
  ASSERT_EQ(c.spec.gears.size(), 2u);
  EXPECT_GT(c.report.packed_nodes, 0);
  EXPECT_GT(c.report.packed_bytes, 0);
  for (const CompiledGear& g : c.spec.gears) EXPECT_GT(packed_nodes(*g.model), 0) << "gear " << g.batch;
  cpu::PackCounts delta;
  const Tensor got = load_and_run(c.spec, &delta);
  EXPECT_EQ(delta.stored, c.report.packed_nodes);  // one executor per gear: every packed node used as stored
  EXPECT_EQ(delta.reordered, 0);
  EXPECT_TRUE(bit_equal(got, run_onnx(c.onnx, images(4))));
}

TEST(PrepackedWeights, WithoutPrepackTheLoadPacks) {
  Compiled c = compile_demo(false);
  EXPECT_EQ(c.report.packed_nodes, 0);
  for (const CompiledGear& g : c.spec.gears) EXPECT_EQ(packed_nodes(*g.model), 0);
  cpu::PackCounts delta;
  const Tensor got = load_and_run(c.spec, &delta);
  EXPECT_EQ(delta.stored, 0);
  EXPECT_GT(delta.reordered, 0);
  EXPECT_TRUE(bit_equal(got, run_onnx(c.onnx, images(4))));
}

// Another oneDNN, another ISA or another layout changes the key: the stored bytes are ignored.
TEST(PrepackedWeights, ForeignKeyFallsBackToPackingAtLoad) {
  Compiled c = compile_demo(true);
  int64_t changed = 0;
  for (CompiledGear& g : c.spec.gears)
    for (Node& n : g.model->graph.nodes)
      if (auto it = n.attrs.find(cpu::kPackedKeyAttr); it != n.attrs.end()) {
        const size_t at = it->second.s.find("|isa ");
        ASSERT_NE(at, std::string::npos) << it->second.s.substr(0, 80);
        it->second.s.replace(at, 5, "|isa 9");
        ++changed;
      }
  ASSERT_GT(changed, 0);
  cpu::PackCounts delta;
  const Tensor got = load_and_run(c.spec, &delta);
  EXPECT_EQ(delta.stored, 0);
  EXPECT_EQ(delta.reordered, changed);
  EXPECT_TRUE(bit_equal(got, run_onnx(c.onnx, images(4))));
}

// Bytes of the wrong size (or type) are never used, whatever the key says.
TEST(PrepackedWeights, WrongSizeFallsBackToPackingAtLoad) {
  Compiled c = compile_demo(true);
  for (CompiledGear& g : c.spec.gears)
    for (Node& n : g.model->graph.nodes)
      if (auto it = n.attrs.find(cpu::kPackedAttr); it != n.attrs.end())
        it->second.t = Tensor::allocate(DType::kU8, {it->second.t.numel() - 64});
  cpu::PackCounts delta;
  const Tensor got = load_and_run(c.spec, &delta);
  EXPECT_EQ(delta.stored, 0);
  EXPECT_GT(delta.reordered, 0);
  EXPECT_TRUE(bit_equal(got, run_onnx(c.onnx, images(4))));
}

// The key pins the kernel kind, oneDNN's version, the ISA and the exact layout.
TEST(PrepackedWeights, KeyNamesKindVersionIsaAndLayout) {
  const dnnl::memory::desc a({8, 4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc b({8, 4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ba);
  const std::string ka = cpu::packed_key("dnnl_matmul", a);
  EXPECT_EQ(ka.rfind("dnnl_matmul|oneDNN ", 0), 0u) << ka.substr(0, 60);
  EXPECT_NE(ka.find("|isa "), std::string::npos);
  EXPECT_EQ(ka, cpu::packed_key("dnnl_matmul", a));
  EXPECT_NE(ka, cpu::packed_key("dnnl_matmul", b));
  EXPECT_NE(ka, cpu::packed_key("dnnl_conv", a));
}

}  // namespace
}  // namespace ferry
