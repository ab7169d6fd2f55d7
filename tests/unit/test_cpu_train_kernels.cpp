// The cpu backend's training kernels (src/backends/cpu/dnnl_conv_grad.cpp, grad_norm_pool.cpp,
// grad_activation.cpp, grad_blocked.cpp, elementwise.cpp's Sum)
// against the reference kernels: ConvGrad (strides, pads, dilations, groups, depthwise, omitted
// outputs), Conv with weights fed at run time, BatchNormTraining / BatchNormTrainingGrad (2-D and
// 4-D), MaxPoolGrad / AveragePoolGrad (pads, ceil_mode, count_include_pad, global) and ReluGrad.
//
// CpuTrainKernelsProfile.Model is a profiler, not a test: with FERRY_TRAIN_PROFILE_MODEL=model.onnx
// (and optionally FERRY_TRAIN_PROFILE_BATCH, _THREADS, _STEPS, _OPT) it builds the model's training
// graph as `ferry train` does and prints the time per op type and the slowest nodes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "backends/cpu/grad_blocked.h"
#include "cpu_features.h"
#include "onnx/onnx_import.h"
#include "ops/conv_grad_link.h"
#include "op_tester.h"
#include "runtime/executor.h"
#include "train/training_graph.h"

namespace ferry::testing {
namespace {

Tensor randn(std::vector<int64_t> dims, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = nd(rng);
  return t;
}

// max |a - b| / max(1, max |b|): relative to the tensor's scale.
// bf16 tensors (--amp bf16 activations) are compared as their f32 values; both must be bf16 then.
double rel_err(const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::kBF16 || b.dtype() == DType::kBF16) {
    EXPECT_EQ(a.dtype(), b.dtype());
    if (a.dtype() != b.dtype()) return 1e9;
    auto widened = [](const Tensor& h) {
      Tensor t = Tensor::allocate(DType::kF32, h.dims());
      for (int64_t i = 0; i < h.numel(); ++i) t.mutable_data<float>()[i] = bf16_to_f32(h.data<uint16_t>()[i]);
      return t;
    };
    return rel_err(widened(a), widened(b));
  }
  EXPECT_EQ(a.dims(), b.dims());
  if (a.dims() != b.dims() || a.dtype() != DType::kF32 || b.dtype() != DType::kF32) return 1e9;
  double m = 1.0, d = 0.0;
  for (int64_t i = 0; i < b.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(b.data<float>()[i])));
  for (int64_t i = 0; i < b.numel(); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  return d / m;
}

// One com.ferry node with named outputs ("" = omitted), run on `device`.
struct OneNode {
  std::string op, domain = "com.ferry";
  std::map<std::string, Attribute> attrs;
  std::vector<Tensor> inputs;
  std::vector<bool> const_inputs;
  std::vector<bool> outputs;  // wanted

  std::vector<Tensor> run(const std::string& device) const {
    auto model = std::make_shared<Model>();
    model->opset_imports[""] = 17;
    model->opset_imports["com.ferry"] = 1;
    Graph& g = model->graph;
    Node n;
    n.name = op + "_0";
    n.op_type = op;
    n.domain = domain;
    n.attrs = attrs;
    NamedTensors feeds;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string name = "in" + std::to_string(i);
      n.inputs.push_back(name);
      g.value_types[name] = inputs[i].type();
      if (i < const_inputs.size() && const_inputs[i]) {
        g.initializers[name] = inputs[i];
      } else {
        g.inputs.push_back(ValueInfo{name, inputs[i].type()});
        feeds.emplace_back(name, inputs[i]);
      }
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      n.outputs.push_back(outputs[i] ? "out" + std::to_string(i) : "");
      if (outputs[i]) g.outputs.push_back(ValueInfo{"out" + std::to_string(i), {}});
    }
    g.nodes.push_back(n);
    std::vector<Tensor> result;
    Status s = infer_shapes(model.get());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (!s.is_ok()) return result;
    ExecutorOptions eo;
    eo.device = device;
    eo.opt_level = 0;
    auto ex = Executor::create(model, eo);
    EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
    if (!ex.is_ok()) return result;
    NamedTensors outs;
    s = ex.value()->run(feeds, &outs);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    for (auto& [name, t] : outs) result.push_back(t);
    return result;
  }

