// The comparator behind `ferry compare`: runs samples through a reference and a target and
// aggregates metrics per output and per layer (see compare.h for the spill scheme).
#include "precision/compare.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "common/env_switch.h"
#include "ops/op_util.h"

namespace ferry {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Argmax and top-5 agreement of classifier-like outputs ([N, C] or [C], C >= 2).
void agree_top_k(const Tensor& ref, const Tensor& target, OutputRecord* rec) {
  if (ref.dims() != target.dims() || ref.rank() < 1 || ref.rank() > 2 || !dtype_is_float(ref.dtype())) return;
  const int64_t c = ref.dims().back();
  if (c < 2) return;
  const int64_t rows = ref.numel() / c;
  rec->top5_defined = c >= 5;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<double, int64_t>> rv, tv;
    for (int64_t j = 0; j < c; ++j) {
      rv.emplace_back(ref.get_double(r * c + j), j);
      tv.emplace_back(target.get_double(r * c + j), j);
    }
    auto by_score = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    const size_t k = std::min<size_t>(5, tv.size());
    std::partial_sort(rv.begin(), rv.begin() + 1, rv.end(), by_score);
    std::partial_sort(tv.begin(), tv.begin() + k, tv.end(), by_score);
    ++rec->rows;
    if (rv[0].second == tv[0].second) ++rec->top1_agree;
    for (size_t j = 0; j < k; ++j)
      if (tv[j].second == rv[0].second) ++rec->top5_agree;
  }
}

// The cpu backend's nhwc_layout pass computes `v` channels-last as `v_nhwc`: the per-layer
// compare matches it to the reference's `v` and permutes it back to NCHW first.
const char kNhwcSuffix[] = "_nhwc";

// The reference value a target value corresponds to, and whether it is channels-last.
std::string compare_key(const std::string& target_value, bool* nhwc) {
  std::string base = precision_base_name(target_value);
  const size_t n = sizeof(kNhwcSuffix) - 1;
  *nhwc = base.size() > n && base.compare(base.size() - n, n, kNhwcSuffix) == 0;
  return *nhwc ? base.substr(0, base.size() - n) : base;
}

// NHWC -> NCHW copy of a rank-4 tensor (as f32).
Tensor nhwc_to_nchw(const Tensor& t) {
  Tensor f = cast_tensor(t, DType::kF32).value();
  const int64_t n = t.dim(0), h = t.dim(1), w = t.dim(2), c = t.dim(3);
  Tensor out = Tensor::allocate(DType::kF32, {n, c, h, w});
  const float* src = f.data<float>();
  float* dst = out.mutable_data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t k = 0; k < c; ++k) dst[((b * c + k) * h + y) * w + x] = src[((b * h + y) * w + x) * c + k];
  return out;
}

struct SpillEntry {
  std::string path;
  std::vector<int64_t> dims;
};

}  // namespace

struct Comparator::Impl {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Executor> ref;     // null for an outputs:DIR reference
  std::unique_ptr<Executor> target;
  std::unordered_set<std::string> target_values;  // base names of the float values the target computes
  std::unordered_map<size_t, NamedTensors> ref_cache;
  std::string spill_dir;
  bool own_spill_dir = false;
  int64_t spill_counter = 0;

  ~Impl() {
    if (own_spill_dir && !spill_dir.empty()) ::rmdir(spill_dir.c_str());
  }

  void index_target_values() {
    target_values.clear();
    const Graph& g = target->model().graph;
    for (const Node& n : g.nodes) {
      if (is_precision_cast(n)) continue;
      for (const std::string& o : n.outputs) {
        const TensorType* t = o.empty() ? nullptr : g.find_type(o);
        bool nhwc = false;
        const std::string key = o.empty() ? o : compare_key(o, &nhwc);
        if (nhwc && (!t || !t->shape || t->shape->rank() != 4)) continue;
        if (t && t->kind == ValueKind::kTensor && dtype_is_float(t->dtype)) target_values.insert(key);
      }
    }
  }

