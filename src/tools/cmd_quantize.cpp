// `ferry quantize MODEL.onnx --calibration DATA --out MODEL.int8.onnx`: post-training int8
// quantization into a standard QDQ ONNX file. The logic lives in quant/ (docs/quantization.md).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "quant/quantizer.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"
#include "tools/progress_bar.h"

namespace ferry::cli {
namespace {

struct QuantizeCliOptions {
  std::string model;
  std::string calibration;
  std::string out;
  std::string method = "percentile";
  int64_t image_size = 0;
  int64_t batch = 8;
  int64_t samples = 0;
  std::vector<std::string> keep_fp32;
  double target_cosine = 0;
  int max_kept = 24;
  int threads = 0;
  bool json = false;
  bool no_plain_floor = false;
  bool reduce_range = false, no_reduce_range = false;
  bool bias_correction = false;
  int bias_rounds = 0;
  std::string holdout;
  std::string weight_rounding = "nearest";
  int gptq_samples = 8;
};

std::string join(const std::vector<std::string>& v, size_t max = 8) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > max) s += ", ... (" + std::to_string(v.size() - max) + " more)";
  return s;
}

int cmd_quantize(const QuantizeCliOptions& opt) {
  quant::QuantizeOptions o;
  o.model_path = opt.model;
  o.out_path = opt.out;
  o.data.path = opt.calibration;
  o.data.image_size = opt.image_size;
  o.data.batch = opt.batch;
  o.data.max_samples = opt.samples;
  auto method = quant::parse_method(opt.method);
  if (!method.is_ok()) return report(method.status());
  o.method = method.value();
  for (const std::string& k : opt.keep_fp32)
    if (!k.empty()) o.keep_fp32.push_back(k);
  o.target_cosine = opt.target_cosine;
  o.max_kept_layers = opt.max_kept;
  o.threads = opt.threads;
  o.bias_correction = opt.bias_correction;
  o.plain_floor = !opt.no_plain_floor;
  if (opt.reduce_range && opt.no_reduce_range)
    return report(invalid_argument("--reduce-range and --no-reduce-range contradict each other: give one (neither: "
                                   "7-bit weights where they keep the plain floor on a host without VNNI)"));
  o.reduce_range = opt.reduce_range      ? quant::ReduceRange::kOn
                   : opt.no_reduce_range ? quant::ReduceRange::kOff
                                         : quant::ReduceRange::kAuto;
  o.bias_correction_rounds = opt.bias_rounds;
  o.holdout_path = opt.holdout;
  auto rounding = quant::parse_weight_rounding(opt.weight_rounding);
  if (!rounding.is_ok()) return report(rounding.status());
  o.weight_rounding = rounding.value();
  o.gptq_samples = opt.gptq_samples;
  ProgressBar bar;
  o.progress = [&bar](const std::string& stage, int64_t done, int64_t total) {
    bar.update(stage, done, total, "batches");
  };
  const bool json = opt.json;
  o.log = [&bar, json](const std::string& line) {
    bar.finish();
    if (!json) std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  };
  if (!json) std::printf("ferry quantize %s (%s calibration)\n", opt.model.c_str(), opt.method.c_str());
  auto result = quant::quantize_model(o);
  bar.finish();
  if (!result.is_ok()) return report(result.status());
  const quant::QuantizeReport& r = result.value();
  for (const std::string& w : r.warnings) std::fprintf(stderr, "ferry: warning: %s\n", w.c_str());
  int64_t floats = 0;
  for (const auto& [op, nodes] : r.left_float) floats += static_cast<int64_t>(nodes.size());
  if (json) {
    nlohmann::json j;
    j["model"] = opt.model;
    j["out"] = opt.out;
    j["method"] = quant::method_name(r.method);
    if (!r.method_cosines.empty()) {
      nlohmann::json mc = nlohmann::json::object();
      for (const auto& [m, c] : r.method_cosines) mc[m] = c;
      j["method_cosines"] = mc;
    }
    j["samples"] = r.samples;
    j["batches"] = r.batches;
    j["warnings"] = r.warnings;
    j["quantized_nodes"] = r.quantized_nodes;
    j["qdq_pairs"] = r.qdq_pairs;
    j["int8_weights"] = r.int8_weights;
    j["int32_biases"] = r.int32_biases;
    j["left_float"] = r.left_float;
    j["kept_fp32"] = r.kept_by_user;
    nlohmann::json fo = nlohmann::json::array();
    for (const auto& [node, c] : r.float_outputs) fo.push_back({{"node", node}, {"cosine_after", c}});
    j["plain_floor"] = {{"on", !opt.no_plain_floor}, {"plain_cosine", r.plain_cosine}, {"float_outputs", fo},
                        {"plain_written", r.plain_written}};
    nlohmann::json restored = nlohmann::json::array();
    for (const auto& k : r.restored_8bit)
      restored.push_back({{"node", k.node}, {"op", k.op_type}, {"probe_cosine_all_7bit", k.input_cosine},
                          {"probe_cosine_this_layer_8bit", k.output_cosine}, {"model_cosine_after", k.model_cosine}});
    nlohmann::json released = nlohmann::json::array();
    for (const auto& k : r.released_7bit) released.push_back({{"node", k.node}, {"op", k.op_type}, {"model_cosine_after", k.model_cosine}});
    j["reduce_range"] = {{"on", r.reduce_range},
                         {"mode", opt.reduce_range ? "on" : opt.no_reduce_range ? "off" : "auto"},
                         {"weight_range", r.reduce_range ? nlohmann::json::array({-64, 64}) : nlohmann::json::array({-127, 127})},
                         {"host_pairs_saturate", r.host_pairs_saturate},
                         {"weights_7bit", r.reduced_weights},
                         {"cosine_8bit", r.cosine_full_range},
                         {"cosine_7bit", r.cosine_reduced_range},
                         {"cosine_mixed", r.cosine_mixed_range},
                         {"cosine_bar", r.reduce_range_bar},
                         {"layers_7bit", r.layers_7bit},
                         {"layers_8bit_restored", restored},
                         {"layers_7bit_released", released}};
    j["output_cosine"] = {{"mean", r.cosine_mean}, {"worst_sample", r.cosine_min}, {"before_repair", r.first_cosine}};
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& k : r.kept_for_target)
      kept.push_back({{"node", k.node}, {"op", k.op_type}, {"probe_cosine_all_quantized", k.input_cosine},
                      {"probe_cosine_this_layer_float", k.output_cosine}, {"model_cosine_after", k.model_cosine}});
    j["target_cosine"] = opt.target_cosine;
    j["kept_for_target"] = kept;
    j["target_reached"] = r.target_reached;
    j["kept_in_graph_order"] = r.graph_order;
    j["weight_rounding"] = {{"method", opt.weight_rounding}, {"weights_gptq", r.weights_gptq},
                            {"cosine_before", r.gptq_cosine_before}};
    j["bias_correction"] = {{"on", opt.bias_correction}, {"biases", r.biases_corrected}, {"round_cosines", r.bias_rounds}};
    if (!opt.holdout.empty())
      j["holdout"] = {{"path", opt.holdout}, {"samples", r.holdout_samples}, {"mean", r.holdout_mean},
                      {"worst_sample", r.holdout_min}, {"without_bias_correction", r.holdout_uncorrected}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    if (!r.method_cosines.empty()) {
      std::printf("  --method auto: output cosine per method:");
      for (const auto& [m, c] : r.method_cosines) std::printf(" %s %.5f", m.c_str(), c);
      std::printf("; kept %s\n", quant::method_name(r.method));
    }
    std::printf("  calibrated on %lld samples (%lld batches)\n", static_cast<long long>(r.samples),
                static_cast<long long>(r.batches));
    std::printf("  quantized %lld nodes: %lld Q/DQ pairs on activations (uint8), %lld int8 weights, %lld int32 biases\n",
                static_cast<long long>(r.quantized_nodes), static_cast<long long>(r.qdq_pairs),
                static_cast<long long>(r.int8_weights), static_cast<long long>(r.int32_biases));
    if (!r.kept_by_user.empty()) std::printf("  kept in fp32 (--keep-fp32): %s\n", join(r.kept_by_user).c_str());
    if (floats > 0) {
      std::printf("  left in float (%lld nodes, ops ferry does not quantize or whose inputs are not float tensors):\n",
                  static_cast<long long>(floats));
      for (const auto& [op, nodes] : r.left_float)
        std::printf("    %-22s %4zu  %s\n", op.c_str(), nodes.size(), join(nodes, 4).c_str());
    }
    if (!r.kept_for_target.empty()) {
      if (r.graph_order)
        std::printf("  --target-cosine %g: kept %zu layer(s) in fp32, in graph order from the input (keeping the most\n"
                    "  sensitive ones alone fell short: the rounding of early layers grows through the network);\n"
                    "  the model's output cosine before -> after each:\n",
                    opt.target_cosine, r.kept_for_target.size());
      else
        std::printf("  --target-cosine %g: kept %zu layer(s) in fp32 (most sensitive first: the probe samples' output cosine\n"
                    "  with all layers quantized -> with only that layer in float; then the calibration data's with it):\n",
                    opt.target_cosine, r.kept_for_target.size());
      for (const auto& k : r.kept_for_target)
        std::printf("    %-40s %-7s %.5f -> %.5f; model %.5f\n", k.node.c_str(), k.op_type.c_str(), k.input_cosine,
                    k.output_cosine, k.model_cosine);
    }
    if (!opt.no_plain_floor) {
      std::printf("  plain MinMax structure (Q/DQ on Conv/Gemm/MatMul inputs only): output cosine %.5f%s\n", r.plain_cosine,
                  r.plain_written ? "; nothing else reached it: the plain structure was written" : "");
      for (const auto& [node, c] : r.float_outputs)
        std::printf("    output of %-40s left float; then %.5f\n", node.c_str(), c);
    }
    if (r.cosine_reduced_range > 0) {
      std::printf("  reduce range (no VNNI on this host): 7-bit weights where 8 bits cost the split give output cosine "
                  "%.5f, 8-bit %.5f, the plain floor %.5f (bar %.5f)",
                  r.cosine_reduced_range, r.cosine_full_range, r.plain_cosine, r.reduce_range_bar);
      if (!r.restored_8bit.empty()) std::printf("; layers put back to 8 bits (best probed gain per multiply-add first):");
      std::printf("\n");
      for (const auto& k : r.restored_8bit)
        std::printf("    %-40s (%s) 8-bit: probe cosine %.5f -> %.5f; then %.5f\n", k.node.c_str(), k.op_type.c_str(),
                    k.input_cosine, k.output_cosine, k.model_cosine);
      for (const auto& k : r.released_7bit)
        std::printf("    %-40s (%s) back to 7 bits (the bar still reached without it): then %.5f\n", k.node.c_str(),
                    k.op_type.c_str(), k.model_cosine);
      std::printf("    %s\n", r.reduce_range ? ("7-bit on " + std::to_string(r.reduced_weights) + " of " +
                                                  std::to_string(r.int8_weights) +
                                                  " weights (exact int8 at full speed on this host): " +
                                                  [&] {
                                                    std::string l;
                                                    for (const auto& n : r.layers_7bit) l += (l.empty() ? "" : ", ") + n;
                                                    return l;
                                                  }())
                                                     .c_str()
                                               : "no mix reached the bar: 8-bit weights written");
    }
    else
      std::printf("  weights: %s\n", r.reduce_range ? "7-bit, [-64, 64] (--reduce-range; depthwise ones 8-bit)"
                                    : opt.reduce_range    ? "8-bit, [-127, 127] (--reduce-range: only depthwise weights here)"
                                    : opt.no_reduce_range ? "8-bit, [-127, 127] (--no-reduce-range)"
                                    : r.host_pairs_saturate ? "8-bit, [-127, 127] (--no-plain-floor: no floor to choose 7-bit by)"
                                                            : "8-bit, [-127, 127] (this host's int8 products do not saturate)");
    std::printf("  output cosine to fp32 on the calibration data: mean %.5f, worst sample %.5f\n", r.cosine_mean,
                r.cosine_min);
    if (!opt.holdout.empty()) {
      std::printf("  output cosine to fp32 on the held-out data (%lld samples): mean %.5f, worst sample %.5f",
                  static_cast<long long>(r.holdout_samples), r.holdout_mean, r.holdout_min);
      if (r.biases_corrected > 0) std::printf(" (without bias correction: %.5f)", r.holdout_uncorrected);
      std::printf("\n");
    }
    if (opt.target_cosine > 0)
      std::printf("  target cosine %g: %s\n", opt.target_cosine, r.target_reached ? "reached" : "NOT reached");
    std::printf("  wrote %s\n", opt.out.c_str());
  }
  return r.target_reached ? kExitOk : kExitBadInput;
}

