// Calibration data and activation ranges; see calibration.h.
#include "quant/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "data/data_source.h"

namespace ferry::quant {
namespace {

constexpr int kBins = 2048;

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(d[i]);
  }
  return s + "]";
}

// One file's arrays matched to the model inputs (samples on axis 0).
StatusOr<NamedTensors> match_inputs(const Model& model, const std::vector<std::pair<std::string, Tensor>>& arrays,
                                    const std::string& file) {
  NamedTensors out;
  const auto& inputs = model.graph.inputs;
  for (const ValueInfo& in : inputs) {
    const Tensor* t = nullptr;
    for (const auto& [name, a] : arrays)
      if (name == in.name) t = &a;
    if (!t && inputs.size() == 1 && arrays.size() == 1) t = &arrays[0].second;
    if (!t) {
      std::string have;
      for (const auto& [name, a] : arrays) have += (have.empty() ? "" : ", ") + name;
      return invalid_argument("calibration file '" + file + "' has no array for model input '" + in.name +
                              "' (arrays: " + (have.empty() ? "none" : have) +
                              "); name the arrays after the inputs, samples stacked on axis 0");
    }
    const std::string expected = in.type.shape ? in.type.shape->to_string() : "?";
    auto mismatch = [&](const std::string& why) {
      return invalid_argument("calibration data for input '" + in.name + "' in '" + file + "' has shape " +
                              dims_string(t->dims()) + " (" + dtype_name(t->dtype()) + "); the model expects " +
                              in.type.to_string() + " with samples on axis 0: " + why);
    };
    if (t->dtype() != in.type.dtype) return mismatch("the element type differs");
    if (in.type.shape) {
      const Shape& s = *in.type.shape;
      if (t->rank() != s.rank()) return mismatch("the rank differs");
      for (int64_t i = 1; i < s.rank(); ++i)
        if (s.dims[static_cast<size_t>(i)].is_known() && s.dims[static_cast<size_t>(i)].value != t->dim(i))
          return mismatch("dimension " + std::to_string(i) + " is " + std::to_string(t->dim(i)) + ", not " +
                          std::to_string(s.dims[static_cast<size_t>(i)].value));
    }
    if (t->rank() == 0 || t->dim(0) == 0) return mismatch("there are no samples");
    out.emplace_back(in.name, *t);
  }
  const int64_t n = out.empty() ? 0 : out[0].second.dim(0);
  for (const auto& [name, t] : out)
    if (t.dim(0) != n)
      return invalid_argument("calibration file '" + file + "': input '" + name + "' has " + std::to_string(t.dim(0)) +
                              " samples, input '" + out[0].first + "' " + std::to_string(n) +
                              "; every array needs the same number of samples on axis 0");
  return out;
}

// The batch the model's inputs allow: a fixed leading dimension wins over `want`.
int64_t batch_for(const Model& model, int64_t want) {
  for (const ValueInfo& in : model.graph.inputs)
    if (in.type.shape && in.type.shape->rank() > 0 && in.type.shape->dims[0].is_known())
      return in.type.shape->dims[0].value;
  return std::max<int64_t>(1, want);
}

// Cuts the samples of `all` into batches of `batch` (a fixed-batch model drops a short last one).
void add_batches(const NamedTensors& all, int64_t batch, bool fixed, int64_t max_samples, CalibrationData* data) {
  const int64_t n = all.empty() ? 0 : all[0].second.dim(0);
  for (int64_t b = 0; b < n; b += batch) {
    int64_t count = std::min(batch, n - b);
    if (max_samples > 0) count = std::min(count, max_samples - data->samples);
    if (count <= 0 || (fixed && count < batch)) return;
    NamedTensors feeds;
    for (const auto& [name, t] : all) feeds.emplace_back(name, t.outer_slice(b, count).clone());
    data->batches.push_back(std::move(feeds));
    data->samples += count;
  }
}

}  // namespace

