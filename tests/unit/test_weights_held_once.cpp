// Each weight held once (issue 40): an .onnx file's initializer bytes read from its mapping, not
// parsed into the ModelProto beside the graph's copy (onnx_import.cpp, strip_raw_data), with the
// same tensors as the in-memory parse and the same errors; the executor's release_weights drops
// a constant from its graph once the MatMul/Gemm kernels reading it hold their packed form, runs
// every later shape (other plans re-derived from a packed form) bit for bit as with the original
// kept, and never changes the caller's model (resident_bytes counts what each graph still holds);
// the packed forms unpack to the original exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/row_gemm.h"
#include "backends/cpu/small_gemm.h"
#include "onnx/onnx_import.h"
#include "onnx/onnx_pb.h"
// After onnx_pb.h, which defines ONNX_API.
#include "onnx/onnx-data.pb.h"
#include "pass_test_util.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

using testing::ModelBuilder;

Tensor ramp(std::vector<int64_t> dims, float scale, float offset) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.mutable_data<float>()[i] = offset + scale * static_cast<float>((i * 7919) % 1009) / 1009.f;
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

std::string temp_path(const std::string& name) {
  return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + name + "_" +
         std::to_string(::getpid()) + ".onnx";
}

void add_f32_initializer(onnx::GraphProto* g, const std::string& name, const Tensor& t, bool raw) {
  auto* tp = g->add_initializer();
  tp->set_name(name);
  tp->set_data_type(1);
  for (int64_t d : t.dims()) tp->add_dims(d);
  if (raw) {
    tp->set_raw_data(t.raw(), static_cast<size_t>(t.nbytes()));
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) tp->add_float_data(t.data<float>()[i]);
  }
}

// y = (x @ W) + B: W in raw_data, B in float_data, a Constant node's tensor in raw_data too.
onnx::ModelProto two_weight_model(int opset) {
  onnx::ModelProto m;
  m.set_ir_version(opset < 8 ? 3 : 8);
  m.set_producer_name("unit-test");
  auto* os = m.add_opset_import();
  os->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  add_f32_initializer(g, "W", ramp({6, 5}, 1.f, -0.5f), true);
  add_f32_initializer(g, "B", ramp({5}, 0.1f, 0.f), false);
  auto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  tt->mutable_shape()->add_dim()->set_dim_value(6);
  auto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->add_input("x");
  mm->add_input("W");
  mm->add_output("xw");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("xw");
  add->add_input("B");
  add->add_output("y");
  auto* y = g->add_output();
  y->set_name("y");
  auto* yt = y->mutable_type()->mutable_tensor_type();
  yt->set_elem_type(1);
  yt->mutable_shape()->add_dim()->set_dim_value(3);
  yt->mutable_shape()->add_dim()->set_dim_value(5);
  m.set_doc_string("written after the graph");
  return m;
}

StatusOr<std::shared_ptr<Model>> load_written(const onnx::ModelProto& m, const std::string& name, size_t keep = 0) {
  std::string bytes = m.SerializeAsString();
  if (keep) bytes.resize(keep);
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto model = load_onnx_model(path);
  ::unlink(path.c_str());
  return model;
}

TEST(WeightsHeldOnce, FileImportReadsInitializersFromTheMappingAsTheInMemoryParseDoes) {
  for (int opset : {17, 7}) {  // 7: the opset converter reads the whole file, parsed as usual
    SCOPED_TRACE(opset);
    const onnx::ModelProto m = two_weight_model(opset);
    const std::string bytes = m.SerializeAsString();
    auto parsed = parse_onnx_model(bytes.data(), bytes.size(), "", "test model");
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
    auto loaded = load_written(m, "held_once_import");
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    const Graph& a = parsed.value()->graph;
    const Graph& b = loaded.value()->graph;
    ASSERT_EQ(a.initializers.size(), b.initializers.size());
    for (const auto& [name, t] : a.initializers) {
      ASSERT_TRUE(b.initializers.count(name)) << name;
      EXPECT_TRUE(same_bytes(t, b.initializers.at(name))) << name;
    }
    EXPECT_TRUE(same_bytes(b.initializers.at("W"), ramp({6, 5}, 1.f, -0.5f)));
    EXPECT_EQ(loaded.value()->doc_string, "written after the graph");
    ASSERT_EQ(a.nodes.size(), b.nodes.size());
  }
  // A file cut short inside an initializer's bytes: the usual parse's error, not a crash.
  const onnx::ModelProto m = two_weight_model(17);
  auto cut = load_written(m, "held_once_cut", m.SerializeAsString().size() / 2);
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("is not a valid ONNX model"), std::string::npos) << cut.status().to_string();
}