  Status ensure_spill_dir(const std::string& requested) {
    if (!spill_dir.empty()) return Status::ok();
    if (!requested.empty()) {
      spill_dir = requested;
      return Status::ok();
    }
    const char* tmp = env_value("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ferry-compare-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) return invalid_argument("cannot create a temporary folder like '" + pattern + "' for per-layer values (set TMPDIR)");
    spill_dir = buf.data();
    own_spill_dir = true;
    return Status::ok();
  }

  Status spill(const Tensor& t, SpillEntry* e) {
    ASSIGN_OR_RETURN(Tensor f, cast_tensor(t, DType::kF32));
    e->path = spill_dir + "/" + std::to_string(spill_counter++) + ".f32";
    e->dims = f.dims();
    FILE* fp = std::fopen(e->path.c_str(), "wb");
    if (!fp) return invalid_argument("cannot write per-layer spill file '" + e->path + "'");
    const size_t n = static_cast<size_t>(f.numel());
    const bool ok = std::fwrite(f.raw(), sizeof(float), n, fp) == n;
    const bool closed = std::fclose(fp) == 0;
    if (!ok || !closed) return resource_exhausted("writing per-layer spill file '" + e->path + "' failed (disk full?)");
    return Status::ok();
  }

  StatusOr<Tensor> unspill(const SpillEntry& e) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::try_allocate(DType::kF32, e.dims));
    FILE* fp = std::fopen(e.path.c_str(), "rb");
    if (!fp) return internal_error("per-layer spill file '" + e.path + "' disappeared");
    const size_t n = static_cast<size_t>(t.numel());
    const bool ok = std::fread(t.mutable_raw(), sizeof(float), n, fp) == n;
    std::fclose(fp);
    ::unlink(e.path.c_str());
    if (!ok) return internal_error("per-layer spill file '" + e.path + "' is short");
    return t;
  }
};

Comparator::~Comparator() = default;

StatusOr<std::unique_ptr<Comparator>> Comparator::create(std::shared_ptr<const Model> model, const CompareOptions& options) {
  if (options.target.is_outputs) return invalid_argument("--target must run the model (DEVICE:PRECISION), not outputs:DIR");
  std::unique_ptr<Comparator> c(new Comparator());
  c->options_ = options;
  c->impl_ = std::make_unique<Impl>();
  c->impl_->model = model;
  if (!options.ref.is_outputs) {
    ExecutorOptions eo;
    eo.device = options.ref.device;
    eo.opt_level = options.ref.opt_level;
    eo.threads = options.threads;
    PrecisionOptions po;
    po.mode = options.ref.mode;
    auto ref = create_precision_executor(options.ref_model ? options.ref_model : model, eo, po);
    if (!ref.is_ok()) return ref.status().with_context("reference " + options.ref.text);
    c->impl_->ref = std::move(ref).value();
  }
  PrecisionOptions target = options.target_precision;
  target.mode = options.target.mode;
  RETURN_IF_ERROR(c->set_target_precision(target));
  return c;
}

const Model& Comparator::target_model() const { return impl_->target->model(); }

Status Comparator::set_target_precision(const PrecisionOptions& precision) {
  ExecutorOptions eo;
  eo.device = options_.target.device;
  eo.opt_level = options_.target.opt_level;
  eo.threads = options_.threads;
  PrecisionReport report;
  auto target = create_precision_executor(impl_->model, eo, precision, &report);
  if (!target.is_ok()) return target.status().with_context("target " + options_.target.text);
  impl_->target = std::move(target).value();
  impl_->index_target_values();
  target_precision_ = precision;
  target_report_ = report;
  return Status::ok();
}

namespace {

void finish_layers(CompareResult* r, const Thresholds& th) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < r->layers.size(); ++i) {
    LayerRecord& l = r->layers[i];
    if (l.samples > 0) l.mean_cosine /= static_cast<double>(l.samples);
    l.passes = layer_passes(l.worst, th);
    index[l.value] = i;
  }
  for (size_t i = 0; i < r->layers.size() && !r->first_diverging; ++i) {
    const LayerRecord& l = r->layers[i];
    if (l.passes) continue;
    bool inputs_within = true;
    for (const std::string& in : l.inputs) {
      auto it = index.find(in);
      if (it != index.end() && it->second < i && !r->layers[it->second].passes) inputs_within = false;
    }
    if (inputs_within) r->first_diverging = i;
  }
}

}  // namespace

