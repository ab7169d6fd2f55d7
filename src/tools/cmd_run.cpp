// `ferry run MODEL --input [NAME=]FILE ... [--output-dir DIR]`: run a model once.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/gears.h"
#include "io/image_metadata.h"
#include "io/npy.h"
#include "ops/op_util.h"
#include "precision/precision_run.h"
#include "runtime/memory_estimate.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"
#include "tools/commands.h"
#include "tools/gear_cli.h"
#include "tools/precision_cli.h"

namespace ferry::cli {
namespace {

using nlohmann::json;

struct Summary {
  double min = 0, max = 0, mean = 0;
  int64_t nan = 0, inf = 0;
};

Summary summarize(const Tensor& t) {
  Summary s;
  if (t.dtype() == DType::kString || t.numel() == 0) return s;
  double sum = 0;
  int64_t finite = 0;
  bool first = true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.get_double(i);
    if (std::isnan(v)) { ++s.nan; continue; }
    if (std::isinf(v)) { ++s.inf; continue; }
    if (first || v < s.min) s.min = v;
    if (first || v > s.max) s.max = v;
    first = false;
    sum += v;
    ++finite;
  }
  s.mean = finite ? sum / static_cast<double>(finite) : 0.0;
  return s;
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// Top-k classes of each row of a [N, C] (or [C]) output.
std::vector<std::vector<std::pair<int64_t, double>>> top_k(const Tensor& t, int k) {
  std::vector<std::vector<std::pair<int64_t, double>>> rows;
  if (t.rank() < 1 || t.dtype() == DType::kString) return rows;
  const int64_t c = t.dims().back();
  if (c == 0) return rows;
  const int64_t n = t.numel() / c;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<std::pair<int64_t, double>> row;
    for (int64_t j = 0; j < c; ++j) row.emplace_back(j, t.get_double(r * c + j));
    const size_t kk = std::min<size_t>(static_cast<size_t>(k), row.size());
    std::partial_sort(row.begin(), row.begin() + kk, row.end(),
                      [](const auto& a, const auto& b) { return a.second > b.second; });
    row.resize(kk);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int cmd_run(const RunOptions& opt) {
  auto loaded = load_geared_model(opt.model);
  if (!loaded.is_ok()) return report(loaded.status());
  if (opt.inputs.empty() && !loaded.value().model->graph.inputs.empty()) {
    std::string names, typed;
    for (const ValueInfo& v : loaded.value().model->graph.inputs) {
      names += (names.empty() ? "'" : ", '") + v.name + "'";
      typed += (typed.empty() ? "" : ", ") + v.name + " " + v.type.to_string();
    }
    return report(invalid_argument("input " + names + " not given: give the model's inputs with --input [NAME=]FILE "
                                   "(.npy, .npz, .pb, or a .jpg/.png image); its inputs: " + typed));
  }
  auto feeds = load_inputs(*loaded.value().model, opt.inputs, opt.image_size);
  if (!feeds.is_ok()) return report(feeds.status());
  // A compiled model with batch gears runs the smallest gear >= the inputs' batch.
  auto gear = choose_gear_for_feeds(loaded.value(), &feeds.value());
  if (!gear.is_ok()) return report(gear.status().with_context(opt.model));
  std::shared_ptr<Model> model = gear.value().model;
  if (opt.memory_limit != "none") {
    int64_t limit = available_memory_bytes();
    if (!opt.memory_limit.empty()) {
      auto parsed = parse_byte_size(opt.memory_limit);
      if (!parsed.is_ok()) return report(parsed.status().with_context("--memory-limit"));
      limit = parsed.value();
    }
    InputShapes shapes;
    for (const auto& [name, t] : feeds.value()) shapes.emplace_back(name, t.dims());
    Status fits = check_memory_limit(*model, shapes, limit);
    if (!fits.is_ok()) return report(fits);
  }
  // Decide output files before running, so a clash is reported before any work is done.
  std::vector<std::string> out_paths;
  if (!opt.output_dir.empty()) {
    struct stat st;
    if (::stat(opt.output_dir.c_str(), &st) != 0) {
      if (::mkdir(opt.output_dir.c_str(), 0755) != 0)
        return report(invalid_argument("--output-dir '" + opt.output_dir + "' cannot be created"));
    } else if (!S_ISDIR(st.st_mode)) {
      return report(invalid_argument("--output-dir '" + opt.output_dir + "' exists and is not a folder"));
    }
    std::set<std::string> input_files;
    for (const std::string& spec : opt.inputs) {
      input_files.insert(real_path(split_input_spec(*model, spec).file));
      input_files.insert(real_path(spec));
    }
    std::set<std::string> used;
    for (const ValueInfo& v : model->graph.outputs) {
      std::string base = safe_file_name(v.name);
      std::string file = base;
      for (int k = 1; used.count(file); ++k) file = base + "_" + std::to_string(k);
      used.insert(file);
      std::string path = opt.output_dir + "/" + file + ".npy";
      std::string rp = real_path(path);
      if (!rp.empty() && input_files.count(rp))
        return report(invalid_argument("output '" + v.name + "' would be written to '" + path +
                                       "', which is one of the inputs; choose another --output-dir"));
      out_paths.push_back(path);
    }
  }

  // --top-k names the classes when the model carries their names (`ferry train --out` writes them).
  auto class_names = class_names_from_metadata(loaded.value().model->metadata);
  if (!class_names.is_ok()) return report(class_names.status().with_context(opt.model));
  apply_inference_malloc_defaults();
  ExecutorOptions eo;
  eo.device = opt.device;
  eo.opt_level = opt.opt_level;
  eo.threads = opt.threads;
  auto precision = precision_options(opt.precision, opt.keep_fp32, opt.precision_config);
  if (!precision.is_ok()) return report(precision.status());
  // From an .onnx file the executor holds the only reference to the model: the weights its kernels
  // pack are then held once (ExecutorOptions::release_weights), the unpacked originals freed.
  eo.release_weights = loaded.value().compiled == nullptr;
  if (eo.release_weights) {
    loaded.value().model.reset();
    gear.value().model.reset();
  }
  auto ex = create_precision_executor(std::move(model), eo, precision.value());
  if (!ex.is_ok()) return report(ex.status());
  NonFiniteWatch overflow;
  if (!opt.precision.empty()) ex.value()->set_observer(overflow.observer());

  NamedTensors outputs, first;
  double ms = 0, first_ms = 0;
  for (int r = 0; r < std::max(opt.runs, 1); ++r) {
    outputs.clear();
    auto start = std::chrono::steady_clock::now();
    Status st = ex.value()->run(feeds.value(), &outputs);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!st.is_ok()) return report(r == 0 ? st : st.with_context("run " + std::to_string(r + 1)));
    if (r == 0) {
      first_ms = ms;
      if (opt.runs > 1)
        for (const auto& [name, t] : outputs) first.emplace_back(name, t.clone());
      continue;
    }
    for (size_t i = 0; i < outputs.size() && i < first.size(); ++i) {
      const Tensor& a = first[i].second;
      const Tensor& b = outputs[i].second;
      const bool same = a.dtype() == b.dtype() && a.dims() == b.dims() &&
                        (a.dtype() == DType::kString ? a.strings() == b.strings()
                                                     : std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0);
      if (!same)
        return report(internal_error("run " + std::to_string(r + 1) + " gave output '" + outputs[i].first +
                                     "' different from run 1 on the same inputs (a memory-plan or kernel state bug; "
                                     "please report it with the model)"));
    }
  }
  cut_to_batch(gear.value().batched_outputs, gear.value().batch, &outputs);
  const std::vector<std::string>& names = class_names.value();
  auto class_label = [&](int64_t cls, const Tensor& t) -> std::string {
    if (names.empty() || t.rank() < 1 || t.dims().back() != static_cast<int64_t>(names.size())) return "";
    return names[static_cast<size_t>(cls)];
  };
  if (overflow.first()) std::fprintf(stderr, "ferry: warning: overflow in %s: %s\n", opt.precision.c_str(),
                                     overflow.first()->describe().c_str());

  json j;
  j["model"] = opt.model;
  j["device"] = opt.device;
  j["latency_ms"] = ms;
  j["runs"] = std::max(opt.runs, 1);
  j["first_run_ms"] = first_ms;
  j["outputs"] = json::array();
  std::string gear_note;
  if (gear.value().gear > 0) {
    j["batch"] = gear.value().batch;
    j["gear"] = gear.value().gear;
    gear_note = " (batch " + std::to_string(gear.value().batch) + " on the batch-" + std::to_string(gear.value().gear) + " gear)";
  }
  // The first run plans memory and warms caches: say which run the time is.
  char timing[160];
  if (opt.runs > 1)
    std::snprintf(timing, sizeof timing, "in %.2f ms (run %d of %d; the first, which plans memory, took %.2f ms)", ms,
                  opt.runs, opt.runs, first_ms);
  else
    std::snprintf(timing, sizeof timing, "in %.2f ms (one run, memory planning included; 'ferry bench' times steady runs)", ms);
  if (!opt.json) std::printf("ran %s on %s%s %s\n", opt.model.c_str(), opt.device.c_str(), gear_note.c_str(), timing);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [name, t] = outputs[i];
    if (!out_paths.empty()) {
      Status ws = write_npy(out_paths[i], t);
      if (!ws.is_ok()) return report(ws);
    }
    Summary s = summarize(t);
    json e = {{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.dims()},
              {"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"nan_count", s.nan}, {"inf_count", s.inf}};
    if (!out_paths.empty()) {
      e["file"] = out_paths[i];
      // safe file name (without .npy) -> output name, as bench and profile give it
      j["output_files"][out_paths[i].substr(opt.output_dir.size() + 1, out_paths[i].size() - opt.output_dir.size() - 5)] = name;
    }
    if (opt.top_k > 0) {
      json rows = json::array();
      for (const auto& row : top_k(t, opt.top_k)) {
        json r = json::array();
        for (const auto& [cls, score] : row) {
          json c = {{"class", cls}, {"score", score}};
          if (!class_label(cls, t).empty()) c["label"] = class_label(cls, t);
          r.push_back(c);
        }
        rows.push_back(r);
      }
      e["top_k"] = rows;
    }
    j["outputs"].push_back(e);
    if (!opt.json) {
      std::printf("  %-20s %-16s min %-12.6g max %-12.6g mean %-12.6g", name.c_str(), t.type().to_string().c_str(),
                  s.min, s.max, s.mean);
      if (s.nan || s.inf) std::printf(" NaN %lld Inf %lld", static_cast<long long>(s.nan), static_cast<long long>(s.inf));
      if (!out_paths.empty()) std::printf(" -> %s", out_paths[i].c_str());
      std::printf("\n");
      if (opt.top_k > 0) {
        int64_t r = 0;
        for (const auto& row : top_k(t, opt.top_k)) {
          std::printf("    [%lld] top-%d:", static_cast<long long>(r++), opt.top_k);
          for (const auto& [cls, score] : row) {
            const std::string label = class_label(cls, t);
            if (label.empty()) std::printf(" %lld (%.4g)", static_cast<long long>(cls), score);
            else std::printf(" %s [%lld] (%.4g)", label.c_str(), static_cast<long long>(cls), score);
          }
          std::printf("\n");
        }
      }
    }
  }
  if (opt.json) std::printf("%s\n", j.dump(2).c_str());
  return kExitOk;
}

namespace {
const bool kRegistered = register_command({"run", 50, [](CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model on inputs from .npy / .npz / ONNX .pb files or .jpg / .png images");
  cmd->add_option("model", opt->model, "ONNX model file (.onnx) or compiled model (.ferry)")->required();
  cmd->add_option("-i,--input", opt->inputs,
                  "[NAME=]FILE: an input as .npy, .npz (arrays matched to inputs by name), ONNX TensorProto .pb, or a "
                  ".jpg/.png image (the eval transform: Resize, CenterCrop, ImageNet Normalize; sizes from the model); "
                  "without NAME= inputs are taken in the model's input order. Repeat for several inputs.");
  cmd->add_option("-o,--output-dir", opt->output_dir,
                  "Write each output as DIR/<output name>.npy (names made file-system safe; created if missing)");
  cmd->add_option("-d,--device", opt->device, "Device to run on: cpu (default) or cpu-ref (reference kernels)");
  cmd->add_option("-O,--opt-level", opt->opt_level,
                  "Graph optimization: 0 none, 1 clean-ups, 2 fusions (default: 2, and 0 on cpu-ref)")
      ->check(CLI::Range(0, 2));
  cmd->add_option("-t,--threads", opt->threads, "Intra-op threads (default: the machine's cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--memory-limit", opt->memory_limit,
                  "Refuse to run when weights + inputs + the peak of intermediate tensors exceed this "
                  "(512M, 2G, ...; default: the memory available now; 'none': no check)");
  cmd->add_option("--top-k", opt->top_k,
                  "Also print the K largest values (class, score) of each output row, with the class names a model "
                  "trained by `ferry train --out` on an image folder carries");
  cmd->add_option("--image-size", opt->image_size,
                  "An image --input: crop size S (Resize(S*256/224) + CenterCrop(S)) when the model does not give it "
                  "(default: the model's metadata, else its square input size)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", opt->json, "Print a JSON summary instead of text");
  cmd->add_option("--runs", opt->runs,
                  "Run N times on the same inputs (the first run plans memory, later runs reuse the plan); "
                  "fails when any run's outputs differ from the first's; reports the last")
      ->check(CLI::Range(1, 1000));
  add_precision_options(cmd, &opt->precision, &opt->keep_fp32, &opt->precision_config);
  return CommandRun{cmd, [opt] { return cmd_run(*opt); }};
}});
}  // namespace

}  // namespace ferry::cli
