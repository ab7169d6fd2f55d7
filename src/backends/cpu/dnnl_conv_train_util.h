// Pieces shared by the cpu backend's oneDNN training convolutions, forward (dnnl_conv_train.cpp:
// Conv / FusedConv with run-time weights) and backward (dnnl_conv_grad.cpp: ConvGrad): per-thread
// buffers in oneDNN's layouts, the forward's X kept for the linked backward-weights, layout changes,
// the convolution's geometry in oneDNN's terms, the layout and algorithm choices, --amp bf16's mode,
// and the plan keys. (The file comment of dnnl_conv_grad.cpp says how the kernels use them.)
#pragma once

#include <dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/node_attrs.h"

namespace ferry::cpu::train_conv {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = memory::data_type;

// Per-thread buffers for the tensors in oneDNN's layouts, one per role (as cpu::scratch_memory:
// a run executes its nodes one after another on one thread, so each run owns its buffers).
enum Buf { kBufSrc, kBufWei, kBufDst, kBufDiffSrc, kBufDiffWei, kBufDiffDst2, kBufPad, kBufRoundX, kBufRoundDy, kBufRoundDw, kBufs };

struct GrowBuffer {
  void* data = nullptr;
  size_t size = 0;
  GrowBuffer() = default;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;
  ~GrowBuffer() { std::free(data); }
};

/// Memory of descriptor `d` over `b`, grown (never shrunk) to fit; throws dnnl::error when out of memory.
memory grow_memory(const memory::desc& d, GrowBuffer& b);
/// Memory of descriptor `d` over the calling thread's buffer for role `slot`.
memory buf_memory(const memory::desc& d, Buf slot);

// The forward's X in the layout of its primitive, kept for the linked ConvGrad's backward-weights
// (ops/conv_grad_link.h) so that X is reordered once per step, not twice. One per link and thread
// (a run executes its nodes one after another on one thread): the forward clears it first thing and
// fills it with the reorder it makes anyway; ConvGrad takes it when it is of the same data pointer
// and layout, and clears it (read once). So a copy is only ever read by the ConvGrad that follows
// the forward which made it, in the same run. The buffer is kept (not freed after the read): the
// copies are all alive at the end of the forward pass, the step's peak, and returning them to the
// system would page them in again every step (train/memory_plan_train.cpp counts them).
struct KeptX {
  GrowBuffer buf;
  memory::desc md;
  const void* x = nullptr;  // the data pointer it is a copy of; nullptr: nothing to read
};

/// The calling thread's kept X of link `link`.
KeptX& kept_x(const std::string& link);

/// The link key of the forward (`grad` false) or ConvGrad node `node` of `graph`; empty: none.
std::string link_of(const Graph& graph, const Node& node, bool grad);

// A tensor in the layout a primitive wants: the user's memory, or a reorder of it into `slot`.
struct LayoutChange {
  memory::desc user, want;
  bool needed = false;
  dnnl::reorder prim;

  void make(const memory::desc& user_desc, const memory::desc& want_desc) {
    user = user_desc;
    want = want_desc;
    needed = user != want;
    if (needed) prim = make_reorder(user, want);
  }
  // Input side: the tensor as the primitive reads it (reordered into `to`, else into `slot`).
  memory in(const Tensor& t, Buf slot, dnnl::stream& s, GrowBuffer* to = nullptr) const {
    memory m = wrap(user, t);
    if (!needed) return m;
    memory b = to ? grow_memory(want, *to) : buf_memory(want, slot);
    prim.execute(s, {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, b}});
    return b;
  }
  // Output side (user = the primitive's layout, want = the tensor's): where the primitive writes.
  memory out(Tensor* t, Buf slot) const { return needed ? buf_memory(user, slot) : wrap(want, *t); }
  void finish(const memory& written, Tensor* t, dnnl::stream& s) const {
    if (needed) prim.execute(s, {{DNNL_ARG_FROM, written}, {DNNL_ARG_TO, wrap(want, *t)}});
  }
};

// Geometry of one convolution in oneDNN's terms.
struct ConvShape {
  memory::dims src, wei, dst, strides, dil, pad_l, pad_r;
  int64_t group = 1;
  tag io_tag = tag::undef, wei_tag = tag::undef;
};

/// The geometry of `node` on X dims `x` and W dims `w`; unsupported where oneDNN's convolution cannot run it.
Status conv_shape(const Node& node, const std::vector<int64_t>& x, const std::vector<int64_t>& w, ConvShape* s);

// Whether the primitives run on oneDNN's own (blocked) layouts, reordering NCHW in and out, or
// directly on NCHW (oneDNN's gemm-based convolution). Measured on a ResNet-50 training step (b8, 2
// threads, oneDNN's own timings): blocked 1.04 s of convolutions + reorders; plain 1x1 convolutions
// alone cost 0.91 s (gemm: 546 ms forward against 161 ms blocked, reorders included). So always
// blocked; $FERRY_TRAIN_CONV_LAYOUT = plain | blocked forces one (to compare).
bool blocked_layout(const ConvShape& s);

