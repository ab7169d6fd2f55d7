// The pass train_blocked_layout (src/passes/train_blocked_layout.cpp): a small CNN's training graph
// (convolution with a 3-channel input, BN + Relu, MaxPool, a residual block, a strided 1x1
// convolution to 32 channels, GlobalAveragePool, Gemm, cross entropy) trained a few SGD steps on the
// cpu backend with its activations in nChw16c ($FERRY_TRAIN_BLOCKED unset) and plain
// ($FERRY_TRAIN_BLOCKED=0): the losses, BN statistics and parameters must agree up to the order of
// f32 sums; and the blocked graph on the reference backend (ops/grad_blocked.cpp's kernels) must
// agree with the cpu backend's.
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "backends/cpu/grad_blocked.h"
#include "grad/registry.h"
#include "ops/blocked_layout.h"
#include "runtime/executor.h"
#include "train/training_graph.h"

namespace ferry {
namespace {

Tensor randn(std::vector<int64_t> dims, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = nd(rng);
  return t;
}

Tensor fill(std::vector<int64_t> dims, float v) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v;
  return t;
}

// prefix + n (not `"w" + std::to_string(n)`: GCC 12's -Wrestrict misfires on it).
std::string named(const char* prefix, int64_t n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

struct Builder {
  std::shared_ptr<Model> m = std::make_shared<Model>();
  uint32_t seed = 1;
  Builder() { m->opset_imports[""] = 17; }
  Graph& g() { return m->graph; }
  std::string init(const std::string& name, Tensor t) {
    g().value_types[name] = t.type();
    g().initializers[name] = std::move(t);
    return name;
  }
  std::string node(const std::string& op, std::vector<std::string> in, std::map<std::string, Attribute> attrs = {},
                   size_t outs = 1) {
    Node n;
    n.op_type = op;
    n.name = op + named("_", g().nodes.size());
    n.inputs = std::move(in);
    for (size_t i = 0; i < outs; ++i) n.outputs.push_back(n.name + named("_out", i));
    n.attrs = std::move(attrs);
    g().nodes.push_back(n);
    return n.outputs[0];
  }
  std::string conv(const std::string& x, int64_t cin, int64_t cout, int64_t k, int64_t stride, bool bias) {
    const std::string w = init(named("w", seed), randn({cout, cin, k, k}, seed, 1.f / std::sqrt(float(cin * k * k))));
    ++seed;
    std::vector<std::string> in = {x, w};
    if (bias) {
      in.push_back(init(named("b", seed), randn({cout}, seed, 0.1f)));
      ++seed;
    }
    const int64_t p = k / 2;
    return node("Conv", in, {{"strides", attr_ints({stride, stride})}, {"pads", attr_ints({p, p, p, p})}});
  }
  std::string bn(const std::string& x, int64_t c) {
    const std::string s = named("", seed++);
    return node("BatchNormalization", {x, init(std::string("g") + s, randn({c}, seed, 0.2f)), init(std::string("beta") + s, randn({c}, seed + 7, 0.1f)),
                                       init(std::string("rm") + s, fill({c}, 0.f)), init(std::string("rv") + s, fill({c}, 1.f))},
                {{"epsilon", attr_float(1e-5f)}, {"momentum", attr_float(0.9f)}});
  }
};

std::shared_ptr<Model> tiny_resnet(int64_t batch) {
  Builder b;
  b.g().inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape::of({batch, 3, 12, 12})}});
  b.g().value_types["x"] = b.g().inputs.back().type;
  std::string h = b.node("Relu", {b.bn(b.conv("x", 3, 16, 3, 1, false), 16)});
  h = b.node("MaxPool", {h}, {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});
  std::string r = b.node("Relu", {b.bn(b.conv(h, 16, 16, 3, 1, true), 16)});
  r = b.bn(b.conv(r, 16, 16, 3, 1, false), 16);
  h = b.node("Relu", {b.node("Add", {r, h})});
  h = b.node("Relu", {b.bn(b.conv(h, 16, 32, 1, 2, false), 32)});
  h = b.node("Flatten", {b.node("GlobalAveragePool", {h})});
  const std::string logits =
      b.node("Gemm", {h, b.init("fc_w", randn({5, 32}, 99, 0.2f)), b.init("fc_b", fill({5}, 0.f))}, {{"transB", attr_int(1)}});
  b.g().outputs.push_back(ValueInfo{logits, {}});
  return b.m;
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, Tensor> weights;  // parameters and BN statistics after the steps
  int64_t blocked_nodes = 0, layout_nodes = 0;
  int64_t blocked_bn = 0, blocked_bn_grad = 0;  // Blocked(BatchNormTraining / ...Grad) nodes
  int64_t block = 0;                              // the Blocked nodes' block (8 or 16; 0: none, -1: mixed)
};

