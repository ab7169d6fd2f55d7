// The training memory plan (see memory_plan_train.h).
#include "train/memory_plan_train.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "ops/blocked_layout.h"
#include "ops/conv_grad_link.h"
#include "runtime/memory_estimate.h"
#include "runtime/memory_plan.h"

namespace ferry {
namespace {

// The process when the first plan is made (read once: later plans, of other batches, build graphs
// of their own): resident now (VmRSS: code, libraries, the loaded model and its copies -- source,
// training graph, the executor's optimized graph --, the weights, an in-memory data set) and its
// peak so far (VmHWM: loading and building the graphs took more than they keep).
struct ProcessMemory {
  int64_t resident = 0, peak = 0;
};

const ProcessMemory& process_memory_at_plan() {
  static const ProcessMemory m = [] {
    ProcessMemory r;
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmRSS:", 0) == 0) r.resident = static_cast<int64_t>(std::atoll(line.c_str() + 6)) * 1024;  // kB
      if (line.rfind("VmHWM:", 0) == 0) r.peak = static_cast<int64_t>(std::atoll(line.c_str() + 6)) * 1024;
    }
    return r;
  }();
  return m;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

int64_t tensor_bytes(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  if (!t || t->kind != ValueKind::kTensor || !t->shape || !t->shape->is_static()) return 0;
  int64_t n = 1;
  for (int64_t d : t->shape->values()) n *= d;
  return n * static_cast<int64_t>(dtype_size(t->dtype));
}

// A tensor's bytes in oneDNN's blocked layout (channels, and the output channels of weights,
// padded to the 16-wide blocks of nChw16c / OIhw16i16o); f32, or bf16 (half) where `half`.
int64_t blocked_bytes(const Graph& g, const std::string& v, bool weights, bool half = false) {
  const TensorType* t = g.find_type(v);
  if (!t || t->kind != ValueKind::kTensor || !t->shape || !t->shape->is_static() || t->shape->rank() < 3) return 0;
  std::vector<int64_t> d = t->shape->values();
  if (weights) d[0] = round_up(d[0], 16);
  if (d[1] >= 8) d[1] = round_up(d[1], 16);  // oneDNN keeps 3-channel images plain
  int64_t n = half ? 2 : 4;
  for (int64_t x : d) n *= x;
  return n;
}

// The training convolutions' layout buffers (backends/cpu/dnnl_conv_grad.cpp): one per role and
// thread that runs the graph, as large as the largest tensor that role ever holds, kept for the
// process's life. Forward Conv: src X, weights W, dst Y; ConvGrad(dY, X, W): src X, dst dY,
// weights W, diff_src dX, diff_weights dW. A node with amp_bf16 (src/passes/amp_bf16_fold.cpp, --amp
// bf16) holds its operands in bf16, and the outputs bit i of amp_round_outputs names. Besides, each
// forward linked to its ConvGrad (ops/conv_grad_link.h) keeps its blocked X for the whole run.
// A com.ferry Blocked node (train_blocked_layout) reads and writes its blocked activations in place:
// no buffer for them in f32, a bf16 one (half) where the operand is converted.
int64_t conv_layout_buffers(const Graph& g) {
  int64_t src = 0, wei = 0, dst = 0, diff_src = 0, diff_wei = 0, round_x = 0, round_dy = 0, round_dw = 0;
  for (const Node& n : g.nodes) {
    const std::string op = inner_op(n);
    const bool conv = op == "Conv" || op == "FusedConv";
    const bool grad = op == "ConvGrad";
    if ((!conv && !grad) || n.inputs.size() < (grad ? 3u : 2u) || n.outputs.empty()) continue;
    const std::string& x = n.inputs[grad ? 1 : 0];
    const std::string& w = n.inputs[grad ? 2 : 1];
    const Attribute* amp = n.attr("amp_bf16");
    const Attribute* rounded = n.attr("amp_round_outputs");
    const bool half = amp && amp->i != 0;
    auto half_out = [&](int i) { return half && rounded && ((rounded->i >> i) & 1); };
    // An activation's buffer: none when held blocked in f32 on both sides.
    auto act = [&](const std::string& v, bool held_blocked, bool h) {
      if (!held_blocked) return blocked_bytes(g, v, false, h);
      return h ? tensor_bytes(g, v) / 2 : int64_t{0};
    };
    src = std::max(src, act(x, input_blocked(n, grad ? 1 : 0), half));
    wei = std::max(wei, blocked_bytes(g, w, true, half));
    dst = std::max(dst, grad ? act(n.inputs[0], input_blocked(n, 0), half)
                             : act(n.outputs[0], output_blocked(n, 0), half_out(0)));
    if (grad && !n.outputs[0].empty()) diff_src = std::max(diff_src, act(x, output_blocked(n, 0), half_out(0)));
    if (grad && n.outputs.size() > 1 && !n.outputs[1].empty())
      diff_wei = std::max(diff_wei, blocked_bytes(g, w, true, half_out(1)));
    // --amp bf16 backward-weights in f32 (ops/conv_grad_link.h): X and dY in f32 in the primitive's
    // layout, their bf16 copies and dW's.
    const TensorType* wt = g.find_type(w);
    const TensorType* xt = g.find_type(x);
    if (grad && half && wt && wt->shape && wt->shape->is_static() && xt && xt->shape && xt->shape->is_static()) {
      const std::vector<int64_t> wd = wt->shape->values(), xd = xt->shape->values();
      const int64_t ic = input_blocked(n, 1) && xd.size() > 2 ? xd[1] * xd.back() : (xd.size() > 1 ? xd[1] : 0);
      const Attribute* ga = n.attr("group");
      if (wd.size() > 2 && amp_wgrad_f32(ga ? ga->i : 1, ic, std::vector<int64_t>(wd.begin() + 2, wd.end()))) {
        const int64_t xf = input_blocked(n, 1) ? tensor_bytes(g, x) : blocked_bytes(g, x, false, false);
        const int64_t yf = input_blocked(n, 0) ? tensor_bytes(g, n.inputs[0]) : blocked_bytes(g, n.inputs[0], false, false);
        src = std::max(src, xf);
        dst = std::max(dst, yf);
        round_x = std::max(round_x, xf / 2);
        round_dy = std::max(round_dy, yf / 2);
        round_dw = std::max(round_dw, blocked_bytes(g, w, true, true));
      }
    }
  }
  int64_t kept_x = 0;
  for (const ConvGradLink& l : conv_grad_links(g)) {
    const Node& n = g.nodes[l.forward];
    const TensorType* t = g.find_type(n.inputs[0]);
    if (!t || !t->shape || !t->shape->is_static() || t->shape->rank() < 3) continue;
    if (!input_blocked(n, 0) && t->shape->values()[1] < 8) continue;
    const Attribute* amp = n.attr("amp_bf16");  // a 3-channel image stays plain: nothing kept
    const bool h = amp && amp->i != 0;
    if (input_blocked(n, 0)) kept_x += h ? tensor_bytes(g, n.inputs[0]) / 2 : 0;  // f32: X itself is read
    else kept_x += blocked_bytes(g, n.inputs[0], false, h);
  }
  return src + wei + dst + diff_src + diff_wei + round_x + round_dy + round_dw + kept_x;
}

}  // namespace

StatusOr<TrainMemoryPlan> plan_train_memory(const Model& model, const TrainMemoryInputs& in) {
  const Graph& g = model.graph;
  TrainMemoryPlan p;
  p.batch = in.batch;
  p.accumulate = in.accumulate;
  p.weights = in.param_bytes + in.state_bytes;
  p.gradients = in.grad_bytes * (in.accumulate > 1 ? 2 : 1);
  p.optimizer_state = in.param_bytes * in.optimizer_slots;
  // The process as it is now holds the weights already: the rest of it is the runtime.
  p.runtime = std::max<int64_t>(0, process_memory_at_plan().resident - p.weights);
  p.startup_peak = process_memory_at_plan().peak;
  p.workspace = conv_layout_buffers(g);
  for (const ValueInfo& v : g.inputs) {
    const int64_t b = tensor_bytes(g, v.name);
    if (b > 0 && v.type.shape && v.type.shape->rank() > 0 && v.type.shape->dims[0].is_known() &&
        v.type.shape->dims[0].value == in.batch)
      p.data_buffers += b * in.batches_in_flight;  // data inputs and labels: rows of the batch
  }
  // The executor's arena: every node output that is not a graph output, alive from its node to
  // its last reader, in place over a dying first input where the op allows it.
  std::unordered_set<std::string> outputs;
  for (const ValueInfo& o : g.outputs) outputs.insert(o.name);
  std::unordered_map<std::string, int32_t> last_use;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& v : g.nodes[i].inputs)
      if (!v.empty()) last_use[v] = static_cast<int32_t>(i);
    for (const auto& v : g.nodes[i].implicit_inputs) last_use[v] = static_cast<int32_t>(i);
  }
  std::vector<BufferRequest> requests;
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> request_of;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const bool in_place = op_may_run_in_place(n.domain, n.op_type);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& o = n.outputs[k];
      if (o.empty() || outputs.count(o)) continue;
      BufferRequest r;
      r.nbytes = tensor_bytes(g, o);
      r.first = static_cast<int32_t>(i);
      auto lu = last_use.find(o);
      r.last = lu == last_use.end() ? r.first : std::max(r.first, lu->second);
      if (k == 0 && in_place && !n.inputs.empty()) {
        auto src = request_of.find(n.inputs[0]);
        if (src != request_of.end()) r.reuse = src->second;
      }
      request_of[o] = static_cast<int32_t>(requests.size());
      requests.push_back(r);
      names.push_back(o);
    }
  }
  const MemoryPlan mp = plan_memory(requests);
  p.activations = mp.arena_bytes;
  // Where the live bytes peak (for the message).
  std::vector<int64_t> delta(g.nodes.size() + 1, 0);
  for (const auto& r : requests) {
    delta[static_cast<size_t>(r.first)] += r.nbytes;
    delta[static_cast<size_t>(r.last) + 1] -= r.nbytes;
  }
  int64_t live = 0, peak = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    live += delta[i];
    if (live > peak) peak = live, p.peak_node = g.nodes[i].describe();
  }
  return p;
}