  void expect_matches_reference(double tol = 1e-5) const {
    auto ref = run("cpu-ref"), cpu = run("cpu");
    ASSERT_EQ(ref.size(), cpu.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LE(rel_err(cpu[i], ref[i]), tol) << op << " output " << i << " dims " << dims_to_string(ref[i].dims());
  }
};

Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.type = AttrType::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute int_attr(int64_t v) {
  Attribute a;
  a.type = AttrType::kInt;
  a.i = v;
  return a;
}
Attribute float_attr(float v) {
  Attribute a;
  a.type = AttrType::kFloat;
  a.f = v;
  return a;
}

// ---- convolutions ------------------------------------------------------------------------------

struct ConvCase {
  std::vector<int64_t> x, w;
  std::map<std::string, Attribute> attrs;
};

std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> c;
  c.push_back({{2, 4, 9, 9}, {6, 4, 3, 3}, {{"pads", ints_attr({1, 1, 1, 1})}}});
  c.push_back({{2, 5, 10, 11}, {7, 5, 3, 2}, {{"strides", ints_attr({2, 3})}, {"pads", ints_attr({1, 0, 0, 1})}}});
  c.push_back({{1, 3, 12, 12}, {4, 3, 3, 3}, {{"dilations", ints_attr({2, 2})}, {"pads", ints_attr({2, 1, 2, 1})}}});
  c.push_back({{2, 6, 8, 8}, {4, 3, 3, 3}, {{"group", int_attr(2)}, {"pads", ints_attr({1, 1, 1, 1})}}});
  c.push_back({{2, 8, 9, 9}, {16, 1, 3, 3},  // depthwise, channel multiplier 2, stride 2
               {{"group", int_attr(8)}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}}});
  c.push_back({{2, 32, 24, 24}, {32, 32, 3, 3}, {{"pads", ints_attr({1, 1, 1, 1})}}});  // Winograd
  c.push_back({{1, 256, 7, 7}, {256, 256, 3, 3}, {{"pads", ints_attr({1, 1, 1, 1})}}});  // Winograd (training only)
  c.push_back({{3, 16, 7, 7}, {32, 16, 1, 1}, {}});
  c.push_back({{2, 16, 8, 8}, {8, 16, 1, 1}, {{"strides", ints_attr({2, 2})}}});
  c.push_back({{2, 3, 17}, {5, 3, 4}, {{"strides", ints_attr({2})}, {"pads", ints_attr({1, 2})}}});  // 1-D
  Attribute same;
  same.type = AttrType::kString;
  same.s = "SAME_UPPER";
  c.push_back({{1, 4, 7, 6}, {4, 4, 2, 3}, {{"auto_pad", same}, {"strides", ints_attr({2, 2})}}});
  return c;
}

TEST(CpuTrainKernels, ConvGradMatchesReference) {
  uint32_t seed = 1;
  for (const ConvCase& cc : conv_cases()) {
    std::vector<int64_t> y = {cc.x[0], cc.w[0]};
    {  // the output shape from the reference forward
      OneNode fwd{"Conv", "", cc.attrs, {randn(cc.x, seed), randn(cc.w, seed + 1)}, {}, {true}};
      y = fwd.run("cpu-ref").at(0).dims();
    }
    const Tensor dy = randn(y, seed + 2), x = randn(cc.x, seed + 3), w = randn(cc.w, seed + 4, 0.3f);
    for (std::vector<bool> want : {std::vector<bool>{true, true, true}, {true}, {false, true}, {false, true, true},
                                   {false, false, true}}) {
      SCOPED_TRACE("X " + dims_to_string(cc.x) + " W " + dims_to_string(cc.w) + " outputs " +
                   std::to_string(want.size()) + (want[0] ? " dX" : ""));
      OneNode{"ConvGrad", "com.ferry", cc.attrs, {dy, x, w}, {}, want}.expect_matches_reference();
    }
    seed += 10;
  }
}

TEST(CpuTrainKernels, ConvWithRuntimeWeightsMatchesReference) {
  uint32_t seed = 100;
  for (const ConvCase& cc : conv_cases()) {
    SCOPED_TRACE("X " + dims_to_string(cc.x) + " W " + dims_to_string(cc.w));
    const Tensor x = randn(cc.x, seed), w = randn(cc.w, seed + 1, 0.3f), b = randn({cc.w[0]}, seed + 2);
    OneNode{"Conv", "", cc.attrs, {x, w, b}, {}, {true}}.expect_matches_reference();
    OneNode{"Conv", "", cc.attrs, {x, w}, {false, true}, {true}}.expect_matches_reference();
    seed += 10;
  }
}

