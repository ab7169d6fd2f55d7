// Pass inverted_residual_fusion (level 2, devices with trait "fused_inverted_residual": cpu; after
// nhwc_layout): MobileNetV2's inverted-residual
// block, three channels-last FusedConv nodes
//   expand 1x1 (+ Relu / Clip) -> depthwise 3x3, stride 1 or 2, pad 1 (+ Relu / Clip) -> project 1x1 (+ Z)
// (or the last two alone: MobileNetV2's first block has no expand)
// with constant f32 weights and biases, each intermediate read only by the next, becomes one
// com.ferry.InvertedResidual (src/ops/fused_block.cpp), which the cpu backend computes one output
// row at a time with the expanded tensor kept in cache (src/backends/cpu/inverted_residual.h).
// Only blocks whose input is at least kMinWidth pixels wide: there the three oneDNN convolutions
// move the 6x-wide expanded tensor through memory; on 14x14 and 7x7 images they are compute-bound
// and faster than the fused kernel (bench/inverted_residual_probe.cpp, figures there).
// MobileNetV2: the 7 blocks at 112x112, 56x56 and 28x28 (20 of its 52 convolutions). Whole model,
// interleaved with ORT, `bench/ab_vs_ort.py mobilenet_v2 T B R 2 "off=env FERRY_INVERTED_RESIDUAL=0
// build/ferry" on=build/ferry` at load 3.7-6.8 on the 2 cores (a sanitizer build and other
// benchmarks running), process-CPU p50 medians off -> on and ferry/ORT per round (wall p50):
// 1 thread b1 (5 rounds) 4.92 -> 4.39 ms, 0.98 -> 0.89; b8 (4) 38.1 -> 33.8 ms, 0.94 -> 0.87;
// 2 threads b1 (5) 5.63 -> 5.63 ms, 0.57 -> 0.60; b8 (4) 36.3 -> 36.5, 0.46 -> 0.47 (within the
// noise at that load). `ferry bench` alone, alternated: 1 thread b1 median of 6 5.95 -> 5.33 ms CPU
// (6 of 6), b8 median of 5 46.8 -> 41.1 (4 of 5), b8's CPU p90/p50 1.05-1.40 -> 1.02-1.10.
// Again at HEAD ac49e17 with the later ConvRows / RowGemm rules (23:15-23:19 UTC, load 4.3-5.7, same
// command on a copy of the binary): 1 thread b1 (5 rounds) 4.93 -> 4.64 ms, 0.93 -> 0.86; b8 (4)
// 35.4 -> 35.1, 0.83 -> 0.82; 2 threads b1 (5) 5.39 -> 5.35, 0.59 -> 0.57; b8 (4) 42.5 -> 38.2, 0.49
// -> 0.40. Outputs against cpu-ref: max abs 2.8e-6 at b1, 3.8e-6 at b8 (3.2e-6 unfused).
// Only on CPUs with AVX-512F (the cpu backend offers the trait only there: backends/cpu/cpu_backend.cpp):
// the kernel has no other path, and the op's reference kernel the cpu
// backend runs instead made MobileNetV2 ~18x slower on an AVX2 host (AMD EPYC, 2 cores, load 7-7.5,
// 359720f, `bench/ab_vs_ort.py mobilenet_v2 T 1 2 1.5 "fused=env FERRY_INVERTED_RESIDUAL_ANY_CPU=1
// build/ferry" gated=build/ferry`): 1 thread 141.3 -> 7.55 CPU ms, ferry/ORT wall 17.8 -> 0.89;
// 2 threads 142.0 -> 8.54, 10.2 -> 0.61 (docs/performance.md, AVX2 note). FERRY_INVERTED_RESIDUAL_ANY_CPU=1
// fuses there anyway (tests, A/B).
// FERRY_DISABLE_PASSES=inverted_residual_fusion: off. FERRY_INVERTED_RESIDUAL_MIN_WIDTH=N: another width limit.
#include <cstdlib>
#include <string>
#include <vector>

#include "common/env_switch.h"
#include "ops/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

constexpr int64_t kMinWidth = 28;

int64_t min_width() {
  static const int64_t w = [] {
    const char* e = env_value("FERRY_INVERTED_RESIDUAL_MIN_WIDTH");
    return e && std::atoll(e) > 0 ? std::atoll(e) : kMinWidth;
  }();
  return w;
}

int64_t int_attr(const Node& n, const char* key, int64_t dflt) {
  const Attribute* a = n.attr(key);
  return a ? a->i : dflt;
}

// All entries of the ints attribute equal `v` (an absent attribute counts as `dflt`).
bool ints_all(const Node& n, const char* key, int64_t v, int64_t dflt) {
  const Attribute* a = n.attr(key);
  if (!a) return v == dflt;
  for (int64_t x : a->ints)
    if (x != v) return false;
  return true;
}

bool clamp_activation(const Node& n) {
  const Attribute* a = n.attr("activation");
  return !a || a->s.empty() || a->s == "Relu" || a->s == "Clip";
}

