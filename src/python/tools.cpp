// The tools as functions (python/ferry/tools.py gives them their Python signatures and result
// objects): compile, check, compare, quantize and doctor on the layers the CLI uses (compiler/,
// check/, precision/, quant/), never on tools/. Results come back as dicts.
#include <pybind11/stl.h>

#include "check/doctor.h"
#include "check/model_check.h"
#include "compiler/compile.h"
#include "format/compiled_model.h"
#include "onnx/onnx_import.h"
#include "precision/compare.h"
#include "python/py_common.h"
#include "quant/quantizer.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

py::dict doctor() {
  DoctorReport r;
  {
    py::gil_scoped_release nogil;
    r = run_doctor();
  }
  py::dict cpu;
  cpu["model"] = r.cpu.model;
  cpu["features"] = r.cpu.features;
  cpu["missing"] = r.cpu.missing;
  cpu["logical_cpus"] = r.cpu.logical_cpus;
  cpu["usable_cpus"] = r.cpu.usable_cpus;
  cpu["omp_threads"] = r.cpu.omp_threads;
  cpu["memory_total"] = r.cpu.memory_total;
  cpu["memory_available"] = r.cpu.memory_available;
  py::list backends;
  for (const BackendHealth& b : r.backends) {
    py::dict d;
    d["name"] = b.name;
    d["summary"] = b.summary;
    d["usable"] = b.usable;
    d["detail"] = b.detail;
    d["fix"] = b.fix;
    backends.append(d);
  }
  py::dict cuda;
  cuda["compiled_in"] = r.cuda_compiled_in;
  cuda["driver_found"] = r.cuda.driver_found;
  cuda["driver_problem"] = r.cuda.driver_problem;
  cuda["driver_version"] = r.cuda.driver_version;
  cuda["gpus"] = static_cast<int64_t>(r.cuda.gpus.size());
  cuda["cudnn"] = r.cuda.cudnn;
  cuda["cublas"] = r.cuda.cublas;
  py::dict out;
  out["cpu"] = cpu;
  out["cuda"] = cuda;
  out["backends"] = backends;
  out["libraries"] = r.libraries;
  out["verdict"] = r.verdict;
  out["ok"] = r.exit_code == 0;
  return out;
}

std::shared_ptr<Model> load_model(const std::string& path) {
  StatusOr<std::shared_ptr<Model>> m = [&] {
    py::gil_scoped_release nogil;
    return load_onnx_model(path);
  }();
  return unwrap(std::move(m));
}

py::dict check_model_targets(const std::string& path, const std::string& target, bool no_fallback) {
  std::shared_ptr<Model> m = load_model(path);
  CheckOptions co;
  co.no_fallback = no_fallback;
  StatusOr<TargetCheck> tc = [&] {
    py::gil_scoped_release nogil;
    return check_model(*m, target, co);
  }();
  TargetCheck c = unwrap(std::move(tc));
  py::list rows;
  for (const NodeFinding& f : c.findings) {
    py::dict d;
    d["node"] = f.node;
    d["op"] = f.op;
    d["opset"] = f.opset;
    d["verdict"] = node_verdict_name(f.verdict);
    d["reason"] = f.reason;
    d["fix"] = f.fix;
    d["target_says"] = f.target_says;
    rows.append(d);
  }
  py::dict out;
  out["target"] = c.target;
  out["kind"] = c.kind;
  out["title"] = c.title;
  out["nodes"] = c.nodes;
  out["runs"] = c.runs;
  out["decomposed"] = c.decomposed;
  out["fallback"] = c.fallback;
  out["fails"] = c.fails;
  out["rows"] = rows;
  out["notes"] = c.notes;
  out["unavailable"] = c.unavailable;
  out["passed"] = c.passed();
  out["verdict"] = c.verdict();
  return out;
}

