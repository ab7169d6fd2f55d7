// `ferry scan` over many files: read (UTF-8, size limit), analyze, match, optionally fix — files
// in parallel. A file that is too big, not UTF-8 or does not tokenize is skipped with a reason.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scan/file_walk.h"
#include "scan/fixer.h"
#include "scan/rules.h"

namespace ferry::scan {

struct ScanOptions {
  std::string target = "ascend";
  bool fix = false;
  int64_t max_file_bytes = 2 << 20;
  int threads = 0;  // 0: one per core
};

/// A finding flattened for reports (positions 1-based, columns in code points).
struct Reported {
  const Rule* rule = nullptr;
  const TargetAction* action = nullptr;
  int32_t line = 0, column = 0, end_line = 0, end_column = 0;
  std::string snippet;  // the source line, trimmed
  FixState fix = FixState::kNotTried;
  std::string note;
};

struct FileResult {
  SourceFile file;
  std::string skipped;  // why the file was not scanned; empty when it was
  int64_t bytes = 0;
  std::vector<Reported> findings;
  std::string original;               // kept when fixing
  std::optional<FixOutcome> fixed;    // when fixing and the file was scanned
};

/// Scans one source text (already read) as `path`.
FileResult scan_text(const SourceFile& file, std::string text, const RuleSet& rules, const ScanOptions& opt);

/// Reads and scans every file; results keep the order of `files`.
std::vector<FileResult> scan_files(const std::vector<SourceFile>& files, const RuleSet& rules, const ScanOptions& opt);

/// Checks that `s` is UTF-8; on failure says where.
Status check_utf8(std::string_view s);

}  // namespace ferry::scan
