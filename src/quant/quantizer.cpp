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
#include "quant/gptq.h"
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

struct Session {
  const QuantizeOptions& o;
  std::shared_ptr<Model> model;
  CalibrationData data;
  RangeCollector ranges;
  std::vector<NamedTensors> float_outputs;
  Method method;  // the ranges in use (--method auto: each in turn, then the best)

  explicit Session(const QuantizeOptions& opt) : o(opt), method(opt.method) {}

  void log(const std::string& line) const {
    if (o.log) o.log(line);
  }

  BiasShift shift;  // bias correction in use (empty: none)
  WeightValues wvals;  // GPTQ-rounded weights in use (empty: round to nearest)

  PlanOptions popt;  // the plain structure / outputs left float (never below plain MinMax)
  int weight_qmax = kFullWeightMax;  // kReducedWeightMax: --reduce-range (or its automatic choice)
  bool reduce_where_split = false;   // the automatic choice's: only where 8 bits cost the split
  std::set<std::string> full_range;  // the automatic choice's layers put back to 8 bits

  StatusOr<QdqPlan> plan(const std::set<std::string>& keep) {
    RangeFn fn = [this](const std::string& v, float* lo, float* hi) { return ranges.range(v, method, lo, hi); };
    PlanOptions po = popt;
    po.weight_qmax = weight_qmax;
    po.reduce_where_split = reduce_where_split;
    po.full_range_nodes = full_range;
    return plan_qdq(*model, fn, keep, shift.empty() ? nullptr : &shift, wvals.empty() ? nullptr : &wvals, &po);
  }