// Conv(X, W) and ConvGrad(dY, X, W) in one graph: the forward keeps its blocked X for the
// backward-weights (ops/conv_grad_link.h). Two runs of one executor, X's buffer rewritten in place
// between them (same data pointer, new values): both match the reference.
TEST(CpuTrainKernels, ConvGradReadsTheForwardsBlockedXOfTheSameRun) {
  uint32_t seed = 200;
  for (const ConvCase& cc : conv_cases()) {
    if (cc.x.size() != 4 || cc.x[1] < 16 || cc.attrs.count("group")) continue;  // blocked, ungrouped 2-D
    SCOPED_TRACE("X " + dims_to_string(cc.x) + " W " + dims_to_string(cc.w));
    auto model = std::make_shared<Model>();
    model->opset_imports[""] = 17;
    model->opset_imports["com.ferry"] = 1;
    Graph& g = model->graph;
    Tensor x = randn(cc.x, seed), w = randn(cc.w, seed + 1, 0.3f);
    Node conv, grad;
    conv.name = "conv";
    conv.op_type = "Conv";
    conv.inputs = {"x", "w"};
    conv.outputs = {"y"};
    conv.attrs = cc.attrs;
    OneNode fwd{"Conv", "", cc.attrs, {x, w}, {}, {true}};
    const Tensor dy = randn(fwd.run("cpu-ref").at(0).dims(), seed + 2);
    grad.name = "conv_grad";
    grad.op_type = "ConvGrad";
    grad.domain = "com.ferry";
    grad.inputs = {"dy", "x", "w"};
    grad.outputs = {"dx", "dw", "db"};
    grad.attrs = cc.attrs;
    g.nodes = {conv, grad};
    for (const auto& [name, t] : std::vector<std::pair<std::string, const Tensor*>>{{"x", &x}, {"w", &w}, {"dy", &dy}}) {
      g.inputs.push_back(ValueInfo{name, t->type()});
      g.value_types[name] = t->type();
    }
    for (const char* o : {"y", "dx", "dw", "db"}) g.outputs.push_back(ValueInfo{o, {}});
    ASSERT_TRUE(infer_shapes(model.get()).is_ok());
    ASSERT_EQ(conv_grad_links(g).size(), 1u);
    std::map<std::string, std::unique_ptr<Executor>> ex;
    for (const char* device : {"cpu", "cpu-ref"}) {
      ExecutorOptions eo;
      eo.device = device;
      eo.opt_level = 0;
      auto e = Executor::create(model, eo);
      ASSERT_TRUE(e.is_ok()) << e.status().to_string();
      ex[device] = std::move(e).value();
    }
    for (int run = 0; run < 2; ++run) {
      if (run == 1) {  // new values in the same buffer
        const Tensor x2 = randn(cc.x, seed + 3);
        std::copy(x2.data<float>(), x2.data<float>() + x2.numel(), x.mutable_data<float>());
      }
      std::map<std::string, NamedTensors> outs;
      for (auto& [device, e] : ex) {
        Status st = e->run({{"x", x}, {"w", w}, {"dy", dy}}, &outs[device]);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
      }
      ASSERT_EQ(outs["cpu"].size(), 4u);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_LE(rel_err(outs["cpu"][i].second, outs["cpu-ref"][i].second), 1e-5) << "run " << run << " " << outs["cpu"][i].first;
    }
    seed += 10;
  }
}

// ---- batch normalization ------------------------------------------------------------------------

TEST(CpuTrainKernels, BatchNormTrainingMatchesReference) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{6, 5}, {4, 3, 5, 7}, {2, 17, 3, 3}, {3, 4, 10}}) {
    SCOPED_TRACE("X " + dims_to_string(dims));
    const int64_t C = dims[1];
    Tensor x = randn(dims, 1, 2.f);
    for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] += 3.f + static_cast<float>(i % 3);
    Tensor var = randn({C}, 5);
    for (int64_t i = 0; i < C; ++i) var.mutable_data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.5f;
    OneNode bn{"BatchNormTraining", "com.ferry",
               {{"epsilon", float_attr(1e-3f)}, {"momentum", float_attr(0.8f)}},
               {x, randn({C}, 2), randn({C}, 3), randn({C}, 4), var}, {}, {true, true, true, true, true}};
    bn.expect_matches_reference();
    bn.outputs = {true, false, false, true, true};
    bn.expect_matches_reference();
    const Tensor dy = randn(dims, 6);
    const auto stats = bn.run("cpu-ref");
    OneNode grad{"BatchNormTrainingGrad", "com.ferry", {}, {dy, x, randn({C}, 2), stats[1], stats[2]}, {},
                 {true, true, true}};
    grad.expect_matches_reference();
    grad.outputs = {false, true, true};
    grad.expect_matches_reference();
    grad.outputs = {true};
    grad.expect_matches_reference();
    // relu = 1 and the Z input: BatchNormTraining -> Relu and ReluGrad -> BatchNormTrainingGrad fused.
    OneNode bnr = bn;
    bnr.attrs["relu"] = int_attr(1);
    bnr.outputs = {true, false, false, true, true};
    bnr.expect_matches_reference();
    const auto zs = bnr.run("cpu-ref");
    OneNode gz{"BatchNormTrainingGrad", "com.ferry", {}, {dy, x, randn({C}, 2), zs[1], zs[2], zs[0]}, {}, {true, true, true}};
    gz.expect_matches_reference();
    int64_t zeros = 0;  // the mask does something: a good part of Z is zero
    for (int64_t i = 0; i < zs[0].numel(); ++i) zeros += zs[0].data<float>()[i] == 0.f;
    EXPECT_GT(zeros, zs[0].numel() / 4);
  }
}

// ---- --amp bf16 activations (train_blocked_layout's bf16_activations) --------------------------

Attribute str_attr(const std::string& v) {
  Attribute a;
  a.type = AttrType::kString;
  a.s = v;
  return a;
}

// `t` rounded to bf16 (a bf16 tensor), and a bf16 tensor widened back to f32.
Tensor to_bf16(const Tensor& t) {
  Tensor b = Tensor::allocate(DType::kBF16, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) b.mutable_data<uint16_t>()[i] = f32_to_bf16(t.data<float>()[i]);
  return b;
}
Tensor to_f32(const Tensor& b) {
  Tensor t = Tensor::allocate(DType::kF32, b.dims());
  for (int64_t i = 0; i < b.numel(); ++i) t.mutable_data<float>()[i] = bf16_to_f32(b.data<uint16_t>()[i]);
  return t;
}

