// Trained-model export (src/onnx/onnx_export.h): a model exported in training mode
// (BatchNormalization with training_mode=1 and three outputs, Dropout with ratio/training_mode
// inputs) gets its trained weights and a replaced classifier, loads in ferry's importer in
// inference form and computes the hand-computed result; refusals leave no file behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"
#include "onnx/onnx_pb.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

void set_type(onnx::ValueInfoProto* vi, const std::string& name, int elem, const std::vector<std::string>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (const std::string& d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out, const std::string& name) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

void add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void add_init(onnx::GraphProto* g, const std::string& name, const std::vector<float>& v, std::vector<int64_t> dims) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

std::vector<float> seq(int n, float start, float step) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(start + step * static_cast<float>(i));
  return v;
}

// x[N,3] -> Gemm(W 4x3, B) -> BN(training_mode=1, 3 outputs) -> Relu -> Dropout(ratio, training) -> Gemm(W2 2x4, B2) -> y[N,2]
onnx::ModelProto training_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("pytorch");
  m.set_doc_string("exported in training mode");
  auto* os = m.add_opset_import();
  os->set_version(15);
  auto* md = m.add_metadata_props();
  md->set_key("author");
  md->set_value("unit-test");
  auto* g = m.mutable_graph();
  g->set_name("net");
  set_type(g->add_input(), "x", 1, {"N", "3"});
  set_type(g->add_output(), "y", 1, {"N", "2"});
  add_init(g, "W", seq(12, -0.5f, 0.1f), {4, 3});
  add_init(g, "B", {0.1f, -0.2f, 0.3f, 0.0f}, {4});
  add_init(g, "bn.scale", {1.0f, 2.0f, 0.5f, 1.5f}, {4});
  add_init(g, "bn.bias", {0.0f, 0.1f, -0.1f, 0.2f}, {4});
  add_init(g, "bn.mean", {0, 0, 0, 0}, {4});
  add_init(g, "bn.var", {1, 1, 1, 1}, {4});
  add_init(g, "W2", seq(8, 0.3f, -0.05f), {2, 4});
  add_init(g, "B2", {0.5f, -0.5f}, {2});
  auto* flag = g->add_initializer();
  flag->set_name("train_flag");
  flag->set_data_type(onnx::TensorProto::BOOL);
  flag->add_int32_data(1);
  add_int_attr(add_node(g, "Gemm", {"x", "W", "B"}, {"h"}, "fc1"), "transB", 1);
  auto* bn = add_node(g, "BatchNormalization", {"h", "bn.scale", "bn.bias", "bn.mean", "bn.var"},
                      {"bn_out", "bn.mean_out", "bn.var_out"}, "bn1");
  add_int_attr(bn, "training_mode", 1);
  add_node(g, "Relu", {"bn_out"}, {"r"}, "relu");
  auto* ratio = add_node(g, "Constant", {}, {"ratio"}, "ratio_const");
  auto* a = ratio->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_float_data(0.3f);
  add_node(g, "Dropout", {"r", "ratio", "train_flag"}, {"d", "mask"}, "drop");
  add_int_attr(add_node(g, "Gemm", {"d", "W2", "B2"}, {"y"}, "classifier"), "transB", 1);
  set_type(g->add_value_info(), "h", 1, {"N", "4"});
  set_type(g->add_value_info(), "mask", 9, {"N", "4"});
  set_type(g->add_value_info(), "d", 1, {"N", "4"});
  return m;
}

class OnnxExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ferry_export_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string save(const onnx::ModelProto& m, const std::string& name) {
    const std::string p = dir_ + "/" + name;
    std::ofstream out(p, std::ios::binary);
    m.SerializeToOstream(&out);
    return p;
  }
  onnx::ModelProto read(const std::string& path) {
    onnx::ModelProto m;
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(m.ParseFromIstream(&in)) << path;
    return m;
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TrainedExport trained() {
  TrainedExport e;
  e.weights["W"] = Tensor::from_vector<float>(seq(12, 0.2f, -0.03f), {4, 3});
  e.weights["bn.mean"] = Tensor::from_vector<float>({0.1f, -0.1f, 0.2f, 0.05f}, {4});
  e.weights["bn.var"] = Tensor::from_vector<float>({0.5f, 2.0f, 1.5f, 0.8f}, {4});
  e.weights["W2"] = Tensor::from_vector<float>(seq(12, -0.4f, 0.07f), {3, 4});  // 3 classes now
  e.weights["B2"] = Tensor::from_vector<float>({0.01f, 0.02f, 0.03f}, {3});
  return e;
}

TEST_F(OnnxExportTest, TrainedModelLoadsInInferenceFormAndComputesTheExpectedResult) {
  const std::string src = save(training_model(), "train.onnx");
  const std::string out = dir_ + "/trained.onnx";
  const TrainedExport e = trained();
  Status s = export_trained_onnx(src, e, out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(files(), (std::vector<std::string>{"train.onnx", "trained.onnx"}));

  const onnx::ModelProto m = read(out);
  EXPECT_EQ(m.doc_string(), "exported in training mode");
  ASSERT_EQ(m.metadata_props_size(), 1);
  EXPECT_EQ(m.metadata_props(0).value(), "unit-test");
  EXPECT_EQ(m.opset_import(0).version(), 15);
  for (const auto& n : m.graph().node()) {
    EXPECT_NE(n.op_type(), "Dropout");
    EXPECT_NE(n.op_type(), "Constant") << "the Dropout's ratio is training-only";
    if (n.op_type() == "BatchNormalization") {
      EXPECT_EQ(n.output_size(), 1);
      for (const auto& a : n.attribute()) EXPECT_NE(a.name(), "training_mode");
    }
  }
  for (const auto& t : m.graph().initializer()) EXPECT_NE(t.name(), "train_flag");
  for (const auto& v : m.graph().value_info()) EXPECT_TRUE(v.name() == "h") << v.name() << " is stale";
  const auto& yshape = m.graph().output(0).type().tensor_type().shape();
  ASSERT_EQ(yshape.dim_size(), 2);
  EXPECT_EQ(yshape.dim(0).dim_param(), "N");
  EXPECT_EQ(yshape.dim(1).dim_value(), 3) << "the classifier has 3 classes now";

  auto model = load_onnx_model(out);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const Graph& g = model.value()->graph;
  for (const auto& [name, t] : e.weights) {
    const Tensor& got = g.initializers.at(name);
    ASSERT_EQ(got.dims(), t.dims()) << name;
    EXPECT_EQ(std::memcmp(got.raw(), t.raw(), static_cast<size_t>(t.nbytes())), 0) << name;
  }
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 0.25f, 3.0f, -1.0f};
  NamedTensors outs;
  Status r = ex.value()->run({{"x", Tensor::from_vector<float>(x, {2, 3})}}, &outs);
  ASSERT_TRUE(r.is_ok()) << r.to_string();
  const Tensor& y = outs[0].second;
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
  // By hand: h = x W^T + B; inference BN with the running statistics; Relu; y = r W2^T + B2.
  const float* W = e.weights.at("W").data<float>();
  const float* mean = e.weights.at("bn.mean").data<float>();
  const float* var = e.weights.at("bn.var").data<float>();
  const float* W2 = e.weights.at("W2").data<float>();
  const float B[4] = {0.1f, -0.2f, 0.3f, 0.0f}, scale[4] = {1.0f, 2.0f, 0.5f, 1.5f}, bias[4] = {0.0f, 0.1f, -0.1f, 0.2f};
  for (int n = 0; n < 2; ++n) {
    float r4[4];
    for (int c = 0; c < 4; ++c) {
      float h = B[c];
      for (int k = 0; k < 3; ++k) h += x[n * 3 + k] * W[c * 3 + k];
      const float b = (h - mean[c]) / std::sqrt(var[c] + 1e-5f) * scale[c] + bias[c];
      r4[c] = b > 0 ? b : 0;
    }
    for (int j = 0; j < 3; ++j) {
      float want = e.weights.at("B2").data<float>()[j];
      for (int c = 0; c < 4; ++c) want += r4[c] * W2[j * 4 + c];
      EXPECT_NEAR(y.data<float>()[n * 3 + j], want, 1e-5f) << "row " << n << " class " << j;
    }
  }
}

TEST_F(OnnxExportTest, RefusalsNameTheProblemAndLeaveNoFile) {
  const std::string src = save(training_model(), "train.onnx");
  const std::string out = dir_ + "/trained.onnx";
  Status s = export_trained_onnx(src, trained(), src);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("is the source model"), std::string::npos) << s.message();
  s = export_trained_onnx(src, trained(), dir_ + "/./train.onnx");
  EXPECT_NE(s.message().find("is the source model"), std::string::npos) << s.message();

  TrainedExport unknown = trained();
  unknown.weights["fc9.weight"] = Tensor::from_vector<float>({1}, {1});
  s = export_trained_onnx(src, unknown, out);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("'fc9.weight'"), std::string::npos) << s.message();

  TrainedExport f64 = trained();
  f64.weights["B"] = Tensor::from_vector<double>({1, 2, 3, 4}, {4});
  s = export_trained_onnx(src, f64, out);
  EXPECT_NE(s.message().find("weight 'B' is f64"), std::string::npos) << s.message();

  TrainedExport bad_shape = trained();
  bad_shape.weights["W2"] = Tensor::from_vector<float>(seq(15, 0, 1), {3, 5});
  s = export_trained_onnx(src, bad_shape, out);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("classifier"), std::string::npos) << s.message();

  TrainedExport clash;
  clash.added["W"] = Tensor::from_vector<float>({1}, {1});
  EXPECT_NE(export_trained_onnx(src, clash, out).message().find("already names"), std::string::npos);

  onnx::ModelProto used_mask = training_model();
  set_type(used_mask.mutable_graph()->add_output(), "mask", 9, {"N", "4"});
  const std::string src2 = save(used_mask, "mask.onnx");
  s = export_trained_onnx(src2, trained(), out);
  EXPECT_NE(s.message().find("node 'drop' (Dropout): its mask output 'mask'"), std::string::npos) << s.message();

  onnx::ModelProto used_stats = training_model();
  add_node(used_stats.mutable_graph(), "Identity", {"bn.mean_out"}, {"m2"}, "reads_stats");
  const std::string src3 = save(used_stats, "stats.onnx");
  s = export_trained_onnx(src3, trained(), out);
  EXPECT_NE(s.message().find("node 'bn1' (BatchNormalization)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reads_stats"), std::string::npos) << s.message();

  // An existing output stays as it was when an export fails, and no temporary file remains.
  { std::ofstream(out) << "previous"; }
  EXPECT_FALSE(export_trained_onnx(src, unknown, out).is_ok());
  std::ifstream in(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "previous");
  EXPECT_EQ(files(), (std::vector<std::string>{"mask.onnx", "stats.onnx", "train.onnx", "trained.onnx"}));
  EXPECT_EQ(export_trained_onnx(dir_ + "/none.onnx", trained(), out).code(), StatusCode::kNotFound);
}