py::dict compile(const std::string& path, const std::string& out_path, const std::string& device, int opt_level,
                 const std::vector<std::string>& input_shapes, const std::vector<int64_t>& batch_gears,
                 const std::string& precision, const std::string& precision_config, bool tune, int threads,
                 bool prepack) {
  std::shared_ptr<Model> m = load_model(path);
  CompileOptions co;
  co.device = device;
  co.opt_level = opt_level;
  check(parse_input_shapes(input_shapes, &co.input_shapes));
  co.batch_gears = batch_gears;
  if (!precision.empty()) co.precision_mode = precision;
  co.precision_config = precision_config;
  co.tune = tune;
  co.threads = threads;
  co.prepack = prepack;
  CompileReport rep;
  Status st = [&] {
    py::gil_scoped_release nogil;
    StatusOr<CompiledModelSpec> spec = compile_model(*m, co, &rep);
    RETURN_IF_ERROR(spec.status());
    spec.value().source = path;
    return write_compiled_model(out_path, spec.value());
  }();
  check(st);
  py::dict out;
  out["path"] = out_path;
  out["device"] = device;
  out["nodes_before"] = rep.nodes_before;
  out["nodes_after"] = rep.nodes_after;
  out["tuned_nodes"] = rep.tuned_nodes;
  out["cache_hits"] = rep.cache_hits;
  out["changed_nodes"] = rep.changed_nodes;
  out["packed_nodes"] = rep.packed_nodes;
  out["packed_bytes"] = rep.packed_bytes;
  return out;
}

py::dict metrics_dict(const TensorMetrics& m) {
  py::dict d;
  d["count"] = m.count;
  d["cosine"] = m.cosine;
  d["max_abs"] = m.max_abs;
  d["mean_abs"] = m.mean_abs;
  d["max_rel"] = m.max_rel;
  d["rmse"] = m.rmse;
  d["ref_nan"] = m.ref_nan;
  d["ref_inf"] = m.ref_inf;
  d["target_nan"] = m.target_nan;
  d["target_inf"] = m.target_inf;
  d["mismatch"] = m.mismatch;
  return d;
}

py::dict compare(const std::string& path, const std::string& ref, const std::string& target,
                 const std::vector<py::dict>& samples, bool per_layer, double cosine_min, double max_abs, int threads,
                 const std::vector<std::string>& keep_fp32, const std::string& ref_model_path) {
  std::shared_ptr<Model> m = load_model(path);
  CompareOptions co;
  co.ref = unwrap(parse_run_spec(ref));
  co.target = unwrap(parse_run_spec(target));
  if (co.ref.is_outputs || co.target.is_outputs)
    raise_status(invalid_argument("compare: ref and target are runs (device:precision[:opt-level]) here; "
                                  "pass saved reference outputs to `ferry compare` instead"));
  co.per_layer = per_layer;
  co.threads = threads;
  co.thresholds.cosine_min = cosine_min;
  co.thresholds.max_abs = max_abs;
  co.target_precision.keep_fp32 = keep_fp32;
  if (!ref_model_path.empty()) co.ref_model = load_model(ref_model_path);
  if (samples.empty()) raise_status(invalid_argument("compare: inputs holds no sample"));
  // The samples become tensors up front (copies: they outlive this call's Python references).
  std::vector<NamedTensors> data;
  std::map<std::string, DType> want;
  for (const ValueInfo& v : m->graph.inputs) want[v.name] = v.type.dtype;
  for (size_t i = 0; i < samples.size(); ++i) {
    NamedTensors feeds;
    std::vector<py::object> keep;
    for (const auto& [k, v] : samples[i]) {
      const std::string name = py::str(k);
      auto it = want.find(name);
      if (it == want.end()) raise_status(invalid_argument("compare: sample " + std::to_string(i) + " has no model input named '" + name + "'"));
      feeds.emplace_back(name, tensor_view("sample " + std::to_string(i) + " input '" + name + "'", v, it->second, &keep).clone());
    }
    data.push_back(std::move(feeds));
  }
  SampleSource src;
  src.count = data.size();
  src.name = [](size_t i) { return "sample " + std::to_string(i); };
  src.inputs = [&data](size_t i) -> StatusOr<NamedTensors> { return data[i]; };
  StatusOr<CompareResult> res = [&]() -> StatusOr<CompareResult> {
    py::gil_scoped_release nogil;
    ASSIGN_OR_RETURN(auto cmp, Comparator::create(m, co));
    return cmp->run(src);
  }();
  CompareResult r = unwrap(std::move(res));
  py::list outputs;
  for (const OutputRecord& o : r.outputs) {
    py::dict d = metrics_dict(o.worst);
    d["name"] = o.name;
    d["mean_cosine"] = o.mean_cosine;
    d["samples_passed"] = o.samples_passed;
    d["top1_agree"] = o.top1_agree;
    d["rows"] = o.rows;
    outputs.append(d);
  }
  py::list layers;
  for (const LayerRecord& l : r.layers) {
    py::dict d = metrics_dict(l.worst);
    d["node"] = l.node;
    d["op"] = l.op;
    d["origin"] = l.origin;
    d["value"] = l.value;
    d["mean_cosine"] = l.mean_cosine;
    d["passes"] = l.passes;
    layers.append(d);
  }
  py::dict out;
  out["outputs"] = outputs;
  out["layers"] = layers;
  out["first_diverging"] = r.first_diverging ? py::object(py::int_(*r.first_diverging)) : py::object(py::none());
  out["first_non_finite"] = r.first_non_finite ? py::object(py::str(r.first_non_finite->describe())) : py::object(py::none());
  out["samples"] = r.samples;
  out["samples_passed"] = r.samples_passed;
  out["passed"] = r.passed();
  out["ref_ms"] = r.ref_ms;
  out["target_ms"] = r.target_ms;
  return out;
}

