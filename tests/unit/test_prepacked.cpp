// Pre-packed weights in .ferry files (compiler/prepack.h, backends/cpu/prepacked.h): `ferry compile`
// stores the oneDNN kernels' packed weights on the nodes, a load uses them without reordering, and
// any mismatch (another key, a wrong size) falls back to packing at load with the same results.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/prepacked.h"
#include "backends/cpu/winograd.h"
#include "compiler/compile.h"
#include "compiler/session.h"
#include "format/compiled_model.h"
#include "ir/packed_layout.h"
#include "io/npy.h"
#include "onnx/onnx_import.h"
#include "onnx/onnx_pb.h"
#include "runtime/executor.h"
#include "graph_builder.h"

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

// Issue 40: a weight whose packed form the kernel uses is stored once, packed; the loaded graph's
// initializer is deferred and stays unmade on cpu (the kernel uses the packed bytes in place), and
// anything reading it (the reference kernels) gets exactly the original weights back.
TEST(PrepackedWeights, WeightsStoredOnceAsTheirPackedForm) {
  Compiled c = compile_demo(true);
  Compiled plain = compile_demo(false);
  auto packed_bytes = serialize_compiled_model(c.spec);
  auto plain_bytes = serialize_compiled_model(plain.spec);
  ASSERT_TRUE(packed_bytes.is_ok() && plain_bytes.is_ok());
  // Both forms stored would add report.packed_bytes; one form adds at most the blocked layouts' padding.
  EXPECT_LT(packed_bytes.value().size(), plain_bytes.value().size() + static_cast<size_t>(c.report.packed_bytes) / 2)
      << "packed " << c.report.packed_bytes;
  std::map<std::string, Tensor> originals;  // the compiled gears' weights stored packed only, by name
  for (const CompiledGear& g : c.spec.gears)
    for (const Node& n : g.model->graph.nodes)
      if (const Attribute* in = n.attr(kPackedInputAttr))
        originals[n.inputs[static_cast<size_t>(in->i)]] = g.model->graph.initializers.at(n.inputs[static_cast<size_t>(in->i)]);
  ASSERT_GT(originals.size(), 0u);

  auto load = [&](const std::string& device) {
    auto cm = parse_compiled_model_copy(packed_bytes.value().data(), packed_bytes.value().size(), "once.ferry");
    EXPECT_TRUE(cm.is_ok()) << cm.status().message();
    SessionOptions so;
    so.device = device;
    auto s = Session::open(std::move(cm).value(), so);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    return std::move(s).value();
  };
  // Weights still unmade after a cpu run: those whose kernel used the packed bytes in place. A plan
  // taking another path for its shape or thread count (Winograd, conv_rows) reads the plain form.
  auto pending = [&](Session& s) {
    int64_t n = 0;
    for (const CompiledGear& g : s.compiled().gears)
      for (const auto& [name, t] : g.model->graph.initializers) n += originals.count(name) && t.pending();
    return n;
  };
  {
    auto s = load("cpu");
    NamedTensors out;
    ASSERT_TRUE(s->run({{"image", images(4)}}, &out).is_ok());
    EXPECT_TRUE(bit_equal(out[0].second, run_onnx(c.onnx, images(4))));
    EXPECT_GT(pending(*s), 0) << "a cpu run unpacked every weight its kernels packed";
  }
  {
    auto s = load("cpu-ref");
    NamedTensors out;
    ASSERT_TRUE(s->run({{"image", images(4)}}, &out).is_ok());
    for (const CompiledGear& g : s->compiled().gears)
      for (const auto& [name, t] : g.model->graph.initializers) {
        auto o = originals.find(name);
        if (o == originals.end()) continue;
        ASSERT_EQ(t.dims(), o->second.dims()) << name;
        EXPECT_EQ(std::memcmp(t.raw(), o->second.raw(), static_cast<size_t>(t.nbytes())), 0) << name;
        EXPECT_FALSE(t.pending()) << name;
      }
  }
}

