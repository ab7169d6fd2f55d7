// Precision modes (passes/precision.h), the comparator (runtime/compare.h) and the fp32 repair
// search (runtime/precision_fix.h) on small hand-built models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "ops/shape_inference.h"
#include "passes/precision.h"
#include "precision/compare.h"
#include "precision/precision_fix.h"
#include "precision/precision_run.h"

namespace ferry::testing {
namespace {

const Node* producer(const Model& m, const std::string& value) {
  for (const Node& n : m.graph.nodes)
    for (const std::string& o : n.outputs)
      if (o == value) return &n;
  return nullptr;
}

const Node* find_node(const Model& m, const std::string& name) {
  for (const Node& n : m.graph.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

// A tiny graph builder: inputs, constants, single-output nodes named <Op>_<k>.
class Builder {
 public:
  Builder() : model_(std::make_shared<Model>()) { model_->opset_imports[""] = 17; }
  std::string input(const std::string& name, std::vector<int64_t> dims) {
    model_->graph.inputs.push_back(ValueInfo{name, TensorType{DType::kF32, Shape::of(dims)}});
    model_->graph.value_types[name] = TensorType{DType::kF32, Shape::of(dims)};
    return name;
  }
  std::string constant(Tensor t) {
    const std::string name = "c" + std::to_string(k_++);
    model_->graph.initializers[name] = t;
    model_->graph.value_types[name] = t.type();
    return name;
  }
  std::string node(const std::string& op, std::vector<std::string> inputs, std::string* node_name = nullptr) {
    Node n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(k_++);
    n.inputs = std::move(inputs);
    n.outputs = {n.name + "_out"};
    if (node_name) *node_name = n.name;
    model_->graph.nodes.push_back(n);
    return n.outputs[0];
  }
  std::shared_ptr<Model> build(const std::string& output) {
    model_->graph.outputs.push_back(ValueInfo{output, {}});
    Status s = infer_shapes(model_.get());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return model_;
  }

 private:
  std::shared_ptr<Model> model_;
  int k_ = 0;
};

// x[2,8] -> MatMul(W) -> Relu -> Mul(scale) -> Softmax -> y
struct SmallNet {
  std::shared_ptr<Model> model;
  std::string matmul, relu, mul, softmax;
  explicit SmallNet(float scale = 1.0f) {
    Builder b;
    auto x = b.input("x", {2, 8});
    std::vector<float> w(8 * 8);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>((i * 7) % 11) - 0.2f;
    auto h = b.node("MatMul", {x, b.constant(Tensor::from_vector(w, {8, 8}))}, &matmul);
    auto r = b.node("Relu", {h}, &relu);
    auto s = b.node("Mul", {r, b.constant(Tensor::scalar<float>(scale))}, &mul);
    model = b.build(b.node("Softmax", {s}, &softmax));
  }
};

Tensor input_tensor(float magnitude) {
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = magnitude * (static_cast<float>(i % 5) - 1.5f);
  return Tensor::from_vector(v, {2, 8});
}

TEST(PrecisionPass, ForceFp16LowersEveryFloatNodeAndKeepsTheInterface) {
  SmallNet net;
  auto m = net.model->clone();
  PrecisionOptions p;
  p.mode = PrecisionMode::kForceFp16;
  PrecisionReport rep;
  ASSERT_TRUE(apply_precision(m.get(), p, &rep).is_ok());
  EXPECT_EQ(rep.nodes_lowered, 4);
  EXPECT_EQ(rep.nodes_kept_fp32, 0);
  EXPECT_GE(rep.initializers_converted, 2);  // W and the scale, converted once
  const std::string y = m->graph.outputs[0].name;
  EXPECT_EQ(m->graph.find_type(y)->dtype, DType::kF32);      // outputs stay fp32
  EXPECT_EQ(m->graph.find_type(y + "::f16")->dtype, DType::kF16);
  const Node* sm = find_node(*m, net.softmax);
  ASSERT_NE(sm, nullptr);
  EXPECT_EQ(sm->outputs[0], y + "::f16");
  EXPECT_TRUE(is_precision_cast(*producer(*m, y)));
  EXPECT_EQ(precision_base_name(y + "::f16"), y);
}

TEST(PrecisionPass, MixPrecisionKeepsSensitiveOpsAndAllowModeLowersCubeOpsOnly) {
  SmallNet net;
  auto mix = net.model->clone();
  PrecisionOptions p;
  p.mode = PrecisionMode::kAllowMixPrecision;
  PrecisionReport rep;
  ASSERT_TRUE(apply_precision(mix.get(), p, &rep).is_ok());
  EXPECT_EQ(rep.nodes_lowered, 3);
  EXPECT_EQ(find_node(*mix, net.softmax)->outputs[0], mix->graph.outputs[0].name);  // Softmax in fp32

  auto allow = net.model->clone();
  p.mode = PrecisionMode::kAllowFp32ToBf16;
  ASSERT_TRUE(apply_precision(allow.get(), p, &rep).is_ok());
  EXPECT_EQ(rep.lowered, std::vector<std::string>{net.matmul});
  EXPECT_EQ(allow->graph.find_type(find_node(*allow, net.matmul)->outputs[0])->dtype, DType::kBF16);
}

TEST(PrecisionPass, KeepListConfigFileAndUnknownNames) {
  SmallNet net;
  PrecisionOptions p;
  p.mode = PrecisionMode::kForceBf16;
  p.keep_fp32 = {net.mul};
  auto m = net.model->clone();
  PrecisionReport rep;
  ASSERT_TRUE(apply_precision(m.get(), p, &rep).is_ok());
  EXPECT_EQ(rep.nodes_lowered, 3);
  EXPECT_EQ(m->graph.find_type(find_node(*m, net.mul)->outputs[0])->dtype, DType::kF32);

  const std::string path = ::testing::TempDir() + "/precision_config.json";
  ASSERT_TRUE(write_precision_config(path, PrecisionMode::kForceFp16, {net.softmax}).is_ok());
  PrecisionOptions loaded;
  ASSERT_TRUE(load_precision_config(path, &loaded).is_ok());
  EXPECT_EQ(loaded.mode, PrecisionMode::kForceFp16);
  EXPECT_EQ(loaded.keep_fp32, std::vector<std::string>{net.softmax});

  PrecisionOptions bad;
  bad.mode = PrecisionMode::kForceFp16;
  bad.keep_fp32 = {"no_such_node"};
  Status st = apply_precision(net.model->clone().get(), bad, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("no_such_node"), std::string::npos);
  EXPECT_FALSE(parse_precision_mode("fp8").is_ok());
}

TEST(PrecisionPass, LowPrecisionIsComputedForRealWithRoundToNearestEven) {
  Builder b;
  auto x = b.input("x", {4});
  auto model = b.build(b.node("Add", {x, b.constant(Tensor::scalar<float>(0.0f))}));
  const Tensor in = Tensor::from_vector<float>({1.0001f, 2049.0f, 257.0f, 70000.0f}, {4});
  auto run = [&](PrecisionMode mode) {
    PrecisionOptions p;
    p.mode = mode;
    auto ex = create_precision_executor(model, ExecutorOptions{"cpu-ref"}, p);
    EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
    NamedTensors out;
    EXPECT_TRUE(ex.value()->run({{"x", in}}, &out).is_ok());
    return out[0].second.to_double_vector();
  };
  auto f16 = run(PrecisionMode::kForceFp16);
  EXPECT_EQ(f16[0], 1.0);     // 1.0001 is below half an fp16 step (2^-10) above 1
  EXPECT_EQ(f16[1], 2048.0);  // a tie: rounds to the even mantissa
  EXPECT_EQ(f16[2], 257.0);
  EXPECT_TRUE(std::isinf(f16[3]));  // over 65504
  auto bf16 = run(PrecisionMode::kForceBf16);
  EXPECT_EQ(bf16[0], 1.0);
  EXPECT_EQ(bf16[1], 2048.0);
  EXPECT_EQ(bf16[2], 256.0);  // bf16 has 8 significant bits
  EXPECT_EQ(bf16[3], 70144.0);
}

TEST(PrecisionRun, OverflowNamesTheFirstNode) {
  SmallNet net(2000.0f);
  PrecisionOptions p;
  p.mode = PrecisionMode::kForceFp16;
  auto ex = create_precision_executor(net.model, ExecutorOptions{"cpu-ref"}, p);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  NonFiniteWatch watch;
  ex.value()->set_observer(watch.observer());
  NamedTensors out;
  ASSERT_TRUE(ex.value()->run({{"x", input_tensor(40.0f)}}, &out).is_ok());
  ASSERT_TRUE(watch.first().has_value());
  EXPECT_EQ(watch.first()->node, net.mul);
}

TEST(CompareMetrics, MetricsAndSpecs) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  Tensor b = Tensor::from_vector<float>({1, 2, 3, 4.5f}, {4});
  TensorMetrics same = compare_tensors(a, a);
  EXPECT_DOUBLE_EQ(same.cosine, 1.0);
  EXPECT_EQ(same.max_abs, 0.0);
  TensorMetrics d = compare_tensors(a, b);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(d.mean_abs, 0.125);
  EXPECT_DOUBLE_EQ(d.max_rel, 0.125);
  EXPECT_NEAR(d.rmse, 0.25, 1e-12);
  EXPECT_LT(d.cosine, 1.0);
  EXPECT_FALSE(output_passes(d, Thresholds{}));
  Tensor inf = Tensor::from_vector<float>({1, 2, INFINITY, 4}, {4});
  TensorMetrics n = compare_tensors(a, inf);
  EXPECT_EQ(n.target_inf, 1);
  EXPECT_FALSE(layer_passes(n, Thresholds{}));
  EXPECT_FALSE(compare_tensors(a, Tensor::from_vector<float>({1, 2}, {2})).mismatch.empty());

  auto s = parse_run_spec("cuda:0:fp16:2");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s.value().device, "cuda:0");
  EXPECT_EQ(s.value().mode, PrecisionMode::kForceFp16);
  EXPECT_EQ(s.value().opt_level, 2);
  EXPECT_TRUE(parse_run_spec("outputs:/tmp/x").value().is_outputs);
  EXPECT_EQ(parse_run_spec("cpu:allow_mix_precision").value().mode, PrecisionMode::kAllowMixPrecision);
  EXPECT_FALSE(parse_run_spec("cpu").is_ok());
  EXPECT_FALSE(parse_run_spec("cpu:fp16:7").is_ok());
}

TEST(FixSearch, GreedyFollowsTheFirstDivergingNode) {
  const std::vector<std::string> cands = {"a", "b", "c", "d", "e", "f", "g", "h"};
  FixEvaluator eval = [](const std::vector<std::string>& keep, bool) -> StatusOr<FixProbe> {
    std::set<std::string> k(keep.begin(), keep.end());
    FixProbe p;
    if (!k.count("c")) p.first_diverging = "c";
    else if (!k.count("g")) p.first_diverging = "g";
    p.passes = p.first_diverging.empty();
    return p;
  };
  auto r = search_fp32_set(cands, eval);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().found);
  EXPECT_EQ(r.value().keep_fp32, (std::vector<std::string>{"c", "g"}));
}

TEST(FixSearch, BisectionAndPruningWithoutDivergenceHints) {
  std::vector<std::string> cands;
  for (int i = 0; i < 40; ++i) cands.push_back(std::string("n").append(std::to_string(i)));
  // Passes when n13 and n29 are kept; no node alone is "diverging" (accumulated error).
  FixEvaluator eval = [](const std::vector<std::string>& keep, bool) -> StatusOr<FixProbe> {
    std::set<std::string> k(keep.begin(), keep.end());
    FixProbe p;
    p.passes = k.count("n13") && k.count("n29");
    return p;
  };
  auto r = search_fp32_set(cands, eval);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().found);
  EXPECT_EQ(r.value().keep_fp32, (std::vector<std::string>{"n13", "n29"}));
  // Never passing: reported as not a precision problem.
  FixEvaluator never = [](const std::vector<std::string>&, bool) -> StatusOr<FixProbe> { return FixProbe{}; };
  auto n = search_fp32_set(cands, never);
  ASSERT_TRUE(n.is_ok());
  EXPECT_FALSE(n.value().found);
}