const bool kRegistered = register_command({"quantize", 55, [](CLI::App& app) {
  auto opt = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Post-training int8 quantization: calibrate, write a QDQ ONNX model, measure and repair its precision");
  cmd->add_option("model", opt->model, "Float ONNX model (.onnx, opset >= 13)")->required();
  cmd->add_option("--calibration", opt->calibration,
                  "Calibration data: an .npz (arrays named after the inputs, samples on axis 0), a folder of .npy/.npz, "
                  "or an image folder with --image-size")
      ->required();
  cmd->add_option("-o,--out", opt->out, "The quantized model to write (.onnx)")->required();
  cmd->add_option("--method", opt->method, "Activation ranges: percentile (default: clip 0.001% of each tail), minmax, entropy, mse (least squared error), or auto "
                  "(write the file with each, keep the best output cosine on the calibration data)");
  cmd->add_option("--image-size", opt->image_size, "The calibration folder holds images: eval transform to SxS (no default: required for an image folder)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", opt->batch, "Samples per calibration run (default 8)")->check(CLI::PositiveNumber);
  cmd->add_option("--samples", opt->samples, "Use at most this many calibration samples (default: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--keep-fp32", opt->keep_fp32, "NODE,...: nodes left in float")->delimiter(',');
  cmd->add_option("--target-cosine", opt->target_cosine,
                  "Keep the most sensitive layers in float until the output cosine to fp32 on the calibration data "
                  "reaches this (e.g. 0.99); exit 2 when it cannot (default: off)");
  cmd->add_option("--max-kept", opt->max_kept, "Most layers --target-cosine may keep in float (default 24)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-plain-floor", opt->no_plain_floor,
                "Skip the check against the plain MinMax structure (Q/DQ on Conv/Gemm/MatMul inputs only) and the "
                "float outputs it may choose (saves one run over the calibration data and the probes)");
  cmd->add_flag("--reduce-range", opt->reduce_range,
                "7-bit weights ([-64, 64] per channel, ONNX Runtime's reduce_range): on CPUs without VNNI (AVX2) no "
                "int16 pair of u8 x s8 products can saturate, so int8 runs unsplit and exact (ferry, ONNX Runtime). Default: "
                "on such a host 7-bit where the file still reaches the plain floor's output cosine, else 8-bit");
  cmd->add_flag("--no-reduce-range", opt->no_reduce_range, "8-bit weights ([-127, 127] per channel) on any host");
  cmd->add_flag("--bias-correction", opt->bias_correction,
                "Empirical bias correction: each int32 bias absorbs the per-channel mean error of its output on the "
                "calibration data, measured with the corrected layers before it (off by default: on the zoo it adds "
                "0.001-0.002 of cosine on the calibration data, held out 0.001 to ResNet-50 and ~0 to the others; one "
                "run of the quantized model per layer; docs/quantization.md)");
  cmd->add_option("--bias-rounds", opt->bias_rounds,
                  "--bias-correction in this many sequential blocks of layers, each one run of the quantized model over the "
                  "calibration data (default 0: one layer at a time, the most accurate; fewer blocks overcorrect)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--weight-rounding", opt->weight_rounding,
                  "int8 weight values: nearest (default) or gptq (each Conv/Gemm/MatMul weight rounded to minimize its "
                  "output error on its inputs in the quantized model, layer by layer; one run of the quantized model "
                  "on --gptq-samples samples per layer; docs/quantization.md)");
  cmd->add_option("--gptq-samples", opt->gptq_samples, "Calibration samples GPTQ measures each layer's inputs on (default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--holdout", opt->holdout,
                  "Held-out data (same forms as --calibration): also report the output cosine on it");
  cmd->add_flag("--json", opt->json, "Print a JSON report");
  cmd->add_option("-t,--threads", opt->threads, "Intra-op threads (default: the machine's cores)")->check(CLI::NonNegativeNumber);
  return CommandRun{cmd, [opt] { return cmd_quantize(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