// A cpu run of a .ferry file reads none of the weights the file stores only packed in their plain
// form (issue 40: each such read unpacks a copy into new memory at every load): not the memory
// plan's recording run (which compares its inputs' addresses, a convolution's residual being written
// over), and not a 1x1 convolution on one pixel (squeeze-excitation after a global pool), whose
// small_gemm panels are made from the plain weights, so `ferry compile` stores those plain.
TEST(PrepackedWeights, ACpuRunOfTheFileUnpacksNoWeight) {
  using testing::GraphBuilder;
  using testing::random_tensor;
  GraphBuilder b;
  const std::string x = b.input("x", DType::kF32, {1, 32, 8, 8});
  const std::string w0 = b.initializer("w0", random_tensor({32, 32, 1, 1}, 5));
  const std::string x0 = b.node("Conv", {x, w0});
  const std::string w1 = b.initializer("w1", random_tensor({32, 32, 3, 3}, 1));
  const std::string y = b.node("Conv", {x0, w1}, {{"pads", GraphBuilder::ints({1, 1, 1, 1})}});
  const std::string r = b.node("Relu", {b.node("Add", {y, x0})});
  const std::string p = b.node("GlobalAveragePool", {r});
  const std::string w2 = b.initializer("w2", random_tensor({8, 32, 1, 1}, 2));
  const std::string b2 = b.initializer("b2", random_tensor({8}, 3));
  const std::string s1 = b.node("Relu", {b.node("Conv", {p, w2, b2})});
  const std::string w3 = b.initializer("w3", random_tensor({32, 8, 1, 1}, 6));
  const std::string b3 = b.initializer("b3", random_tensor({32}, 7));
  b.output(b.node("Mul", {r, b.node("Sigmoid", {b.node("Conv", {s1, w3, b3})})}));
  std::shared_ptr<Model> m = b.build();
  const Tensor in = random_tensor({1, 32, 8, 8}, 4);
  NamedTensors expect;
  {
    auto ex = Executor::create(m);
    ASSERT_TRUE(ex.is_ok()) << ex.status().message();
    ASSERT_TRUE(ex.value()->run({{x, in}}, &expect).is_ok());
  }
  CompileOptions o;
  CompileReport rep;
  auto spec = compile_model(*m, o, &rep);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  int64_t stored_packed = 0;  // the weights the file stores only packed (ir/packed_layout.h)
  for (const CompiledGear& g : spec.value().gears)
    for (const Node& n : g.model->graph.nodes) stored_packed += n.attr(kPackedInputAttr) != nullptr;
  EXPECT_GE(stored_packed, 2) << "the 1x1 and 3x3 convolutions' weights should be stored only packed";
  auto bytes = serialize_compiled_model(spec.value());
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto cm = parse_compiled_model_copy(bytes.value().data(), bytes.value().size(), "se.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().message();
  auto s = Session::open(std::move(cm).value());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const auto pending = [&] {
    int64_t n = 0;
    for (const CompiledGear& g : s.value()->compiled().gears)
      for (const auto& [name, t] : g.model->graph.initializers) n += t.pending();
    return n;
  };
  EXPECT_EQ(pending(), stored_packed) << "the load unpacked a weight stored only packed";
  NamedTensors out;
  ASSERT_TRUE(s.value()->run({{x, in}}, &out).is_ok());
  ASSERT_TRUE(s.value()->run({{x, in}}, &out).is_ok());  // a planned run after the recording one
  EXPECT_EQ(pending(), stored_packed) << "a cpu run unpacked a weight stored only packed";
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].second.dims(), expect[0].second.dims());
  for (int64_t i = 0; i < out[0].second.numel(); ++i)
    EXPECT_NEAR(out[0].second.data<float>()[i], expect[0].second.data<float>()[i], 1e-4) << i;
}