StatusOr<CalibrationData> load_calibration_data(const Model& model, const CalibrationDataOptions& o) {
  CalibrationData data;
  const int64_t batch = batch_for(model, o.batch);
  bool fixed = false;
  for (const ValueInfo& in : model.graph.inputs)
    fixed |= in.type.shape && in.type.shape->rank() > 0 && in.type.shape->dims[0].is_known();
  DataOptions d;
  d.use = DataUse::kCalibration;
  d.image_size = o.image_size;
  d.train = false;
  for (const ValueInfo& in : model.graph.inputs) d.inputs.push_back(in.name);
  ASSIGN_OR_RETURN(DataSource src, open_data_source(o.path, d));
  if (src.dataset) {  // an image folder
    const Dataset& ds = *src.dataset;
    int64_t n = ds.size();
    if (o.max_samples > 0) n = std::min(n, o.max_samples);
    for (int64_t b = 0; b < n; b += batch) {
      const int64_t count = std::min(batch, n - b);
      if (fixed && count < batch) break;
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < count; ++i) idx.push_back(b + i);
      Batch out;
      RETURN_IF_ERROR(ds.load(idx, 0, &out));
      ASSIGN_OR_RETURN(NamedTensors feeds, match_inputs(model, out.inputs, o.path));
      data.batches.push_back(std::move(feeds));
      data.samples += count;
    }
    return data;
  }
  for (const std::string& f : src.array_files) {
    if (o.max_samples > 0 && data.samples >= o.max_samples) break;
    ASSIGN_OR_RETURN(auto arrays, read_array_file(f, d));
    ASSIGN_OR_RETURN(NamedTensors all, match_inputs(model, arrays, f));
    add_batches(all, batch, fixed, o.max_samples, &data);
  }
  if (data.batches.empty())
    return invalid_argument("calibration data '" + o.path + "' gives no batch of " + std::to_string(batch) +
                            " samples the model's inputs take");
  return data;
}

StatusOr<Method> parse_method(const std::string& name) {
  if (name == "minmax") return Method::kMinMax;
  if (name == "entropy") return Method::kEntropy;
  if (name == "percentile") return Method::kPercentile;
  if (name == "mse") return Method::kMse;
  if (name == "auto") return Method::kAuto;
  return invalid_argument("--method '" + name + "' is not one of minmax, entropy, percentile, mse, auto");
}

const char* method_name(Method m) {
  switch (m) {
    case Method::kMinMax: return "minmax";
    case Method::kEntropy: return "entropy";
    case Method::kPercentile: return "percentile";
    case Method::kMse: return "mse";
    case Method::kAuto: return "auto";
  }
  return "?";
}

void RangeCollector::observe_minmax(const std::string& name, const Tensor& t) {
  if (t.dtype() != DType::kF32 || t.numel() == 0) return;
  const float* p = t.data<float>();
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  bool nonfinite = false;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) {
      nonfinite = true;
      continue;
    }
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  Stats& s = stats_[name];
  s.nonfinite |= nonfinite;
  if (lo > hi) return;
  if (!s.seen) {
    s.min = lo;
    s.max = hi;
    s.seen = true;
  } else {
    s.min = std::min(s.min, lo);
    s.max = std::max(s.max, hi);
  }
}

void RangeCollector::observe_hist(const std::string& name, const Tensor& t) {
  auto it = stats_.find(name);
  if (it == stats_.end() || t.dtype() != DType::kF32) return;
  Stats& s = it->second;
  const float a = std::min(s.min, 0.0f), b = std::max(s.max, 0.0f);
  if (s.hist.empty()) s.hist.assign(kBins, 0.0);
  if (b <= a) return;
  const double k = kBins / static_cast<double>(b - a);
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) continue;
    const int bin = std::clamp(static_cast<int>((p[i] - a) * k), 0, kBins - 1);
    s.hist[static_cast<size_t>(bin)] += 1.0;
  }
}

