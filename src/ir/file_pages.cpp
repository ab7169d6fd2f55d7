#include "ir/file_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>

namespace ferry {
namespace {

std::mutex g_mu;
std::map<uintptr_t, uintptr_t>& ranges() {  // begin -> end, under g_mu
  static auto* r = new std::map<uintptr_t, uintptr_t>();
  return *r;
}
std::atomic<int64_t> g_dropped{0};

struct Registration {
  std::shared_ptr<const void> owner;
  uintptr_t begin = 0;
  ~Registration() {
    std::lock_guard<std::mutex> lock(g_mu);
    ranges().erase(begin);
  }
};

}  // namespace

std::shared_ptr<const void> register_file_pages(std::shared_ptr<const void> owner, const void* begin, size_t size) {
  if (size == 0) return owner;
  auto r = std::make_shared<Registration>();
  r->owner = std::move(owner);
  r->begin = reinterpret_cast<uintptr_t>(begin);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!ranges().emplace(r->begin, r->begin + size).second) return r->owner;  // already registered (kept by its first owner)
  }
  return r;
}

int64_t drop_file_pages(const void* p, int64_t n) {
  if (!p || n <= 0) return 0;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), z = a + static_cast<uintptr_t>(n);
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (a + page - 1) / page * page, e = z / page * page;
  if (e <= b) return 0;
  std::lock_guard<std::mutex> lock(g_mu);  // held through madvise: the range cannot be unregistered (and unmapped) meanwhile
  auto it = ranges().upper_bound(a);
  if (it == ranges().begin()) return 0;
  --it;
  if (a < it->first || z > it->second) return 0;
  if (::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED) != 0) return 0;
  g_dropped += static_cast<int64_t>(e - b);
  return static_cast<int64_t>(e - b);
}

int64_t file_pages_dropped() { return g_dropped.load(); }

}  // namespace ferry
