// Reports of `ferry scan`: the text listing with its summary and "by hand" list, JSON, and SARIF
// 2.1.0 (for code-scanning UIs).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scan/scanner.h"

namespace ferry::scan {

struct ReportInfo {
  std::string target;
  double seconds = 0;  // wall time of the scan
  bool fix = false;
  std::vector<std::string> files_written;  // by --fix
};

/// Findings then the summary, as text for a terminal.
std::string text_report(const std::vector<FileResult>& results, const ReportInfo& info);
/// Only the summary part of text_report (counts, skipped files, the by-hand list).
std::string text_summary(const std::vector<FileResult>& results, const ReportInfo& info);
nlohmann::json json_report(const std::vector<FileResult>& results, const ReportInfo& info);
nlohmann::json sarif_report(const std::vector<FileResult>& results, const RuleSet& rules, const ReportInfo& info);

}  // namespace ferry::scan