// `steps` SGD steps (lr 0.05) of the training graph on `device`, with the pass on or off.
TrainRun train(bool blocked, int steps, const std::string& device = "cpu", std::shared_ptr<const Model> given = nullptr,
               bool sync_bn = false) {
  TrainRun out;
  const int64_t batch = 4;
  if (blocked) unsetenv("FERRY_TRAIN_BLOCKED");
  else setenv("FERRY_TRAIN_BLOCKED", "0", 1);
  TrainGraphOptions o;
  o.batch_size = batch;
  o.sync_bn = sync_bn;
  auto tg = build_train_graph(*tiny_resnet(batch), o);
  EXPECT_TRUE(tg.is_ok()) << tg.status().message();
  if (!tg.is_ok()) return out;
  ExecutorOptions eo;
  eo.device = device;
  eo.threads = 2;
  eo.opt_level = given ? 0 : 2;
  auto ex = Executor::create(given ? std::const_pointer_cast<Model>(given) : tg.value().model, eo);
  unsetenv("FERRY_TRAIN_BLOCKED");
  EXPECT_TRUE(ex.is_ok()) << ex.status().message();
  if (!ex.is_ok()) return out;
  for (const Node& n : ex.value()->model().graph.nodes) {
    out.blocked_nodes += n.op_type == "Blocked";
    const Attribute* inner = n.op_type == "Blocked" ? n.attr("op") : nullptr;
    out.blocked_bn += inner && inner->s == "BatchNormTraining";
    out.blocked_bn_grad += inner && inner->s == "BatchNormTrainingGrad";
    out.layout_nodes += n.op_type == "ToBlocked" || n.op_type == "FromBlocked";
    if (n.op_type == "Blocked") out.block = out.block == 0 || out.block == node_layout_block(n) ? node_layout_block(n) : -1;
  }
  std::map<std::string, Tensor>& w = out.weights;
  for (const auto& [name, t] : tg.value().initial) w[name] = t.clone();
  for (int s = 0; s < steps; ++s) {
    NamedTensors feeds = {{"x", randn({batch, 3, 12, 12}, 1000 + s, 1.f)}};
    Tensor labels = Tensor::allocate(DType::kI64, {batch});
    for (int64_t i = 0; i < batch; ++i) labels.mutable_data<int64_t>()[i] = (i * 3 + s) % 5;
    feeds.push_back({tg.value().labels, labels});
    for (const auto& [name, t] : w) feeds.push_back({name, t});
    NamedTensors res;
    Status st = ex.value()->run(feeds, &res);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) return out;
    std::map<std::string, Tensor> got(res.begin(), res.end());
    out.losses.push_back(got.at(tg.value().loss).data<float>()[0]);
    for (const auto& [p, gname] : tg.value().grads) {
      Tensor& t = w.at(p);
      const Tensor& gr = got.at(gname);
      for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] -= 0.05f * gr.data<float>()[i];
    }
    for (const auto& su : tg.value().state) w[su.input] = got.at(su.output).clone();
  }
  return out;
}

void expect_same(const TrainRun& a, const TrainRun& b, double tol) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], tol * std::max(1.f, std::fabs(b.losses[i])));
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [name, t] : a.weights) {
    const Tensor& u = b.weights.at(name);
    ASSERT_EQ(t.dims(), u.dims()) << name;
    double worst = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double x = t.data<float>()[i], y = u.data<float>()[i];
      worst = std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
    }
    EXPECT_LE(worst, tol) << name;
  }
}