// com.ferry Blocked(op) on nChw16c operands; bf16_inputs / bf16_outputs as given.
OneNode blocked_node(const std::string& op, std::map<std::string, Attribute> attrs, std::vector<Tensor> inputs,
                     std::vector<bool> outputs, int64_t in_mask, int64_t out_mask, int64_t bf16_in, int64_t bf16_out) {
  attrs["op"] = str_attr(op);
  attrs["op_domain"] = str_attr(op == "Conv" ? "" : "com.ferry");
  attrs["op_opset"] = int_attr(op == "Conv" ? 17 : 1);
  attrs["blocked_inputs"] = int_attr(in_mask);
  attrs["blocked_outputs"] = int_attr(out_mask);
  if (bf16_in) attrs["bf16_inputs"] = int_attr(bf16_in);
  if (bf16_out) attrs["bf16_outputs"] = int_attr(bf16_out);
  return OneNode{"Blocked", "com.ferry", attrs, std::move(inputs), {}, std::move(outputs)};
}

// Runs the Blocked BN node `n` on the cpu backend, checking that grad_blocked.cpp's own nChw16c
// loops ran it: the reference kernel it falls back to gives the same numbers (several times slower),
// so only grad_blocked.h's counts tell.
std::vector<Tensor> run_fast_bn(const OneNode& n, bool grad) {
  const cpu::BlockedBnCounts before = cpu::blocked_bn_counts();
  std::vector<Tensor> out = n.run("cpu");
  const cpu::BlockedBnCounts after = cpu::blocked_bn_counts();
  EXPECT_EQ(grad ? after.grad - before.grad : after.forward - before.forward, 1)
      << "the fast blocked BatchNorm" << (grad ? "Grad" : "") << " kernel did not run";
  EXPECT_EQ(after.forward_fallback - before.forward_fallback + after.grad_fallback - before.grad_fallback, 0)
      << "a blocked BatchNorm fell back to the reference kernel";
  return out;
}