Status RangeCollector::collect(std::shared_ptr<const Model> model, const CalibrationData& data, Method method,
                               int threads, const Progress& progress, std::vector<NamedTensors>* outputs) {
  ExecutorOptions eo;
  eo.device = "cpu";
  eo.opt_level = 0;
  eo.threads = threads;
  ASSIGN_OR_RETURN(auto ex, Executor::create(model, eo));
  const int passes = method == Method::kMinMax ? 1 : 2;
  const int64_t total = static_cast<int64_t>(data.batches.size()) * passes;
  int64_t done = 0;
  for (int pass = 0; pass < passes; ++pass) {
    auto observe = [this, pass](const std::string& name, const Tensor& t) {
      if (pass == 0) observe_minmax(name, t);
      else observe_hist(name, t);
    };
    ex->set_observer(
        [&observe](const Node& node, const std::vector<Value>& outs, double) {
          for (size_t i = 0; i < outs.size() && i < node.outputs.size(); ++i)
            if (outs[i].is_tensor() && !node.outputs[i].empty()) observe(node.outputs[i], outs[i].tensor);
        },
        false);
    for (const NamedTensors& feeds : data.batches) {
      for (const auto& [name, t] : feeds) observe(name, t);
      NamedTensors outs;
      RETURN_IF_ERROR(ex->run(feeds, &outs).with_context("running the float model on calibration batch " +
                                                         std::to_string(done % data.batches.size() + 1)));
      if (pass == 0 && outputs) outputs->push_back(std::move(outs));
      ++done;
      if (progress) progress(pass == 0 ? "calibrating" : "histograms", done, total);
    }
  }
  return Status::ok();
}