StatusOr<int64_t> largest_batch_that_fits(int64_t limit, const TrainMemoryPlan& at,
                                          const std::function<StatusOr<TrainMemoryPlan>(int64_t)>& plan_at) {
  // Activations and data grow with the batch, the rest does not: a linear guess, then checked.
  const int64_t fixed = at.weights + at.gradients + at.optimizer_state + at.runtime;
  const double per_row = static_cast<double>(at.activations + at.workspace + at.data_buffers) / static_cast<double>(std::max<int64_t>(at.batch, 1));
  if (limit <= fixed) return 0;
  int64_t b = std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(limit - fixed) / std::max(per_row, 1.0)), 1, int64_t(1) << 20);
  for (int tries = 0; tries < 6; ++tries) {
    ASSIGN_OR_RETURN(TrainMemoryPlan p, plan_at(b));
    if (p.total() <= limit) {
      ASSIGN_OR_RETURN(TrainMemoryPlan next, plan_at(b + 1));
      if (next.total() > limit) return b;
      b = b + std::max<int64_t>(1, b / 16);
    } else {
      if (b == 1) return 0;
      b = std::max<int64_t>(1, b - std::max<int64_t>(1, b / 16));
    }
  }
  return b;  // close enough after the tries: the last candidate that fit or its neighbour
}

