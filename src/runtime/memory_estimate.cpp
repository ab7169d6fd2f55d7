// Static memory estimate and the --memory-limit check; see memory_estimate.h.
#include "runtime/memory_estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <unordered_map>

#include "ops/shape_inference.h"

namespace ferry {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

StatusOr<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return invalid_argument("memory size '" + text + "' is not a number (examples: 512M, 2G, 1.5GiB)");
  double value = 0;
  try {
    value = std::stod(text.substr(0, i));
  } catch (...) {
    return invalid_argument("memory size '" + text + "' is not a number (examples: 512M, 2G, 1.5GiB)");
  }
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  else return invalid_argument("memory size '" + text + "': unknown unit '" + text.substr(i) + "' (use K, M, G or T)");
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 9.0e18) return invalid_argument("memory size '" + text + "' is out of range");
  return static_cast<int64_t>(bytes);
}

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

namespace {

// Bytes of a fully known tensor type; -1 when unknown.
int64_t type_bytes(const TensorType& t) {
  if (!t.shape || t.kind != ValueKind::kTensor) return -1;
  int64_t n = 1;
  for (const Dim& d : t.shape->dims) {
    if (!d.is_known()) return -1;
    if (d.value != 0 && n > (int64_t(1) << 62) / d.value) return int64_t(1) << 62;
    n *= d.value;
  }
  const int64_t es = t.dtype == DType::kString ? 32 : static_cast<int64_t>(dtype_size(t.dtype));
  return n > (int64_t(1) << 62) / std::max<int64_t>(es, 1) ? int64_t(1) << 62 : n * es;
}

}  // namespace

StatusOr<MemoryEstimate> estimate_memory(const Model& model, const InputShapes& shapes) {
  std::shared_ptr<Model> m = model.clone();
  Graph& g = m->graph;
  // Keep only what is declared (inputs, initializers, declared outputs); infer the rest anew.
  std::unordered_map<std::string, TensorType> kept;
  for (ValueInfo& in : g.inputs) {
    for (const auto& [name, dims] : shapes) {
      if (name != in.name) continue;
      if (in.type.shape) {  // the declared dims first: a mismatch is the user's input, not a memory problem
        const Shape& declared = *in.type.shape;
        bool fits = declared.rank() == static_cast<int64_t>(dims.size());
        for (int64_t i = 0; fits && i < declared.rank(); ++i)
          fits = !declared.dims[i].is_known() || declared.dims[i].value == dims[i];
        if (declared.rank() != static_cast<int64_t>(dims.size()))
          return invalid_argument("input '" + in.name + "': the model expects " + in.type.to_string() + " (rank " +
                                  std::to_string(declared.rank()) + "), given shape " + dims_to_string(dims) +
                                  " (rank " + std::to_string(dims.size()) + ")");
        if (!fits)
          return invalid_argument("input '" + in.name + "': the model expects " + in.type.to_string() +
                                  ", given shape " + dims_to_string(dims) +
                                  " (a fixed dimension differs; resize the data, or re-export with dynamic_axes)");
      }
      Shape s;
      for (int64_t d : dims) s.dims.push_back(Dim(d));
      in.type.shape = s;
    }
    if (in.type.shape)
      for (const Dim& d : in.type.shape->dims)
        if (!d.is_known())
          return invalid_argument("input '" + in.name + "' has a symbolic dimension" +
                                  (d.symbol.empty() ? std::string() : " '" + d.symbol + "'") +
                                  " that no given shape binds; give the input's shape to estimate memory");
    kept[in.name] = in.type;
  }
  for (const auto& [name, t] : g.initializers) kept[name] = t.type();
  g.value_types = kept;
  RETURN_IF_ERROR(infer_shapes(m.get()).with_context("estimating memory"));

  MemoryEstimate est;
  for (const auto& [name, t] : g.initializers) est.weight_bytes += t.nbytes();
  for (const ValueInfo& in : g.inputs) est.input_bytes += std::max<int64_t>(0, type_bytes(in.type));

  std::set<std::string> inputs_and_weights;
  for (const ValueInfo& in : g.inputs) inputs_and_weights.insert(in.name);
  for (const auto& [name, t] : g.initializers) inputs_and_weights.insert(name);
  std::set<std::string> outputs;
  for (const ValueInfo& o : g.outputs) outputs.insert(o.name);
  std::unordered_map<std::string, size_t> last_use;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const std::string& in : g.nodes[i].inputs)
      if (!in.empty()) last_use[in] = i;
    for (const std::string& in : g.nodes[i].implicit_inputs) last_use[in] = i;
  }
  std::unordered_map<std::string, int64_t> live;
  int64_t live_bytes = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    for (const std::string& o : node.outputs) {
      if (o.empty()) continue;
      const TensorType* t = g.find_type(o);
      const int64_t b = t ? type_bytes(*t) : -1;
      if (b < 0) {
        ++est.unknown_values;
        continue;
      }
      live[o] = b;
      live_bytes += b;
    }
    if (live_bytes > est.peak_activation_bytes) {
      est.peak_activation_bytes = live_bytes;
      est.peak_node = node.describe();
      std::vector<std::pair<std::string, int64_t>> all(live.begin(), live.end());
      std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      if (all.size() > 5) all.resize(5);
      est.largest = all;
    }
    for (const std::string& in : node.inputs) {
      auto lu = last_use.find(in);
      if (in.empty() || lu == last_use.end() || lu->second != i || outputs.count(in) || inputs_and_weights.count(in)) continue;
      auto it = live.find(in);
      if (it != live.end()) {
        live_bytes -= it->second;
        live.erase(it);
      }
    }
    for (const std::string& o : node.outputs)  // outputs nobody reads (and that are not graph outputs) die at once
      if (!o.empty() && !last_use.count(o) && !outputs.count(o) && live.count(o)) {
        live_bytes -= live[o];
        live.erase(o);
      }
  }
  return est;
}