py::dict quantize(const std::string& path, const std::string& out_path, const std::string& data_path, int64_t batch,
                  int64_t max_samples, const std::string& method, const std::vector<std::string>& keep_fp32,
                  double target_cosine, bool bias_correction, const std::string& weight_rounding, int threads,
                  int reduce_range) {
  quant::QuantizeOptions o;
  o.model_path = path;
  o.out_path = out_path;
  o.data.path = data_path;
  o.data.batch = batch;
  o.data.max_samples = max_samples;
  o.method = unwrap(quant::parse_method(method));
  o.keep_fp32 = keep_fp32;
  o.target_cosine = target_cosine;
  o.bias_correction = bias_correction;
  o.weight_rounding = unwrap(quant::parse_weight_rounding(weight_rounding));
  o.threads = threads;
  o.reduce_range = reduce_range < 0 ? quant::ReduceRange::kAuto : reduce_range ? quant::ReduceRange::kOn : quant::ReduceRange::kOff;
  StatusOr<quant::QuantizeReport> res = [&] {
    py::gil_scoped_release nogil;
    return quant::quantize_model(o);
  }();
  quant::QuantizeReport r = unwrap(std::move(res));
  py::dict left;
  for (const auto& [op, nodes] : r.left_float) left[py::str(op)] = nodes;
  py::list kept;
  for (const auto& k : r.kept_for_target) {
    py::dict d;
    d["node"] = k.node;
    d["op_type"] = k.op_type;
    d["model_cosine"] = k.model_cosine;
    kept.append(d);
  }
  py::dict out;
  out["path"] = out_path;
  out["samples"] = r.samples;
  out["batches"] = r.batches;
  out["warnings"] = r.warnings;
  out["quantized_nodes"] = r.quantized_nodes;
  out["qdq_pairs"] = r.qdq_pairs;
  out["int8_weights"] = r.int8_weights;
  out["int32_biases"] = r.int32_biases;
  out["left_float"] = left;
  out["kept_for_target"] = kept;
  out["cosine_mean"] = r.cosine_mean;
  out["cosine_min"] = r.cosine_min;
  out["method"] = quant::method_name(r.method);
  out["target_reached"] = r.target_reached;
  out["biases_corrected"] = r.biases_corrected;
  out["weights_gptq"] = r.weights_gptq;
  out["reduce_range"] = r.reduce_range;
  out["weights_7bit"] = r.reduced_weights;
  return out;
}

}  // namespace

void register_tools(py::module_& m) {
  m.def("_doctor", &doctor);
  m.def("_check", &check_model_targets, py::arg("model"), py::arg("target"), py::arg("no_fallback"));
  m.def("_check_targets", &check_targets);
  m.def("_compile", &compile, py::arg("model"), py::arg("out"), py::arg("device"), py::arg("opt_level"),
        py::arg("input_shapes"), py::arg("batch_gears"), py::arg("precision"), py::arg("precision_config"),
        py::arg("tune"), py::arg("threads"), py::arg("prepack"));
  m.def("_compare", &compare, py::arg("model"), py::arg("ref"), py::arg("target"), py::arg("samples"),
        py::arg("per_layer"), py::arg("cosine_min"), py::arg("max_abs"), py::arg("threads"), py::arg("keep_fp32"),
        py::arg("ref_model"));
  m.def("_quantize", &quantize, py::arg("model"), py::arg("out"), py::arg("data"), py::arg("batch"),
        py::arg("max_samples"), py::arg("method"), py::arg("keep_fp32"), py::arg("target_cosine"),
        py::arg("bias_correction"), py::arg("weight_rounding"), py::arg("threads"), py::arg("reduce_range"));
}

}  // namespace ferry::python
