// Tensor difference metrics, thresholds and run specs for `ferry compare` (compare.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "precision/compare.h"

namespace ferry {

TensorMetrics compare_tensors(const Tensor& ref, const Tensor& target) {
  TensorMetrics m;
  if (ref.dims() != target.dims()) {
    m.mismatch = "shape " + ref.type().to_string() + " vs " + target.type().to_string();
    m.cosine = 0.0;
    return m;
  }
  if (ref.dtype() == DType::kString || target.dtype() == DType::kString) {
    bool same = ref.strings() == target.strings();
    if (!same) m.mismatch = "string values differ";
    return m;
  }
  const int64_t n = ref.numel();
  m.count = n;
  double dot = 0, rr = 0, tt = 0, sum_abs = 0, sum_sq = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref.get_double(i), t = target.get_double(i);
    if (std::isnan(r)) ++m.ref_nan;
    else if (std::isinf(r)) ++m.ref_inf;
    if (std::isnan(t)) ++m.target_nan;
    else if (std::isinf(t)) ++m.target_inf;
    if (!std::isfinite(r) || !std::isfinite(t)) continue;
    ++finite;
    const double d = std::fabs(t - r);
    dot += r * t;
    rr += r * r;
    tt += t * t;
    sum_abs += d;
    sum_sq += d * d;
    m.max_abs = std::max(m.max_abs, d);
    m.max_rel = std::max(m.max_rel, d / std::max(std::fabs(r), 1e-6));
    m.ref_max_abs_value = std::max(m.ref_max_abs_value, std::fabs(r));
  }
  if (finite > 0) {
    m.mean_abs = sum_abs / static_cast<double>(finite);
    m.rmse = std::sqrt(sum_sq / static_cast<double>(finite));
  }
  if (rr == 0.0 && tt == 0.0) m.cosine = 1.0;
  else if (rr == 0.0 || tt == 0.0) m.cosine = 0.0;
  else m.cosine = dot / (std::sqrt(rr) * std::sqrt(tt));
  // Values that became NaN/inf are the worst disagreement there is.
  if (m.new_non_finite()) m.cosine = std::min(m.cosine, 0.0);
  return m;
}

void merge_worst(TensorMetrics* worst, const TensorMetrics& m) {
  worst->count = std::max(worst->count, m.count);
  worst->cosine = std::min(worst->cosine, m.cosine);
  worst->max_abs = std::max(worst->max_abs, m.max_abs);
  worst->mean_abs = std::max(worst->mean_abs, m.mean_abs);
  worst->max_rel = std::max(worst->max_rel, m.max_rel);
  worst->rmse = std::max(worst->rmse, m.rmse);
  worst->ref_max_abs_value = std::max(worst->ref_max_abs_value, m.ref_max_abs_value);
  worst->ref_nan += m.ref_nan;
  worst->ref_inf += m.ref_inf;
  worst->target_nan += m.target_nan;
  worst->target_inf += m.target_inf;
  if (worst->mismatch.empty()) worst->mismatch = m.mismatch;
}

bool output_passes(const TensorMetrics& m, const Thresholds& t) {
  return m.mismatch.empty() && !m.new_non_finite() && m.cosine >= t.cosine_min &&
         (!t.check_max_abs || m.max_abs <= t.max_abs);
}

std::vector<FailedCriterion> failed_criteria(const TensorMetrics& m, const Thresholds& t) {
  auto g = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return std::string(buf);
  };
  std::vector<FailedCriterion> out;
  if (!m.mismatch.empty()) {
    out.push_back({"mismatch", 0.0, 0.0, "cannot compare: " + m.mismatch});
    return out;
  }
  if (m.new_non_finite())
    out.push_back({"non_finite", static_cast<double>(m.target_nan + m.target_inf), static_cast<double>(m.ref_nan + m.ref_inf),
                   "NaN/inf in the target (" + std::to_string(m.target_nan) + " NaN, " + std::to_string(m.target_inf) +
                       " inf) where the reference has " + std::to_string(m.ref_nan) + " NaN, " + std::to_string(m.ref_inf) +
                       " inf"});
  if (!(m.cosine >= t.cosine_min))
    out.push_back({"cosine", m.cosine, t.cosine_min, "cosine " + g(m.cosine) + " < " + g(t.cosine_min)});
  if (t.check_max_abs && !(m.max_abs <= t.max_abs))
    out.push_back({"max_abs", m.max_abs, t.max_abs, "max abs " + g(m.max_abs) + " > " + g(t.max_abs)});
  return out;
}

bool layer_passes(const TensorMetrics& m, const Thresholds& t) {
  return m.mismatch.empty() && !m.new_non_finite() && m.cosine >= t.cosine_min;
}

StatusOr<RunSpec> parse_run_spec(const std::string& text) {
  RunSpec spec;
  spec.text = text;
  const std::string kOutputs = "outputs:";
  if (text.rfind(kOutputs, 0) == 0) {
    spec.is_outputs = true;
    spec.outputs_dir = text.substr(kOutputs.size());
    if (spec.outputs_dir.empty()) return invalid_argument("run spec '" + text + "': give the folder, outputs:DIR");
    return spec;
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  // The precision is the first part (after the device) that names a mode; an opt level may follow.
  size_t p = 1;
  for (; p < parts.size(); ++p)
    if (parse_precision_mode(parts[p]).is_ok()) break;
  if (parts.empty() || parts[0].empty() || p >= parts.size())
    return invalid_argument("run spec '" + text + "': expected DEVICE:PRECISION[:OPT_LEVEL] (cpu-ref:fp32, cpu:fp16, "
                            "cpu:bf16:2, cuda:fp16) or outputs:DIR");
  for (size_t i = 0; i < p; ++i) spec.device += (i ? ":" : "") + parts[i];
  spec.mode = parse_precision_mode(parts[p]).value();
  if (p + 1 < parts.size()) {
    const std::string& lv = parts[p + 1];
    if (p + 2 != parts.size() || lv.size() != 1 || lv[0] < '0' || lv[0] > '2')
      return invalid_argument("run spec '" + text + "': the part after the precision must be an opt level 0, 1 or 2");
    spec.opt_level = lv[0] - '0';
  }
  return spec;
}

}  // namespace ferry
