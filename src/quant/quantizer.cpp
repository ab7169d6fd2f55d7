// `ferry quantize`'s library side; see quantizer.h.
#include "quant/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "backends/device_defaults.h"
#include "common/env_switch.h"
#include "onnx/onnx_import.h"
#include "quant/quantize_session.h"

namespace ferry::quant {
namespace {

constexpr int64_t kFewSamples = 16;
using detail::Session;

}  // namespace

StatusOr<WeightRounding> parse_weight_rounding(const std::string& name) {
  if (name == "nearest") return WeightRounding::kNearest;
  if (name == "gptq") return WeightRounding::kGptq;
  return invalid_argument("--weight-rounding '" + name + "': expected nearest or gptq");
}

const char* weight_rounding_name(WeightRounding r) { return r == WeightRounding::kGptq ? "gptq" : "nearest"; }

bool choose_reduce_range(ReduceRange mode, bool host_saturates, bool plain_floor, double cosine_reduced, double bar) {
  if (mode != ReduceRange::kAuto) return mode == ReduceRange::kOn;
  return host_saturates && plain_floor && cosine_reduced >= bar;
}

StatusOr<LayerSearch> search_8bit_layers(
    double initial, double bar, const std::vector<std::string>& order, const std::map<std::string, int64_t>& macs,
    int max_restored, const std::function<StatusOr<double>(const std::vector<std::string>&)>& measure) {
  LayerSearch r;
  r.cosine = initial;
  for (const std::string& n : order) {
    if (r.cosine >= bar || static_cast<int>(r.restored.size()) >= max_restored) break;
    r.eight_bit.push_back(n);
    ASSIGN_OR_RETURN(r.cosine, measure(r.eight_bit));
    r.restored.emplace_back(n, r.cosine);
  }
  r.reached = r.cosine >= bar;
  if (!r.reached || r.eight_bit.empty()) return r;
  auto macs_of = [&](const std::string& n) {
    auto it = macs.find(n);
    return it == macs.end() ? int64_t{0} : it->second;
  };
  std::vector<std::string> back = r.eight_bit;
  std::stable_sort(back.begin(), back.end(),
                   [&](const std::string& x, const std::string& y) { return macs_of(x) > macs_of(y); });
  for (const std::string& n : back) {
    std::vector<std::string> without;
    for (const std::string& k : r.eight_bit)
      if (k != n) without.push_back(k);
    ASSIGN_OR_RETURN(const double c, measure(without));
    r.tried_back.push_back(n);
    if (c >= bar) {
      r.eight_bit = std::move(without);
      r.cosine = c;
      r.released.emplace_back(n, c);
    }
  }
  return r;
}

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
  CalibrationData holdout;  // checked before anything is written
  if (!o.holdout_path.empty()) {
    CalibrationDataOptions hd = o.data;
    hd.path = o.holdout_path;
    hd.max_samples = 0;
    auto h = load_calibration_data(*s.model, hd);
    if (!h.is_ok()) return h.status().with_context("--holdout '" + o.holdout_path + "'");
    holdout = std::move(h.value());
  }
  rep.samples = s.data.samples;
  rep.batches = static_cast<int64_t>(s.data.batches.size());
  if (rep.samples < kFewSamples)
    rep.warnings.push_back("only " + std::to_string(rep.samples) + " calibration samples (fewer than " +
                           std::to_string(kFewSamples) + "); the ranges may not cover real inputs: give more samples");
  RETURN_IF_ERROR(s.ranges.collect(s.model, s.data, o.method, o.threads, o.progress, &s.float_outputs));
  rep.host_pairs_saturate = o.host_pairs_saturate >= 0 ? o.host_pairs_saturate != 0 : host_int8_pairs_saturate();
  if (o.reduce_range == ReduceRange::kOn) {  // every file from here on, the plain structure's included
    s.weight_qmax = kReducedWeightMax;
    rep.reduce_range = true;
  }
  std::set<std::string> keep(o.keep_fp32.begin(), o.keep_fp32.end());
  ASSIGN_OR_RETURN(QdqPlan plan, s.plan(keep));
  if (o.method == Method::kAuto) {
    // Each method's file, measured on the calibration data; the best is kept (ties: the earlier).
    double best = -2, best_worst = 0;
    Method best_method = Method::kPercentile;
    for (Method m : {Method::kPercentile, Method::kMinMax, Method::kEntropy, Method::kMse}) {
      s.method = m;
      ASSIGN_OR_RETURN(QdqPlan p, s.plan(keep));
      double mean = 0, worst = 0;
      RETURN_IF_ERROR(s.write_and_measure(p, &mean, &worst));
      rep.method_cosines.emplace_back(method_name(m), mean);
      s.log(std::string("--method auto: ") + method_name(m) + " gives output cosine " + std::to_string(mean));
      if (mean > best) {
        best = mean;
        best_worst = worst;
        best_method = m;
        plan = std::move(p);
      }
    }
    s.method = best_method;
    s.log(std::string("--method auto: keeping ") + method_name(best_method));
    RETURN_IF_ERROR(write_edited_onnx(o.model_path, plan.edit, o.out_path));  // the best one (the last written is mse)
    rep.cosine_mean = best;
    rep.cosine_min = best_worst;
  } else {
    RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
  }
  rep.method = s.method;
  if (o.plain_floor) RETURN_IF_ERROR(s.plain_floor(keep, &plan, &rep));
  if (o.reduce_range == ReduceRange::kAuto && rep.host_pairs_saturate && o.plain_floor) {
    // The file's structure as chosen above with 7-bit weights where 8 bits cost ferry's kernels the split,
    // measured against the plain (8-bit) floor (docs/quantization.md "Reduce range"): kept where it reaches it
    // (those kernels then run unsplit and exact on this host); else layers go back to 8-bit one at a time, in
    // the order of their probed gain per multiply-add, re-measured after each, until the floor is reached; if
    // no mix reaches it, the 8-bit file.
    rep.cosine_full_range = rep.cosine_mean;
    s.weight_qmax = kReducedWeightMax;
    s.reduce_where_split = true;
    ASSIGN_OR_RETURN(QdqPlan p7, s.plan(keep));
    double mean7 = 0, worst7 = 0;
    RETURN_IF_ERROR(s.write_and_measure(p7, &mean7, &worst7));
    rep.cosine_reduced_range = mean7;
    const int64_t candidates7 = static_cast<int64_t>(p7.reduced_nodes.size());
    // The bar: the plain floor plus half the 8-bit file's margin over it. Searching layer by layer for a mix that
    // just reaches the floor on the calibration data picks the mixes that do best there by chance: on EfficientNet-B0
    // a mix 0.00002 above the floor there was 0.0006 below the plain baseline on held-out data.
    const double bar = rep.plain_cosine + std::max(0.0, rep.cosine_full_range - rep.plain_cosine) / 2;
    rep.reduce_range_bar = bar;
    s.log("reduce range (7-bit weights in [-64, 64] on the " + std::to_string(p7.reduced_weights) + " of " +
          std::to_string(p7.int8_weights) + " weights where 8 bits cost the split on this host without VNNI): output "
          "cosine " + std::to_string(mean7) + " against 8-bit " + std::to_string(rep.cosine_mean) + ", the plain floor " +
          std::to_string(rep.plain_cosine) + " and the bar " + std::to_string(bar));
    double mean = mean7, worst = worst7;
    if (mean < bar && candidates7 > 1) {
      // Per layer: each candidate's cosine with only it back at 8 bits, on all the calibration data (the gaps are a
      // few 0.0001, below what the 4 probe samples of --target-cosine resolve); the gain per multiply-add orders them.
      std::map<std::string, size_t> index;
      for (size_t i = 0; i < s.model->graph.nodes.size(); ++i) index[s.model->graph.nodes[i].name] = i;
      std::vector<size_t> cand;
      for (const std::string& n : p7.reduced_nodes)
        if (index.count(n) && (cand.empty() || cand.back() != index[n])) cand.push_back(index[n]);
      ASSIGN_OR_RETURN(std::vector<KeptLayer> ranked, s.probe_each(
                                                          p7, cand,
                                                          [&](size_t i) {
                                                            s.full_range = {s.model->graph.nodes[i].name};
                                                            auto p = s.plan(keep);
                                                            s.full_range.clear();
                                                            return p;
                                                          },
                                                          "reduce range: layers probed at 8 bits",
                                                          s.data.batches.size()));
      std::vector<std::pair<double, KeptLayer>> order;  // (gain per multiply-add, layer), positive gains only
      for (const KeptLayer& k : ranked) {
        if (k.output_cosine <= k.input_cosine) continue;
        const int64_t macs = s.macs_of(s.model->graph.nodes[index[k.node]]);
        order.emplace_back((k.output_cosine - k.input_cosine) / static_cast<double>(std::max<int64_t>(1, macs)), k);
      }
      std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
      // Forward: layers back to 8 bits in that order, re-measured after each, until the bar is reached, the layers
      // with a positive probed gain are used up, or kMaxRestored have gone back; then backward: each of them, the
      // most multiply-adds first, returns to 7 bits where the file still reaches the bar without it.
      std::vector<std::string> names;
      std::map<std::string, int64_t> macs;
      std::map<std::string, KeptLayer> probed;
      for (const auto& [per_mac, k] : order) {
        names.push_back(k.node);
        macs[k.node] = s.macs_of(s.model->graph.nodes[index[k.node]]);
        probed[k.node] = k;
      }
      std::map<std::vector<std::string>, double> worst_of;  // the measured sets' worst sample
      ASSIGN_OR_RETURN(LayerSearch found, search_8bit_layers(
                                              mean, bar, names, macs, kMaxRestored,
                                              [&](const std::vector<std::string>& eight) -> StatusOr<double> {
                                                s.full_range = std::set<std::string>(eight.begin(), eight.end());
                                                ASSIGN_OR_RETURN(QdqPlan t, s.plan(keep));
                                                double m = 0, w = 0;
                                                RETURN_IF_ERROR(s.write_and_measure(t, &m, &w));
                                                worst_of[eight] = w;
                                                return m;
                                              }));
      for (const auto& [node, c] : found.restored) {
        KeptLayer k = probed[node];
        k.model_cosine = c;
        rep.restored_8bit.push_back(k);
        s.log("reduce range: " + k.node + " (" + k.op_type + ") back to 8-bit weights: alone it raises the probe cosine " +
              std::to_string(k.input_cosine) + " -> " + std::to_string(k.output_cosine) + "; the output cosine on the "
              "calibration data is now " + std::to_string(c));
      }
      for (const auto& [node, c] : found.released) {
        KeptLayer k = probed[node];
        k.model_cosine = c;
        rep.released_7bit.push_back(k);
        s.log("reduce range: " + k.node + " (" + k.op_type + ") back to 7 bits, the bar still reached without it: "
              "output cosine " + std::to_string(c));
      }
      // The chosen mix, planned again (and written: the file on disk is the last one measured).
      s.full_range = std::set<std::string>(found.eight_bit.begin(), found.eight_bit.end());
      ASSIGN_OR_RETURN(p7, s.plan(keep));
      if (!found.tried_back.empty()) RETURN_IF_ERROR(write_edited_onnx(o.model_path, p7.edit, o.out_path));
      mean = found.cosine;
      if (worst_of.count(found.eight_bit)) worst = worst_of[found.eight_bit];
    }
    rep.reduce_range = choose_reduce_range(o.reduce_range, true, true, mean, bar) && !p7.reduced_nodes.empty();
    rep.cosine_mixed_range = rep.restored_8bit.empty() ? 0 : mean;
    s.log(std::string("reduce range: ") +
          (rep.reduce_range ? "7-bit weights on " + std::to_string(p7.reduced_nodes.size()) + " of " +
                                  std::to_string(candidates7) + " layers written"
                            : "below the bar, 8-bit written"));
    if (rep.reduce_range) {
      plan = std::move(p7);
      rep.cosine_mean = mean;
      rep.cosine_min = worst;
    } else {
      s.weight_qmax = kFullWeightMax;
      s.reduce_where_split = false;
      s.full_range.clear();
      rep.restored_8bit.clear();
      rep.released_7bit.clear();
      RETURN_IF_ERROR(write_edited_onnx(o.model_path, plan.edit, o.out_path));
    }
  }
  rep.gptq_cosine_before = rep.cosine_mean;
  if (o.weight_rounding == WeightRounding::kGptq) {
    const double before = rep.cosine_mean;
    RETURN_IF_ERROR(s.gptq_weights(&plan, keep, &rep));
    RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
    s.log("GPTQ weight rounding: output cosine " + std::to_string(before) + " -> " + std::to_string(rep.cosine_mean));
    if (rep.cosine_mean < before) {  // it did not help on the calibration data: round to nearest
      s.wvals.clear();
      rep.weights_gptq = 0;
      ASSIGN_OR_RETURN(plan, s.plan(keep));
      RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
      s.log("GPTQ weight rounding lowered the output cosine: written with round to nearest");
    }
  }
  if (o.bias_correction) {
    const double before = rep.cosine_mean;
    RETURN_IF_ERROR(s.correct_bias(&plan, keep, &rep));
    RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
    rep.bias_cosine_before = before;
    s.log("bias correction: " + std::to_string(rep.biases_corrected) + " biases corrected in " +
          std::to_string(rep.bias_rounds.size()) + " rounds; output cosine " + std::to_string(before) + " -> " +
          std::to_string(rep.cosine_mean));
    if (rep.cosine_mean < before) {  // it did not help on the calibration data: the plain file
      s.shift.clear();
      rep.biases_corrected = 0;
      ASSIGN_OR_RETURN(plan, s.plan(keep));
      RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
      s.log("bias correction lowered the output cosine: written without it");
    }
  }
  rep.first_cosine = rep.cosine_mean;
  if (o.target_cosine > 0) {
    s.log("output cosine " + std::to_string(rep.cosine_mean) + " with every layer quantized; target " +
          std::to_string(o.target_cosine));
    ASSIGN_OR_RETURN(std::vector<KeptLayer> ranked, s.rank_layers(plan, keep));
    for (KeptLayer k : ranked) {
      if (rep.cosine_mean >= o.target_cosine || static_cast<int>(rep.kept_for_target.size()) >= o.max_kept_layers) break;
      if (k.output_cosine <= k.input_cosine) break;  // keeping it alone does not help: neither will the rest
      keep.insert(k.node);
      ASSIGN_OR_RETURN(plan, s.plan(keep));
      RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
      k.model_cosine = rep.cosine_mean;
      s.log("kept " + k.node + " (" + k.op_type + ") in float: alone it raises the output cosine on the probe samples " +
            std::to_string(k.input_cosine) + " -> " + std::to_string(k.output_cosine) +
            "; with the layers kept before it, the output cosine on the calibration data is now " +
            std::to_string(rep.cosine_mean));
      rep.kept_for_target.push_back(k);
    }
    if (rep.cosine_mean < o.target_cosine) {
      // Second strategy: in deep networks the rounding of early layers grows through the rest, so
      // no single layer is worth much alone; keep layers in graph order from the input instead.
      const std::set<std::string> user(o.keep_fp32.begin(), o.keep_fp32.end());
      const QdqPlan first = plan;
      const double first_mean = rep.cosine_mean, first_min = rep.cosine_min;
      std::vector<KeptLayer> first_kept = rep.kept_for_target;
      s.log("not reached keeping the most sensitive layers (" + std::to_string(rep.cosine_mean) +
            "); trying layers in graph order from the input");
      std::set<std::string> k2 = user;
      ASSIGN_OR_RETURN(QdqPlan p2, s.plan(k2));
      std::vector<KeptLayer> kept2;
      double mean2 = rep.first_cosine, min2 = 0;
      const Graph& g = s.model->graph;
      for (size_t i = 0; i < g.nodes.size() && mean2 < o.target_cosine &&
                         static_cast<int>(kept2.size()) < o.max_kept_layers; ++i) {
        const Role r = p2.roles[i];
        if (r != Role::kCompute && r != Role::kBinary && r != Role::kOwnRange) continue;
        k2.insert(g.nodes[i].name);
        ASSIGN_OR_RETURN(p2, s.plan(k2));
        const double before = mean2;
        RETURN_IF_ERROR(s.write_and_measure(p2, &mean2, &min2));
        kept2.push_back(KeptLayer{g.nodes[i].name, g.nodes[i].op_type, before, mean2, mean2});
        s.log("kept " + g.nodes[i].name + " (" + g.nodes[i].op_type + ") in float (graph order): output cosine " +
              std::to_string(before) + " -> " + std::to_string(mean2));
      }
      if (mean2 >= o.target_cosine || mean2 > first_mean) {
        plan = p2;
        rep.cosine_mean = mean2;
        rep.cosine_min = min2;
        rep.kept_for_target = kept2;
        rep.graph_order = true;
      } else {
        plan = first;
        RETURN_IF_ERROR(s.write_and_measure(plan, &rep.cosine_mean, &rep.cosine_min));
        rep.kept_for_target = first_kept;
        (void)first_min;
      }
    }
    rep.target_reached = rep.cosine_mean >= o.target_cosine;
  }
  if (!o.holdout_path.empty()) {
    // The written file and the float model on data the ranges and biases never saw.
    const CalibrationData* h = &holdout;
    std::vector<NamedTensors> href;
    {
      ExecutorOptions eo;
      eo.device = "cpu";
      eo.threads = o.threads;
      ASSIGN_OR_RETURN(auto ex, Executor::create(s.model, eo));
      for (const NamedTensors& feeds : h->batches) {
        NamedTensors outs;
        RETURN_IF_ERROR(ex->run(feeds, &outs).with_context("running the float model on the --holdout data"));
        href.push_back(std::move(outs));
      }
    }
    rep.holdout_samples = h->samples;
    ASSIGN_OR_RETURN(auto q, load_onnx_model(o.out_path));
    RETURN_IF_ERROR(s.run_model(q, *h, href, -1, {}, nullptr, &rep.holdout_mean, &rep.holdout_min, "held-out"));
    rep.holdout_uncorrected = rep.holdout_mean;
    if (!s.shift.empty()) {
      s.shift.clear();
      ASSIGN_OR_RETURN(QdqPlan plain, s.plan(std::set<std::string>(plan.kept.begin(), plan.kept.end())));
      ASSIGN_OR_RETURN(auto q2, s.load_plan(plain, ".uncorrected.onnx"));
      RETURN_IF_ERROR(s.run_model(q2, *h, href, -1, {}, nullptr, &rep.holdout_uncorrected, nullptr,
                                  "held-out, without bias correction"));
    }
  }
  rep.quantized_nodes = static_cast<int64_t>(plan.quantized.size());
  rep.qdq_pairs = plan.qdq_pairs;
  rep.int8_weights = plan.int8_weights;
  rep.reduced_weights = plan.reduced_weights;
  rep.reduce_range = plan.reduced_weights > 0;
  rep.layers_7bit = plan.reduced_nodes;
  rep.int32_biases = plan.int32_biases;
  rep.left_float = plan.left_float;
  rep.kept_by_user = o.keep_fp32;
  return rep;
}

}  // namespace ferry::quant
