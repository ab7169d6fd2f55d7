// `ferry train --amp bf16` on the cpu backend: the amp_bf16_fold pass (src/passes/amp_bf16_fold.cpp)
// folds the autocast Cast pairs into Conv / ConvGrad, whose kernels (dnnl_conv_grad.cpp) then run
// oneDNN's bf16 primitives. The emulated graph (Cast pairs, f32 compute) is the specification: the
// native results must match it up to f32 accumulation order (one bf16 rounding step on a few
// elements), and differ from the unrounded f32 results.
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "backends/backend.h"
#include "ops/shape_inference.h"
#include "passes/pipeline.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

bool cpu_has_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") != 0;
#else
  return false;
#endif
}

Tensor randn(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = nd(rng);
  return t;
}

Node node(const std::string& op, const std::string& domain, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = op + "/" + out[0];
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

Node cast(const std::string& from, const std::string& to, DType type) {
  Node n = node("Cast", "", {from}, {to});
  Attribute a;
  a.type = AttrType::kInt;
  a.i = static_cast<int64_t>(type);
  n.attrs["to"] = a;
  return n;
}

// The graph autocast + autodiff give a Conv (3x3, pads 1, `stride`): Y = r(conv(r(X), r(W))) and
// ConvGrad(r(dY), r(X), r(W)) -> dX = r(.), dW = r(.), with r = Cast f32 -> bf16 -> f32. With
// rounded = false, the same without any Cast (plain f32).
std::shared_ptr<Model> conv_model(const std::vector<int64_t>& x, const std::vector<int64_t>& w, int64_t stride,
                                  bool rounded) {
  auto m = std::make_shared<Model>();
  m->opset_imports[""] = 17;
  m->opset_imports["com.ferry"] = 1;
  Graph& g = m->graph;
  const int64_t oh = (x[2] + 2 - 3) / stride + 1;
  const std::vector<int64_t> y = {x[0], w[0], oh, oh};
  for (auto [name, dims] : {std::pair{"X", x}, std::pair{"W", w}, std::pair{"dY", y}}) {
    g.inputs.push_back(ValueInfo{name, TensorType{DType::kF32, Shape::of(dims)}});
    g.value_types[name] = TensorType{DType::kF32, Shape::of(dims)};
  }
  auto r = [&](const std::string& v) {
    if (!rounded) return v;
    g.nodes.push_back(cast(v, v + "/m", DType::kBF16));
    g.nodes.push_back(cast(v + "/m", v + "/r", DType::kF32));
    return v + "/r";
  };
  auto out = [&](const std::string& acc, const std::string& name) {
    if (rounded) {
      g.nodes.push_back(cast(acc, name + "/m", DType::kBF16));
      g.nodes.push_back(cast(name + "/m", name, DType::kF32));
    }
    g.outputs.push_back(ValueInfo{name, {}});
  };
  const std::string xr = r("X"), wr = r("W");
  Node conv = node("Conv", "", {xr, wr}, {rounded ? "acc" : "Y"});
  Attribute pads, strides;
  pads.type = strides.type = AttrType::kInts;
  pads.ints = {1, 1, 1, 1};
  strides.ints = {stride, stride};
  conv.attrs["pads"] = pads;
  conv.attrs["strides"] = strides;
  g.nodes.push_back(conv);
  out("acc", "Y");
  const std::string dyr = r("dY");
  Node grad = node("ConvGrad", "com.ferry", {dyr, xr, wr}, {rounded ? "dXacc" : "dX", rounded ? "dWacc" : "dW"});
  grad.attrs = conv.attrs;
  g.nodes.push_back(grad);
  out("dXacc", "dX");
  out("dWacc", "dW");
  return m;
}

std::vector<Tensor> run(std::shared_ptr<Model> m, bool fold, int* amp_nodes, int* casts,
                        const std::string& device = "cpu") {
  EXPECT_TRUE(infer_shapes(m.get()).is_ok());
  OptimizeOptions oo;
  oo.device_traits = device_graph_traits(device);
  if (!fold) oo.disabled = {"amp_bf16_fold"};
  Status s = optimize_model(m.get(), oo);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  *amp_nodes = *casts = 0;
  for (const Node& n : m->graph.nodes) {
    *amp_nodes += n.attr("amp_bf16") != nullptr;
    *casts += n.op_type == "Cast";
  }
  ExecutorOptions eo;
  eo.device = device;
  eo.opt_level = 0;
  eo.threads = 1;
  auto ex = Executor::create(m, eo);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return {};
  const std::vector<int64_t> x = m->graph.inputs[0].type.shape->values(), w = m->graph.inputs[1].type.shape->values(),
                             y = m->graph.inputs[2].type.shape->values();
  NamedTensors feeds = {{"X", randn(x, 1)}, {"W", randn(w, 2)}, {"dY", randn(y, 3)}}, outs;
  s = ex.value()->run(feeds, &outs);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  std::vector<Tensor> r;
  for (auto& [name, t] : outs) r.push_back(t);
  return r;
}

// Elements of a (native) and b (emulated) more than one bf16 step of |b| apart; `differ`: how many
// differ at all.
int64_t beyond_one_step(const Tensor& a, const Tensor& b, int64_t* differ) {
  int64_t far = 0;
  *differ = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const float u = a.data<float>()[i], v = b.data<float>()[i];
    if (u == v) continue;
    ++*differ;
    far += std::fabs(u - v) > std::ldexp(1.0f, std::ilogb(std::fabs(v)) - 7) * 1.01f;
  }
  return far;
}