// A channels-last f32 FusedConv with constant weights [o, i, k, k] and bias, the given stride and
// padding, no dilation, and no residual when `no_z`.
const Tensor* conv_weights(const Graph& g, const Node& n, int64_t k, int64_t stride, int64_t pad, bool no_z) {
  if (n.domain != kFerryDomain || n.op_type != "FusedConv" || n.inputs.size() < 3 || n.inputs[2].empty()) return nullptr;
  if (no_z && n.inputs.size() > 3 && !n.inputs[3].empty()) return nullptr;
  if (int_attr(n, "channels_last", 0) != 1 || int_attr(n, "nchw_input", 0) != 0) return nullptr;
  const Attribute* ap = n.attr("auto_pad");
  if (ap && !ap->s.empty() && ap->s != "NOTSET") return nullptr;
  if (!ints_all(n, "strides", stride, 1) || !ints_all(n, "pads", pad, 0) || !ints_all(n, "dilations", 1, 1) ||
      !ints_all(n, "kernel_shape", k, k) || !clamp_activation(n))
    return nullptr;
  const Tensor* w = constant_value(g, n.inputs[1]);
  const Tensor* b = constant_value(g, n.inputs[2]);
  if (!w || !b || w->dtype() != DType::kF32 || b->dtype() != DType::kF32 || w->rank() != 4 || w->dim(2) != k ||
      w->dim(3) != k || b->numel() != w->dim(0))
    return nullptr;
  return w;
}

void copy_activation(const Node& from, const std::string& prefix, Node* to) {
  if (const Attribute* a = from.attr("activation")) to->attrs[prefix + "activation"] = *a;
  if (const Attribute* a = from.attr("activation_params")) to->attrs[prefix + "activation_params"] = *a;
}

bool rewrite(PatternContext& pc, long c) {
  Graph& g = pc.g;
  const Node& pn = g.nodes[c];
  const Tensor* wp = conv_weights(g, pn, 1, 1, 0, false);
  if (!wp || int_attr(pn, "group", 1) != 1) return false;
  const long d = pc.uses.producer_of(pn.inputs[0]);
  if (d < 0 || pc.dead[d] || !pc.uses.single_use(pn.inputs[0])) return false;
  const Node& dn = g.nodes[d];
  const int64_t stride = dn.attr("strides") && !dn.attr("strides")->ints.empty() ? dn.attr("strides")->ints[0] : 1;
  if (stride != 1 && stride != 2) return false;
  const Tensor* wd = conv_weights(g, dn, 3, stride, 1, true);
  if (!wd || wd->dim(1) != 1 || int_attr(dn, "group", 1) != wd->dim(0) || wp->dim(1) != wd->dim(0)) return false;
  // The expand convolution, or none (MobileNetV2's first block: the depthwise reads the stem's output).
  long e = pc.uses.producer_of(dn.inputs[0]);
  const Tensor* we = nullptr;
  if (e >= 0 && !pc.dead[e] && pc.uses.single_use(dn.inputs[0])) {
    we = conv_weights(g, g.nodes[e], 1, 1, 0, true);
    if (we && (int_attr(g.nodes[e], "group", 1) != 1 || we->dim(0) != wd->dim(0))) we = nullptr;
  }
  if (!we) e = -1;
  const std::string& x = e >= 0 ? g.nodes[e].inputs[0] : dn.inputs[0];
  const TensorType* xt = g.find_type(x);
  if (!xt || xt->dtype != DType::kF32 || !xt->shape || xt->shape->rank() != 4) return false;
  const Shape& xs = *xt->shape;
  if (!xs.dims[1].is_known() || !xs.dims[2].is_known() || !xs.dims[3].is_known() ||
      xs.dims[3].value != (we ? we->dim(1) : wd->dim(0)) || xs.dims[2].value < min_width())
    return false;
  Node f;
  f.op_type = "InvertedResidual";
  f.domain = kFerryDomain;
  f.name = fresh_name(g, pn.name + "_block");
  f.inputs = {x, e >= 0 ? g.nodes[e].inputs[1] : "", e >= 0 ? g.nodes[e].inputs[2] : "", dn.inputs[1], dn.inputs[2],
              pn.inputs[1], pn.inputs[2]};
  if (pn.inputs.size() > 3 && !pn.inputs[3].empty()) f.inputs.push_back(pn.inputs[3]);
  f.outputs = pn.outputs;
  set_attr(&f, "stride", stride);
  if (e >= 0) copy_activation(g.nodes[e], "expand_", &f);
  copy_activation(dn, "dw_", &f);
  copy_activation(pn, "", &f);
  if (e >= 0) pc.replace({e, d, c}, std::move(f));
  else pc.replace({d, c}, std::move(f));
  return true;
}

Status run_inverted_residual_fusion(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  int changes = 0;
  for (size_t i = 0; i < pc.g.nodes.size(); ++i)
    if (!pc.dead[i] && pc.g.nodes[i].op_type == "FusedConv") changes += rewrite(pc, static_cast<long>(i));
  if (!changes) return Status::ok();
  pc.finish();
  use_ferry_domain(model);
  ctx.changes += changes;
  return infer_shapes(model);
}

}  // namespace

GraphPass inverted_residual_fusion_pass() {
  return {"inverted_residual_fusion", 2,
          "channels-last expand 1x1 -> depthwise 3x3 -> project 1x1 FusedConvs on wide images are one InvertedResidual",
          run_inverted_residual_fusion, "fused_inverted_residual"};
}

}  // namespace ferry