// BatchNormTraining / BatchNormTrainingGrad reading a bf16 X (grad_blocked.cpp's bf16 loads) give
// the reference's results, and the f32 kernel's on the same values widened to f32.
TEST(CpuTrainKernels, BlockedBatchNormReadsBf16X) {
  const int64_t N = 2, C = 32, H = 5, W = 3;
  Tensor xf = randn({N, C / 16, H, W, 16}, 11, 2.f);
  for (int64_t i = 0; i < xf.numel(); ++i) xf.mutable_data<float>()[i] += 1.f + static_cast<float>(i % 5);
  const Tensor xb = to_bf16(xf), xw = to_f32(xb);
  Tensor var = randn({C}, 12);
  for (int64_t i = 0; i < C; ++i) var.mutable_data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.5f;
  const std::map<std::string, Attribute> bn_attrs = {{"epsilon", float_attr(1e-3f)}, {"momentum", float_attr(0.8f)}};
  for (int relu = 0; relu < 2; ++relu) {
    SCOPED_TRACE(relu ? "relu" : "no relu");
    std::map<std::string, Attribute> a = bn_attrs;
    if (relu) a["relu"] = int_attr(1);
    const std::vector<Tensor> rest = {randn({C}, 13), randn({C}, 14), randn({C}, 15), var};
    std::vector<Tensor> in_b = {xb}, in_f = {xw};
    in_b.insert(in_b.end(), rest.begin(), rest.end());
    in_f.insert(in_f.end(), rest.begin(), rest.end());
    const OneNode bn_b = blocked_node("BatchNormTraining", a, in_b, {true, true, true, true, true}, 1, 1, 1, 0);
    const OneNode bn_f = blocked_node("BatchNormTraining", a, in_f, {true, true, true, true, true}, 1, 1, 0, 0);
    bn_b.expect_matches_reference();
    const auto got = run_fast_bn(bn_b, false), want = run_fast_bn(bn_f, false);
    ASSERT_EQ(got.size(), 5u);
    ASSERT_EQ(want.size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_LE(rel_err(got[i], want[i]), 1e-6) << "output " << i;
    // Y written in bf16 (bf16_outputs: a BN + Relu read only by amp convolutions): the f32 Y rounded.
    const OneNode bn_y = blocked_node("BatchNormTraining", a, in_b, {true, true, true, true, true}, 1, 1, 1, 1);
    bn_y.expect_matches_reference(1e-2);
    const auto got_y = run_fast_bn(bn_y, false);
    ASSERT_EQ(got_y.size(), 5u);
    ASSERT_EQ(got_y[0].dtype(), DType::kBF16);
    EXPECT_LE(rel_err(to_f32(got_y[0]), to_f32(to_bf16(want[0]))), 8e-3);
    for (size_t i = 1; i < 5; ++i) EXPECT_LE(rel_err(got_y[i], want[i]), 1e-6) << "output " << i;
    // The gradient with the saved X in bf16 (input 1), with and without the fused ReluGrad's Z.
    const Tensor dy = randn(xf.dims(), 16);
    std::vector<Tensor> g_b = {dy, xb, rest[0], got[3], got[4]}, g_f = {dy, xw, rest[0], got[3], got[4]};
    int64_t mask = 3;
    if (relu) {
      g_b.push_back(got[0]);
      g_f.push_back(got[0]);
      mask |= 32;
    }
    const OneNode gr_b = blocked_node("BatchNormTrainingGrad", {}, g_b, {true, true, true}, mask, 1, 2, 0);
    const OneNode gr_f = blocked_node("BatchNormTrainingGrad", {}, g_f, {true, true, true}, mask, 1, 0, 0);
    gr_b.expect_matches_reference();
    const auto gg = run_fast_bn(gr_b, true), gw = run_fast_bn(gr_f, true);
    ASSERT_EQ(gg.size(), 3u);
    ASSERT_EQ(gw.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_LE(rel_err(gg[i], gw[i]), 1e-6) << "grad output " << i;
    if (relu) {  // the Relu mask Z in bf16 (the bf16 Y above): the same mask
      std::vector<Tensor> z_b = g_b;
      z_b[5] = to_bf16(got[0]);
      const OneNode gr_z = blocked_node("BatchNormTrainingGrad", {}, z_b, {true, true, true}, mask, 1, 2 | 32, 0);
      gr_z.expect_matches_reference();
      const auto gz = run_fast_bn(gr_z, true);
      ASSERT_EQ(gz.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_LE(rel_err(gz[i], gw[i]), 1e-6) << "grad output " << i << " (bf16 Z)";
    }
    // dY in bf16 too (a ConvGrad's dX), and dX written in bf16 (a ConvGrad's dY): the f32 kernel's dX
    // rounded, on dY widened.
    const Tensor dyb = to_bf16(dy), dyw = to_f32(dyb);
    std::vector<Tensor> h_b = g_b, h_f = g_f;
    h_b[0] = dyb;
    h_f[0] = dyw;
    for (int out16 = 0; out16 < 2; ++out16) {
      SCOPED_TRACE(out16 ? "bf16 dY and dX" : "bf16 dY");
      const OneNode hb = blocked_node("BatchNormTrainingGrad", {}, h_b, {true, true, true}, mask, 1, 3, out16);
      const OneNode hf = blocked_node("BatchNormTrainingGrad", {}, h_f, {true, true, true}, mask, 1, 0, 0);
      hb.expect_matches_reference(1e-2);  // the reference rounds its f32 dX once more (to bf16)
      const auto hg = run_fast_bn(hb, true), hw = run_fast_bn(hf, true);
      ASSERT_EQ(hg.size(), 3u);
      ASSERT_EQ(hw.size(), 3u);
      ASSERT_EQ(hg[0].dtype(), out16 ? DType::kBF16 : DType::kF32);
      EXPECT_LE(rel_err(out16 ? to_f32(hg[0]) : hg[0], out16 ? to_f32(to_bf16(hw[0])) : hw[0]), out16 ? 8e-3 : 1e-6);
      for (size_t i = 1; i < 3; ++i) EXPECT_LE(rel_err(hg[i], hw[i]), 1e-6) << "grad output " << i;
    }
  }
}

// A Blocked Conv with amp_bf16 writing its rounded output in bf16 (bf16_outputs): the values the
// f32-stored output holds, and the reference's within bf16 rounding of the operands.
TEST(CpuTrainKernels, BlockedAmpConvWritesBf16Output) {
  if (!test::cpu_has_avx512_core()) GTEST_SKIP() << "no AVX-512 here: oneDNN has no bf16 convolution (the amp pass leaves the emulated graph)";
  const Tensor x = randn({2, 2, 6, 6, 16}, 21), w = randn({32, 32, 3, 3}, 22, 0.1f);
  std::map<std::string, Attribute> a = {{"pads", ints_attr({1, 1, 1, 1})},
                                        {"amp_bf16", int_attr(1)},
                                        {"amp_round_outputs", int_attr(1)}};
  const OneNode bf = blocked_node("Conv", a, {x, w}, {true}, 1, 1, 0, 1);
  const OneNode f32 = blocked_node("Conv", a, {x, w}, {true}, 1, 1, 0, 0);
  const auto yb = bf.run("cpu"), yf = f32.run("cpu"), yr = bf.run("cpu-ref");
  ASSERT_EQ(yb.size(), 1u);
  ASSERT_EQ(yf.size(), 1u);
  ASSERT_EQ(yr.size(), 1u);
  ASSERT_EQ(yb[0].dtype(), DType::kBF16);
  ASSERT_EQ(yr[0].dtype(), DType::kBF16);
  const Tensor wide = to_f32(yb[0]);
  EXPECT_EQ(wide.dims(), yf[0].dims());
  EXPECT_EQ(0, std::memcmp(wide.raw(), yf[0].raw(), static_cast<size_t>(wide.nbytes()))) << "not the f32 output's values";
  EXPECT_LE(rel_err(wide, to_f32(yr[0])), 2e-2);
  EXPECT_GT(rel_err(wide, to_f32(yr[0])), 0.0) << "the operands were not rounded (amp_bf16 not taken)";
  // X in bf16 (bf16_inputs: a BN + Relu's Y): the same output as X in f32 (the kernel rounds it).
  const OneNode xb = blocked_node("Conv", a, {to_bf16(x), w}, {true}, 1, 1, 1, 1);
  const auto yx = xb.run("cpu");
  ASSERT_EQ(yx.size(), 1u);
  ASSERT_EQ(yx[0].dtype(), DType::kBF16);
  EXPECT_EQ(0, std::memcmp(yx[0].raw(), yb[0].raw(), static_cast<size_t>(yb[0].nbytes())));
  EXPECT_LE(rel_err(yx[0], xb.run("cpu-ref")[0]), 2e-2);
  // ConvGrad with dY and X in bf16 and dX written in bf16: as with f32 dY and X (rounded by the
  // kernel) and dX rounded.
  const Tensor dy = randn({2, 2, 6, 6, 16}, 23);
  std::map<std::string, Attribute> ga = a;
  ga["amp_round_outputs"] = int_attr(3);
  const OneNode g16 = blocked_node("ConvGrad", ga, {to_bf16(dy), to_bf16(x), w}, {true, true, false}, 3, 1, 3, 1);
  const OneNode g32 = blocked_node("ConvGrad", ga, {dy, x, w}, {true, true, false}, 3, 1, 0, 0);
  const auto r16 = g16.run("cpu"), r32 = g32.run("cpu");
  ASSERT_EQ(r16.size(), 2u);
  ASSERT_EQ(r32.size(), 2u);
  ASSERT_EQ(r16[0].dtype(), DType::kBF16);
  EXPECT_EQ(0, std::memcmp(to_f32(r16[0]).raw(), r32[0].raw(), static_cast<size_t>(r32[0].nbytes())));
  EXPECT_LE(rel_err(r16[1], r32[1]), 1e-6);
  EXPECT_LE(rel_err(r16[0], g16.run("cpu-ref")[0]), 2e-2);
}

// The training graph's BatchNormTraining -> Relu fusion: fused and unfused graphs give the same loss
// and gradients (Conv -> BN -> Relu -> GlobalAveragePool -> Flatten -> Gemm, on the cpu backend).
TEST(CpuTrainKernels, FusedBatchNormReluGraphMatchesUnfused) {
  auto model = std::make_shared<Model>();
  model->opset_imports[""] = 17;
  Graph& g = model->graph;
  const int64_t C = 6, K = 4;
  g.inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape({Dim::symbolic("b"), 3, 9, 9})}});
  g.initializers["w"] = randn({C, 3, 3, 3}, 1, 0.3f);
  g.initializers["scale"] = randn({C}, 2);
  g.initializers["bias"] = randn({C}, 3);
  g.initializers["rmean"] = Tensor::from_vector<float>(std::vector<float>(C, 0.f), {C});
  g.initializers["rvar"] = Tensor::from_vector<float>(std::vector<float>(C, 1.f), {C});
  g.initializers["fcw"] = randn({K, C}, 4);
  g.initializers["fcb"] = randn({K}, 5);
  auto node = [&](const char* op, std::vector<std::string> in, std::string out) {
    Node n;
    n.name = std::string(op) + "_" + out;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    return n;
  };
  g.nodes.push_back(node("Conv", {"x", "w"}, "c"));
  g.nodes.back().attrs["pads"] = ints_attr({1, 1, 1, 1});
  g.nodes.push_back(node("BatchNormalization", {"c", "scale", "bias", "rmean", "rvar"}, "bn"));
  g.nodes.push_back(node("Relu", {"bn"}, "r"));
  g.nodes.push_back(node("GlobalAveragePool", {"r"}, "p"));
  g.nodes.push_back(node("Flatten", {"p"}, "f"));
  g.nodes.push_back(node("Gemm", {"f", "fcw", "fcb"}, "logits"));
  g.nodes.back().attrs["transB"] = int_attr(1);
  g.outputs.push_back(ValueInfo{"logits", {}});
  // f32, and --amp bf16, whose autocast leaves BN -> Relu without a Cast between (the pair still fuses).
  for (DType amp : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(amp == DType::kF32 ? "f32" : "--amp bf16");
    std::vector<NamedTensors> results;
    for (bool fuse : {false, true}) {
      TrainGraphOptions o;
      o.batch_size = 3;
      o.amp = amp;
      o.fuse_bn_relu = fuse;
      auto tg = build_train_graph(*model, o);
      ASSERT_TRUE(tg.is_ok()) << tg.status().to_string();
      EXPECT_EQ(tg.value().fused_bn_relu, fuse ? 1 : 0);
      int64_t relus = 0;
      for (const Node& n : tg.value().model->graph.nodes) relus += n.op_type == "Relu" || n.op_type == "ReluGrad";
      EXPECT_EQ(relus, fuse ? 0 : 2);
      ExecutorOptions eo;
      eo.device = "cpu";
      auto ex = Executor::create(tg.value().model, eo);
      ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
      NamedTensors feeds = {{"x", randn({3, 3, 9, 9}, 9)},
                            {tg.value().labels, Tensor::from_vector<int64_t>({0, 3, 1}, {3})}};
      for (const auto& [name, t] : tg.value().initial) feeds.emplace_back(name, t);
      NamedTensors outs;
      Status st = ex.value()->run(feeds, &outs);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      std::sort(outs.begin(), outs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      results.push_back(outs);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    ASSERT_GE(results[0].size(), 6u);  // loss, 5 gradients, running statistics
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_EQ(results[0][i].first, results[1][i].first);
      EXPECT_LE(rel_err(results[1][i].second, results[0][i].second), 1e-6) << results[0][i].first;
    }
  }
}

// ---- pooling and activation gradients -----------------------------------------------------------

TEST(CpuTrainKernels, PoolGradsMatchReference) {
  struct Case {
    std::vector<int64_t> x;
    std::map<std::string, Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 12, 12}, {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}}},
      {{1, 2, 8, 9}, {{"kernel_shape", ints_attr({3, 2})}, {"strides", ints_attr({2, 2})}, {"ceil_mode", int_attr(1)}}},
      {{1, 2, 9, 9},
       {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 0, 1, 1})},
        {"ceil_mode", int_attr(1)}}},
      {{2, 2, 10, 10}, {{"kernel_shape", ints_attr({2, 2})}, {"dilations", ints_attr({2, 2})}}},
      {{2, 4, 7, 7}, {{"kernel_shape", ints_attr({7, 7})}}},  // global
      // rows wide enough for MaxPoolGrad's vector path (several vectors and a tail), stride 3
      {{1, 2, 9, 75}, {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}}},
      {{1, 2, 7, 61}, {{"kernel_shape", ints_attr({2, 3})}, {"strides", ints_attr({3, 3})}, {"pads", ints_attr({0, 1, 0, 1})}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("X " + dims_to_string(c.x));
    Tensor x = randn(c.x, 7);
    for (int64_t i = 0; i < x.numel(); i += 3) x.mutable_data<float>()[i] = 1.f;  // ties: the first maximum
    for (int64_t i = 17; i < x.numel(); i += 97) x.mutable_data<float>()[i] = std::nanf("");  // a NaN wins
    OneNode fwd{"MaxPool", "", c.attrs, {x}, {}, {true}};
    const std::vector<int64_t> y = fwd.run("cpu-ref").at(0).dims();
    const Tensor dy = randn(y, 8);
    OneNode{"MaxPoolGrad", "com.ferry", c.attrs, {dy, x}, {}, {true}}.expect_matches_reference();
    for (int64_t cip : {0, 1}) {
      auto attrs = c.attrs;
      attrs["count_include_pad"] = int_attr(cip);
      OneNode{"AveragePoolGrad", "com.ferry", attrs, {dy, Tensor::from_vector<int64_t>(c.x, {4})}, {false, true}, {true}}
          .expect_matches_reference();
    }
  }
}