TEST(Comparator, PerLayerNamesTheOverflowAndFixRepairsIt) {
  SmallNet net(2000.0f);
  CompareOptions co;
  co.ref = parse_run_spec("cpu-ref:fp32").value();
  co.target = parse_run_spec("cpu-ref:fp16").value();
  co.per_layer = true;
  auto c = Comparator::create(net.model, co);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  SampleSource src;
  src.count = 3;
  src.name = [](size_t i) { return "s" + std::to_string(i); };
  src.inputs = [](size_t i) -> StatusOr<NamedTensors> {
    return NamedTensors{{"x", input_tensor(10.0f + 10.0f * static_cast<float>(i))}};
  };
  auto r = c.value()->run(src);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const CompareResult& res = r.value();
  EXPECT_FALSE(res.passed());
  ASSERT_EQ(res.layers.size(), 4u);
  ASSERT_TRUE(res.first_diverging.has_value());
  EXPECT_EQ(res.layers[*res.first_diverging].node, net.mul);
  EXPECT_TRUE(res.layers[0].passes);  // MatMul is fine in fp16
  ASSERT_TRUE(res.first_non_finite.has_value());
  EXPECT_EQ(res.first_non_finite->node, net.mul);

  const std::string path = ::testing::TempDir() + "/fix_config.json";
  auto fixed = fix_precision(c.value().get(), src, path);
  ASSERT_TRUE(fixed.is_ok()) << fixed.status().to_string();
  EXPECT_TRUE(fixed.value().search.found);
  // Mul overflows; Softmax then reads the fp32 value through an fp16 Cast, which overflows too.
  EXPECT_EQ(fixed.value().search.keep_fp32, (std::vector<std::string>{net.mul, net.softmax}));
  EXPECT_TRUE(fixed.value().verified.passed());
  EXPECT_EQ(fixed.value().verified.samples, 3u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ferry::testing
