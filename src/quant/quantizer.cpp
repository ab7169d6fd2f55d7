// `ferry quantize`'s library side; see quantizer.h.
#include "quant/quantizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "onnx/onnx_import.h"
#include "quant/qdq_plan.h"

namespace ferry::quant {
namespace {

constexpr int64_t kFewSamples = 16;

// Cosine of two equally sized float ranges (1 when both are zero).
double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa == 0 && bb == 0) return 1.0;
  if (aa == 0 || bb == 0) return 0.0;
  return ab / std::sqrt(aa * bb);
}

// Per-sample cosines of two [N, ...] float tensors (one cosine when rank 0).
std::vector<double> sample_cosines(const Tensor& ref, const Tensor& got) {
  std::vector<double> out;
  if (ref.dtype() != DType::kF32 || got.dtype() != DType::kF32 || ref.numel() != got.numel() || ref.numel() == 0)
    return out;
  const int64_t n = ref.rank() > 0 ? ref.dim(0) : 1;
  const int64_t per = n > 0 ? ref.numel() / n : 0;
  for (int64_t s = 0; s < n; ++s) out.push_back(cosine(ref.data<float>() + s * per, got.data<float>() + s * per, per));
  return out;
}

double whole_cosine(const Tensor& ref, const Tensor& got) {
  if (ref.dtype() != DType::kF32 || got.dtype() != DType::kF32 || ref.numel() != got.numel()) return 0.0;
  return cosine(ref.data<float>(), got.data<float>(), ref.numel());
}

struct Session {
  const QuantizeOptions& o;
  std::shared_ptr<Model> model;
  CalibrationData data;
  RangeCollector ranges;
  std::vector<NamedTensors> float_outputs;
  std::unordered_map<std::string, Tensor> float_values;  // first sensitivity feed: every node output
  NamedTensors sens_feeds;

  explicit Session(const QuantizeOptions& opt) : o(opt) {}

  void log(const std::string& line) const {
    if (o.log) o.log(line);
  }

  StatusOr<QdqPlan> plan(const std::set<std::string>& keep) {
    RangeFn fn = [this](const std::string& v, float* lo, float* hi) { return ranges.range(v, o.method, lo, hi); };
    return plan_qdq(*model, fn, keep);
  }

  // Writes the plan to the output and measures its output cosine on the calibration data.
  Status write_and_measure(const QdqPlan& p, double* mean, double* worst) {
    RETURN_IF_ERROR(write_edited_onnx(o.model_path, p.edit, o.out_path));
    ASSIGN_OR_RETURN(auto q, load_onnx_model(o.out_path));
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = o.threads;
    ASSIGN_OR_RETURN(auto ex, Executor::create(q, eo));
    std::vector<double> per_output_sum(model->graph.outputs.size(), 0.0);
    double worst_cos = 1.0;
    int64_t samples = 0;
    for (size_t b = 0; b < data.batches.size(); ++b) {
      NamedTensors outs;
      RETURN_IF_ERROR(ex->run(data.batches[b], &outs).with_context("running the quantized model '" + o.out_path + "'"));
      int64_t n = 0;
      for (size_t k = 0; k < outs.size() && k < float_outputs[b].size(); ++k) {
        const std::vector<double> c = sample_cosines(float_outputs[b][k].second, outs[k].second);
        for (double x : c) {
          per_output_sum[k] += x;
          worst_cos = std::min(worst_cos, x);
        }
        n = std::max<int64_t>(n, static_cast<int64_t>(c.size()));
      }
      samples += n;
      if (o.progress) o.progress("measuring", static_cast<int64_t>(b) + 1, static_cast<int64_t>(data.batches.size()));
    }
    *mean = 1.0;
    for (double s : per_output_sum) *mean = std::min(*mean, samples > 0 ? s / static_cast<double>(samples) : 0.0);
    *worst = worst_cos;
    return Status::ok();
  }

  // Every node output of a run at opt level 0 (names as in the file).
  Status node_values(std::shared_ptr<const Model> m, std::unordered_map<std::string, Tensor>* values) {
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.opt_level = 0;
    eo.threads = o.threads;
    ASSIGN_OR_RETURN(auto ex, Executor::create(m, eo));
    ex->set_observer(
        [values](const Node& node, const std::vector<Value>& outs, double) {
          for (size_t i = 0; i < outs.size() && i < node.outputs.size(); ++i)
            if (outs[i].is_tensor() && outs[i].tensor.dtype() == DType::kF32)
              (*values)[node.outputs[i]] = outs[i].tensor.clone();
        },
        true);
    for (const auto& [name, t] : sens_feeds) (*values)[name] = t;
    NamedTensors outs;
    return ex->run(sens_feeds, &outs);
  }