// The cpu MaxPool on plain NCHW f32 where oneDNN has only its reference loop (AVX2 hosts: the
// backend's own max_pool_plane, dnnl_pool.cpp) gives the reference's values exactly: ties, signed
// zeros (the first of +0 / -0 stays), pads, ceil_mode, rows narrower than the window's reach.
TEST(CpuTrainKernels, MaxPoolForwardMatchesReferenceExactly) {
  struct Case {
    std::vector<int64_t> x;
    std::map<std::string, Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 112, 112}, {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}}},
      {{1, 2, 9, 9},
       {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 0, 1, 1})},
        {"ceil_mode", int_attr(1)}}},
      {{1, 2, 8, 9}, {{"kernel_shape", ints_attr({3, 2})}, {"strides", ints_attr({2, 3})}, {"ceil_mode", int_attr(1)}}},
      {{2, 2, 5, 3}, {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({1, 1})}, {"pads", ints_attr({1, 1, 1, 1})}}},
      {{1, 3, 7, 7}, {{"kernel_shape", ints_attr({7, 7})}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("X " + dims_to_string(c.x));
    Tensor x = randn(c.x, 11);
    float* p = x.mutable_data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = -1.f - std::fabs(p[i]);       // negative windows
    for (int64_t i = 0; i < x.numel(); i += 7) p[i] = -0.5f;                      // ties
    for (int64_t i = 1; i < x.numel(); i += 4) p[i] = (i / 4) % 3 ? -0.f : 0.f;   // signed zeros, often two a window
    OneNode fwd{"MaxPool", "", c.attrs, {x}, {}, {true}};
    const Tensor want = fwd.run("cpu-ref").at(0), got = fwd.run("cpu").at(0);
    ASSERT_EQ(want.dims(), got.dims());
    EXPECT_EQ(std::memcmp(want.raw(), got.raw(), static_cast<size_t>(want.nbytes())), 0);
  }
}