// A Session over an .onnx file (ferry serve's instances, the Python Session, the C API) packs each
// weight once at open and keeps the forms on the nodes: every executor of its pool uses them in
// place (not one copy each), and a weight a node holds in its packed form alone is freed, unpacked
// only if something reads it (issue 40).
// (Shapes known at open: a dynamic batch packs on the first run, per executor.)
TEST(PrepackedWeights, SessionFromOnnxSharesOnePackedFormAcrossExecutors) {
  onnx::ModelProto proto;
  {
    std::ifstream in(kDemo, std::ios::binary);
    ASSERT_TRUE(proto.ParseFromIstream(&in));
  }
  proto.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(4);
  const std::string path = ::testing::TempDir() + "prepacked_session_" + std::to_string(::getpid()) + ".onnx";
  {
    std::ofstream out(path, std::ios::binary);
    ASSERT_TRUE(proto.SerializeToOstream(&out));
  }
  const cpu::PackCounts before = cpu::pack_counts();
  auto s = Session::open_file(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const cpu::PackCounts after = cpu::pack_counts();
  const Model& m = *s.value()->compiled().gears.at(0).model;
  EXPECT_GT(packed_nodes(m), 0);
  EXPECT_EQ(after.stored - before.stored, packed_nodes(m)) << "the pool's executor packed its own copies";
  int64_t pending = 0;
  for (const auto& [name, t] : m.graph.initializers) pending += t.pending();
  EXPECT_GT(pending, 0) << "no original was freed once packed";
  NamedTensors out;
  ASSERT_TRUE(s.value()->run({{"image", images(4)}}, &out).is_ok());
  EXPECT_TRUE(bit_equal(out[0].second, run_onnx(load_onnx_model(kDemo).value(), images(4))));
  int64_t still = 0;
  for (const auto& [name, t] : m.graph.initializers) still += t.pending();
  EXPECT_EQ(still, pending) << "a run unpacked a weight held packed only";
}

// A float ONNX model written proto by proto (the onnx_import path a served .onnx takes), its inputs'
// and outputs' dims < 0 given as the symbolic batch "N"; weights random, times `scale`.
class OnnxFile {
 public:
  explicit OnnxFile(const std::string& name) : g_(proto_.mutable_graph()), name_(name) {
    proto_.set_ir_version(7);
    proto_.add_opset_import()->set_version(13);
    g_->set_name(name);
  }
  void weight(const std::string& name, const std::vector<int64_t>& dims, uint32_t seed, float scale) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    const Tensor v = testing::random_tensor(dims, seed);
    for (int64_t i = 0; i < v.numel(); ++i) t->add_float_data(scale * v.data<float>()[i]);
  }
  void input(const std::string& name, const std::vector<int64_t>& dims) { value(g_->add_input(), name, dims); }
  void output(const std::string& name, const std::vector<int64_t>& dims) { value(g_->add_output(), name, dims); }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in, const std::string& out) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(out + "_node");
    for (const std::string& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  // Written under the test's temporary directory; the path.
  std::string write() const {
    const std::string path = ::testing::TempDir() + name_ + "_" + std::to_string(::getpid()) + ".onnx";
    std::ofstream out(path, std::ios::binary);
    EXPECT_TRUE(proto_.SerializeToOstream(&out));
    return path;
  }

 private:
  static void value(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (d < 0) dim->set_dim_param("N");
      else dim->set_dim_value(d);
    }
  }
  onnx::ModelProto proto_;
  onnx::GraphProto* g_;
  std::string name_;
};

