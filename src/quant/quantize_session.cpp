// The measuring steps of a `ferry quantize` run; see quantize_session.h.
#include "quant/quantize_session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "common/env_switch.h"
#include "onnx/onnx_import.h"

namespace ferry::quant::detail {
namespace {

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
}  // namespace

Status Session::plain_floor(const std::set<std::string>& keep, QdqPlan* p, QuantizeReport* rep) {
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

std::vector<Session::GptqLayer> Session::gptq_layers(const QdqPlan& p) const {
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

void Session::add_rows(const GptqLayer& l, const Tensor& t, HessianAccumulator* h) {
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

Status Session::gptq_weights(QdqPlan* p, const std::set<std::string>& keep, QuantizeReport* rep) {
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
    const std::vector<float> scales = plan_weight_scales(w, l.transposed ? 1 : 0, qmax);
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

Status Session::run_model(std::shared_ptr<const Model> m, const CalibrationData& d, const std::vector<NamedTensors>& ref,
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

Status Session::write_and_measure(const QdqPlan& p, double* mean, double* worst) {
  RETURN_IF_ERROR(write_edited_onnx(o.model_path, p.edit, o.out_path));
  ASSIGN_OR_RETURN(auto q, load_onnx_model(o.out_path));
  return run_model(q, data, float_outputs, -1, {}, nullptr, mean, worst, "measuring");
}

Status Session::correct_bias(QdqPlan* p, const std::set<std::string>& keep, QuantizeReport* rep) {
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

StatusOr<std::shared_ptr<Model>> Session::load_plan(const QdqPlan& p, const std::string& suffix) const {
  const std::string path = o.out_path + suffix;
  RETURN_IF_ERROR(write_edited_onnx(o.model_path, p.edit, path));
  auto q = load_onnx_model(path);
  std::remove(path.c_str());
  return q;
}

StatusOr<double> Session::probe(const QdqPlan& p, size_t batches) {
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

StatusOr<std::vector<KeptLayer>> Session::probe_each(const QdqPlan& base, const std::vector<size_t>& candidates,
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

StatusOr<std::vector<KeptLayer>> Session::rank_layers(const QdqPlan& full, const std::set<std::string>& keep) {
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

int64_t Session::macs_of(const Node& n) const {
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

}  // namespace ferry::quant::detail