Status check_memory_limit(const Model& model, const InputShapes& shapes, int64_t limit_bytes) {
  if (limit_bytes <= 0) return Status::ok();
  ASSIGN_OR_RETURN(MemoryEstimate est, estimate_memory(model, shapes));
  if (est.total_bytes() <= limit_bytes) return Status::ok();
  std::string msg = "the model needs about " + format_bytes(est.total_bytes()) + " (weights " +
                    format_bytes(est.weight_bytes) + ", inputs " + format_bytes(est.input_bytes) +
                    ", peak of intermediate tensors " + format_bytes(est.peak_activation_bytes) + " after " +
                    est.peak_node + ") but the memory limit is " + format_bytes(limit_bytes) + ".";
  if (!est.largest.empty()) {
    msg += " Largest tensors alive at the peak:";
    for (size_t i = 0; i < est.largest.size(); ++i)
      msg += std::string(i ? ", '" : " '") + est.largest[i].first + "' " + format_bytes(est.largest[i].second);
    msg += ".";
  }
  // The largest batch that fits, when every input's dimension 0 is a batch the model leaves free.
  int64_t batch = -1;
  bool batched = !shapes.empty();
  for (const auto& [name, dims] : shapes) {
    const ValueInfo* vi = nullptr;
    for (const ValueInfo& in : model.graph.inputs)
      if (in.name == name) vi = &in;
    if (!vi || !vi->type.shape || vi->type.shape->dims.empty() || vi->type.shape->dims[0].is_known() || dims.empty()) {
      batched = false;
      break;
    }
    if (batch >= 0 && dims[0] != batch) batched = false;
    batch = dims[0];
  }
  if (batched && batch > 1) {
    auto fits = [&](int64_t b) {
      InputShapes s = shapes;
      for (auto& [name, dims] : s) dims[0] = b;
      auto e = estimate_memory(model, s);
      return e.is_ok() && e.value().total_bytes() <= limit_bytes;
    };
    int64_t lo = 0, hi = batch - 1;  // largest b in [1, batch-1] that fits; 0 = none
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid)) lo = mid;
      else hi = mid - 1;
    }
    msg += lo > 0 ? " The largest batch that fits is " + std::to_string(lo) + " (given " + std::to_string(batch) + ")."
                  : " Even batch 1 does not fit.";
  }
  msg += " Raise --memory-limit, lower the batch, or use a lower precision (ferry compile --precision-mode).";
  return resource_exhausted(msg);
}

}  // namespace ferry
