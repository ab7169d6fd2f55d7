// Precision options of the CLI; see precision_cli.h.
#include "tools/precision_cli.h"

namespace ferry::cli {

void add_precision_options(CLI::App* cmd, std::string* mode, std::vector<std::string>* keep_fp32, std::string* config) {
  cmd->add_option("--precision", *mode,
                  "Precision mode (ATC names): force_fp32 (default), allow_fp32_to_fp16, force_fp16, allow_mix_precision, "
                  "allow_fp32_to_bf16, force_bf16, allow_mix_precision_bf16; short: fp32 fp16 bf16 mix mix_bf16. "
                  "fp16/bf16 values are stored and rounded as the hardware would; the first NaN/inf is reported");
  cmd->add_option("--keep-fp32", *keep_fp32, "NODE,...: nodes kept in fp32 whatever the mode (ONNX names work on fused graphs)");
  cmd->add_option("--precision-config", *config,
                  "Precision config JSON: {\"mode\", \"keep_fp32\": [...], \"nodes\": {NODE: fp32|fp16|bf16}, "
                  "\"keep_fp32_ops\": [...], \"cube_ops\": [...]} (ferry compare --fix writes one)");
}

StatusOr<PrecisionOptions> precision_options(const std::string& mode, const std::vector<std::string>& keep_fp32,
                                             const std::string& config) {
  PrecisionOptions p;
  if (!config.empty()) RETURN_IF_ERROR(load_precision_config(config, &p));
  if (!mode.empty()) {
    auto m = parse_precision_mode(mode);
    if (!m.is_ok()) return m.status().with_context("--precision");
    p.mode = m.value();
  }
  for (const std::string& n : split_commas(keep_fp32)) p.keep_fp32.push_back(n);
  return p;
}

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& s : items) {
    size_t start = 0;
    while (true) {
      const size_t c = s.find(',', start);
      std::string part = s.substr(start, c == std::string::npos ? std::string::npos : c - start);
      if (!part.empty()) out.push_back(part);
      if (c == std::string::npos) break;
      start = c + 1;
    }
  }
  return out;
}

}  // namespace ferry::cli
