// See spin_wait.h.
#include "serve/spin_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace ferry::serve {

namespace {

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

bool cores_free() {
  using Clock = std::chrono::steady_clock;
  static const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  thread_local Clock::time_point checked{};
  thread_local bool free_now = true;
  const auto now = Clock::now();
  if (now - checked < std::chrono::milliseconds(1)) return free_now;
  checked = now;
  // Opened and closed each time (at most once a millisecond per thread): no descriptor stays open.
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return free_now = true;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return free_now = true;
  buf[n] = '\0';
  // "0.52 0.61 0.70 2/517 12345": the fourth field is runnable/total tasks.
  const char* p = buf;
  for (int field = 0; field < 3; ++field) {
    while (*p && *p != ' ') ++p;
    while (*p == ' ') ++p;
  }
  const long runnable = std::strtol(p, nullptr, 10);
  free_now = runnable <= 0 || runnable <= cores;
  return free_now;
}

void SpinWait::arm() {
  if (budget_ns_ <= 0) return;
  const auto now = Clock::now();
  if (armed_) {  // work found while spinning (or soon after)
    ++hits_;
    misses_ = 0;
  } else if (misses_ >= kMaxMisses && ++skipped_ % kProbeEvery != 0) {
    return;
  } else if (!may_spin_()) {
    return;
  }
  armed_ = true;
  deadline_ = now + std::chrono::nanoseconds(budget_ns_);
  last_ = now;
}

bool SpinWait::again() {
  if (!armed_) return false;
  const auto now = Clock::now();
  if (now >= deadline_ || now - last_ > std::chrono::nanoseconds(kPreemptedNs)) {
    armed_ = false;
    ++misses_;
    ++total_misses_;
    return false;
  }
  last_ = now;
  cpu_pause();
  return true;
}

}  // namespace ferry::serve
