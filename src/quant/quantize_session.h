// The state of one `ferry quantize` run and its measuring steps (calibration ranges, plans written and
// measured, the plain floor, GPTQ, bias correction, per-layer probes), shared by quantizer.cpp's stages.
// Internal to src/quant/.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "quant/gptq.h"
#include "quant/qdq_plan.h"
#include "quant/quantizer.h"

namespace ferry::quant::detail {

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
  std::map<std::string, std::vector<float>> weight_scale_cache;  // 7-bit scales, searched once per weight

  StatusOr<QdqPlan> plan(const std::set<std::string>& keep) {
    RangeFn fn = [this](const std::string& v, float* lo, float* hi) { return ranges.range(v, method, lo, hi); };
    PlanOptions po = popt;
    po.weight_qmax = weight_qmax;
    po.reduce_where_split = reduce_where_split;
    po.full_range_nodes = full_range;
    po.weight_scale_cache = &weight_scale_cache;
    return plan_qdq(*model, fn, keep, shift.empty() ? nullptr : &shift, wvals.empty() ? nullptr : &wvals, &po);
  }

  // Never below plain MinMax (docs/quantization.md): measures the plain structure (Q/DQ on the inputs of
  // Conv/Gemm/MatMul only, MinMax ranges, float biases) on the calibration data; when `*p` is below it,
  // the quantized Conv/Gemm/MatMul whose output (or its bias Add's) only float ops read lose that
  // output's Q/DQ, all of them; if that is still below the plain cosine, the plain structure is written.
  Status plain_floor(const std::set<std::string>& keep, QdqPlan* p, QuantizeReport* rep);

  // A layer whose weight GPTQ rounds: the weight as [n, k] rows (transposed: the initializer is [k, n]),
  // and for a Conv the patch geometry of its input (im2col rows in the weight's [C, kh, kw] order).
  struct GptqLayer {
    std::string node, weight;
    bool conv = false, transposed = false;
    int64_t n = 0, k = 0, kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  };

  std::vector<GptqLayer> gptq_layers(const QdqPlan& p) const;

  // Adds the rows (input patches) of one observed input tensor of `l` to `h`: at most kMaxRows a
  // batch, evenly spaced.
  static void add_rows(const GptqLayer& l, const Tensor& t, HessianAccumulator* h);

  // GPTQ weight rounding, sequential: each layer's inputs come from the quantized model in which the
  // layers before it already have their GPTQ weights (one run over the first gptq_samples samples
  // per layer). `*p` is replanned with the new weights.
  Status gptq_weights(QdqPlan* p, const std::set<std::string>& keep, QuantizeReport* rep);

  // Runs `m` over `d` (opt level `opt`, -1: the default): the output cosine to `ref` (mean over
  // samples, worst output; worst sample) and, for `targets` (tensor, channel axis), per-channel means.
  Status run_model(std::shared_ptr<const Model> m, const CalibrationData& d, const std::vector<NamedTensors>& ref,
                   int opt, const std::vector<std::pair<std::string, int>>& targets,
                   std::map<std::string, std::vector<double>>* means, double* mean, double* worst,
                   const std::string& stage);

  // Writes the plan to the output and measures its output cosine on the calibration data.
  Status write_and_measure(const QdqPlan& p, double* mean, double* worst);

  // Empirical bias correction (Nagel et al. 2019, the empirical variant), sequential by blocks: the
  // biased layers, in graph order, are cut into `bias_correction_rounds` blocks; round r runs the
  // quantized model of the current plan (opt level 0: every Conv/Gemm/bias Add output under its
  // ONNX name), in which the blocks before r are already corrected, and moves each int32 bias of
  // block r by the per-channel mean of (quantized - float) output. One layer per block (the
  // default) is the exact sequential variant; fewer blocks cost fewer runs but overcorrect (a
  // layer's measured error includes the shift its block's earlier layers are about to lose: on
  // ResNet-50, 8 blocks take the cosine from 0.984 to 0.961). `*p` is replanned with the shifts.
  Status correct_bias(QdqPlan* p, const std::set<std::string>& keep, QuantizeReport* rep);

  // The plan as a model, through a scratch file beside the output (`suffix` names it; removed at once).
  StatusOr<std::shared_ptr<Model>> load_plan(const QdqPlan& p, const std::string& suffix) const;

  // Output cosine (mean over samples, worst output) of the plan on the first probe batches,
  // written to a scratch file beside the output.
  StatusOr<double> probe(const QdqPlan& p, size_t batches);

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
                                              const std::string& what, size_t batches);

  // Per-layer sensitivity: the output cosine on a few samples with only that Conv/MatMul/Gemm
  // (and what it absorbs) kept in float, for every quantized one. Best gain first.
  StatusOr<std::vector<KeptLayer>> rank_layers(const QdqPlan& full, const std::set<std::string>& keep);

  // Multiply-adds per sample of a Conv/Gemm/MatMul node (its weight's elements times the output positions each
  // is used at; unknown dimensions count 1): what its split int8 kernel costs, for ordering layers by it.
  int64_t macs_of(const Node& n) const;};

}  // namespace ferry::quant::detail