TEST_F(OnnxExportTest, DropoutFeedingAGraphOutputKeepsTheOutputName) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"2"});
  set_type(g->add_output(), "out", 1, {"2"});
  set_type(g->add_output(), "copy", 1, {"2"});
  add_node(g, "Relu", {"x"}, {"r"}, "relu");
  add_node(g, "Dropout", {"r"}, {"out"}, "drop_after_relu");
  add_node(g, "Dropout", {"x"}, {"copy", "unused_mask"}, "drop_on_input");
  const std::string src = save(m, "m.onnx");
  const std::string out = dir_ + "/m_trained.onnx";
  Status s = export_trained_onnx(src, {}, out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const onnx::ModelProto got = read(out);
  ASSERT_EQ(got.graph().node_size(), 2);
  EXPECT_EQ(got.graph().node(0).op_type(), "Relu");
  EXPECT_EQ(got.graph().node(0).output(0), "out");
  EXPECT_EQ(got.graph().node(1).op_type(), "Identity");
  EXPECT_EQ(got.graph().node(1).output_size(), 1);
  auto model = load_onnx_model(out);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok());
  NamedTensors outs;
  ASSERT_TRUE(ex.value()->run({{"x", Tensor::from_vector<float>({-1.0f, 2.0f}, {2})}}, &outs).is_ok());
  EXPECT_EQ(outs[0].second.data<float>()[0], 0.0f);
  EXPECT_EQ(outs[1].second.data<float>()[0], -1.0f);
}

