// `ferry serve`'s log and its settings, Triton's logging extension: where the lines go (stderr, or
// --log-file), which are written (info, warnings, errors, verbose up to a level) and their format,
// read and changed at run time over HTTP (GET/POST /v2/logging) and gRPC (LogSettings). Verbose
// level >= 1 logs every inference request and every HTTP request with its answer.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace ferry::serve {

struct LogSettings {
  std::string file;  // "": stderr
  bool info = true, warnings = true, errors = true;
  uint32_t verbose_level = 0;
  std::string format = "default";  // default: "ferry serve: ..."; ISO8601: the UTC time first
};

/// A setting's new value as the protocols carry it (bool, unsigned integer or string).
using LogValue = std::variant<bool, uint64_t, std::string>;

class ServerLog {
 public:
  /// Opens settings.file (appending) when it is set; checks the format.
  static StatusOr<std::unique_ptr<ServerLog>> open(LogSettings settings);
  ~ServerLog();
  /// One line: "error: ..." is an error, "warning: ..." a warning, anything else info; written
  /// when its level is on.
  void write(const std::string& line);
  /// True when verbose lines of `level` (>= 1) are written; one relaxed load, for the hot paths.
  bool verbose_on(uint32_t level) const { return level <= verbose_.load(std::memory_order_relaxed); }
  void verbose(uint32_t level, const std::string& line);
  LogSettings settings() const;
  /// Applies the named settings together (log_info, log_warnings, log_errors: bool;
  /// log_verbose_level: uint32; log_format: "default" | "ISO8601"; log_file: only its current
  /// value, a file is chosen at start with --log-file). An unknown name or a wrong type fails,
  /// naming the setting, and changes nothing.
  Status update(const std::vector<std::pair<std::string, LogValue>>& changes);

  /// GET /v2/logging's body; POST /v2/logging: the body's settings applied, then the settings.
  std::string settings_json() const;
  Status update_json(std::string_view body);

 private:
  ServerLog() = default;
  void emit(const std::string& line);  // lock held
  mutable std::mutex mu_;
  LogSettings s_;
  std::FILE* out_ = stderr;
  std::atomic<uint32_t> verbose_{0};
};

}  // namespace ferry::serve
