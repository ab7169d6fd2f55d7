// Reports of `ferry compare`: the JSON document (for machines; the HTML embeds it) and a
// self-contained HTML page (inline CSS and SVG charts, no scripts or network) with the per-layer
// cosine / max-abs-error plot along the graph, the first diverging node highlighted, and tables.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "precision/compare.h"
#include "precision/precision_fix.h"

namespace ferry::cli {

nlohmann::json compare_to_json(const CompareResult& result, const CompareOptions& options, const std::string& model_path);
/// Adds the --fix outcome under "fix".
void add_fix_json(nlohmann::json* doc, const FixResult& fix, const std::string& config_path);
/// Writes the HTML page for a document made by compare_to_json.
Status write_compare_html(const std::string& path, const nlohmann::json& doc);

}  // namespace ferry::cli