  // Never below plain MinMax (docs/quantization.md): measures the plain structure (Q/DQ on the inputs of
  // Conv/Gemm/MatMul only, MinMax ranges, float biases) on the calibration data; when `*p` is below it,
  // the quantized Conv/Gemm/MatMul whose output (or its bias Add's) only float ops read lose that
  // output's Q/DQ, all of them; if that is still below the plain cosine, the plain structure is written.
  Status plain_floor(const std::set<std::string>& keep, QdqPlan* p, QuantizeReport* rep) {
    const Method saved = method;
    method = Method::kMinMax;
    popt = PlanOptions{};
    popt.inputs_only = true;
    ASSIGN_OR_RETURN(QdqPlan plain, plan(keep));
    double plain_mean = 0, plain_worst = 0;
    RETURN_IF_ERROR(write_and_measure(plain, &plain_mean, &plain_worst));
    method = saved;
    popt = PlanOptions{};
    rep->plain_cosine = plain_mean;
    log("plain MinMax (Q/DQ on Conv/Gemm/MatMul inputs only): output cosine " + std::to_string(plain_mean) +
        "; this file: " + std::to_string(rep->cosine_mean));
    if (rep->cosine_mean >= plain_mean) return write_edited_onnx(o.model_path, p->edit, o.out_path);
    // Candidates: a quantized compute node whose output (or its bias Add's) is read by float nodes only.
    const Graph& g = model->graph;
    std::map<std::string, std::vector<size_t>> readers;
    std::set<std::string> outs;
    for (const auto& v : g.outputs) outs.insert(v.name);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& v : g.nodes[i].inputs) readers[v].push_back(i);
    std::vector<std::string> cands;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (p->roles[i] != Role::kCompute) continue;
      std::string v = g.nodes[i].outputs[0];
      const auto& r0 = readers[v];
      if (r0.size() == 1 && p->roles[r0[0]] == Role::kBiasAdd) v = g.nodes[r0[0]].outputs[0];
      bool float_readers = !outs.count(v) && !readers[v].empty();
      for (size_t r : readers[v]) float_readers = float_readers && p->roles[r] == Role::kFloat;
      if (float_readers) cands.push_back(g.nodes[i].name);
    }
    // Every candidate's output float at once.
    QdqPlan all;
    double all_mean = -2, all_worst = 0;
    if (!cands.empty()) {
      popt.float_outputs = std::set<std::string>(cands.begin(), cands.end());
      ASSIGN_OR_RETURN(all, plan(keep));
      RETURN_IF_ERROR(write_and_measure(all, &all_mean, &all_worst));
      log("every Conv/Gemm/MatMul output read only by float ops left float (" + std::to_string(cands.size()) +
          "): output cosine " + std::to_string(all_mean));
      popt.float_outputs.clear();
    }
    // Every candidate's output float when that reaches the plain structure: those convolutions still run
    // in int8 (the float output's dequantization is in the int8 kernel's epilogue, issue 38), so a
    // subset saves no int8 work; all of them measure highest (EfficientNet-B0: a greedy subset that
    // just reached the plain cosine on the calibration data, 11 of 65, was 0.0007 below the baseline
    // held out; all 65 are above) and no per-output probe runs.
    if (all_mean >= plain_mean) {
      popt.float_outputs = std::set<std::string>(cands.begin(), cands.end());
      rep->float_outputs.clear();
      for (const std::string& c : cands) rep->float_outputs.emplace_back(c, all_mean);
      *p = std::move(all);
      rep->cosine_mean = all_mean;
      rep->cosine_min = all_worst;
      return write_edited_onnx(o.model_path, p->edit, o.out_path);
    }
    // Not reached: the plain structure itself (what was measured above).
    log("the plain structure is written: no choice of float outputs reached its output cosine");
    method = Method::kMinMax;
    popt = PlanOptions{};
    popt.inputs_only = true;
    rep->float_outputs.clear();
    rep->plain_written = true;
    rep->method = Method::kMinMax;
    *p = std::move(plain);
    rep->cosine_mean = plain_mean;
    rep->cosine_min = plain_worst;
    return write_edited_onnx(o.model_path, p->edit, o.out_path);
  }

  // A layer whose weight GPTQ rounds: the weight as [n, k] rows (transposed: the initializer is [k, n]),
  // and for a Conv the patch geometry of its input (im2col rows in the weight's [C, kh, kw] order).
  struct GptqLayer {
    std::string node, weight;
    bool conv = false, transposed = false;
    int64_t n = 0, k = 0, kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  };

  std::vector<GptqLayer> gptq_layers(const QdqPlan& p) const {
    std::vector<GptqLayer> out;
    const Graph& g = model->graph;
    std::set<std::string> seen;
    auto ints = [](const Node& n, const char* name, std::vector<int64_t> dflt) {
      const Attribute* a = n.attr(name);
      return a && !a->ints.empty() ? a->ints : dflt;
    };
    for (size_t i = 0; i < g.nodes.size() && i < p.roles.size(); ++i) {
      const Node& n = g.nodes[i];
      if (p.roles[i] != Role::kCompute || n.inputs.size() < 2) continue;
      const Tensor* w = g.find_initializer(n.inputs[1]);
      if (!w || w->dtype() != DType::kF32 || seen.count(n.inputs[1])) continue;
      GptqLayer l;
      l.node = n.name;
      l.weight = n.inputs[1];
      if (n.op_type == "Conv") {
        const Attribute* grp = n.attr("group");
        const Attribute* ap = n.attr("auto_pad");
        if (w->rank() != 4 || (grp && grp->i != 1) || (ap && !ap->s.empty() && ap->s != "NOTSET")) continue;
        l.conv = true;
        l.n = w->dim(0);
        l.kh = w->dim(2);
        l.kw = w->dim(3);
        l.k = w->dim(1) * l.kh * l.kw;
        const auto st = ints(n, "strides", {1, 1}), di = ints(n, "dilations", {1, 1}), pa = ints(n, "pads", {0, 0, 0, 0});
        if (st.size() != 2 || di.size() != 2 || pa.size() != 4) continue;
        l.sh = st[0], l.sw = st[1], l.dh = di[0], l.dw = di[1], l.pt = pa[0], l.pl = pa[1], l.pb = pa[2], l.pr = pa[3];
      } else if (n.op_type == "Gemm" || n.op_type == "MatMul") {
        if (w->rank() != 2) continue;
        const Attribute* ta = n.attr("transA");
        const Attribute* tb = n.attr("transB");
        if (ta && ta->i) continue;
        l.transposed = !(n.op_type == "Gemm" && tb && tb->i);
        l.n = l.transposed ? w->dim(1) : w->dim(0);
        l.k = l.transposed ? w->dim(0) : w->dim(1);
      } else {
        continue;
      }
      seen.insert(l.weight);
      out.push_back(l);
    }
    return out;
  }

  // Adds the rows (input patches) of one observed input tensor of `l` to `h`: at most kMaxRows a
  // batch, evenly spaced.
  static void add_rows(const GptqLayer& l, const Tensor& t, HessianAccumulator* h) {
    constexpr int64_t kMaxRows = 32768;
    const float* x = t.data<float>();
    if (!l.conv) {
      if (t.rank() < 1 || t.dim(t.rank() - 1) != l.k) return;
      const int64_t rows = t.numel() / l.k;
      const int64_t step = std::max<int64_t>(1, (rows + kMaxRows - 1) / kMaxRows);
      std::vector<float> buf;
      for (int64_t r = 0; r < rows; r += step) buf.insert(buf.end(), x + r * l.k, x + (r + 1) * l.k);
      h->add(buf.data(), static_cast<int64_t>(buf.size()) / l.k);
      return;
    }
    if (t.rank() != 4 || t.dim(1) * l.kh * l.kw != l.k) return;
    const int64_t N = t.dim(0), C = t.dim(1), H = t.dim(2), W = t.dim(3);
    const int64_t ho = (H + l.pt + l.pb - l.dh * (l.kh - 1) - 1) / l.sh + 1;
    const int64_t wo = (W + l.pl + l.pr - l.dw * (l.kw - 1) - 1) / l.sw + 1;
    if (ho <= 0 || wo <= 0) return;
    const int64_t rows = N * ho * wo;
    const int64_t step = std::max<int64_t>(1, (rows + kMaxRows - 1) / kMaxRows);
    std::vector<float> buf;
    buf.reserve(static_cast<size_t>((rows / step + 1) * l.k));
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t b = r / (ho * wo), oy = (r / wo) % ho, ox = r % wo;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t ky = 0; ky < l.kh; ++ky)
          for (int64_t kx = 0; kx < l.kw; ++kx) {
            const int64_t iy = oy * l.sh - l.pt + ky * l.dh, ix = ox * l.sw - l.pl + kx * l.dw;
            buf.push_back(iy >= 0 && iy < H && ix >= 0 && ix < W ? x[((b * C + c) * H + iy) * W + ix] : 0.0f);
          }
    }
    h->add(buf.data(), static_cast<int64_t>(buf.size()) / l.k);
  }

  // GPTQ weight rounding, sequential: each layer's inputs come from the quantized model in which the
  // layers before it already have their GPTQ weights (one run over the first gptq_samples samples
  // per layer). `*p` is replanned with the new weights.
  Status gptq_weights(QdqPlan* p, const std::set<std::string>& keep, QuantizeReport* rep) {
    wvals.clear();
    const std::vector<GptqLayer> layers = gptq_layers(*p);
    size_t batches = 0;
    int64_t n = 0;
    while (batches < data.batches.size() && n < std::max(1, o.gptq_samples)) n += data.batches[batches++][0].second.dim(0);
    const Graph& g = model->graph;
    double err_before = 0, err_after = 0;
    for (size_t li = 0; li < layers.size(); ++li) {
      const GptqLayer& l = layers[li];
      ASSIGN_OR_RETURN(auto q, load_plan(*p, ".gptq.onnx"));
      std::string input;
      for (const Node& node : q->graph.nodes)
        if (node.name == l.node && !node.inputs.empty()) input = node.inputs[0];
      if (input.empty()) continue;
      HessianAccumulator h(l.k);
      ExecutorOptions eo;
      eo.device = "cpu";
      eo.threads = o.threads;
      eo.opt_level = 0;
      ASSIGN_OR_RETURN(auto ex, Executor::create(q, eo));
      ex->set_observer(
          [&](const Node& node, const std::vector<Value>& outs, double) {
            for (size_t i = 0; i < outs.size() && i < node.outputs.size(); ++i)
              if (node.outputs[i] == input && outs[i].is_tensor() && outs[i].tensor.dtype() == DType::kF32)
                add_rows(l, outs[i].tensor, &h);
          },
          false);
      for (size_t b = 0; b < batches; ++b) {
        NamedTensors outs;
        RETURN_IF_ERROR(ex->run(data.batches[b], &outs).with_context("GPTQ: running the quantized model for " + l.node));
      }
      const Tensor& w = *g.find_initializer(l.weight);
      // This layer's weight range in the plan (the automatic reduce range chooses it per layer).
      const int qmax = std::find(p->reduced_nodes.begin(), p->reduced_nodes.end(), l.node) != p->reduced_nodes.end()
                           ? kReducedWeightMax
                           : kFullWeightMax;
      const std::vector<float> scales = weight_scales(w, l.transposed ? 1 : 0, qmax);
      std::vector<float> wt;  // [n, k]
      const float* wp = w.data<float>();
      if (l.transposed) {
        wt.resize(static_cast<size_t>(l.n * l.k));
        for (int64_t a = 0; a < l.k; ++a)
          for (int64_t c = 0; c < l.n; ++c) wt[static_cast<size_t>(c * l.k + a)] = wp[a * l.n + c];
        wp = wt.data();
      }
      bool fell_back = false;
      std::vector<int8_t> qv =
          gptq_round(wp, l.n, scales, h, 0.01, env_value("FERRY_GPTQ_ACT_ORDER") != nullptr, &fell_back, qmax);
      if (fell_back) continue;
      const std::vector<int8_t> nearest = nearest_round(wp, l.n, l.k, scales, qmax);
      const double eb = output_error(wp, nearest.data(), l.n, scales, h), ea = output_error(wp, qv.data(), l.n, scales, h);
      err_before += eb;
      err_after += ea;
      if (l.transposed) {
        std::vector<int8_t> back(qv.size());
        for (int64_t a = 0; a < l.k; ++a)
          for (int64_t c = 0; c < l.n; ++c) back[static_cast<size_t>(a * l.n + c)] = qv[static_cast<size_t>(c * l.k + a)];
        qv = std::move(back);
      }
      wvals[l.weight] = std::move(qv);
      ASSIGN_OR_RETURN(*p, plan(keep));
      if (o.progress) o.progress("GPTQ weight rounding", static_cast<int64_t>(li) + 1, static_cast<int64_t>(layers.size()));
    }
    rep->weights_gptq = static_cast<int64_t>(wvals.size());
    log("GPTQ: " + std::to_string(wvals.size()) + " weights rounded on " + std::to_string(n) +
        " samples; their output error on those samples (sum over layers) " + std::to_string(err_before) + " -> " +
        std::to_string(err_after));
    return Status::ok();
  }

  // Runs `m` over `d` (opt level `opt`, -1: the default): the output cosine to `ref` (mean over
  // samples, worst output; worst sample) and, for `targets` (tensor, channel axis), per-channel means.
  Status run_model(std::shared_ptr<const Model> m, const CalibrationData& d, const std::vector<NamedTensors>& ref,
                   int opt, const std::vector<std::pair<std::string, int>>& targets,
                   std::map<std::string, std::vector<double>>* means, double* mean, double* worst,
                   const std::string& stage) {
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = o.threads;
    if (opt >= 0) eo.opt_level = opt;
    ASSIGN_OR_RETURN(auto ex, Executor::create(m, eo));
    std::map<std::string, int> axis_of(targets.begin(), targets.end());
    std::map<std::string, std::vector<double>> sums;
    std::map<std::string, double> counts;
    if (!targets.empty())
      ex->set_observer(
          [&](const Node& node, const std::vector<Value>& outs, double) {
            for (size_t i = 0; i < outs.size() && i < node.outputs.size(); ++i) {
              auto it = axis_of.find(node.outputs[i]);
              if (it == axis_of.end() || !outs[i].is_tensor()) continue;
              const Tensor& t = outs[i].tensor;
              if (t.dtype() != DType::kF32 || t.rank() < 1) continue;
              const int64_t a = it->second < 0 ? t.rank() - 1 : it->second;
              if (a >= t.rank()) continue;
              int64_t outer = 1, inner = 1;
              for (int64_t k = 0; k < a; ++k) outer *= t.dim(k);
              for (int64_t k = a + 1; k < t.rank(); ++k) inner *= t.dim(k);
              const int64_t c = t.dim(a);
              std::vector<double>& sum = sums[it->first];
              if (sum.empty()) sum.assign(static_cast<size_t>(c), 0.0);
              if (static_cast<int64_t>(sum.size()) != c) continue;
              const float* p = t.data<float>();
              for (int64_t u = 0; u < outer; ++u)
                for (int64_t ch = 0; ch < c; ++ch) {
                  double acc = 0;
                  const float* q = p + (u * c + ch) * inner;
                  for (int64_t v = 0; v < inner; ++v) acc += q[v];
                  sum[static_cast<size_t>(ch)] += acc;
                }
              counts[it->first] += static_cast<double>(outer * inner);
            }
          },
          false);
    std::vector<double> per_output_sum(model->graph.outputs.size(), 0.0);
    double worst_cos = 1.0;
    int64_t samples = 0;
    for (size_t b = 0; b < d.batches.size(); ++b) {
      NamedTensors outs;
      RETURN_IF_ERROR(ex->run(d.batches[b], &outs).with_context("running the model (" + stage + ")"));
      int64_t n = 0;
      for (size_t k = 0; k < outs.size() && b < ref.size() && k < ref[b].size(); ++k) {
        const std::vector<double> c = sample_cosines(ref[b][k].second, outs[k].second);
        for (double x : c) {
          per_output_sum[k] += x;
          worst_cos = std::min(worst_cos, x);
        }
        n = std::max<int64_t>(n, static_cast<int64_t>(c.size()));
      }
      samples += n;
      if (o.progress) o.progress(stage, static_cast<int64_t>(b) + 1, static_cast<int64_t>(d.batches.size()));
    }
    if (means) {
      means->clear();
      for (auto& [name, sum] : sums)
        if (counts[name] > 0) {
          std::vector<double>& m2 = (*means)[name];
          for (double x : sum) m2.push_back(x / counts[name]);
        }
    }
    if (mean) {
      *mean = 1.0;
      for (double x : per_output_sum) *mean = std::min(*mean, samples > 0 ? x / static_cast<double>(samples) : 0.0);
    }
    if (worst) *worst = worst_cos;
    return Status::ok();
  }

  // Writes the plan to the output and measures its output cosine on the calibration data.
  Status write_and_measure(const QdqPlan& p, double* mean, double* worst) {
    RETURN_IF_ERROR(write_edited_onnx(o.model_path, p.edit, o.out_path));
    ASSIGN_OR_RETURN(auto q, load_onnx_model(o.out_path));
    return run_model(q, data, float_outputs, -1, {}, nullptr, mean, worst, "measuring");
  }

  // Empirical bias correction (Nagel et al. 2019, the empirical variant), sequential by blocks: the
  // biased layers, in graph order, are cut into `bias_correction_rounds` blocks; round r runs the
  // quantized model of the current plan (opt level 0: every Conv/Gemm/bias Add output under its
  // ONNX name), in which the blocks before r are already corrected, and moves each int32 bias of
  // block r by the per-channel mean of (quantized - float) output. One layer per block (the
  // default) is the exact sequential variant; fewer blocks cost fewer runs but overcorrect (a
  // layer's measured error includes the shift its block's earlier layers are about to lose: on
  // ResNet-50, 8 blocks take the cosine from 0.984 to 0.961). `*p` is replanned with the shifts.
  Status correct_bias(QdqPlan* p, const std::set<std::string>& keep, QuantizeReport* rep) {
    shift.clear();
    const std::vector<std::pair<std::string, int>> targets = p->biased_outputs;
    if (targets.empty()) return Status::ok();
    std::map<std::string, std::vector<double>> fmean;
    RETURN_IF_ERROR(run_model(model, data, {}, 0, targets, &fmean, nullptr, nullptr, "bias correction: float"));
    const size_t n = targets.size();
    const size_t blocks = o.bias_correction_rounds > 0 ? std::min(n, static_cast<size_t>(o.bias_correction_rounds)) : n;
    for (size_t round = 0; round < blocks; ++round) {
      ASSIGN_OR_RETURN(auto q, load_plan(*p, ".bias.onnx"));
      const size_t first = round * n / blocks, last = (round + 1) * n / blocks;
      const std::vector<std::pair<std::string, int>> block(targets.begin() + static_cast<std::ptrdiff_t>(first),
                                                           targets.begin() + static_cast<std::ptrdiff_t>(last));
      std::map<std::string, std::vector<double>> qmean;
      double cos = 0;
      RETURN_IF_ERROR(run_model(q, data, float_outputs, 0, block, &qmean, &cos, nullptr,
                                "bias correction " + std::to_string(round + 1) + "/" + std::to_string(blocks)));
      rep->bias_rounds.push_back(cos);
      for (const auto& [name, axis] : block) {
        auto f = fmean.find(name);
        auto g = qmean.find(name);
        if (f == fmean.end() || g == qmean.end() || f->second.size() != g->second.size()) continue;
        std::vector<float>& d = shift[name];
        d.assign(f->second.size(), 0.0f);
        for (size_t c = 0; c < d.size(); ++c) d[c] = static_cast<float>(g->second[c] - f->second[c]);
      }
      ASSIGN_OR_RETURN(*p, plan(keep));
    }
    rep->biases_corrected = static_cast<int64_t>(shift.size());
    return Status::ok();
  }

  // The plan as a model, through a scratch file beside the output (`suffix` names it; removed at once).
  StatusOr<std::shared_ptr<Model>> load_plan(const QdqPlan& p, const std::string& suffix) const {
    const std::string path = o.out_path + suffix;
    RETURN_IF_ERROR(write_edited_onnx(o.model_path, p.edit, path));
    auto q = load_onnx_model(path);
    std::remove(path.c_str());
    return q;
  }

  // Output cosine (mean over samples, worst output) of the plan on the first probe batches,
  // written to a scratch file beside the output.
  StatusOr<double> probe(const QdqPlan& p, size_t batches) {
    ASSIGN_OR_RETURN(auto q, load_plan(p, ".probe.onnx"));
    ExecutorOptions eo;
    eo.device = "cpu";
    eo.threads = o.threads;
    ASSIGN_OR_RETURN(auto ex, Executor::create(q, eo));
    std::vector<double> sum(model->graph.outputs.size(), 0.0);
    int64_t samples = 0;
    for (size_t b = 0; b < batches && b < data.batches.size(); ++b) {
      NamedTensors outs;
      RETURN_IF_ERROR(ex->run(data.batches[b], &outs));
      int64_t n = 0;
      for (size_t k = 0; k < outs.size() && k < float_outputs[b].size(); ++k) {
        const std::vector<double> c = sample_cosines(float_outputs[b][k].second, outs[k].second);
        for (double x : c) sum[k] += x;
        n = std::max<int64_t>(n, static_cast<int64_t>(c.size()));
      }
      samples += n;
    }
    double mean = 1.0;
    for (double x : sum) mean = std::min(mean, samples > 0 ? x / static_cast<double>(samples) : 0.0);
    return mean;
  }

  // The probe batches: the first calibration batches holding at least 4 samples.
  size_t probe_batches() const {
    size_t batches = 0;
    int64_t n = 0;
    while (batches < data.batches.size() && n < 4) n += data.batches[batches++][0].second.dim(0);
    return batches;
  }

  // Per-candidate probe: the output cosine on the probe samples of `make(i)`'s plan for each candidate node i,
  // against `base`'s (KeptLayer::input_cosine / output_cosine). Best first. Shared by the --target-cosine
  // search (a layer kept in float) and the automatic reduce range (a layer put back to 8-bit weights).
  StatusOr<std::vector<KeptLayer>> probe_each(const QdqPlan& base, const std::vector<size_t>& candidates,
                                              const std::function<StatusOr<QdqPlan>(size_t)>& make,
                                              const std::string& what, size_t batches) {
    ASSIGN_OR_RETURN(const double b, probe(base, batches));
    std::vector<KeptLayer> ranked;
    const Graph& g = model->graph;
    int64_t done = 0;
    for (size_t i : candidates) {
      ASSIGN_OR_RETURN(QdqPlan p, make(i));
      ASSIGN_OR_RETURN(const double c, probe(p, batches));
      ranked.push_back(KeptLayer{g.nodes[i].name, g.nodes[i].op_type, b, c, 0});
      if (o.progress) o.progress(what, ++done, static_cast<int64_t>(candidates.size()));
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const KeptLayer& x, const KeptLayer& y) { return x.output_cosine > y.output_cosine; });
    return ranked;
  }

  // Per-layer sensitivity: the output cosine on a few samples with only that Conv/MatMul/Gemm
  // (and what it absorbs) kept in float, for every quantized one. Best gain first.
  StatusOr<std::vector<KeptLayer>> rank_layers(const QdqPlan& full, const std::set<std::string>& keep) {
    // Candidates: Conv/MatMul/Gemm, Add, Concat, pools, Softmax (a Relu/Clip or bias Add goes with its producer;
    // a pass-through op with its input).
    std::vector<size_t> candidates;
    for (size_t i = 0; i < full.roles.size(); ++i) {
      const Role r = full.roles[i];
      if (r == Role::kCompute || r == Role::kBinary || r == Role::kOwnRange) candidates.push_back(i);
    }
    return probe_each(
        full, candidates,
        [&](size_t i) {
          std::set<std::string> k = keep;
          k.insert(model->graph.nodes[i].name);
          return plan(k);
        },
        "sensitivity", probe_batches());
  }

  // Multiply-adds per sample of a Conv/Gemm/MatMul node (its weight's elements times the output positions each
  // is used at; unknown dimensions count 1): what its split int8 kernel costs, for ordering layers by it.
  int64_t macs_of(const Node& n) const {
    const Graph& g = model->graph;
    const Tensor* w = n.inputs.size() > 1 ? g.find_initializer(n.inputs[1]) : nullptr;
    if (!w) return 0;
    int64_t positions = 1;
    const TensorType* t = n.outputs.empty() ? nullptr : g.find_type(n.outputs[0]);
    if (t && t->shape) {
      const auto& d = t->shape->dims;
      const size_t first = n.op_type == "Conv" ? 2 : 1;  // Conv: the spatial dims; MatMul/Gemm: the rows past the batch
      for (size_t a = first; a < d.size() && (n.op_type == "Conv" || a + 1 < d.size()); ++a)
        if (d[a].value > 0) positions *= d[a].value;
    }
    return w->numel() * positions;
  }
};

}  // namespace

