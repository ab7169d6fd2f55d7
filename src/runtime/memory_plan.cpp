#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace ferry {
namespace {

int64_t align_up(int64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

/// Requests sharing one piece of memory (a tensor and the in-place outputs written over it).
struct Group {
  int64_t nbytes = 0;
  int32_t first = 0;
  int32_t last = 0;
  int32_t tail = -1;  // the request holding the memory last
  int64_t offset = 0;
};

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  const size_t n = requests.size();
  plan.offsets.assign(n, 0);
  plan.in_place.assign(n, false);
  std::vector<int32_t> group_of(n, -1);
  std::vector<Group> groups;

  // Join in-place requests to their input's group, in creation order.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].first < requests[b].first; });
  for (size_t idx : order) {
    const BufferRequest& r = requests[idx];
    plan.total_bytes += align_up(r.nbytes);
    const int32_t last = std::max(r.first, r.last);
    if (r.reuse >= 0 && static_cast<size_t>(r.reuse) < n && group_of[r.reuse] >= 0) {
      Group& g = groups[group_of[r.reuse]];
      const BufferRequest& holder = requests[g.tail];
      if (g.tail == r.reuse && holder.first < r.first && g.last == r.first && align_up(r.nbytes) <= g.nbytes) {
        g.last = std::max(g.last, last);
        g.tail = static_cast<int32_t>(idx);
        group_of[idx] = group_of[r.reuse];
        plan.in_place[idx] = true;
        ++plan.in_place_count;
        continue;
      }
    }
    group_of[idx] = static_cast<int32_t>(groups.size());
    groups.push_back(Group{align_up(r.nbytes), r.first, last, static_cast<int32_t>(idx), 0});
  }

  // Greedy by size: largest first, into the tightest gap among buffers alive at the same time.
  std::vector<size_t> by_size(groups.size());
  std::iota(by_size.begin(), by_size.end(), size_t{0});
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    if (groups[a].nbytes != groups[b].nbytes) return groups[a].nbytes > groups[b].nbytes;
    return groups[a].first < groups[b].first;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of overlapping placed groups
  for (size_t gi : by_size) {
    Group& g = groups[gi];
    busy.clear();
    for (size_t pj : placed) {
      const Group& p = groups[pj];
      if (p.first <= g.last && g.first <= p.last) busy.emplace_back(p.offset, p.offset + p.nbytes);
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = 0, cursor = 0;
    for (const auto& [begin, end] : busy) {
      const int64_t gap = begin - cursor;
      if (gap >= g.nbytes && (best < 0 || gap < best_gap)) {
        best = cursor;
        best_gap = gap;
      }
      cursor = std::max(cursor, end);
    }
    g.offset = best >= 0 ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, g.offset + g.nbytes);
    placed.push_back(gi);
  }
  for (size_t i = 0; i < n; ++i) plan.offsets[i] = groups[group_of[i]].offset;
  return plan;
}

bool op_may_run_in_place(const std::string& domain, const std::string& op_type) {
  if (!domain.empty() && domain != "ai.onnx") return false;
  // Ops whose kernels compute out[k] from in0[k] (and broadcast reads of other inputs) only.
  static const char* const kOps[] = {
      "Abs",  "Acos", "Acosh", "Add",  "Asin",      "Asinh", "Atan",     "Atanh",    "Ceil",  "Celu",
      "Clip", "Cos",  "Cosh",  "Div",  "Elu",       "Erf",   "Exp",      "Floor",    "Gelu",  "HardSigmoid",
      "HardSwish", "LeakyRelu", "Log", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal", "Relu",
      "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub",
      "Tan", "Tanh", "ThresholdedRelu"};
  for (const char* op : kOps)
    if (op_type == op) return true;
  return false;
}

}  // namespace ferry