// An .onnx model with a dynamic batch axis, as ferry serve's models with max_batch_size > 0:
// x [N, 8, 16, 16] -> Conv 1x1 8->64 -> Conv 3x3 64->64 (pads 1) -> Relu -> Conv 1x1 64->128 ->
// GlobalAveragePool -> Flatten -> Gemm 128->10. On the cpu backend the 3x3 runs ferry's Winograd
// (channels-last on both sides), the 1x1s oneDNN's packed forms, the Gemm small_gemm's panels.
std::string write_dynamic_batch_cnn() {
  OnnxFile f("dynamic_batch_cnn");
  f.input("x", {-1, 8, 16, 16});
  f.weight("w0", {64, 8, 1, 1}, 6, 0.05f);
  f.weight("w3", {64, 64, 3, 3}, 1, 0.05f);
  f.weight("b3", {64}, 2, 0.05f);
  f.weight("w1", {128, 64, 1, 1}, 3, 0.05f);
  f.weight("fc", {10, 128}, 4, 0.05f);
  f.weight("fc_b", {10}, 5, 0.05f);
  f.node("Conv", {"x", "w0"}, "c0");
  onnx::AttributeProto* pads = f.node("Conv", {"c0", "w3", "b3"}, "c3")->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  f.node("Relu", {"c3"}, "r3");
  f.node("Conv", {"r3", "w1"}, "c1");
  f.node("GlobalAveragePool", {"c1"}, "gap");
  f.node("Flatten", {"gap"}, "flat");
  onnx::AttributeProto* trans = f.node("Gemm", {"flat", "fc", "fc_b"}, "y")->add_attribute();
  trans->set_name("transB");
  trans->set_type(onnx::AttributeProto::INT);
  trans->set_i(1);
  f.output("y", {-1, 10});
  return f.write();
}