TEST(CpuTrainKernels, ActivationGradsAndSumMatchReference) {
  const std::vector<int64_t> dims = {3, 5, 7, 11};
  const Tensor dy = randn(dims, 1);
  Tensor y = randn(dims, 2);
  for (int64_t i = 0; i < y.numel(); i += 5) y.mutable_data<float>()[i] = 0.f;
  Tensor s = y;
  for (int64_t i = 0; i < s.numel(); ++i) s.mutable_data<float>()[i] = 1.f / (1.f + std::exp(-y.data<float>()[i]));
  OneNode{"ReluGrad", "com.ferry", {}, {dy, y}, {}, {true}}.expect_matches_reference(0);
  OneNode{"LeakyReluGrad", "com.ferry", {{"alpha", float_attr(0.2f)}}, {dy, y}, {}, {true}}.expect_matches_reference(0);
  OneNode{"SigmoidGrad", "com.ferry", {}, {dy, s}, {}, {true}}.expect_matches_reference();
  OneNode{"TanhGrad", "com.ferry", {}, {dy, s}, {}, {true}}.expect_matches_reference();
  Tensor hx = randn(dims, 3, 4.f);
  OneNode{"HardSwishGrad", "com.ferry", {}, {dy, hx}, {}, {true}}.expect_matches_reference();
  OneNode{"Sum", "", {}, {dy, y, s}, {}, {true}}.expect_matches_reference();
}

