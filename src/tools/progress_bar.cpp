// ProgressBar; see progress_bar.h.
#include "tools/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

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
  // Fit the terminal's width, as tqdm does: a line that wraps is redrawn as a new line per update.
  // The detail is cut first, then the bar shrinks (to 10), then the detail goes.
  struct winsize ws {};
  const int columns = ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
  char head[64];
  std::snprintf(head, sizeof head, "%-8s", stage.c_str());
  char counts[64];
  std::snprintf(counts, sizeof counts, " %lld/%lld", static_cast<long long>(done), static_cast<long long>(total));
  const int fixed = static_cast<int>(std::strlen(head) + std::strlen(counts)) + 3;  // " [" "]"
  const int room = columns - 1 - fixed;  // the last column left free: some terminals wrap there
  int width = 30;
  std::string tail = " " + detail;
  if (room - width < static_cast<int>(tail.size())) width = std::max(10, room - static_cast<int>(tail.size()));
  if (room - width < static_cast<int>(tail.size())) tail = room - width > 4 ? tail.substr(0, static_cast<size_t>(room - width - 3)) + "..." : "";
  if (room < width) width = std::max(0, room);
  const int filled = total > 0 ? static_cast<int>(width * done / total) : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(static_cast<size_t>(width), ' ');
  std::fprintf(stderr, "\r\033[K%s [%s]%s%s", head, bar.c_str(), counts, tail.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace ferry::cli