StatusOr<CompareResult> Comparator::run(const SampleSource& samples) {
  std::vector<size_t> all(samples.count);
  for (size_t i = 0; i < samples.count; ++i) all[i] = i;
  CompareResult result;
  Impl& im = *impl_;
  const bool per_layer = options_.per_layer && im.ref;
  if (per_layer) RETURN_IF_ERROR(im.ensure_spill_dir(options_.spill_dir));
  RETURN_IF_ERROR(run_samples_(samples, all, per_layer, /*use_cache=*/false, /*stop=*/false, &result));
  return result;
}

StatusOr<CompareResult> Comparator::run_target_only(const SampleSource& samples, bool stop_at_first_failure) {
  std::vector<size_t> all(samples.count);
  for (size_t i = 0; i < samples.count; ++i) all[i] = i;
  CompareResult result;
  RETURN_IF_ERROR(run_samples_(samples, all, false, true, stop_at_first_failure, &result));
  return result;
}

StatusOr<CompareResult> Comparator::run_per_layer(const SampleSource& samples, size_t index) {
  if (!impl_->ref) return invalid_argument("per-layer compare needs a reference that runs the model (not outputs:DIR)");
  RETURN_IF_ERROR(impl_->ensure_spill_dir(options_.spill_dir));
  CompareResult result;
  RETURN_IF_ERROR(run_samples_(samples, {index}, true, false, false, &result));
  return result;
}

