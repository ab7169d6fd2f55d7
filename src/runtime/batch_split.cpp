#include "runtime/batch_split.h"
#include "common/env_switch.h"
#include "runtime/batch_split_parts.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry {
namespace {

// Ops that compute each element from the elements at the same (broadcast) index of their inputs.
const std::set<std::string> kElementwise = {
    "Abs",   "Acos",    "Acosh",     "Add",      "And",      "Asin",        "Asinh",   "Atan",  "Atanh",
    "BitShift", "Cast", "CastLike",  "Ceil",     "Celu",     "Clip",        "Cos",     "Cosh",  "Div",
    "Dropout", "Elu",   "Equal",     "Erf",      "Exp",      "Floor",       "Gelu",    "Greater",
    "GreaterOrEqual",   "HardSigmoid", "HardSwish", "Identity", "IsInf",   "IsNaN",   "LeakyRelu", "Less",
    "LessOrEqual", "Log", "Max",     "Mean",     "Min",      "Mish",        "Mod",     "Mul",   "Neg",
    "Not",   "Or",      "Pow",       "PRelu",    "Reciprocal", "Relu",      "Round",   "Selu",  "Sigmoid",
    "Sign",  "Sin",     "Sinh",      "Softplus", "Softsign", "Sqrt",        "Sub",     "Sum",   "Tan",
    "Tanh",  "ThresholdedRelu", "Where", "Xor"};

// Ops whose first input is an N-first batch (NCHW or ferry's NHWC) that they read one sample at a
// time; their other inputs are weights, biases or parameters.
const std::set<std::string> kPerSample = {
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
    "GlobalLpPool", "BatchNormalization", "InstanceNormalization", "LRN", "SpaceToDepth", "DepthToSpace",
    "Resize", "Upsample", "FusedConv", "NhwcMaxPool", "NhwcAveragePool", "NhwcGlobalAveragePool",
    "InvertedResidual"};

// Ops that work along one axis (attribute `axis`, its default here; CumSum's is input 1): rows
// stay apart when that axis is not 0.
const std::map<std::string, int64_t> kAlongAxis = {
    {"Concat", 0}, {"Split", 0},  {"Softmax", -1}, {"LogSoftmax", -1}, {"Hardmax", -1}, {"LayerNormalization", -1},
    {"LayerNorm", -1}, {"ArgMax", 0}, {"ArgMin", 0}, {"CumSum", 0}};

// Reductions over `axes` (attribute, or input 1 in newer opsets).
const std::set<std::string> kReduce = {"ReduceMean", "ReduceSum",  "ReduceMax",       "ReduceMin",
                                       "ReduceProd", "ReduceL1",   "ReduceL2",        "ReduceLogSum",
                                       "ReduceLogSumExp", "ReduceSumSquare"};

int64_t normalized(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

class Analysis {
 public:
  explicit Analysis(const Graph& g) : g_(g) {}

  BatchSplitInfo run() {
    if (g_.inputs.empty()) return fail("the graph has no inputs");
    for (const ValueInfo& in : g_.inputs) {
      const TensorType& t = in.type;
      if (t.kind != ValueKind::kTensor || !t.shape || t.shape->rank() == 0)
        return fail("input '" + in.name + "' is not a tensor of known rank >= 1");
      const Dim& d0 = t.shape->dims[0];
      if (d0.is_known() || d0.symbol.empty()) return fail("input '" + in.name + "' has no symbolic batch axis 0");
      if (info_.symbol.empty()) info_.symbol = d0.symbol;
      if (d0.symbol != info_.symbol) return fail("inputs '" + g_.inputs[0].name + "' and '" + in.name + "' have different batch axes");
      if (!batched_shape_ok(*t.shape)) return fail("input '" + in.name + "' has the batch dimension beyond axis 0");
      batched_.insert(in.name);
    }
    for (const Node& n : g_.nodes) {
      std::string why;
      if (!visit(n, &why)) return fail(n.describe() + ": " + why);
    }
    for (const ValueInfo& out : g_.outputs)
      if (!batched_.count(out.name)) return fail("output '" + out.name + "' does not carry the batch");
    info_.separable = true;
    info_.largest_row_bytes = sizes_known_ ? largest_ : 0;
    return info_;
  }

 private:
  BatchSplitInfo fail(const std::string& why) {
    info_.separable = false;
    info_.why_not = why;
    return info_;
  }

  bool is_batched(const std::string& v) const { return !v.empty() && batched_.count(v); }
  const Shape* shape_of(const std::string& v) const {
    const TensorType* t = g_.find_type(v);
    return t && t->kind == ValueKind::kTensor && t->shape ? &*t->shape : nullptr;
  }
  int64_t rank_of(const std::string& v) const {
    const Shape* s = shape_of(v);
    return s ? s->rank() : -1;
  }
  // Axis 0 is the batch symbol and it appears nowhere else.
  bool batched_shape_ok(const Shape& s) const {
    if (s.rank() == 0 || s.dims[0].is_known() || s.dims[0].symbol != info_.symbol) return false;
    for (int64_t i = 1; i < s.rank(); ++i)
      if (!s.dims[static_cast<size_t>(i)].is_known() && s.dims[static_cast<size_t>(i)].symbol == info_.symbol) return false;
    return true;
  }
  std::optional<std::vector<int64_t>> constant_ints(const std::string& v) const {
    if (v.empty()) return std::nullopt;
    const Tensor* t = g_.find_initializer(v);
    if (!t || !is_integer(t->dtype())) return std::nullopt;
    return t->to_int64_vector();
  }
  static bool is_integer(DType d) { return d == DType::kI64 || d == DType::kI32; }
  int64_t int_attr(const Node& n, const std::string& key, int64_t dflt) const {
    const Attribute* a = n.attr(key);
    return a ? a->i : dflt;
  }
  // The reduction/normalization axes of `n` (over its input 0 of rank r) leave axis 0 alone.
  bool axes_spare_batch(const std::vector<int64_t>& axes, int64_t r) const {
    return std::none_of(axes.begin(), axes.end(), [&](int64_t a) { return normalized(a, r) == 0; });
  }

  bool visit(const Node& n, std::string* why) {
    bool any_batched = false;
    for (const std::string& in : n.inputs) any_batched = any_batched || is_batched(in);
    for (const std::string& in : n.implicit_inputs) {
      if (is_batched(in)) {
        *why = "a subgraph reads the batch";
        return false;
      }
    }
    if (!any_batched) return free_outputs(n, why);
    const std::string& op = n.op_type;
    if (op == "Shape" || op == "Size") return free_outputs(n, why);  // sizes follow the part's batch
    if (!n.attrs.empty()) {
      for (const auto& [key, a] : n.attrs)
        if (a.g || !a.graphs.empty()) {
          *why = "a subgraph reads the batch";
          return false;
        }
    }
    if (!rule_allows(n, why)) return false;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& out = n.outputs[k];
      if (out.empty()) continue;
      const Shape* s = shape_of(out);
      if (!s || !batched_shape_ok(*s)) {
        *why = "output '" + out + "' does not keep the batch on axis 0 (" + (s ? s->to_string() : "rank unknown") + ")";
        return false;
      }
      note_size(out, *s);
      batched_.insert(out);
    }
    return true;
  }

  // Values computed from weights and shapes only: the same for every row. A free value as long as
  // the batch is a row-dependent quantity (ConstantOfShape(Shape(x)), Range over the batch size).
  bool free_outputs(const Node& n, std::string* why) {
    for (const std::string& out : n.outputs) {
      if (out.empty()) continue;
      const Shape* s = shape_of(out);
      bool batch_sized = !s;  // an unknown dimension may be the batch's
      for (size_t i = 0; s && i < s->dims.size(); ++i) {
        const Dim& d = s->dims[i];
        batch_sized = batch_sized || (!d.is_known() && (d.symbol.empty() || d.symbol == info_.symbol));
      }
      if (batch_sized) {
        *why = "'" + out + "' may be batch-sized (" + (s ? s->to_string() : "rank unknown") +
               ") but is computed without the inputs' rows";
        return false;
      }
    }
    return true;
  }

  void note_size(const std::string& v, const Shape& s) {
    const TensorType* t = g_.find_type(v);
    int64_t row = t ? dtype_size(t->dtype) : 0;
    for (int64_t i = 1; i < s.rank() && row > 0; ++i) {
      const Dim& d = s.dims[static_cast<size_t>(i)];
      if (!d.is_known()) row = 0;
      else row *= d.value;
    }
    if (row <= 0) sizes_known_ = false;
    largest_ = std::max(largest_, row);
  }

  // Per-op conditions under which row i of every output depends on row i of the batched inputs only.
  bool rule_allows(const Node& n, std::string* why) {
    const std::string& op = n.op_type;
    const int64_t out_rank = rank_of(n.outputs.empty() ? std::string() : n.outputs[0]);
    const auto batched_inputs_full_rank = [&]() {
      for (const std::string& in : n.inputs)
        if (is_batched(in) && rank_of(in) != out_rank) return false;
      return true;
    };
    const auto only_first_batched = [&](std::set<size_t> also = {}) {
      for (size_t k = 1; k < n.inputs.size(); ++k)
        if (is_batched(n.inputs[k]) && !also.count(k)) return false;
      return is_batched(n.inputs[0]);
    };
    // A free value of the output's rank must not stretch along axis 0 ([5, C] + x[batch, C] runs
    // only for a batch of 5 or 1, and a part of 1 row would come back with 5).
    const auto free_input_spares_axis0 = [&](size_t k, int64_t rank) {
      const std::string& in = n.inputs[k];
      if (in.empty() || is_batched(in)) return true;
      const Shape* s = shape_of(in);
      return s && (s->rank() < rank || (s->rank() > 0 && s->dims[0].is_known() && s->dims[0].value == 1));
    };
    if (kElementwise.count(op)) {
      if (!batched_inputs_full_rank()) {
        *why = "a batched input is broadcast against a higher-rank one";
        return false;
      }
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (!free_input_spares_axis0(k, out_rank)) {
          *why = "input '" + n.inputs[k] + "' would broadcast along the batch axis";
          return false;
        }
      return true;
    }
    if (kPerSample.count(op)) {
      // FusedConv's fourth input (InvertedResidual's eighth) is the residual added to its output: the same batch.
      const std::set<size_t> z = op == "FusedConv" ? std::set<size_t>{3} : op == "InvertedResidual" ? std::set<size_t>{7} : std::set<size_t>{};
      if (only_first_batched(z) && batched_inputs_full_rank())
        return true;
      *why = "its parameters depend on the batch";
      return false;
    }
    const int64_t r0 = n.inputs.empty() ? -1 : rank_of(n.inputs[0]);
    if (op == "MatMul" || op == "FusedMatMul" || op == "Gemm" || op == "FusedGemm") {
      const bool a = is_batched(n.inputs[0]), b = n.inputs.size() > 1 && is_batched(n.inputs[1]);
      if ((op == "Gemm" || op == "FusedGemm") && int_attr(n, "transA", 0) != 0) {
        *why = "transA reads the batch as the reduction axis";
        return false;
      }
      for (size_t k = 2; k < n.inputs.size(); ++k)
        if (is_batched(n.inputs[k])) {
          *why = "its bias depends on the batch";
          return false;
        }
      for (size_t k = 1; k < n.inputs.size(); ++k) {
        const int64_t rk = rank_of(n.inputs[k]);
        const bool bias = k >= 2;  // Gemm's C: [M, N] would need M == batch
        if ((bias && rk >= 2 && !free_input_spares_axis0(k, rk)) || (!bias && rk == r0 && rk >= 3 && !free_input_spares_axis0(k, rk))) {
          *why = "input '" + n.inputs[k] + "' would broadcast along the batch axis";
          return false;
        }
      }
      if (a && !b && r0 >= 2) return true;
      if (a && b && r0 >= 3 && rank_of(n.inputs[1]) == r0) return true;
      *why = "the batch is not the outer axis of the product";
      return false;
    }
    if (op == "Reshape" || op == "Flatten" || op == "Expand" || op == "Squeeze" || op == "Unsqueeze") {
      // Row-major: when axis 0 stays the batch (checked on the output), row i stays row i.
      if (only_first_batched()) return true;
      *why = "its shape input depends on the batch";
      return false;
    }
    if (op == "Transpose") {
      const Attribute* perm = n.attr("perm");
      if (perm && !perm->ints.empty() && perm->ints[0] == 0) return true;
      *why = "the permutation moves axis 0";
      return false;
    }
    if (const auto along = kAlongAxis.find(op); along != kAlongAxis.end()) {
      int64_t axis = int_attr(n, "axis", along->second);
      if (op == "CumSum") {
        auto ax = n.inputs.size() > 1 ? constant_ints(n.inputs[1]) : std::nullopt;
        if (!ax || ax->size() != 1) {
          *why = "its axis is not a constant";
          return false;
        }
        axis = (*ax)[0];
      }
      if (op == "Concat") {
        for (const std::string& in : n.inputs)
          if (!is_batched(in) || rank_of(in) != out_rank) {
            *why = "it joins the batch with a value that is not batched the same way";
            return false;
          }
      } else if (!only_first_batched()) {
        *why = "its parameters depend on the batch";
        return false;
      }
      if (r0 > 0 && normalized(axis, r0) != 0) return true;
      *why = "it works along axis 0";
      return false;
    }
    if (kReduce.count(op)) {
      std::optional<std::vector<int64_t>> axes;
      if (const Attribute* a = n.attr("axes")) axes = a->ints;
      else if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = constant_ints(n.inputs[1]);
      if (axes && !axes->empty() && only_first_batched() && axes_spare_batch(*axes, r0)) return true;
      *why = "it may reduce over axis 0";
      return false;
    }
    if (op == "Slice") {
      auto axes = n.inputs.size() > 3 ? constant_ints(n.inputs[3]) : std::nullopt;
      if (axes && only_first_batched() && axes_spare_batch(*axes, r0)) return true;
      *why = "it may slice axis 0";
      return false;
    }
    if (op == "Gather") {
      const int64_t axis = int_attr(n, "axis", 0);
      const bool data = is_batched(n.inputs[0]), idx = n.inputs.size() > 1 && is_batched(n.inputs[1]);
      if (data && !idx && r0 > 0 && normalized(axis, r0) != 0) return true;
      if (!data && idx && normalized(axis, r0) == 0) return true;  // an embedding lookup per row
      *why = "it gathers along the batch";
      return false;
    }
    if (op == "Pad") {
      auto pads = n.inputs.size() > 1 ? constant_ints(n.inputs[1]) : std::nullopt;
      if (!pads) {
        if (const Attribute* a = n.attr("pads")) pads = a->ints;
      }
      const bool axes_given = n.inputs.size() > 3 && !n.inputs[3].empty();
      if (pads && !axes_given && r0 > 0 && static_cast<int64_t>(pads->size()) == 2 * r0 && (*pads)[0] == 0 &&
          (*pads)[static_cast<size_t>(r0)] == 0 && only_first_batched())
        return true;
      *why = "it may pad axis 0";
      return false;
    }
    *why = "op not known to keep batch rows apart";
    return false;
  }

  const Graph& g_;
  BatchSplitInfo info_;
  std::set<std::string> batched_;
  int64_t largest_ = 0;
  bool sizes_known_ = true;
};

}  // namespace

