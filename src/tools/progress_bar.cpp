// ProgressBar; see progress_bar.h.
#include "tools/progress_bar.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace ferry::cli {

ProgressBar::ProgressBar() : enabled_(::isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(const std::string& stage, int64_t done, int64_t total, const std::string& detail) {
  if (!enabled_) return;
  const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  if (drawn_ && done < total && now - last_draw_us_ < 50000) return;  // at most 20 redraws a second
  last_draw_us_ = now;
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  std::string tail = detail.size() > 40 ? detail.substr(0, 37) + "..." : detail;
  std::fprintf(stderr, "\r\033[K%-8s [%s] %lld/%lld %s", stage.c_str(), bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total), tail.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace ferry::cli