Status Comparator::run_samples_(const SampleSource& samples, const std::vector<size_t>& indices, bool per_layer,
                                bool use_cache, bool stop_at_first_failure, CompareResult* result) {
  Impl& im = *impl_;
  const Thresholds& th = options_.thresholds;
  CompareResult& r = *result;
  r.target_precision = target_report_;
  std::unordered_map<std::string, size_t> layer_index;
  NonFiniteWatch watch;
  double ref_total = 0, target_total = 0;
  size_t ref_runs = 0;
  for (size_t done = 0; done < indices.size(); ++done) {
    const size_t si = indices[done];
    const std::string sample_name = samples.name ? samples.name(si) : std::to_string(si);
    ASSIGN_OR_RETURN(NamedTensors feeds, samples.inputs(si));
    // Reference side.
    NamedTensors ref_out;
    std::unordered_map<std::string, SpillEntry> spilled;
    Status observer_error;
    if (!im.ref) {
      if (!samples.reference_outputs) return invalid_argument("the outputs:DIR reference has no outputs to read");
      auto it = im.ref_cache.find(si);
      if (it != im.ref_cache.end()) {
        ref_out = it->second;
      } else {
        ASSIGN_OR_RETURN(ref_out, samples.reference_outputs(si));
        im.ref_cache[si] = ref_out;
      }
    } else if (use_cache && im.ref_cache.count(si)) {
      ref_out = im.ref_cache[si];
    } else {
      if (per_layer) {
        im.ref->set_observer([&](const Node& node, const std::vector<Value>& outs, double) {
          if (!observer_error.is_ok() || is_precision_cast(node)) return;
          for (size_t k = 0; k < outs.size() && k < node.outputs.size(); ++k) {
            const std::string base = precision_base_name(node.outputs[k]);
            if (!outs[k].is_tensor() || !dtype_is_float(outs[k].tensor.dtype()) || !im.target_values.count(base) ||
                spilled.count(base))
              continue;
            SpillEntry e;
            observer_error = im.spill(outs[k].tensor, &e);
            if (!observer_error.is_ok()) return;
            spilled[base] = e;
          }
        });
      }
      const double start = now_ms();
      Status st = im.ref->run(feeds, &ref_out);
      ref_total += now_ms() - start;
      ++ref_runs;
      im.ref->set_observer(nullptr);
      if (!st.is_ok()) return st.with_context("reference " + options_.ref.text + ", sample '" + sample_name + "'");
      RETURN_IF_ERROR(observer_error);
      im.ref_cache[si] = ref_out;
    }
    // Target side: compares each shared value as it is produced.
    watch.reset();
    NodeObserver watch_observer = watch.observer();
    std::unordered_set<std::string> seen;
    im.target->set_observer([&](const Node& node, const std::vector<Value>& outs, double ms) {
      watch_observer(node, outs, ms);
      if (!per_layer || !observer_error.is_ok() || is_precision_cast(node)) return;
      for (size_t k = 0; k < outs.size() && k < node.outputs.size(); ++k) {
        bool nhwc = false;
        const std::string base = compare_key(node.outputs[k], &nhwc);
        auto sp = spilled.find(base);
        if (sp == spilled.end() || !outs[k].is_tensor() || !seen.insert(base).second) continue;
        if (nhwc && outs[k].tensor.rank() != 4) continue;
        auto ref_t = im.unspill(sp->second);
        spilled.erase(sp);
        if (!ref_t.is_ok()) {
          observer_error = ref_t.status();
          return;
        }
        TensorMetrics m = compare_tensors(ref_t.value(), nhwc ? nhwc_to_nchw(outs[k].tensor) : outs[k].tensor);
        auto [it, fresh] = layer_index.emplace(base, r.layers.size());
        if (fresh) {
          LayerRecord l;
          l.node = node.name;
          l.op = node.op_type;
          l.origin = node.origin;
          l.value = base;
          for (const std::string& in : node.inputs) {
            bool in_nhwc = false;
            if (!in.empty()) l.inputs.push_back(compare_key(in, &in_nhwc));
          }
          l.worst = m;
          r.layers.push_back(std::move(l));
        } else {
          merge_worst(&r.layers[it->second].worst, m);
        }
        r.layers[it->second].mean_cosine += m.cosine;
        ++r.layers[it->second].samples;
      }
    });
    NamedTensors target_out;
    const double start = now_ms();
    Status st = im.target->run(feeds, &target_out);
    target_total += now_ms() - start;
    im.target->set_observer(nullptr);
    for (auto& [base, e] : spilled) ::unlink(e.path.c_str());
    if (!st.is_ok()) return st.with_context("target " + options_.target.text + ", sample '" + sample_name + "'");
    RETURN_IF_ERROR(observer_error);
    if (watch.first() && !r.first_non_finite) {
      r.first_non_finite = watch.first();
      r.first_non_finite_sample = sample_name;
    }
    // Outputs.
    bool sample_ok = true;
    for (size_t k = 0; k < target_out.size(); ++k) {
      const auto& [name, t] = target_out[k];
      const Tensor* rt = nullptr;
      for (const auto& [rn, rv] : ref_out)
        if (rn == name) rt = &rv;
      if (!rt && k < ref_out.size() && im.ref == nullptr && ref_out.size() == target_out.size()) rt = &ref_out[k].second;
      if (!rt) return invalid_argument("the reference has no output '" + name + "' (sample '" + sample_name + "')");
      if (r.outputs.size() <= k) {
        OutputRecord rec;
        rec.name = name;
        r.outputs.push_back(rec);
      }
      OutputRecord& rec = r.outputs[k];
      TensorMetrics m = compare_tensors(*rt, t);
      if (r.samples == 0) rec.worst = m;
      else merge_worst(&rec.worst, m);
      rec.mean_cosine += m.cosine;
      rec.mean_max_abs += m.max_abs;
      const bool ok = output_passes(m, th);
      rec.samples_passed += ok ? 1 : 0;
      if (!ok && rec.first_failing_sample.empty()) {
        rec.first_failing_sample = sample_name.empty() ? "#" + std::to_string(r.samples) : sample_name;
        rec.first_failure = m;
      }
      sample_ok &= ok;
      agree_top_k(*rt, t, &rec);
    }
    ++r.samples;
    if (sample_ok) ++r.samples_passed;
    else if (r.failing_samples.size() < 20) r.failing_samples.push_back(sample_name);
    if (options_.progress) options_.progress(done + 1, indices.size());
    if (!sample_ok && stop_at_first_failure) break;
  }
  for (OutputRecord& rec : r.outputs) {
    if (r.samples == 0) continue;
    rec.mean_cosine /= static_cast<double>(r.samples);
    rec.mean_max_abs /= static_cast<double>(r.samples);
  }
  r.ref_ms = ref_runs ? ref_total / static_cast<double>(ref_runs) : 0.0;
  r.target_ms = r.samples ? target_total / static_cast<double>(r.samples) : 0.0;
  finish_layers(&r, th);
  return Status::ok();
}

}  // namespace ferry