BatchSplitInfo analyze_batch_split(const Graph& g) { return Analysis(g).run(); }

int64_t batch_split_rows(const BatchSplitInfo& info, int64_t rows, int64_t cache_bytes) {
  if (!info.separable || info.largest_row_bytes <= 0 || rows < 2 || cache_bytes <= 0) return 0;
  if (rows * info.largest_row_bytes <= cache_bytes / 2) return 0;  // the whole batch stays in cache
  const int64_t limit = std::max<int64_t>(1, cache_bytes / (3 * info.largest_row_bytes));
  for (int64_t part = std::min(limit, rows - 1); part >= 1; --part)
    if (rows % part == 0) return part;
  return 1;
}

std::vector<BatchSplitCut> batch_split_cuts(const Graph& g, const BatchSplitInfo& info) {
  std::vector<BatchSplitCut> cuts;
  if (!info.separable || g.nodes.size() < 2) return cuts;
  constexpr int64_t kUnknown = std::numeric_limits<int64_t>::max();
  // Bytes per row of a batched value (axis 0 the batch symbol, the rest known); 0: not batched
  // (a shape, a value computed from weights); kUnknown: batched of unknown size.
  const auto row_bytes = [&](const std::string& v) -> int64_t {
    const TensorType* t = g.find_type(v);
    if (!t || t->kind != ValueKind::kTensor || !t->shape) return kUnknown;
    const Shape& s = *t->shape;
    if (s.rank() == 0 || s.dims[0].is_known() || s.dims[0].symbol != info.symbol) return 0;
    int64_t bytes = dtype_size(t->dtype);
    if (bytes <= 0) return kUnknown;
    for (int64_t i = 1; i < s.rank(); ++i) {
      const Dim& d = s.dims[static_cast<size_t>(i)];
      if (!d.is_known()) return kUnknown;
      bytes *= d.value;
    }
    return bytes;
  };
  const int64_t n = static_cast<int64_t>(g.nodes.size());
  std::unordered_map<std::string, int64_t> last_use;  // node index of the last reader; n: a graph output
  for (int64_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[static_cast<size_t>(i)];
    for (const std::string& in : node.inputs)
      if (!in.empty()) last_use[in] = i;
    for (const std::string& in : node.implicit_inputs) last_use[in] = i;
  }
  for (const ValueInfo& out : g.outputs) last_use[out.name] = n;
  const auto last_of = [&](const std::string& v) {
    auto it = last_use.find(v);
    return it == last_use.end() ? int64_t{-1} : it->second;
  };
  // back[i]: the largest batched tensor nodes i.. read or make, per row.
  std::vector<int64_t> back(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t m = back[static_cast<size_t>(i) + 1];
    const Node& node = g.nodes[static_cast<size_t>(i)];
    for (const std::string& v : node.outputs)
      if (!v.empty()) m = std::max(m, row_bytes(v));
    for (const std::string& v : node.inputs)
      if (!v.empty() && !g.initializers.count(v)) m = std::max(m, row_bytes(v));
    back[static_cast<size_t>(i)] = m;
  }
  std::set<std::string> live;  // values made so far (graph inputs included) that a later node or the graph's outputs need
  for (const ValueInfo& in : g.inputs)
    if (last_of(in.name) >= 0) live.insert(in.name);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const Node& node = g.nodes[static_cast<size_t>(i)];
    for (const std::string& v : node.outputs)
      if (!v.empty() && last_of(v) > i) live.insert(v);
    for (auto it = live.begin(); it != live.end();) it = last_of(*it) <= i ? live.erase(it) : std::next(it);
    if (live.size() != 1) continue;
    const std::string& v = *live.begin();
    const int64_t rb = row_bytes(v);
    if (rb <= 0 || rb == kUnknown || last_of(v) >= n) continue;  // not a batched tensor, or a graph output itself
    if (std::any_of(g.inputs.begin(), g.inputs.end(), [&](const ValueInfo& in) { return in.name == v; })) continue;
    BatchSplitCut c;
    c.after = i;
    c.value = v;
    for (int64_t j = i; j >= 0 && c.producer < 0; --j) {
      const std::vector<std::string>& outs = g.nodes[static_cast<size_t>(j)].outputs;
      for (size_t k = 0; k < outs.size(); ++k)
        if (outs[k] == v) c.producer = j, c.producer_output = static_cast<int64_t>(k);
    }
    c.value_row_bytes = rb;
    c.back_row_bytes = back[static_cast<size_t>(i) + 1];
    cuts.push_back(std::move(c));
  }
  return cuts;
}

