// `ferry compile MODEL -o OUT.ferry [...]`: the offline compiler (like ATC). Optimizes the graph
// for a device, fixes shapes, compiles one plan per batch gear, optionally tunes kernels, and
// writes one .ferry file (docs/format.md) that every other command and the C API load.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "compiler/tuner.h"
#include "format/compiled_model.h"
#include "io/file.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"
#include "tools/progress_bar.h"

namespace ferry::cli {
namespace {

struct CompileCliOptions {
  std::string model;
  std::string output;
  std::vector<std::string> input_shapes;
  std::string dynamic_batch;
  std::string precision_mode = "force_fp32";
  std::string precision_config;
  int opt_level = -1;
  std::string device = "cpu";
  bool tune = false;
  bool no_prepack = false;
  std::string tuning_cache;
  int threads = 0;
  bool json = false;
};

int cmd_compile(const CompileCliOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  CompileOptions co;
  co.device = opt.device;
  co.opt_level = opt.opt_level;
  co.precision_mode = opt.precision_mode;
  co.precision_config = opt.precision_config;
  co.tune = opt.tune;
  co.prepack = !opt.no_prepack;
  co.tuning_cache = opt.tuning_cache.empty() ? default_tuning_cache_path() : opt.tuning_cache;
  co.threads = opt.threads;
  if (Status s = parse_input_shapes(opt.input_shapes, &co.input_shapes); !s.is_ok()) return report(s);
  if (!opt.dynamic_batch.empty()) {
    auto gears = parse_batch_gears(opt.dynamic_batch);
    if (!gears.is_ok()) return report(gears.status());
    co.batch_gears = gears.value();
  }
  if (is_compiled_model_file(opt.model))
    return report(invalid_argument("'" + opt.model + "' is already a compiled model; compile the .onnx it came from"));
  auto loaded = load_model(opt.model);
  if (!loaded.is_ok()) return report(loaded.status());

  ProgressBar bar;
  co.progress = [&bar](const std::string& stage, int64_t done, int64_t total, const std::string& detail) {
    bar.update(stage, done, total, detail);
  };
  CompileReport rep;
  auto spec = compile_model(*loaded.value(), co, &rep);
  bar.finish();
  if (!spec.is_ok()) return report(spec.status());
  spec.value().source = opt.model;
  auto bytes = serialize_compiled_model(spec.value());
  if (!bytes.is_ok()) return report(bytes.status());
  {
    auto w = AtomicFileWriter::create(opt.output);
    if (!w.is_ok()) return report(w.status());
    Status s = w.value()->write(bytes.value().data(), bytes.value().size());
    if (s.is_ok()) s = w.value()->commit();
    if (!s.is_ok()) return report(s);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const CompiledModelSpec& sp = spec.value();
  std::string gears;
  for (const CompiledGear& g : sp.gears)
    if (g.batch > 0) gears += (gears.empty() ? "" : ",") + std::to_string(g.batch);
  int64_t weight_bytes = 0;
  for (const auto& [name, t] : sp.gears[0].model->graph.initializers) weight_bytes += t.nbytes();
  if (opt.json) {
    nlohmann::json j = {{"model", opt.model}, {"output", opt.output}, {"device", sp.device}, {"isa", host_isa()},
                        {"opt_level", sp.opt_level}, {"precision_mode", sp.precision_mode},
                        {"nodes_before", rep.nodes_before}, {"nodes_after", rep.nodes_after},
                        {"batch_gears", nlohmann::json::array()}, {"file_bytes", bytes.value().size()},
                        {"seconds", secs}, {"packed_nodes", rep.packed_nodes}, {"packed_bytes", rep.packed_bytes}};
    for (const CompiledGear& g : sp.gears)
      if (g.batch > 0) j["batch_gears"].push_back(g.batch);
    if (opt.tune)
      j["tuning"] = {{"threads", sp.threads}, {"nodes_timed", rep.tuned_nodes}, {"cache_hits", rep.cache_hits},
                     {"changed", rep.changed_nodes}, {"cache", co.tuning_cache}};
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("compiled %s -> %s in %.2f s\n", opt.model.c_str(), opt.output.c_str(), secs);
  std::printf("  target:    %s (%s), opt level %d, precision %s\n", sp.device.c_str(), host_isa().c_str(), sp.opt_level,
              sp.precision_mode.c_str());
  // Without gears the compiled graph keeps the input shapes it was given: "fixed" only when every
  // dimension is a number (a batch-dynamic model stays dynamic, planned per run).
  std::string shapes = "batch gears " + gears;
  if (gears.empty()) {
    std::string dynamic;
    for (const ValueInfo& v : sp.gears[0].model->graph.inputs)
      if (v.type.shape)
        for (const Dim& d : v.type.shape->dims)
          if (!d.is_known()) {
            dynamic = v.name + " " + v.type.to_string();
            break;
          }
    shapes = dynamic.empty() ? "fixed shapes"
                             : "dynamic shapes (input " + dynamic + "; memory planned per input shape at run time; "
                               "--input-shape or --dynamic-batch 1,2,4,8 fixes them)";
  }
  std::printf("  graph:     %lld nodes -> %lld; %s\n", static_cast<long long>(rep.nodes_before),
              static_cast<long long>(rep.nodes_after), shapes.c_str());
  std::printf("  file:      %s (weights of one plan %s)\n", human_bytes(static_cast<int64_t>(bytes.value().size())).c_str(),
              human_bytes(weight_bytes).c_str());
  if (rep.packed_nodes > 0)
    std::printf("  packed:    weights of %lld nodes stored in their kernels' layout (%s; used in place at load)\n",
                static_cast<long long>(rep.packed_nodes), human_bytes(rep.packed_bytes).c_str());
  if (opt.tune)
    std::printf("  tuning:    %d threads; %lld nodes timed, %lld from the cache, %lld changed from the default (cache %s)\n",
                sp.threads, static_cast<long long>(rep.tuned_nodes), static_cast<long long>(rep.cache_hits),
                static_cast<long long>(rep.changed_nodes), co.tuning_cache.empty() ? "none" : co.tuning_cache.c_str());
  return kExitOk;
}

const bool kRegistered = register_command({"compile", 40, [](CLI::App& app) {
  auto opt = std::make_shared<CompileCliOptions>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile a model for a device into one .ferry file (fast, safe to load; "
                                                "the C API and every command load it)");
  cmd->add_option("model", opt->model, "ONNX model file (.onnx)")->required();
  cmd->add_option("-o,--output", opt->output, "The compiled model to write (.ferry)")->required();
  cmd->add_option("--input-shape", opt->input_shapes,
                  "Fix input shapes: NAME:D0,D1,...[;NAME:...] (e.g. image:1,3,224,224); repeatable");
  cmd->add_option("--dynamic-batch", opt->dynamic_batch,
                  "Compile one plan per batch size (e.g. 1,2,4,8); a run picks the smallest gear >= its batch");
  cmd->add_option("--precision-mode", opt->precision_mode,
                  "force_fp32 (default), allow_fp32_to_fp16, force_fp16, allow_mix_precision, and the bf16 forms "
                  "(short: fp32, fp16, bf16, mix)");
  cmd->add_option("--precision-config", opt->precision_config, "Per-node precision choices (JSON, see `ferry compare --fix`)");
  cmd->add_option("-O,--opt-level", opt->opt_level, "Graph optimization: 0 none, 1 clean-ups, 2 fusions (default: 2; 0 on cpu-ref)")
      ->check(CLI::Range(0, 2));
  cmd->add_option("-d,--device", opt->device, "Device to compile for: cpu (default), cpu-ref, ...");
  cmd->add_flag("--tune", opt->tune, "Time candidate kernels per node on this machine and keep the fastest");
  cmd->add_flag("--no-prepack", opt->no_prepack,
                "Do not store the weights pre-packed for the cpu kernels (smaller file; the load packs them)");
  cmd->add_option("--tuning-cache", opt->tuning_cache,
                  "Tuning cache file, reused across compiles (default: ~/.cache/ferry/tuning.json)");
  cmd->add_option("-t,--threads", opt->threads, "Intra-op threads when tuning (default: try 1, 2, 4, ... cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", opt->json, "Print a JSON summary");
  return CommandRun{cmd, [opt] { return cmd_compile(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
