// Activation recomputation (see recompute.h).
#include "grad/recompute.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace ferry {
namespace {

int64_t value_bytes(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  if (!t || t->kind != ValueKind::kTensor || !t->shape || !t->shape->is_static()) return 0;
  int64_t n = 1;
  for (int64_t d : t->shape->values()) n *= d;
  return n * static_cast<int64_t>(dtype_size(t->dtype));
}

}  // namespace

StatusOr<RecomputeReport> apply_recompute(Model* model, const std::string& loss, int64_t segments) {
  Graph& g = model->graph;
  RecomputeReport r;
  int64_t loss_node = -1;
  for (size_t i = 0; i < g.nodes.size() && loss_node < 0; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (o == loss) loss_node = static_cast<int64_t>(i);
  if (loss_node < 0) return invalid_argument("recompute: no node produces the loss '" + loss + "'");
  const size_t nf = static_cast<size_t>(loss_node) + 1;
  r.forward_nodes = static_cast<int64_t>(nf);
  if (segments < 0) return invalid_argument("recompute: the number of segments must be >= 0 (0: about sqrt(nodes))");
  if (segments == 0) segments = std::max<int64_t>(1, std::llround(std::sqrt(static_cast<double>(nf))));
  segments = std::min<int64_t>(segments, static_cast<int64_t>(nf));
  r.segments = segments;
  if (segments <= 1) return r;

  // Who produces each forward value, which forward values backward reads.
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < nf; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::unordered_set<std::string> saved;
  for (size_t j = nf; j < g.nodes.size(); ++j) {
    for (const auto& in : g.nodes[j].inputs)
      if (!in.empty() && producer.count(in)) saved.insert(in);
    for (const auto& in : g.nodes[j].implicit_inputs)
      if (producer.count(in)) saved.insert(in);
  }
  for (const auto& v : saved) r.saved_bytes += value_bytes(g, v);

  // Segments of about equal saved bytes, in forward order.
  std::vector<int64_t> seg(nf, 0);
  {
    const double per = static_cast<double>(std::max<int64_t>(r.saved_bytes, 1)) / static_cast<double>(segments);
    int64_t cum = 0;
    for (size_t i = 0; i < nf; ++i) {
      seg[i] = std::min<int64_t>(segments - 1, static_cast<int64_t>(static_cast<double>(cum) / per));
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty() && saved.count(o)) cum += value_bytes(g, o);
    }
  }
  // Boundary values: read by a forward node of a later segment, or graph outputs. They stay alive
  // (the later segment's recomputation starts from them), so backward reads them as they are.
  std::unordered_set<std::string> boundary;
  for (const auto& out : g.outputs) boundary.insert(out.name);
  for (size_t i = 0; i < nf; ++i) {
    auto reads = [&](const std::string& in) {
      auto p = producer.find(in);
      if (p != producer.end() && seg[p->second] < seg[i]) boundary.insert(in);
    };
    for (const auto& in : g.nodes[i].inputs) reads(in);
    for (const auto& in : g.nodes[i].implicit_inputs) reads(in);
  }

  // Per segment (not the last): the values to recompute and the nodes that recompute them.
  std::unordered_map<std::string, std::string> renamed;  // original -> clone, every recomputed value
  std::vector<std::vector<Node>> clones(static_cast<size_t>(segments));
  for (int64_t s = 0; s + 1 < segments; ++s) {
    std::unordered_set<std::string> need;
    for (const auto& v : saved)
      if (seg[producer[v]] == s && !boundary.count(v)) need.insert(v);
    if (need.empty()) continue;
    std::vector<size_t> picked;
    for (size_t i = nf; i-- > 0;) {
      if (seg[i] != s) continue;
      bool wanted = false;
      for (const auto& o : g.nodes[i].outputs) wanted |= !o.empty() && need.count(o);
      if (!wanted) continue;
      picked.push_back(i);
      for (const auto& in : g.nodes[i].inputs) {
        auto p = producer.find(in);
        if (!in.empty() && p != producer.end() && seg[p->second] == s && !boundary.count(in)) need.insert(in);
      }
    }
    std::reverse(picked.begin(), picked.end());
    for (size_t i : picked) {
      Node c = g.nodes[i];
      c.name += "/recompute";
      for (auto& in : c.inputs) {
        auto it = renamed.find(in);
        if (!in.empty() && it != renamed.end()) in = it->second;
      }
      for (auto& o : c.outputs) {
        if (o.empty()) continue;
        const std::string clone = o + "/recompute";
        if (const TensorType* t = g.find_type(o)) g.value_types[clone] = *t;
        if (need.count(o)) {
          renamed[o] = clone;
          if (saved.count(o)) r.recomputed_bytes += value_bytes(g, o);
        }
        o = clone;
      }
      if (c.origin.empty()) c.origin = {g.nodes[i].name};
      clones[static_cast<size_t>(s)].push_back(std::move(c));
      ++r.cloned_nodes;
    }
  }
  if (renamed.empty()) return r;

  // Backward reads the clones; each segment's clones run just before their first reader.
  std::vector<std::vector<int64_t>> insert_before(g.nodes.size());
  std::vector<bool> placed(static_cast<size_t>(segments), false);
  std::unordered_map<std::string, int64_t> clone_segment;
  for (int64_t s = 0; s < segments; ++s)
    for (const Node& c : clones[static_cast<size_t>(s)])
      for (const auto& o : c.outputs) clone_segment[o] = s;
  for (size_t j = nf; j < g.nodes.size(); ++j) {
    Node& n = g.nodes[j];
    auto rewire = [&](std::string* in) {
      auto it = renamed.find(*in);
      if (in->empty() || it == renamed.end()) return;
      *in = it->second;
      const int64_t s = clone_segment.at(it->second);
      if (!placed[static_cast<size_t>(s)]) {
        placed[static_cast<size_t>(s)] = true;
        insert_before[j].push_back(s);
      }
    };
    for (auto& in : n.inputs) rewire(&in);
    for (auto& in : n.implicit_inputs) rewire(&in);
  }
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + static_cast<size_t>(r.cloned_nodes));
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    for (int64_t s : insert_before[j])
      for (Node& c : clones[static_cast<size_t>(s)]) nodes.push_back(std::move(c));
    nodes.push_back(std::move(g.nodes[j]));
  }
  g.nodes = std::move(nodes);
  return r;
}

}  // namespace ferry