const BatchSplitCut* choose_front_cut(const std::vector<BatchSplitCut>& cuts, int64_t rows, int64_t back_bytes) {
  if (rows <= 0 || back_bytes <= 0) return nullptr;
  for (const BatchSplitCut& c : cuts)
    if (c.back_row_bytes <= back_bytes / rows) return &c;
  return nullptr;
}

int64_t last_level_cache_bytes() {
  // sysfs first: the size one core's cache domain has (what lscpu prints). sysconf's L3 figure
  // can be the whole host's (384 MiB inside a VM on a 32 MiB-per-CCX EPYC).
  static const int64_t bytes = [] {
    int best_level = 0;
    int64_t best = 0;
    for (int i = 0; i < 8; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream level(dir + "level"), type(dir + "type"), size(dir + "size");
      int lv = 0;
      std::string ty, sz;
      if (!(level >> lv) || !(type >> ty) || !(size >> sz) || ty == "Instruction" || sz.empty()) continue;
      int64_t v = 0;
      size_t k = 0;
      while (k < sz.size() && sz[k] >= '0' && sz[k] <= '9') v = v * 10 + (sz[k++] - '0');
      const char unit = k < sz.size() ? sz[k] : 'B';
      v *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? int64_t{1} << 30 : 1;
      if (lv > best_level && v > 0) {
        best_level = lv;
        best = v;
      }
    }
    if (best > 0) return best;
    for (int level : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
      const long v = sysconf(level);
      if (v > 0) return static_cast<int64_t>(v);
    }
    return int64_t{32} << 20;
  }();
  return bytes;
}

}  // namespace ferry