// ---- profiler ---------------------------------------------------------------------------------

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : def;
}

TEST(CpuTrainKernelsProfile, Model) {
  const char* path = std::getenv("FERRY_TRAIN_PROFILE_MODEL");
  if (!path) GTEST_SKIP() << "set FERRY_TRAIN_PROFILE_MODEL=model.onnx to profile its training graph";
  const int batch = env_int("FERRY_TRAIN_PROFILE_BATCH", 8), steps = env_int("FERRY_TRAIN_PROFILE_STEPS", 3);
  ImportOptions io;
  io.infer_shapes = false;
  auto src = load_onnx_model(path, io);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  TrainGraphOptions o;
  o.batch_size = batch;
  auto tg = build_train_graph(*src.value(), o);
  ASSERT_TRUE(tg.is_ok()) << tg.status().to_string();
  ExecutorOptions eo;
  eo.device = "cpu";
  eo.threads = env_int("FERRY_TRAIN_PROFILE_THREADS", 2);
  eo.opt_level = env_int("FERRY_TRAIN_PROFILE_OPT", -1);
  eo.batch_split_rows = 0;
  auto ex = Executor::create(tg.value().model, eo);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  const OptimizeReport& rep = ex.value()->optimize_report();
  std::printf("nodes %lld -> %lld after the passes\n", static_cast<long long>(rep.nodes_before),
              static_cast<long long>(rep.nodes_after));
  for (const PassRecord& r : rep.passes)
    if (r.changes) std::printf("  pass %s: %d changes\n", r.name.c_str(), r.changes);
  NamedTensors feeds;
  const Graph& g = tg.value().model->graph;
  for (const std::string& in : tg.value().data_inputs) {
    std::vector<int64_t> dims = g.find_type(in)->shape->values();
    dims[0] = batch;
    feeds.emplace_back(in, randn(dims, 1));
  }
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % std::max<int64_t>(1, tg.value().num_classes);
  feeds.emplace_back(tg.value().labels, Tensor::from_vector<int64_t>(labels, {batch}));
  for (const auto& [name, t] : tg.value().initial) feeds.emplace_back(name, t);
  for (const auto& s : tg.value().dropout_seeds) feeds.emplace_back(s, Tensor::scalar<int64_t>(7));
  for (const ValueInfo& in : g.inputs) {  // other scalars (e.g. the loss seed): 1
    bool fed = false;
    for (const auto& f : feeds) fed = fed || f.first == in.name;
    if (!fed && in.type.shape && in.type.shape->rank() == 0 && in.type.dtype == DType::kF32)
      feeds.emplace_back(in.name, Tensor::scalar<float>(1.f));
  }
  std::map<std::string, std::pair<double, int>> by_op;
  std::vector<std::pair<double, std::string>> nodes;
  bool record = false;
  ex.value()->set_observer(
      [&](const Node& n, const std::vector<Value>&, double ms) {
        if (!record) return;
        auto& e = by_op[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type];
        e.first += ms;
        e.second += 1;
        nodes.emplace_back(ms, n.describe());
      },
      false);
  double total = 0;
  for (int s = 0; s < steps; ++s) {
    record = s == steps - 1;
    NamedTensors outs;
    const auto t0 = std::chrono::steady_clock::now();
    Status st = ex.value()->run(feeds, &outs);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("run %d: %.1f ms\n", s, ms);
    if (record) total = ms;
  }
  std::vector<std::pair<double, std::string>> ops;
  double sum = 0;
  for (const auto& [op, e] : by_op) {
    ops.emplace_back(e.first, op + " x" + std::to_string(e.second));
    sum += e.first;
  }
  std::sort(ops.rbegin(), ops.rend());
  std::printf("last run %.1f ms, nodes %.1f ms\n", total, sum);
  for (const auto& [ms, op] : ops) std::printf("%9.2f ms %5.1f%%  %s\n", ms, 100 * ms / sum, op.c_str());
  std::sort(nodes.rbegin(), nodes.rend());
  for (size_t i = 0; i < nodes.size() && i < 25; ++i) std::printf("%9.2f ms  %s\n", nodes[i].first, nodes[i].second.c_str());
}

}  // namespace
}  // namespace ferry::testing
