// The precision options shared by commands that run a model (`ferry run`, and any command that
// wants them): --precision MODE, --keep-fp32 NODE,..., --precision-config FILE.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "passes/precision.h"

namespace ferry::cli {

void add_precision_options(CLI::App* cmd, std::string* mode, std::vector<std::string>* keep_fp32, std::string* config);
/// Builds the options: the config file first, then --precision (wins over the file's mode), then
/// --keep-fp32 (comma-separated, repeatable) added to the file's list.
StatusOr<PrecisionOptions> precision_options(const std::string& mode, const std::vector<std::string>& keep_fp32,
                                             const std::string& config);
/// "a,b" "c" -> a, b, c
std::vector<std::string> split_commas(const std::vector<std::string>& items);

}  // namespace ferry::cli