// x [batch, 64] -> MatMul W1 [64, 96] -> Gemm (transB) W2 [40, 96] + C -> y; W1 also read by a
// second MatMul of another input, so it goes only once both kernels hold it.
std::shared_ptr<Model> two_layer_model() {
  ModelBuilder b;
  auto x = b.input("x", {1, 64});
  auto x2 = b.input("x2", {2, 64});
  const std::string w1 = b.constant(ramp({64, 96}, 0.5f, -0.25f));
  const std::string w2 = b.constant(ramp({40, 96}, 0.25f, -0.1f));
  const std::string c = b.constant(ramp({40}, 0.1f, 0.f));
  auto h = b.node("MatMul", {x, w1});
  Attribute trans;
  trans.type = AttrType::kInt;
  trans.i = 1;
  auto y = b.node("Gemm", {h, w2, c}, {{"transB", trans}});
  auto y2 = b.node("MatMul", {x2, w1});
  b.output(y);
  b.output(y2);
  std::shared_ptr<Model> m = b.build();
  // A symbolic batch on x: no plan at creation, each batch size its own plan (small_gemm panels up
  // to 8 rows, oneDNN's packed weights above) made from whichever form is held.
  for (Shape* s : {&m->graph.inputs[0].type.shape.value(), &m->graph.value_types.at("x").shape.value()})
    s->dims[0] = Dim::symbolic("batch");
  return m;
}

TEST(WeightsHeldOnce, ReleasedWeightsRunEveryShapeBitForBit) {
  std::shared_ptr<Model> model = two_layer_model();
  const size_t initializers = model->graph.initializers.size();
  ExecutorOptions kept_o, released_o;
  kept_o.threads = released_o.threads = 1;
  released_o.release_weights = true;
  auto kept = Executor::create(model, kept_o);
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  auto released = Executor::create(model, released_o);
  ASSERT_TRUE(released.is_ok()) << released.status().to_string();
  // The caller's model is never changed; the executor's own graph lost the weights its kernels hold.
  EXPECT_EQ(model->graph.initializers.size(), initializers);
  EXPECT_EQ(kept.value()->model().graph.initializers.size(), initializers);
  EXPECT_LT(released.value()->model().graph.initializers.size(), initializers);
  for (const auto& [name, t] : released.value()->model().graph.initializers) EXPECT_LT(t.numel(), 40 * 96) << name;
  for (int64_t batch : {3, 20, 1, 150, 3}) {  // panels, then oneDNN from the panels, back, ...
    SCOPED_TRACE(batch);
    NamedTensors feeds = {{"x", ramp({batch, 64}, 1.f, -0.5f)}, {"x2", ramp({2, 64}, 2.f, -1.f)}};
    NamedTensors a, b;
    ASSERT_TRUE(kept.value()->run(feeds, &a).is_ok());
    Status st = released.value()->run(feeds, &b);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bytes(a[i].second, b[i].second)) << a[i].first;
  }
  // Executor::resident_bytes: the weights are what each executor's graph still holds (a released
  // weight counts only as its kernels' packed forms, which both executors hold).
  auto initializer_bytes = [](const Model& m) {
    int64_t b = 0;
    for (const auto& [name, t] : m.graph.initializers) b += t.nbytes();
    return b;
  };
  const ResidentBytes rk = kept.value()->resident_bytes(), rr = released.value()->resident_bytes();
  EXPECT_EQ(rk.weights, initializer_bytes(kept.value()->model()));
  EXPECT_EQ(rr.weights, initializer_bytes(released.value()->model()));
  EXPECT_LT(rr.weights + 40 * 96 * 4, rk.weights);
  EXPECT_GT(rk.packed_weights, 0);
  EXPECT_GT(rr.packed_weights, 0);
  EXPECT_GT(rk.process, rk.weights + rk.packed_weights + rk.arena);
}

