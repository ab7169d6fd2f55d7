// Pieces shared by the oneDNN training convolutions (dnnl_conv_train_util.h).
#include "backends/cpu/dnnl_conv_train_util.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "backends/cpu/node_attrs.h"
#include "common/env_switch.h"
#include "ops/blocked_layout.h"
#include "ops/conv_grad_link.h"
#include "ops/conv_pool_util.h"

namespace ferry::cpu::train_conv {

memory grow_memory(const memory::desc& d, GrowBuffer& b) {
  const size_t bytes = d.get_size();
  if (bytes > b.size) {
    std::free(b.data);
    b.size = (bytes + 4095) / 4096 * 4096;
    b.data = std::aligned_alloc(64, b.size);
    if (!b.data) {
      b.size = 0;
      throw dnnl::error(dnnl_out_of_memory, "training convolution buffer allocation failed");
    }
  }
  return memory(d, dnnl_engine(), bytes ? b.data : nullptr);
}

memory buf_memory(const memory::desc& d, Buf slot) {
  thread_local GrowBuffer bufs[kBufs];
  return grow_memory(d, bufs[slot]);
}

KeptX& kept_x(const std::string& link) {
  thread_local std::unordered_map<std::string, KeptX> kept;
  return kept[link];
}

std::string link_of(const Graph& graph, const Node& node, bool grad) {
  for (const ConvGradLink& l : conv_grad_links(graph)) {
    const Node& n = graph.nodes[grad ? l.grad : l.forward];
    if (n.name == node.name && n.inputs == node.inputs && n.outputs == node.outputs) return l.key;
  }
  return {};
}

Status conv_shape(const Node& node, const std::vector<int64_t>& x, const std::vector<int64_t>& w, ConvShape* s) {
  NodeAttrs attrs(node);
  const int64_t rank = static_cast<int64_t>(x.size()), nd = rank - 2;
  if (rank < 3 || rank > 5 || static_cast<int64_t>(w.size()) != rank) return unsupported("rank");
  s->group = attrs.get_int("group", 1);
  const int64_t g = s->group;
  if (g < 1 || w[0] % g != 0 || x[1] != w[1] * g) return unsupported("channels");
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  SpatialAttrs sa;
  RETURN_IF_ERROR(read_spatial_attrs(attrs, nd, &kernel, true, &sa));
  s->src = cpu::to_dnnl_dims(x);
  s->dst = {x[0], w[0]};
  for (int64_t i = 0; i < nd; ++i) {
    AxisGeom ag;
    RETURN_IF_ERROR(conv_pool_axis(attrs, sa, i, x[2 + i], &ag));
    if (ag.pad_begin < 0 || ag.pad_end < 0 || ag.out <= 0) return unsupported("geometry");
    s->dst.push_back(ag.out);
    s->strides.push_back(sa.strides[i]);
    s->dil.push_back(sa.dilations[i] - 1);
    s->pad_l.push_back(ag.pad_begin);
    s->pad_r.push_back(ag.pad_end);
  }
  for (int64_t d : x)
    if (d <= 0) return unsupported("empty");
  s->wei = g > 1 ? memory::dims{g, w[0] / g, w[1]} : memory::dims{w[0], w[1]};
  s->wei.insert(s->wei.end(), kernel.begin(), kernel.end());
  s->io_tag = cpu::plain_tag(x.size());
  s->wei_tag = g > 1 ? (rank == 3 ? tag::goiw : rank == 4 ? tag::goihw : tag::goidhw)
                     : (rank == 3 ? tag::oiw : rank == 4 ? tag::oihw : tag::oidhw);
  return Status::ok();
}

bool blocked_layout(const ConvShape& s) {
  static const int forced = [] {
    const char* e = env_value("FERRY_TRAIN_CONV_LAYOUT");
    if (!e) return -1;
    return std::string(e) == "plain" ? 0 : std::string(e) == "blocked" ? 1 : -1;
  }();
  if (forced >= 0) return forced == 1;
  (void)s;  // measured on ResNet-50 (oneDNN verbose, 2 threads): blocked wins for 1x1 convolutions too
  return true;
}

bool winograd(const ConvShape& s, bool blocked) {
  static const int enabled = [] {
    const char* e = env_value("FERRY_TRAIN_CONV_WINOGRAD");
    return e && std::string(e) == "0" ? 0 : e && std::string(e) == "all" ? 2 : 1;
  }();
  if (!enabled || !blocked || s.group != 1 || s.src.size() != 4 || s.wei[2] != 3 || s.wei[3] != 3) return false;
  for (size_t i = 0; i < 2; ++i)
    if (s.strides[i] != 1 || s.dil[i] != 0) return false;
  if (enabled == 2) return true;
  if (s.dst[2] * s.dst[3] >= 7 * 7 && s.src[1] >= 256 && s.dst[1] >= 256) return true;  // training: see above
  return s.dst[2] * s.dst[3] >= 24 * 24 && s.src[1] >= 32 && s.dst[1] >= 16 && std::min(s.src[1], s.dst[1]) <= 128;
}

memory::desc layout_desc(const memory::dims& d, tag plain, bool blocked, dt type) {
  return memory::desc(d, type, blocked ? tag::any : plain);
}

bool wgrad_in_f32(const ConvShape& s) {
  return amp_wgrad_f32(s.group, s.src[1], std::vector<int64_t>(s.wei.end() - (s.src.size() - 2), s.wei.end()));
}

Status amp_unsupported(const Node& node, const std::string& why) {
  return unsupported(node.describe() + ": --amp bf16 folded into this convolution, but " + why +
                     "; run with FERRY_AMP_NATIVE=0 (the emulated bf16 graph)");
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvShape& s, bool blocked, bool bias,
                                                     const dnnl::primitive_attr& attr, dnnl::algorithm alg,
                                                     dt in, dt out) {
  const auto src = layout_desc(s.src, s.io_tag, blocked, in), dst = layout_desc(s.dst, s.io_tag, blocked, out),
             wei = layout_desc(s.wei, s.wei_tag, blocked, in);
  const memory::desc b({s.dst[1]}, memory::data_type::f32, tag::x);
  const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, b, dst,
                                                        s.strides, s.dil, s.pad_l, s.pad_r)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, dst,
                                                        s.strides, s.dil, s.pad_l, s.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, attr, dnnl_engine());
}

std::vector<int64_t> logical_dims(const Tensor& t, bool blocked) { return blocked ? plain_dims(t.dims()) : t.dims(); }

tag blocked_tag(int64_t block) { return block == 8 ? tag::nChw8c : tag::nChw16c; }

memory::desc user_desc(const memory::dims& d, tag plain, bool blocked, dt type, int64_t block) {
  return memory::desc(d, type, blocked ? blocked_tag(block) : plain);
}

std::vector<int64_t> plan_key(const Tensor& x, bool x_blocked, const Tensor& w) {
  std::vector<int64_t> k = logical_dims(x, x_blocked);
  k.push_back(-1);
  k.insert(k.end(), w.dims().begin(), w.dims().end());
  return k;
}

void split_key(const std::vector<int64_t>& key, std::vector<int64_t>* x, std::vector<int64_t>* w) {
  const auto sep = std::find(key.begin(), key.end(), -1);
  x->assign(key.begin(), sep);
  w->assign(sep + 1, key.end());
}

}  // namespace ferry::cpu::train_conv