StatusOr<WeightRounding> parse_weight_rounding(const std::string& name) {
  if (name == "nearest") return WeightRounding::kNearest;
  if (name == "gptq") return WeightRounding::kGptq;
  return invalid_argument("--weight-rounding '" + name + "': expected nearest or gptq");
}

const char* weight_rounding_name(WeightRounding r) { return r == WeightRounding::kGptq ? "gptq" : "nearest"; }

bool choose_reduce_range(ReduceRange mode, bool host_saturates, bool plain_floor, double cosine_reduced,
                         double plain_cosine) {
  if (mode != ReduceRange::kAuto) return mode == ReduceRange::kOn;
  return host_saturates && plain_floor && cosine_reduced >= plain_cosine;
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
      // Stop rule: the floor reached, the layers with a positive probed gain used up, or kMaxRestored of them
      // re-measured (each one run over the calibration data).
      for (auto& [per_mac, k] : order) {
        if (mean >= bar || static_cast<int>(rep.restored_8bit.size()) >= kMaxRestored) break;
        s.full_range.insert(k.node);
        ASSIGN_OR_RETURN(p7, s.plan(keep));
        RETURN_IF_ERROR(s.write_and_measure(p7, &mean, &worst));
        k.model_cosine = mean;
        rep.restored_8bit.push_back(k);
        s.log("reduce range: " + k.node + " (" + k.op_type + ") back to 8-bit weights: alone it raises the probe cosine " +
              std::to_string(k.input_cosine) + " -> " + std::to_string(k.output_cosine) + "; the output cosine on the "
              "calibration data is now " + std::to_string(mean));
      }
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