// Convolutions release their weights too once oneDNN's packed form is made (not where Winograd's
// or ConvRows' form is the one held: those cannot be turned back into the weights).
TEST(WeightsHeldOnce, ReleasedConvolutionWeightsRunBitForBit) {
  ModelBuilder b;
  auto x = b.input("x", {2, 32, 10, 10});
  const std::string w1 = b.constant(ramp({48, 32, 3, 3}, 0.05f, -0.02f));
  const std::string w2 = b.constant(ramp({16, 48, 1, 1}, 0.1f, -0.05f));
  const std::string bias = b.constant(ramp({16}, 0.1f, 0.f));
  Attribute strides;
  strides.type = AttrType::kInts;
  strides.ints = {2, 2};
  auto h = b.node("Relu", {b.node("Conv", {x, w1}, {{"strides", strides}})});
  b.output(b.node("Conv", {h, w2, bias}));
  std::shared_ptr<Model> model = b.build();
  ExecutorOptions kept_o, released_o;
  kept_o.threads = released_o.threads = 1;
  released_o.release_weights = true;
  auto kept = Executor::create(model, kept_o);
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  auto released = Executor::create(model, released_o);
  ASSERT_TRUE(released.is_ok()) << released.status().to_string();
  EXPECT_EQ(model->graph.initializers.size(), 3u);
  for (const auto& [name, t] : released.value()->model().graph.initializers)
    EXPECT_LT(t.numel(), 16 * 48) << name << ": a convolution's weights kept beside its packed form";
  const NamedTensors feeds = {{"x", ramp({2, 32, 10, 10}, 1.f, -0.5f)}};
  for (int run = 0; run < 2; ++run) {
    NamedTensors a, c;
    ASSERT_TRUE(kept.value()->run(feeds, &a).is_ok());
    Status st = released.value()->run(feeds, &c);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(a.size(), c.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bytes(a[i].second, c[i].second)) << a[i].first;
  }
  EXPECT_LT(released.value()->resident_bytes().weights + 48 * 32 * 9 * 4, kept.value()->resident_bytes().weights + 1);
}

// A node the fast kernels decline after their weights were released (a Z addend that broadcasts,
// which only the reference FusedConv/FusedMatMul take) runs the reference kernel on the kernel's
// own weights (run_fallback_with_input): the same bytes as with the graph's copy kept.
TEST(WeightsHeldOnce, ReleasedWeightsServeTheReferenceFallback) {
  ModelBuilder b;
  b.import_opset("com.ferry", 1);
  auto x = b.input("x", {2, 32, 6, 6});
  auto c = b.node("FusedConv", {x, b.constant(ramp({16, 32, 1, 1}, 0.1f, -0.05f)), b.constant(ramp({16}, 0.1f, 0.f)),
                                b.constant(ramp({1, 16, 1, 1}, 1.f, -0.5f))},
                  {}, 1, "com.ferry");
  auto a = b.input("a", {5, 64});
  auto m = b.node("FusedMatMul", {a, b.constant(ramp({64, 24}, 0.5f, -0.25f)), "", b.constant(ramp({1, 24}, 1.f, -0.5f))},
                  {}, 1, "com.ferry");
  b.output(c);
  b.output(m);
  std::shared_ptr<Model> model = b.build();
  ExecutorOptions kept_o, released_o;
  kept_o.threads = released_o.threads = 1;
  released_o.release_weights = true;
  auto kept = Executor::create(model, kept_o);
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  auto released = Executor::create(model, released_o);
  ASSERT_TRUE(released.is_ok()) << released.status().to_string();
  for (const auto& [name, t] : released.value()->model().graph.initializers)
    EXPECT_LT(t.numel(), 24 * 16) << name << ": a weight kept beside its packed form";
  const NamedTensors feeds = {{"x", ramp({2, 32, 6, 6}, 1.f, -0.5f)}, {"a", ramp({5, 64}, 2.f, -1.f)}};
  for (int run = 0; run < 2; ++run) {
    NamedTensors k, r;
    ASSERT_TRUE(kept.value()->run(feeds, &k).is_ok());
    Status st = released.value()->run(feeds, &r);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(k.size(), 2u);
    ASSERT_EQ(r.size(), 2u);
    for (size_t i = 0; i < k.size(); ++i) EXPECT_TRUE(same_bytes(k[i].second, r[i].second)) << k[i].first;
  }
}