  // The quantized layer that loses the most cosine (its output against its inputs), not yet kept.
  StatusOr<KeptLayer> most_sensitive(const QdqPlan& p, const std::set<std::string>& keep) {
    if (float_values.empty()) RETURN_IF_ERROR(node_values(model, &float_values));
    ASSIGN_OR_RETURN(auto q, load_onnx_model(o.out_path));
    std::unordered_map<std::string, Tensor> qv;
    RETURN_IF_ERROR(node_values(q, &qv));
    std::unordered_map<std::string, std::string> renamed;  // original -> name in the quantized file
    for (const auto& [from, to] : p.edit.rename_outputs) renamed[from] = to;
    auto cos_of = [&](const std::string& v) -> double {
      auto f = float_values.find(v);
      auto r = renamed.find(v);
      auto g = qv.find(r == renamed.end() ? v : r->second);
      if (f == float_values.end() || g == qv.end()) return 1.0;
      return whole_cosine(f->second, g->second);
    };
    KeptLayer best;
    double best_drop = -1;
    const Graph& g = model->graph;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Role r = p.roles[i];
      if (r == Role::kFloat || r == Role::kPassThrough) continue;
      const Node& n = g.nodes[i];
      if (keep.count(n.name)) continue;
      double in_cos = 1.0;
      for (const auto& v : n.inputs)
        if (!v.empty() && !g.find_initializer(v)) in_cos = std::min(in_cos, cos_of(v));
      const double out_cos = cos_of(n.outputs[0]);
      const double drop = in_cos - out_cos;
      if (drop > best_drop) {
        best_drop = drop;
        best = KeptLayer{n.name, n.op_type, in_cos, out_cos, 0};
      }
    }
    if (best_drop < 0) return not_found("no quantized layer left to keep in float");
    // An absorbed Relu/Clip, or a bias Add taken into its MatMul, goes with its producer: keep that instead.
    for (int hop = 0; hop < 2; ++hop) {
      size_t idx = 0;
      while (idx < g.nodes.size() && g.nodes[idx].name != best.node) ++idx;
      if (idx == g.nodes.size() || (p.roles[idx] != Role::kAbsorbed && p.roles[idx] != Role::kBiasAdd)) break;
      for (const std::string& in : g.nodes[idx].inputs) {
        if (in.empty() || g.find_initializer(in)) continue;
        for (const Node& pnode : g.nodes)
          if (!pnode.outputs.empty() && pnode.outputs[0] == in && !keep.count(pnode.name)) {
            best.node = pnode.name;
            best.op_type = pnode.op_type;
          }
        break;
      }
    }
    return best;
  }
};

}  // namespace

StatusOr<QuantizeReport> quantize_model(const QuantizeOptions& o) {
  Session s(o);
  ASSIGN_OR_RETURN(s.model, load_onnx_model(o.model_path));
  if (const int64_t n = count_quantization_ops(*s.model); n > 0)
    return invalid_argument("model '" + o.model_path + "' is already quantized (" + std::to_string(n) +
                            " QuantizeLinear/DequantizeLinear/QLinear*/...Integer nodes); nothing was written. "
                            "Quantize its float original instead");
  for (const std::string& k : o.keep_fp32)
    if (!names_node(*s.model, k))
      return invalid_argument("--keep-fp32 '" + k + "' names no node of '" + o.model_path +
                              "' (give node names or their first output's name; `ferry info` lists them)");
  if (o.target_cosine < 0 || o.target_cosine > 1)
    return invalid_argument("--target-cosine " + std::to_string(o.target_cosine) + " is not in (0, 1]");
  QuantizeReport rep;
  ASSIGN_OR_RETURN(s.data, load_calibration_data(*s.model, o.data));
  rep.samples = s.data.samples;
  rep.batches = static_cast<int64_t>(s.data.batches.size());
  if (rep.samples < kFewSamples)
    rep.warnings.push_back("only " + std::to_string(rep.samples) + " calibration samples (fewer than " +
                           std::to_string(kFewSamples) + "); the ranges may not cover real inputs: give more samples");
  RETURN_IF_ERROR(s.ranges.collect(s.model, s.data, o.method, o.threads, o.progress, &s.float_outputs));
  {
    // Sensitivity runs on up to 2 samples of the first batch.
    for (const auto& [name, t] : s.data.batches[0]) s.sens_feeds.emplace_back(name, t.outer_slice(0, std::min<int64_t>(2, t.dim(0))));
  }
  std::set<std::string> keep(o.keep_fp32.begin(), o.keep_fp32.end());
  ASSIGN_OR_RETURN(QdqPlan plan, s.plan(keep));
  RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
  rep.first_cosine = rep.cosine_mean;
  if (o.target_cosine > 0) {
    s.log("output cosine " + std::to_string(rep.cosine_mean) + " with every layer quantized; target " +
          std::to_string(o.target_cosine));
    while (rep.cosine_mean < o.target_cosine && static_cast<int>(rep.kept_for_target.size()) < o.max_kept_layers) {
      auto pick = s.most_sensitive(plan, keep);
      if (!pick.is_ok()) break;
      KeptLayer k = pick.value();
      keep.insert(k.node);
      ASSIGN_OR_RETURN(plan, s.plan(keep));
      RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
      k.model_cosine = rep.cosine_mean;
      s.log("kept " + k.node + " (" + k.op_type + ") in float: its inputs' cosine " + std::to_string(k.input_cosine) +
            ", its output's " + std::to_string(k.output_cosine) + "; model output cosine now " +
            std::to_string(rep.cosine_mean));
      rep.kept_for_target.push_back(k);
    }
    rep.target_reached = rep.cosine_mean >= o.target_cosine;
  }
  rep.quantized_nodes = static_cast<int64_t>(plan.quantized.size());
  rep.qdq_pairs = plan.qdq_pairs;
  rep.int8_weights = plan.int8_weights;
  rep.int32_biases = plan.int32_biases;
  rep.left_float = plan.left_float;
  rep.kept_by_user = o.keep_fp32;
  return rep;
}

}  // namespace ferry::quant