// A Session over `path` (the file is removed once read) whose next two runs after crossed() starts
// overlap: the first node of each waits (up to 20 s) for the other, so the pool hands them two
// executors, the batch sizes in one order on one and in the other order on the second.
class OverlappingRuns {
 public:
  OverlappingRuns(const std::string& path, int threads) {
    SessionOptions so;
    so.threads = threads;
    so.observer = [this](const Node& node, const std::vector<Value>&, double) {
      if (!gate_.load() || node.name != first_node_ || arrived_.fetch_add(1) >= 2) return;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (arrived_.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (arrived_.load() >= 2) overlapped_ = true;
    };
    auto opened = Session::open_file(path, so);
    ::unlink(path.c_str());
    EXPECT_TRUE(opened.is_ok()) << opened.status().message();
    if (!opened.is_ok()) return;
    session_ = opened.value();
    first_node_ = model().graph.nodes.at(0).name;
  }
  OverlappingRuns(const OverlappingRuns&) = delete;
  OverlappingRuns& operator=(const OverlappingRuns&) = delete;

  bool opened() const { return session_ != nullptr; }
  const Model& model() const { return *session_->compiled().gears.at(0).model; }
  // The first output of a run on input "x".
  Tensor run(const Tensor& x) {
    NamedTensors out;
    const Status st = session_->run({{"x", x}}, &out);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return out.empty() ? Tensor() : out[0].second;
  }
  // Two threads at once: one runs `xs[0]` then `xs[1]`, the other `xs[1]` then `xs[0]`; their
  // outputs in `a` and `b` by the index of the input. Whether the first runs overlapped: overlapped().
  void crossed(const Tensor (&xs)[2], Tensor (&a)[2], Tensor (&b)[2]) {
    gate_ = true;
    std::thread ta([&] {
      a[0] = run(xs[0]);
      a[1] = run(xs[1]);
    });
    std::thread tb([&] {
      b[1] = run(xs[1]);
      b[0] = run(xs[0]);
    });
    ta.join();
    tb.join();
  }
  bool overlapped() const { return overlapped_.load(); }

 private:
  std::shared_ptr<Session> session_;
  std::string first_node_;
  std::atomic<bool> gate_{false};
  std::atomic<int> arrived_{0};
  std::atomic<bool> overlapped_{false};
};

// The executors of a dynamic-batch Session (ferry serve's instances) share one form of each weight:
// what the open packed with the batch axis bound (compiler/prepack.h) on the nodes, the rest made by
// whichever executor and batch size needed it first (ExecutorOptions::shared_forms,
// backends/shared_forms.h): a second executor, running batch sizes in another order while the first
// runs, packs nothing (no oneDNN reorder, no Winograd transform) and answers bit for bit as the first.
TEST(PrepackedWeights, DynamicBatchSessionExecutorsShareFormsAcrossBatchSizes) {
  OverlappingRuns runs(write_dynamic_batch_cnn(), 1);
  ASSERT_TRUE(runs.opened());
  const Model& model = runs.model();
  // Packed at open with the batch axis taken as 1: the 1x1 convolutions' oneDNN forms are on the
  // nodes, their originals freed (unpacked only if something reads them).
  EXPECT_GT(packed_nodes(model), 0) << "nothing packed at open: the dynamic batch axis was not bound";
  int64_t pending = 0;
  for (const auto& [name, t] : model.graph.initializers) pending += t.pending();
  EXPECT_GT(pending, 0) << "no original was freed once packed";
  const Tensor xs[2] = {testing::random_tensor({3, 8, 16, 16}, 7), testing::random_tensor({1, 8, 16, 16}, 7)};
  // One executor: batch 1, then batch 3 (each makes the forms its shapes ask for).
  const Tensor y1 = runs.run(xs[1]);
  const Tensor y3 = runs.run(xs[0]);
  const cpu::PackCounts packs = cpu::pack_counts();
  const int64_t transforms = cpu::WinogradConv3x3::packings();
  ASSERT_GT(transforms, 0) << "the 3x3 convolution did not run ferry's Winograd: the test shows nothing";
  // Two executors at once, the batch sizes in the other order on one of them.
  Tensor a[2], b[2];
  runs.crossed(xs, a, b);
  ASSERT_TRUE(runs.overlapped()) << "the two runs did not overlap: one executor ran both";
  EXPECT_EQ(cpu::pack_counts().reordered, packs.reordered) << "the second executor packed its own oneDNN forms";
  EXPECT_EQ(cpu::WinogradConv3x3::packings(), transforms) << "the second executor transformed its own Winograd weights";
  EXPECT_TRUE(bit_equal(a[1], y1) && bit_equal(b[1], y1));
  EXPECT_TRUE(bit_equal(a[0], y3) && bit_equal(b[0], y3));
}

// A transformer-like block with a dynamic batch axis: x [N, 16, 64] -> MatMul [64, 96] + bias -> Relu
// -> MatMul [96, 40]. At 1 thread on the cpu backend, batch 1's 16 rows take RowGemm on the first
// (16-24 rows where oneDNN keeps the weights plain, 16-256 elsewhere) and oneDNN's form on the second;
// batch 2's 32 rows oneDNN's on both where its weights are plain.
std::string write_dynamic_batch_mlp() {
  OnnxFile f("dynamic_batch_mlp");
  f.input("x", {-1, 16, 64});
  f.weight("w1", {64, 96}, 21, 0.1f);
  f.weight("b1", {96}, 22, 0.1f);
  f.weight("w2", {96, 40}, 23, 0.1f);
  f.node("MatMul", {"x", "w1"}, "h");
  f.node("Add", {"h", "b1"}, "hb");
  f.node("Relu", {"hb"}, "r");
  f.node("MatMul", {"r", "w2"}, "y");
  f.output("y", {-1, 16, 40});
  return f.write();
}

// The MatMul kernel's forms too (oneDNN's packed or plain copies, RowGemm's, the per-thread column
// blocks at 2 threads): a second executor of a dynamic-batch Session, running batch sizes in another
// order while the first runs, makes none of its own and answers bit for bit as the first.
void share_matmul_forms(int threads) {
  OverlappingRuns runs(write_dynamic_batch_mlp(), threads);
  ASSERT_TRUE(runs.opened());
  const Tensor xs[2] = {testing::random_tensor({2, 16, 64}, 9), testing::random_tensor({1, 16, 64}, 9)};
  const int64_t packings0 = cpu::matmul_weight_packings() + cpu::pack_counts().reordered;
  const Tensor y1 = runs.run(xs[1]);
  const Tensor y2 = runs.run(xs[0]);
  const int64_t packings = cpu::matmul_weight_packings() + cpu::pack_counts().reordered;
  ASSERT_GT(packings, packings0) << "the first executor packed no MatMul form: the test shows nothing";
  Tensor a[2], b[2];
  runs.crossed(xs, a, b);
  ASSERT_TRUE(runs.overlapped()) << "the two runs did not overlap: one executor ran both";
  EXPECT_EQ(cpu::matmul_weight_packings() + cpu::pack_counts().reordered, packings)
      << "the second executor packed its own MatMul forms";
  EXPECT_TRUE(bit_equal(a[1], y1) && bit_equal(b[1], y1));
  EXPECT_TRUE(bit_equal(a[0], y2) && bit_equal(b[0], y2));
}

TEST(PrepackedWeights, DynamicBatchSessionExecutorsShareMatMulForms) { share_matmul_forms(1); }

TEST(PrepackedWeights, DynamicBatchSessionExecutorsShareMatMulColumnBlocks) {
  // Batch 2's 32 rows x [64, 96] split over the 2 threads' column blocks (on plain weights too).
  ::setenv("FERRY_MATMUL_NSPLIT", "128", 1);
  const int64_t splits = cpu::matmul_column_split_runs();
  share_matmul_forms(2);
  EXPECT_GT(cpu::matmul_column_split_runs(), splits) << "no product ran split: the test shows nothing";
  ::unsetenv("FERRY_MATMUL_NSPLIT");
}

// ferry's blocked layout: a [4, 3] tensor stored as 2-row blocks of its first dim (padded to 4x4).
TEST(PackedLayout, UnpacksBlocksAndRefusesWhatReachesOutside) {
  // dims [4, 3]; plain strides {3, 1}; outer strides {8 (block of 2 rows x 4 padded cols), 2}; blocks: dim 0 by 2.
  const std::vector<int64_t> layout{2, 4, 3, 3, 1, 8, 2, 0, 1, 2, 0};
  std::vector<float> packed(16, -1.f);
  for (int r = 0; r < 4; ++r)
    for (int col = 0; col < 3; ++col) packed[static_cast<size_t>((r / 2) * 8 + col * 2 + r % 2)] = static_cast<float>(r * 3 + col);
  ASSERT_TRUE(check_packed_layout(layout, 12, 4, 64, "w").is_ok());
  std::vector<float> plain(12, 0.f);
  unpack_layout(layout, packed.data(), plain.data(), 4);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(plain[static_cast<size_t>(i)], static_cast<float>(i));
  EXPECT_TRUE(check_packed_layout(layout, 12, 4, 56, "w").is_ok());   // the last element: offset 13
  EXPECT_FALSE(check_packed_layout(layout, 12, 4, 52, "w").is_ok());  // lies past the bytes
  EXPECT_FALSE(check_packed_layout(layout, 11, 4, 64, "w").is_ok());  // another element count
  std::vector<int64_t> gap = layout;
  gap[3] = 4;  // plain rows 4 apart: not dense
  EXPECT_FALSE(check_packed_layout(gap, 12, 4, 64, "w").is_ok());
  std::vector<int64_t> bad_idx = layout;
  bad_idx.back() = 5;  // a block of a dim that does not exist
  EXPECT_FALSE(check_packed_layout(bad_idx, 12, 4, 64, "w").is_ok());
  const Status st = check_packed_layout({2, 4}, 12, 4, 64, "graph 'g' initializer 'w'");
  EXPECT_NE(st.message().find("initializer 'w'"), std::string::npos) << st.message();
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