// ---- Parts side by side (batch_split_parts.h) ----

namespace ferry {
namespace {
std::atomic<int64_t> g_concurrent_runs{0};
// Off until measured faster on a quiet machine (issue 22): FERRY_SPLIT_LANES=2 turns it on. Under
// load 4-6 on 2 cores (bench/ab_vs_ort.py MODEL 2 8 5 1.5, median of per-round ferry/ORT, off then
// on): ResNet-50 0.683 -> 0.596 and 0.703 -> 0.661, EfficientNet-B0 0.781 -> 0.602, UNet 0.567 ->
// 0.542, MobileNetV2 0.454 -> 0.579 (its direct pairs even); one unloaded ResNet-50 pair 197.5 ->
// 176.6 ms.
constexpr bool kSplitLanesByDefault = false;
}  // namespace

int batch_split_lanes(int64_t parts) {
  if (parts < 2 || omp_in_parallel()) return 1;
  int lanes = kSplitLanesByDefault ? omp_get_max_threads() : 1;
  if (const char* e = env_value("FERRY_SPLIT_LANES"); e && *e) lanes = std::min(omp_get_max_threads(), std::max(1, std::atoi(e)));
  if (lanes < 2 || parts % lanes != 0) return 1;
  return lanes;
}

void run_batch_parts(int64_t parts, int lanes, const std::function<void(int64_t)>& job) {
  if (lanes <= 1 || parts < 2) {
    for (int64_t i = 0; i < parts; ++i) job(i);
    return;
  }
  g_concurrent_runs.fetch_add(1);
  const int outer = omp_get_max_threads();
  std::exception_ptr thrown;
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(lanes)
  {
    // The ICV is this implicit task's own: the kernels called below see one thread (and
    // omp_in_parallel(), so parallel_ranges and oneDNN run serially on this lane).
    omp_set_num_threads(1);
    // Parts handed out in turn (not lane i every n-th part): a lane that lost its core for a while
    // to another process takes fewer parts.
    try {
      for (int64_t i = next.fetch_add(1); i < parts; i = next.fetch_add(1)) job(i);
    } catch (...) {
#pragma omp critical(ferry_batch_parts_error)
      if (!thrown) thrown = std::current_exception();
    }
  }
  omp_set_num_threads(outer);
  if (thrown) std::rethrow_exception(thrown);
}

int64_t batch_split_concurrent_runs() { return g_concurrent_runs.load(); }

}  // namespace ferry
