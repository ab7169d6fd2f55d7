// A one-line progress bar on stderr, drawn only when stderr is a terminal (logs stay clean).
#pragma once

#include <cstdint>
#include <string>

namespace ferry::cli {

class ProgressBar {
 public:
  ProgressBar();
  ~ProgressBar();
  /// Redraws "stage [=====     ] done/total detail" in place (rate-limited).
  void update(const std::string& stage, int64_t done, int64_t total, const std::string& detail);
  /// Clears the line.
  void finish();

 private:
  bool enabled_;
  bool drawn_ = false;
  int64_t last_draw_us_ = 0;
};

}  // namespace ferry::cli