// Winograd F(4x4, 3x3) for 3x3 stride-1 ungrouped convolutions on large images, forward and
// backward, on the shapes dnnl_conv.cpp measured for inference. ResNet-50 b8 (2 threads, oneDNN's
// timings): its six 3x3 convolutions of layer1/2 take 74 ms per step (forward + both backward)
// instead of ~200 ms direct; rounding differs by ~1e-6 relative. Also for the wide 3x3s of layer3/4
// (>= 256 channels in and out, >= 7x7 out), which the inference measurements left direct: oneDNN's
// timings of one step each way, same load (3.3-3.6, so ~2.8x quiet times): the five 14x14x256
// convolutions 338 -> 226 ms, the two 7x7x512 135 -> 116 ms (forward + both backward).
// $FERRY_TRAIN_CONV_WINOGRAD=0 turns it off, =all takes every 3x3 stride-1 shape (to measure).
// Blocked layouts only.
bool winograd(const ConvShape& s, bool blocked);

/// `d` as `plain`, or any layout (the primitive's choice) where `blocked`.
memory::desc layout_desc(const memory::dims& d, tag plain, bool blocked, dt type = dt::f32);

// --amp bf16 folded into the node (src/passes/amp_bf16_fold.cpp): amp_bf16 = 1 runs the oneDNN bf16
// primitives (operands converted to bf16 by the reorders into the primitive's layout, f32
// accumulation); bit i of amp_round_outputs: output i is written in bf16 (rounded), else in f32.
struct AmpMode {
  bool bf16 = false;
  int64_t round = 0;
  explicit AmpMode(const Node& n) {
    NodeAttrs a(n);
    bf16 = a.get_int("amp_bf16", 0) != 0;
    round = bf16 ? a.get_int("amp_round_outputs", 0) : 0;
  }
  dt in() const { return bf16 ? dt::bf16 : dt::f32; }
  dt out(int i) const { return (round >> i) & 1 ? dt::bf16 : dt::f32; }
};

// --amp bf16, backward-weights of the 3x3 (any kernel wider than 1) convolutions with 128 input
// channels or more: oneDNN 2.6's bf16 kernel (jit_bf16) is 5-10x slower there than the f32 one on
// the same shape (ResNet-50 b8, 2 threads, oneDNN's timings in one step, same load: the 13 such
// convolutions 735 ms bf16 against 109 ms f32, Winograd for the stride-1 ones), while the 1x1 and
// 64-channel ones are even. Those run f32 backward-weights on the operands rounded to bf16 (a
// reorder f32 -> bf16 -> f32 each), dW rounded afterwards where the graph rounds it: the autocast
// specification (f32 compute on rounded operands). $FERRY_AMP_WGRAD = bf16 | f32 forces one for
// every shape (to compare). ResNet-50 b8 --amp bf16, 2 threads, 3 interleaved rounds (loaded
// machine, load 4.1-4.7): median step 2316-2521 / 1614 ms all bf16, 1418-1695 / 960 ms with this.
// The rule: ops/conv_grad_link.h (the memory plan counts its buffers).
bool wgrad_in_f32(const ConvShape& s);

/// The error of a convolution with --amp bf16 folded in that the oneDNN kernel cannot run (`why`).
Status amp_unsupported(const Node& node, const std::string& why);

/// The forward primitive descriptor of `s` (the backward primitives' hint too).
dnnl::convolution_forward::primitive_desc forward_pd(const ConvShape& s, bool blocked, bool bias,
                                                     const dnnl::primitive_attr& attr, dnnl::algorithm alg,
                                                     dt in = dt::f32, dt out = dt::f32);

// The plain dims of an activation held blocked (`blocked`) or plain.
std::vector<int64_t> logical_dims(const Tensor& t, bool blocked);

// The blocked layout of `block` channels (ops/blocked_layout.h: 16, or 8 on AVX2 hosts).
tag blocked_tag(int64_t block);

// The user's (the graph's) memory descriptor of an activation: nChw16c / nChw8c when held blocked.
memory::desc user_desc(const memory::dims& d, tag plain, bool blocked, dt type, int64_t block);

/// A plan's key: X's logical dims, -1, W's dims; split_key reads it back.
std::vector<int64_t> plan_key(const Tensor& x, bool x_blocked, const Tensor& w);
void split_key(const std::vector<int64_t>& key, std::vector<int64_t>* x, std::vector<int64_t>* w);

}  // namespace ferry::cpu::train_conv

namespace ferry {
/// The training convolution's factory (dnnl_conv_train.cpp): Conv / FusedConv with run-time weights,
/// and com.ferry Blocked wrapping one.
StatusOr<std::unique_ptr<Kernel>> make_train_conv(const Node& node, const OpSchema& schema, const Graph& graph);
}  // namespace ferry