// A MatMul whose runs go to cpu::RowGemm (1 thread, 16-24 rows; 16-256 on AVX-512 hosts) makes no oneDNN form of its
// weights when the executor is made: it was dropped at the first run for RowGemm's, its heap kept
// (ViT-B/16 at 1 thread: peak RSS 415 -> 733 MiB).
TEST(WeightsHeldOnce, MatMulOnRowGemmPacksOnlyRowGemmsForm) {
  if (!cpu::RowGemm::supported(256, 768)) GTEST_SKIP() << "no RowGemm on this CPU";
  ModelBuilder b;
  auto x = b.input("x", {24, 256});
  b.output(b.node("MatMul", {x, b.constant(ramp({256, 768}, 0.5f, -0.25f))}));
  std::shared_ptr<Model> model = b.build();
  ExecutorOptions o;
  o.threads = 1;
  auto ex = Executor::create(model, o);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex.value()->resident_bytes().packed_weights, 0) << "oneDNN's form packed at creation, though RowGemm runs it";
  NamedTensors out;
  ASSERT_TRUE(ex.value()->run({{"x", ramp({24, 256}, 1.f, -0.5f)}}, &out).is_ok());
  const int64_t packed = ex.value()->resident_bytes().packed_weights;
  EXPECT_GT(packed, 0);
  EXPECT_LT(packed, 256 * 768 * 4 * 3 / 2 + (2 << 20)) << "more than one packed form (RowGemm rounds its buffer up to 2 MiB pages)";
  const float* y = out[0].second.data<float>();
  const Tensor xs = ramp({24, 256}, 1.f, -0.5f), ws = ramp({256, 768}, 0.5f, -0.25f);
  for (int64_t j : {0, 17, 767}) {
    double e = 0;
    for (int64_t k = 0; k < 256; ++k) e += double(xs.data<float>()[5 * 256 + k]) * ws.data<float>()[k * 768 + j];
    EXPECT_NEAR(y[5 * 768 + j], e, 1e-3 * (1 + std::abs(e))) << j;
  }
}

TEST(WeightsHeldOnce, PackedFormsUnpackToTheOriginal) {
  for (bool trans_b : {false, true}) {
    SCOPED_TRACE(trans_b);
    const int64_t k = 200, n = 96;  // K over one 128-row block, N two 48-column slivers
    const Tensor w = ramp(trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, 3.f, -1.f);
    auto g = cpu::RowGemm::create(w.data<float>(), trans_b, nullptr, k, n, false);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    Tensor back = Tensor::allocate(DType::kF32, w.dims());
    g.value()->unpack(back.mutable_data<float>(), trans_b);
    EXPECT_TRUE(same_bytes(w, back));
    const cpu::PanelMatrix p = trans_b ? cpu::pack_panels(k, n, w.data<float>(), 1, k) : cpu::pack_panels(k, n, w.data<float>(), n, 1);
    Tensor back2 = Tensor::allocate(DType::kF32, w.dims());
    cpu::unpack_panels(p, back2.mutable_data<float>(), trans_b ? 1 : n, trans_b ? k : 1);
    EXPECT_TRUE(same_bytes(w, back2));
  }
}

}  // namespace
}  // namespace ferry