TEST_F(OnnxExportTest, ExternalDataIsCopiedNeverWrittenAndLargeModelsGetTheirOwn) {
  onnx::ModelProto m = training_model();
  // The source keeps W (48 bytes) in an external file beside it.
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  ASSERT_EQ(w->name(), "W");
  const std::string wbytes = w->raw_data();
  { std::ofstream(dir_ + "/weights.bin", std::ios::binary) << std::string(16, 'z') << wbytes; }
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto kv = [&](const char* k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", "weights.bin");
  kv("offset", "16");
  kv("length", std::to_string(wbytes.size()));
  const std::string src = save(m, "ext.onnx");
  TrainedExport e = trained();
  e.weights.erase("W");  // untouched: its bytes come from weights.bin
  ASSERT_TRUE(export_trained_onnx(src, e, dir_ + "/inline.onnx").is_ok());
  auto inl = load_onnx_model(dir_ + "/inline.onnx");
  ASSERT_TRUE(inl.is_ok()) << inl.status().to_string();
  EXPECT_EQ(std::memcmp(inl.value()->graph.initializers.at("W").raw(), wbytes.data(), wbytes.size()), 0);
  const onnx::ModelProto inline_proto = read(dir_ + "/inline.onnx");
  for (const auto& t : inline_proto.graph().initializer())
    EXPECT_NE(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();

  ExportOptions small;
  small.max_inline_bytes = 200;  // as if the model were over protobuf's 2 GiB
  small.external_min_bytes = 40;
  fs::create_directory(dir_ + "/sub");
  Status s = export_trained_onnx(src, e, dir_ + "/sub/big.onnx", small);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(fs::exists(dir_ + "/sub/big.onnx.data"));
  auto big = load_onnx_model(dir_ + "/sub/big.onnx");
  ASSERT_TRUE(big.is_ok()) << big.status().to_string();
  EXPECT_EQ(std::memcmp(big.value()->graph.initializers.at("W").raw(), wbytes.data(), wbytes.size()), 0);
  const Tensor& w2 = big.value()->graph.initializers.at("W2");
  EXPECT_EQ(std::memcmp(w2.raw(), e.weights.at("W2").raw(), 48), 0);
  // A name whose data file would replace the source's external file is refused.
  s = export_trained_onnx(src, e, dir_ + "/weights.bin.onnx", small);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  const std::string clash_src = save(m, "weights");  // its own external file is weights.bin
  s = export_trained_onnx(clash_src, e, dir_ + "/weights.bin", small);
  EXPECT_FALSE(s.is_ok());
  std::ifstream wb(dir_ + "/weights.bin", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(wb), {}).substr(16), wbytes);
}

TEST_F(OnnxExportTest, AddedClassifierReplacesTheOldOneThroughRenames) {
  const std::string src = save(training_model(), "train.onnx");
  const std::string out = dir_ + "/head.onnx";
  TrainedExport e;
  e.added["head.weight"] = Tensor::from_vector<float>(seq(20, -1.0f, 0.1f), {5, 4});
  e.added["head.bias"] = Tensor::from_vector<float>(seq(5, 0.0f, 1.0f), {5});
  e.renames = {{"W2", "head.weight"}, {"B2", "head.bias"}, {"bn.scale", "bn1.weight"}};
  Status s = export_trained_onnx(src, e, out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const onnx::ModelProto m = read(out);
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  EXPECT_EQ(inits, (std::set<std::string>{"B", "W", "bn.bias", "bn.mean", "bn.var", "bn1.weight", "head.bias",
                                          "head.weight"}));
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(1).dim_value(), 5);
  auto model = load_onnx_model(out);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors outs;
  ASSERT_TRUE(ex.value()->run({{"x", Tensor::from_vector<float>({0, 0, 0}, {1, 3})}}, &outs).is_ok());
  EXPECT_EQ(outs[0].second.dims(), (std::vector<int64_t>{1, 5}));
  e.renames = {{"nothing", "x2"}};
  EXPECT_EQ(export_trained_onnx(src, e, out).code(), StatusCode::kNotFound);
}

TEST_F(OnnxExportTest, OldOpsetBatchNormAttributesAreMadeValid) {
  onnx::ModelProto m;
  m.set_ir_version(4);
  m.add_opset_import()->set_version(9);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"1", "2"});
  set_type(g->add_output(), "y", 1, {"1", "2"});
  for (const char* n : {"s", "b", "m", "v"}) add_init(g, n, {1, 1}, {2});
  auto* bn = add_node(g, "BatchNormalization", {"x", "s", "b", "m", "v"}, {"y", "m_out", "v_out", "sm", "sv"}, "bn");
  add_int_attr(bn, "spatial", 1);
  add_int_attr(bn, "is_test", 0);
  const std::string src = save(m, "bn9.onnx");
  Status s = export_trained_onnx(src, {}, dir_ + "/bn9_out.onnx");
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const onnx::ModelProto got = read(dir_ + "/bn9_out.onnx");
  EXPECT_EQ(got.graph().node(0).attribute_size(), 0);
  EXPECT_EQ(got.graph().node(0).output_size(), 1);
  EXPECT_TRUE(load_onnx_model(dir_ + "/bn9_out.onnx").is_ok());
  g->mutable_node(0)->mutable_attribute(0)->set_i(0);  // spatial=0: no opset-9 equivalent
  const std::string src0 = save(m, "bn9_spatial0.onnx");
  s = export_trained_onnx(src0, {}, dir_ + "/bn9_out0.onnx");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("node 'bn' (BatchNormalization): spatial=0"), std::string::npos) << s.message();
}

