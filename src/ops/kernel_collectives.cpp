// The calling thread's kernel collectives and SyncBatchNorm's exchanges (see kernel_collectives.h).
#include "ops/kernel_collectives.h"

#include <algorithm>

namespace ferry {
namespace {

thread_local KernelCollectives* tls_collectives = nullptr;

// The collectives of a job of more than one rank, or nullptr.
KernelCollectives* group() {
  KernelCollectives* c = tls_collectives;
  return c && c->world_size() > 1 ? c : nullptr;
}

// Every rank's `values` (the same count on each), in rank order, each double as two floats.
StatusOr<std::vector<std::vector<double>>> allgather_doubles(KernelCollectives& c, const std::vector<double>& values,
                                                             const std::string& what) {
  const size_t n = values.size();
  std::vector<float> mine(2 * n);
  for (size_t i = 0; i < n; ++i) {
    mine[2 * i] = static_cast<float>(values[i]);
    mine[2 * i + 1] = static_cast<float>(values[i] - static_cast<double>(mine[2 * i]));
  }
  const size_t world = static_cast<size_t>(c.world_size());
  std::vector<float> all(world * 2 * n);
  RETURN_IF_ERROR(c.allgather(mine, all).with_context(what + " across " + std::to_string(world) + " ranks"));
  std::vector<std::vector<double>> out(world, std::vector<double>(n));
  for (size_t r = 0; r < world; ++r)
    for (size_t i = 0; i < n; ++i)
      out[r][i] = static_cast<double>(all[(r * n + i) * 2]) + static_cast<double>(all[(r * n + i) * 2 + 1]);
  return out;
}

}  // namespace

KernelCollectives* kernel_collectives() { return tls_collectives; }

ScopedKernelCollectives::ScopedKernelCollectives(KernelCollectives* c) : previous_(tls_collectives) { tls_collectives = c; }
ScopedKernelCollectives::~ScopedKernelCollectives() { tls_collectives = previous_; }

Status sync_batchnorm_moments(std::vector<double>* stats, const std::string& what) {
  KernelCollectives* c = group();
  if (!c) return Status::ok();
  ASSIGN_OR_RETURN(std::vector<std::vector<double>> ranks,
                   allgather_doubles(*c, *stats, what + ": synchronizing the batch statistics"));
  const size_t channels = (stats->size() - 1) / 2;
  std::vector<double>& out = *stats;
  std::fill(out.begin(), out.end(), 0.0);
  for (const auto& r : ranks) {
    if (r[0] < 1) continue;
    const double count = out[0], total = count + r[0], w = r[0] / total;  // w = 1 for the first: its moments exactly
    for (size_t ch = 0; ch < channels; ++ch) {
      const double delta = r[1 + 2 * ch] - out[1 + 2 * ch];
      out[1 + 2 * ch] += delta * w;
      out[2 + 2 * ch] += r[2 + 2 * ch] + delta * delta * count * w;
    }
    out[0] = total;
  }
  return Status::ok();
}

Status sync_batchnorm_grad_sums(std::vector<double>* sums, const std::string& what) {
  KernelCollectives* c = group();
  if (!c) return Status::ok();
  ASSIGN_OR_RETURN(std::vector<std::vector<double>> ranks,
                   allgather_doubles(*c, *sums, what + ": synchronizing the BatchNorm gradient sums"));
  std::fill(sums->begin(), sums->end(), 0.0);
  for (const auto& r : ranks)
    for (size_t k = 0; k < r.size(); ++k) (*sums)[k] += r[k];
  return Status::ok();
}

}  // namespace ferry
