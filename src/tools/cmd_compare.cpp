// `ferry compare MODEL --ref SPEC --target SPEC`: how far a target (device + precision) is from
// a reference, per output, per layer (--per-layer), over a dataset (--inputs-dir), with an
// automatic fp32 repair (--fix) and JSON / HTML reports. The logic lives in precision/compare.h.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/cli_common.h"
#include "tools/gear_cli.h"
#include "tools/command_registry.h"
#include "tools/compare_report.h"
#include "tools/compare_samples.h"
#include "tools/precision_cli.h"
#include "tools/progress_bar.h"

namespace ferry::cli {
namespace {

struct CompareCliOptions {
  std::string model;
  std::string ref = "cpu-ref:fp32";
  std::string ref_model;
  std::string target;
  std::vector<std::string> inputs;
  std::string inputs_dir;
  bool per_layer = false;
  bool json = false;
  std::string report;
  double cosine_min = 0.99;
  double max_abs = -1;  // < 0: not given (0.01, or 5% of the output's range for an int8 model)
  std::vector<std::string> keep_fp32;
  std::string precision_config;
  std::string fix;
  int max_probes = 48;
  int threads = 0;
};

std::string fmt(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The precision one side really runs in: its spec's mode, the mode a .ferry file was compiled
// with (a cpu:fp32 run of a file compiled with allow_mix_precision runs mixed), and the target's
// --keep-fp32 / --precision-config.
std::string side_precision(const RunSpec& spec, const CompiledModel* compiled, const std::string& flags) {
  if (spec.is_outputs) return "saved outputs";
  std::string text = precision_mode_name(spec.mode);
  if (compiled) {
    auto built = parse_precision_mode(compiled->precision_mode);
    if (built.is_ok() && built.value() != PrecisionMode::kForceFp32) {
      const std::string built_name = precision_mode_name(built.value());
      text = spec.mode == PrecisionMode::kForceFp32 ? built_name + " (compiled into the .ferry file)"
                                                    : text + " over the .ferry file's compiled " + built_name;
    }
  }
  return text + flags;
}

struct HeaderPrecision {
  std::string ref, target;
};

void print_text(const CompareResult& r, const CompareOptions& o, const std::string& model, const HeaderPrecision& hp) {
  std::printf("ferry compare %s\n  reference %s [%s]  vs  target %s [%s]", model.c_str(), o.ref.text.c_str(),
              hp.ref.c_str(), o.target.text.c_str(), hp.target.c_str());
  const PrecisionReport& p = r.target_precision;
  if (p.nodes_lowered) {
    std::printf(" (%s: %lld nodes in low precision", precision_mode_name(o.target.mode), static_cast<long long>(p.nodes_lowered));
    if (p.nodes_computed_in_fp32) std::printf(", %lld of them computed in fp32", static_cast<long long>(p.nodes_computed_in_fp32));
    std::printf(", %lld kept fp32, %lld casts)", static_cast<long long>(p.nodes_kept_fp32), static_cast<long long>(p.casts_inserted));
  }
  if (!o.thresholds.check_max_abs)
    std::printf("\n  %zu sample(s); thresholds: cosine >= %g; max abs reported, not judged (an int8 model's error "
                "scales with its outputs; --max-abs X judges it)\n\n",
                r.samples, o.thresholds.cosine_min);
  else
    std::printf("\n  %zu sample(s); thresholds: cosine >= %g, max abs <= %g\n\n", r.samples, o.thresholds.cosine_min,
                o.thresholds.max_abs);
  std::printf("  %-24s %10s %10s %11s %11s %11s %11s %9s %8s %7s %7s\n", "output", "worst cos", "mean cos", "max abs",
              "mean abs", "max rel", "rmse", "nan/inf", "passed", "top-1", "top-5");
  for (const OutputRecord& rec : r.outputs) {
    std::string nf = std::to_string(rec.worst.target_nan) + "/" + std::to_string(rec.worst.target_inf);
    std::string passed = std::to_string(rec.samples_passed) + "/" + std::to_string(r.samples);
    char t1[16] = "", t5[16] = "";
    if (rec.rows) std::snprintf(t1, sizeof t1, "%.1f%%", 100.0 * static_cast<double>(rec.top1_agree) / static_cast<double>(rec.rows));
    if (rec.rows && rec.top5_defined)
      std::snprintf(t5, sizeof t5, "%.1f%%", 100.0 * static_cast<double>(rec.top5_agree) / static_cast<double>(rec.rows));
    std::printf("  %-24s %10s %10s %11s %11s %11s %11s %9s %8s %7s %7s\n", rec.name.c_str(), fmt(rec.worst.cosine).c_str(),
                fmt(rec.mean_cosine).c_str(), fmt(rec.worst.max_abs).c_str(), fmt(rec.worst.mean_abs).c_str(),
                fmt(rec.worst.max_rel).c_str(), fmt(rec.worst.rmse).c_str(), nf.c_str(), passed.c_str(), t1, t5);
    if (!rec.worst.mismatch.empty()) std::printf("      cannot compare: %s\n", rec.worst.mismatch.c_str());
  }
  if (!r.layers.empty()) {
    std::printf("\n  per layer (%zu values shared by both graphs, target order; worst over samples):\n", r.layers.size());
    std::printf("  %4s %-32s %-18s %10s %11s %11s %9s\n", "#", "node", "op", "cosine", "max abs", "max rel", "nan/inf");
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const LayerRecord& l = r.layers[i];
      std::string nf = std::to_string(l.worst.target_nan) + "/" + std::to_string(l.worst.target_inf);
      const char* mark = r.first_diverging && *r.first_diverging == i ? "  <-- first diverging" : (l.passes ? "" : "  (over)");
      std::printf("  %4zu %-32s %-18s %10s %11s %11s %9s%s\n", i, l.node.c_str(), l.op.c_str(), fmt(l.worst.cosine).c_str(),
                  fmt(l.worst.max_abs).c_str(), fmt(l.worst.max_rel).c_str(), nf.c_str(), mark);
    }
  }
  std::printf("\n");
  if (r.first_diverging) {
    const LayerRecord& l = r.layers[*r.first_diverging];
    std::string covers;
    for (const std::string& o : l.origin) covers += (covers.empty() ? " covering " : ", ") + o;
    std::printf("  first diverging node: '%s' (%s)%s, value '%s': cosine %s, max abs %s\n", l.node.c_str(), l.op.c_str(),
                covers.c_str(), l.value.c_str(), fmt(l.worst.cosine).c_str(), fmt(l.worst.max_abs).c_str());
  } else if (!r.layers.empty()) {
    std::printf("  no layer is over the cosine threshold\n");
  }
  if (r.first_non_finite)
    std::printf("  overflow: %s (sample '%s')\n", r.first_non_finite->describe().c_str(), r.first_non_finite_sample.c_str());
  std::printf("  result: %s (%zu/%zu samples pass)\n", r.passed() ? "PASS" : "FAIL", r.samples_passed, r.samples);
  // A failing verdict says why: each output's failed criteria on its first failing sample.
  for (const OutputRecord& rec : r.outputs) {
    if (rec.first_failing_sample.empty()) continue;
    for (const FailedCriterion& f : failed_criteria(rec.first_failure, o.thresholds)) {
      const char* flag = f.criterion == "max_abs" ? " (--max-abs)" : f.criterion == "cosine" ? " (--cosine-min)" : "";
      std::printf("    output '%s' fails on sample '%s': %s%s\n", rec.name.c_str(), rec.first_failing_sample.c_str(),
                  f.text.c_str(), flag);
    }
  }
}

// A quantized model (QuantizeLinear/DequantizeLinear, QLinear*, *Integer ops): its outputs carry
// int8 rounding error that scales with their range, so an absolute default bound fails good models.
bool is_quantized(const Model& model) {
  for (const Node& n : model.graph.nodes) {
    const std::string& op = n.op_type;
    if (op == "QuantizeLinear" || op == "DequantizeLinear" || op == "DynamicQuantizeLinear" || op.rfind("QLinear", 0) == 0 ||
        (op.size() > 7 && op.compare(op.size() - 7, 7, "Integer") == 0))
      return true;
  }
  return false;
}

int cmd_compare(const CompareCliOptions& opt) {
  auto loaded = load_geared_model(opt.model);
  if (!loaded.is_ok()) return report(loaded.status());
  std::shared_ptr<const Model> model = loaded.value().model;
  CompareOptions co;
  auto ref = parse_run_spec(opt.ref);
  if (!ref.is_ok()) return report(ref.status().with_context("--ref"));
  auto target = parse_run_spec(opt.target);
  if (!target.is_ok()) return report(target.status().with_context("--target"));
  co.ref = ref.value();
  if (!opt.ref_model.empty()) {
    if (co.ref.is_outputs) return report(invalid_argument("--ref-model runs a model; it does not go with --ref outputs:DIR"));
    auto rm = load_model(opt.ref_model);
    if (!rm.is_ok()) return report(rm.status().with_context("--ref-model"));
    co.ref_model = rm.value();
  }
  co.target = target.value();
  co.thresholds.cosine_min = opt.cosine_min;
  if (opt.max_abs >= 0) {
    co.thresholds.max_abs = opt.max_abs;
  } else if (is_quantized(*model)) {
    co.thresholds.check_max_abs = false;
  }
  co.per_layer = opt.per_layer;
  co.threads = opt.threads;
  if (opt.per_layer && co.ref.is_outputs)
    return report(invalid_argument("--per-layer needs a reference that runs the model (DEVICE:PRECISION), not outputs:DIR"));
  auto precision = precision_options("", opt.keep_fp32, opt.precision_config);
  if (!precision.is_ok()) return report(precision.status());
  co.target_precision = precision.value();  // the --target precision sets the mode
  auto samples = make_sample_source(model, opt.inputs, opt.inputs_dir, co.ref);
  if (!samples.is_ok()) return report(samples.status());
  if (loaded.value().geared() && samples.value().count > 0) {  // the gear for the first sample's batch
    Status st = use_gear_for_samples(loaded.value(), co.ref.is_outputs, &model, &samples.value());
    if (!st.is_ok()) return report(st.with_context(opt.model));
  }
  if (opt.inputs.empty() && opt.inputs_dir.empty() && !model->graph.inputs.empty())
    return report(invalid_argument("give the inputs: --input [NAME=]FILE ... or --inputs-dir DIR"));
  ProgressBar bar;
  co.progress = [&bar](size_t done, size_t total) {
    bar.update("compare", static_cast<int64_t>(done), static_cast<int64_t>(total), "");
  };
  auto comparator = Comparator::create(model, co);
  if (!comparator.is_ok()) return report(comparator.status());
  auto result = comparator.value()->run(samples.value());
  bar.finish();
  if (!result.is_ok()) return report(result.status());
  const CompareResult& r = result.value();
  nlohmann::json doc = compare_to_json(r, co, opt.model);
  HeaderPrecision hp;
  {
    const CompiledModel* compiled = loaded.value().compiled.get();
    std::string flags;
    if (!opt.keep_fp32.empty()) flags += ", --keep-fp32 given";
    if (!opt.precision_config.empty()) flags += ", --precision-config " + opt.precision_config;
    hp.ref = side_precision(co.ref, co.ref_model ? nullptr : compiled, "");
    hp.target = side_precision(co.target, compiled, flags);
    doc["ref_runs_in"] = hp.ref;
    doc["target_runs_in"] = hp.target;
  }
  bool ok = r.passed();
  if (!opt.json) print_text(r, co, opt.model, hp);
  if (!opt.fix.empty()) {
    if (r.passed()) {
      if (!opt.json) std::printf("  --fix: the target already passes; nothing to keep in fp32 (no config written)\n");
    } else {
      co.progress = nullptr;
      FixSearchOptions fo;
      fo.max_probes = opt.max_probes;
      auto fixed = fix_precision(comparator.value().get(), samples.value(), opt.fix, fo);
      if (!fixed.is_ok()) return report(fixed.status().with_context("--fix"));
      const FixResult& f = fixed.value();
      add_fix_json(&doc, f, opt.fix);
      ok = f.search.found && f.verified.passed();
      if (!opt.json) {
        std::printf("\n  --fix (%d probes):\n", f.search.probes);
        for (const std::string& line : f.search.log) std::printf("    %s\n", line.c_str());
        if (f.search.found) {
          std::string names;
          for (const std::string& n : f.search.keep_fp32) names += (names.empty() ? "" : ", ") + n;
          std::printf("    keep %zu node(s) in fp32: %s\n    wrote %s; verified from the file: %s (%zu/%zu samples pass)\n",
                      f.search.keep_fp32.size(), names.c_str(), opt.fix.c_str(), f.verified.passed() ? "PASS" : "FAIL",
                      f.verified.samples_passed, f.verified.samples);
          std::printf("    target time per sample: %.2f ms before, %.2f ms with the config\n", f.target_ms_before,
                      f.target_ms_after);
        }
      }
    }
  }
  if (!opt.report.empty()) {
    Status st = write_compare_html(opt.report, doc);
    if (!st.is_ok()) return report(st);
    if (!opt.json) std::printf("  report: %s\n", opt.report.c_str());
  }
  if (opt.json) std::printf("%s\n", doc.dump(2).c_str());
  return ok ? kExitOk : kExitBadInput;
}

const bool kRegistered = register_command({"compare", 60, [](CLI::App& app) {
  auto opt = std::make_shared<CompareCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Compare a target (device + precision) with a reference: per output, per layer, over a dataset; repair with --fix");
  cmd->add_option("model", opt->model, "The target's model: ONNX (.onnx) or compiled (.ferry)")->required();
  cmd->add_option("--ref", opt->ref,
                  "Reference: DEVICE:PRECISION[:OPT_LEVEL] (default cpu-ref:fp32) or outputs:DIR (saved .npy outputs: "
                  "<output>.npy or expected_<k>.npy; one sub-folder or .npz per sample with --inputs-dir)");
  cmd->add_option("--ref-model", opt->ref_model,
                  "The reference runs this model (same inputs and outputs): e.g. the fp32 original of a quantized MODEL");
  cmd->add_option("--target", opt->target,
                  "Target: DEVICE:PRECISION[:OPT_LEVEL], e.g. cpu:fp16, cpu:bf16, cpu:allow_mix_precision, cuda:fp16. "
                  "Precisions: fp32 fp16 bf16 mix mix_bf16 or the ATC names (force_fp16, allow_fp32_to_fp16, ...)")
      ->required();
  cmd->add_option("-i,--input", opt->inputs, "[NAME=]FILE: one sample's inputs (.npy, .npz, .pb); repeat for several inputs");
  cmd->add_option("--inputs-dir", opt->inputs_dir,
                  "A dataset: one sample per .npz/.npy file or per sub-folder (test_data_set_*/input_<i>.pb, <input>.npy)");
  cmd->add_flag("--per-layer", opt->per_layer,
                "Also compare every value both graphs compute (fused boundaries) and name the first diverging node");
  cmd->add_flag("--json", opt->json, "Print the JSON report instead of text");
  cmd->add_option("--report", opt->report, "Write a self-contained HTML report (per-layer chart, tables)");
  cmd->add_option("--cosine-min", opt->cosine_min, "Cosine similarity threshold (default 0.99)");
  cmd->add_option("--max-abs", opt->max_abs, "Max absolute error threshold for outputs (default 0.01; for an int8 (quantized) MODEL: not "
                  "judged unless given, as its error scales with its outputs)");
  cmd->add_option("--keep-fp32", opt->keep_fp32, "NODE,...: target nodes kept in fp32 (ONNX names work on fused graphs)");
  cmd->add_option("--precision-config", opt->precision_config,
                  "Precision config JSON for the target (keep_fp32, nodes, keep_fp32_ops; the --target precision wins over its mode)");
  cmd->add_option("--fix", opt->fix,
                  "When the target fails: search a small set of nodes to keep in fp32, write it to this precision config "
                  "file, and verify the target passes with it");
  cmd->add_option("--max-probes", opt->max_probes, "Budget of target runs over the samples for --fix (default 48)");
  cmd->add_option("-t,--threads", opt->threads, "Intra-op threads (default: the machine's cores)")->check(CLI::NonNegativeNumber);
  return CommandRun{cmd, [opt] { return cmd_compare(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