TEST_F(OnnxExportTest, DropoutInsideASubgraphIsRemovedToo) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", 1, {"2"});
  set_type(g->add_input(), "c", 9, {});
  set_type(g->add_output(), "y", 1, {"2"});
  add_node(g, "Relu", {"x"}, {"r"}, "relu");
  auto* iff = add_node(g, "If", {"c"}, {"y"}, "branch");
  auto* then_attr = iff->add_attribute();
  then_attr->set_name("then_branch");
  then_attr->set_type(onnx::AttributeProto::GRAPH);
  auto* tg = then_attr->mutable_g();
  tg->set_name("then");
  add_node(tg, "Dropout", {"r"}, {"t0"}, "inner_drop");
  add_node(tg, "Neg", {"t0"}, {"t1"}, "neg");
  set_type(tg->add_output(), "t1", 1, {"2"});
  auto* else_attr = iff->add_attribute();
  else_attr->set_name("else_branch");
  else_attr->set_type(onnx::AttributeProto::GRAPH);
  auto* eg = else_attr->mutable_g();
  eg->set_name("else");
  add_node(eg, "Dropout", {"r"}, {"e0"}, "inner_drop_out");
  set_type(eg->add_output(), "e0", 1, {"2"});
  const std::string src = save(m, "if.onnx");
  const std::string out = dir_ + "/if_out.onnx";
  Status s = export_trained_onnx(src, {}, out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const onnx::ModelProto got = read(out);
  const auto& then_g = got.graph().node(1).attribute(0).g();
  ASSERT_EQ(then_g.node_size(), 1);
  EXPECT_EQ(then_g.node(0).input(0), "r");
  EXPECT_EQ(got.graph().node(1).attribute(1).g().node(0).op_type(), "Identity");
  auto model = load_onnx_model(out);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto ex = Executor::create(model.value(), ExecutorOptions{"cpu-ref"});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors outs;
  ASSERT_TRUE(ex.value()->run({{"x", Tensor::from_vector<float>({-1.0f, 2.0f}, {2})}, {"c", Tensor::scalar<bool>(true)}},
                              &outs).is_ok());
  EXPECT_EQ(outs[0].second.data<float>()[1], -2.0f);
}

}  // namespace
}  // namespace ferry