TEST(TrainBlockedLayout, SameLossesAndUpdatesAsPlain) {
  const TrainRun plain = train(false, 3);
  const cpu::BlockedBnCounts before = cpu::blocked_bn_counts();
  const TrainRun blocked = train(true, 3);
  const cpu::BlockedBnCounts after = cpu::blocked_bn_counts();
  // Every blocked BatchNorm and BN gradient ran on grad_blocked.cpp's nChw16c loops at every step,
  // none on the reference kernel (same numbers, several times slower: the losses cannot tell).
  EXPECT_GT(blocked.blocked_bn, 0);
  EXPECT_GT(blocked.blocked_bn_grad, 0);
  EXPECT_EQ(after.forward - before.forward, blocked.blocked_bn * 3);
  EXPECT_EQ(after.grad - before.grad, blocked.blocked_bn_grad * 3);
  EXPECT_EQ(after.forward_fallback - before.forward_fallback, 0);
  EXPECT_EQ(after.grad_fallback - before.grad_fallback, 0);
  EXPECT_EQ(plain.blocked_nodes, 0);
  EXPECT_EQ(plain.layout_nodes, 0);
  // 5 convolutions, 4 ConvGrad, 5 BN and 5 BN grads run blocked; edges: the stem BN's Relu output to
  // MaxPool and its gradient back, MaxPool's output and its gradient, the last Relu to
  // GlobalAveragePool and its gradient back.
  EXPECT_GE(blocked.blocked_nodes, 15);
  EXPECT_GT(blocked.layout_nodes, 0);
  EXPECT_LE(blocked.layout_nodes, 8);
  // The losses move (the steps train) and the runs agree up to the order of f32 sums.
  ASSERT_EQ(plain.losses.size(), 3u);
  EXPECT_NE(plain.losses[0], plain.losses[2]);
  expect_same(blocked, plain, 2e-5);
}

// Blocks of 8 (nChw8c, oneDNN's layout on AVX2 CPUs) and of 16 (AVX-512) give the same losses and
// updates bit for bit: each channel's sums run in the same order (grad_blocked.cpp), and oneDNN's
// convolutions compute the same either way (on a CPU whose kernels want the other block, reordered).
TEST(TrainBlockedLayout, BlocksOf8And16GiveTheSameBits) {
  TrainRun runs[2];
  const int64_t blocks[2] = {8, 16};
  for (int i = 0; i < 2; ++i) {
    setenv("FERRY_TRAIN_LAYOUT_BLOCK", std::to_string(blocks[i]).c_str(), 1);
    const cpu::BlockedBnCounts before = cpu::blocked_bn_counts();
    runs[i] = train(true, 3);
    const cpu::BlockedBnCounts after = cpu::blocked_bn_counts();
    unsetenv("FERRY_TRAIN_LAYOUT_BLOCK");
    EXPECT_GE(runs[i].blocked_nodes, 15) << "block " << blocks[i];
    EXPECT_EQ(runs[i].block, blocks[i]);
    EXPECT_EQ(after.forward - before.forward, runs[i].blocked_bn * 3) << "block " << blocks[i];
    EXPECT_EQ(after.forward_fallback - before.forward_fallback + after.grad_fallback - before.grad_fallback, 0)
        << "block " << blocks[i];
  }
  expect_same(runs[0], runs[1], 0.0);
}

// The blocked graph on the reference backend: the Blocked / ToBlocked / FromBlocked reference
// kernels against the cpu kernels.
TEST(TrainBlockedLayout, ReferenceKernelsMatchCpu) {
  setenv("FERRY_TRAIN_BLOCKED", "1", 1);
  TrainGraphOptions o;
  o.batch_size = 4;
  auto tg = build_train_graph(*tiny_resnet(4), o);
  ASSERT_TRUE(tg.is_ok()) << tg.status().message();
  ExecutorOptions eo;
  eo.threads = 2;
  auto ex = Executor::create(tg.value().model, eo);
  unsetenv("FERRY_TRAIN_BLOCKED");
  ASSERT_TRUE(ex.is_ok()) << ex.status().message();
  std::shared_ptr<const Model> optimized = ex.value()->model().clone();
  const TrainRun cpu = train(true, 2), ref = train(true, 2, "cpu-ref", optimized);
  EXPECT_GE(ref.blocked_nodes, 15);
  expect_same(ref, cpu, 2e-5);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// --sync-bn's SyncBatchNormTraining has no blocked form: every convolution's output would need a
// reorder at the region's edge, so the pass leaves the graph plain (and the steps still run).
TEST(TrainBlockedLayout, SyncBatchNormLeavesTheGraphPlain) {
  const TrainRun r = train(true, 1, "cpu", nullptr, /*sync_bn=*/true);
  EXPECT_EQ(r.blocked_nodes, 0);
  EXPECT_EQ(r.layout_nodes, 0);
  EXPECT_EQ(r.losses.size(), 1u);
}

}  // namespace
}  // namespace ferry