bool RangeCollector::range(const std::string& name, Method method, float* lo, float* hi) const {
  auto it = stats_.find(name);
  if (it == stats_.end() || !it->second.seen || it->second.nonfinite) return false;
  const Stats& s = it->second;
  *lo = std::min(s.min, 0.0f);
  *hi = std::max(s.max, 0.0f);
  if (method == Method::kMinMax || s.hist.empty() || *hi <= *lo) return true;
  const double width = (*hi - *lo) / static_cast<double>(kBins);
  double total = 0;
  for (double c : s.hist) total += c;
  if (total <= 0) return true;
  const int zero = std::clamp(static_cast<int>(-*lo / width), 0, kBins - 1);
  if (method == Method::kPercentile || method == Method::kAuto) {
    // Clip each tail at 0.001% of the values (99.999th percentile, ONNX Runtime's default), never past 0.
    const double tail = total * 1e-5;
    double acc = 0;
    int l = 0;
    while (l < zero && acc + s.hist[static_cast<size_t>(l)] <= tail) acc += s.hist[static_cast<size_t>(l++)];
    acc = 0;
    int r = kBins - 1;
    while (r > zero && acc + s.hist[static_cast<size_t>(r)] <= tail) acc += s.hist[static_cast<size_t>(r--)];
    const float a0 = *lo;
    *lo = std::min(0.0f, static_cast<float>(a0 + l * width));
    *hi = std::max(0.0f, static_cast<float>(a0 + (r + 1) * width));
    return true;
  }
  if (method == Method::kMse) {
    // The range (each side shrunk towards 0 on its own, to 1/16 at most) whose uint8 quantization
    // has the least expected squared error over the histogram: clipped values cost their distance
    // to the edge squared, the others scale^2 / 12 (rounding to the nearest level).
    std::vector<double> c(kBins + 1, 0.0), cx(kBins + 1, 0.0), cxx(kBins + 1, 0.0);
    const double a0 = *lo;
    for (int i = 0; i < kBins; ++i) {
      const double h = s.hist[static_cast<size_t>(i)], x = a0 + (i + 0.5) * width;
      c[static_cast<size_t>(i) + 1] = c[static_cast<size_t>(i)] + h;
      cx[static_cast<size_t>(i) + 1] = cx[static_cast<size_t>(i)] + h * x;
      cxx[static_cast<size_t>(i) + 1] = cxx[static_cast<size_t>(i)] + h * x * x;
    }
    auto clipped = [&](int b0, int b1, double edge) {  // sum over bins [b0, b1) of count * (x - edge)^2
      const size_t u = static_cast<size_t>(b0), v = static_cast<size_t>(b1);
      return std::max(0.0, (cxx[v] - cxx[u]) - 2 * edge * (cx[v] - cx[u]) + edge * edge * (c[v] - c[u]));
    };
    double best = std::numeric_limits<double>::infinity();
    int best_l = 0, best_r = kBins;
    for (int kl = 64; kl >= 4; --kl) {
      const int l = zero - static_cast<int>(std::lround(zero * kl / 64.0));
      for (int kr = 64; kr >= 4; --kr) {
        const int r = zero + static_cast<int>(std::lround((kBins - zero) * kr / 64.0));
        if (r <= l) continue;
        const double lo_v = a0 + l * width, hi_v = a0 + r * width, step = (hi_v - lo_v) / 255.0;
        const double err = clipped(0, l, lo_v) + clipped(r, kBins, hi_v) +
                           (c[static_cast<size_t>(r)] - c[static_cast<size_t>(l)]) * step * step / 12.0;
        if (err < best) {
          best = err;
          best_l = l;
          best_r = r;
        }
      }
    }
    *lo = std::min(0.0f, static_cast<float>(a0 + best_l * width));
    *hi = std::max(0.0f, static_cast<float>(a0 + best_r * width));
    return true;
  }
  // Entropy: the clipped range (both sides shrunk by the same fraction around 0) whose 255-level
  // quantization of the histogram has the least KL divergence from it (TensorRT's calibrator,
  // asymmetric).
  const float a0 = *lo;
  double best = std::numeric_limits<double>::infinity();
  int best_l = 0, best_r = kBins;
  for (int k = 64; k >= 8; --k) {
    const int l = zero - static_cast<int>(std::lround(zero * k / 64.0));
    const int r = zero + static_cast<int>(std::lround((kBins - zero) * k / 64.0));
    const int n = r - l;
    if (n < 255) break;
    // P: the slice with the clipped values folded into its edge bins; Q: the slice without them,
    // merged into 255 levels and spread back over P's non-empty bins (so clipping costs).
    const std::vector<double> slice(s.hist.begin() + l, s.hist.begin() + r);
    std::vector<double> p = slice;
    for (int i = 0; i < l; ++i) p.front() += s.hist[static_cast<size_t>(i)];
    for (int i = r; i < kBins; ++i) p.back() += s.hist[static_cast<size_t>(i)];
    std::vector<double> q(static_cast<size_t>(n), 0.0);
    for (int level = 0; level < 255; ++level) {
      const int b0 = level * n / 255, b1 = (level + 1) * n / 255;
      double sum = 0;
      int nonzero = 0;
      for (int i = b0; i < b1; ++i) {
        sum += slice[static_cast<size_t>(i)];
        nonzero += p[static_cast<size_t>(i)] > 0;
      }
      for (int i = b0; i < b1; ++i)
        if (p[static_cast<size_t>(i)] > 0) q[static_cast<size_t>(i)] = sum / nonzero;
    }
    double kl = 0;
    for (int i = 0; i < n; ++i) {
      const double pi = p[static_cast<size_t>(i)] / total;
      const double qi = std::max(q[static_cast<size_t>(i)] / total, 1e-7);  // smoothed: an empty Q bin costs
      if (pi > 0) kl += pi * std::log(pi / qi);
    }
    if (kl < best) {
      best = kl;
      best_l = l;
      best_r = r;
    }
  }
  *lo = std::min(0.0f, static_cast<float>(a0 + best_l * width));
  *hi = std::max(0.0f, static_cast<float>(a0 + best_r * width));
  return true;
}

}  // namespace ferry::quant