std::string format_train_memory(const TrainMemoryPlan& p, int64_t limit, int64_t largest, bool as_json) {
  if (as_json) {
    nlohmann::json j = {{"batch", p.batch},          {"accumulate", p.accumulate},
                        {"weights", p.weights},      {"gradients", p.gradients},
                        {"optimizer_state", p.optimizer_state}, {"activations", p.activations},
                        {"workspace", p.workspace},
                        {"data_buffers", p.data_buffers}, {"runtime", p.runtime},
                        {"startup_peak", p.startup_peak},
                        {"total", p.total()},        {"limit", limit},
                        {"fits", p.total() <= limit}, {"largest_batch_that_fits", largest},
                        {"activation_peak_at", p.peak_node}};
    return j.dump(2) + "\n";
  }
  std::string s = "training memory plan (batch " + std::to_string(p.batch) +
                  (p.accumulate > 1 ? " x " + std::to_string(p.accumulate) + " accumulated" : "") + "):\n";
  auto line = [&](const char* what, int64_t b, const std::string& note) {
    s += std::string("  ") + what + std::string(18 - std::string(what).size(), ' ') + format_bytes(b) +
         (note.empty() ? "" : "  (" + note + ")") + "\n";
  };
  line("weights", p.weights, "parameters and BN statistics, f32");
  line("gradients", p.gradients, p.accumulate > 1 ? "sum and next micro-batch" : "");
  line("optimizer state", p.optimizer_state, "");
  line("activations", p.activations, "saved for backward + temporaries, peak at " + p.peak_node);
  line("workspace", p.workspace, "convolutions' blocked-layout buffers and kept blocked inputs");
  line("data buffers", p.data_buffers, "batches in flight");
  line("runtime", p.runtime, "the process when planning, less the weights: code, libraries, model");
  line("startup peak", p.startup_peak, "the process's peak before planning (loading, graphs)");
  line("total", p.total(), "the parts' sum, or the startup peak when larger: the run's peak");
  s += "  limit             " + format_bytes(limit) + (p.total() <= limit ? "  (fits)" : "  (does NOT fit)") + "\n";
  s += "largest batch that fits: " + std::to_string(largest) + "\n";
  return s;
}

}  // namespace ferry