TEST(AmpBf16, NativeConvMatchesEmulatedGraph) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no avx512_bf16 on this CPU: the pass leaves the emulated graph";
  // 128 input channels: the f32 backward-weights on rounded operands (ops/conv_grad_link.h's
  // amp_wgrad_f32), also within one bf16 step of the emulated graph.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 32, 10, 10}, {48, 32, 3, 3}}, {{2, 128, 6, 6}, {32, 128, 3, 3}}};
  for (const auto& [x, w] : shapes)
  for (int64_t stride : {1, 2}) {
    SCOPED_TRACE("input channels " + std::to_string(x[1]));
    int amp = 0, casts = 0, amp_e = 0, casts_e = 0, amp_f = 0, casts_f = 0;
    auto native = run(conv_model(x, w, stride, true), true, &amp, &casts);
    auto emulated = run(conv_model(x, w, stride, true), false, &amp_e, &casts_e);
    auto f32 = run(conv_model(x, w, stride, false), true, &amp_f, &casts_f);
    EXPECT_EQ(amp, 2) << "Conv and ConvGrad both fold";
    EXPECT_EQ(casts, 0) << "every pair folds into the convolutions";
    EXPECT_EQ(amp_e, 0);
    EXPECT_EQ(casts_e, 12);
    EXPECT_EQ(amp_f, 0) << "no Cast pair: nothing to fold";
    ASSERT_EQ(native.size(), 3u);
    ASSERT_EQ(emulated.size(), 3u);
    const char* names[] = {"Y", "dX", "dW"};
    for (size_t i = 0; i < 3; ++i) {
      int64_t differ = 0, differ_f32 = 0;
      EXPECT_EQ(beyond_one_step(native[i], emulated[i], &differ), 0) << names[i] << " stride " << stride;
      EXPECT_LE(differ, native[i].numel() / 20) << names[i] << " stride " << stride;
      beyond_one_step(native[i], f32[i], &differ_f32);
      EXPECT_GT(differ_f32, native[i].numel() / 2) << names[i] << ": the native result is not rounded to bf16";
      for (int64_t k = 0; k < native[i].numel(); ++k) {  // bf16 values held in f32
        uint32_t bits;
        std::memcpy(&bits, native[i].data<float>() + k, 4);
        if (bits & 0xffffu) {
          ADD_FAILURE() << names[i] << "[" << k << "] is not a bf16 value";
          break;
        }
      }
    }
  }
}

// The reference backend has no bf16 convolution: the pass leaves its graph emulated.
TEST(AmpBf16, EmulatedOnCpuRef) {
  int amp = 0, casts = 0;
  auto out = run(conv_model({1, 16, 6, 6}, {16, 16, 3, 3}, 1, true), true, &amp, &casts, "cpu-ref");
  EXPECT_EQ(amp, 0);
  EXPECT_EQ(casts, 12);
  EXPECT_EQ(out.size(), 3u);
}

}  // namespace
}  // namespace ferry
