// Which samples each training step takes (ferry train's loop; torch's DataLoader sampler).
#pragma once

#include <cstdint>
#include <vector>

namespace ferry {

/// Which samples step k (1-based) takes: a stream of rows through the epochs' orders (the data in
/// order with --no-shuffle, a permutation drawn from (seed, epoch) otherwise), B rows per step.
/// Data parallel: each rank steps through its DistributedSampler shard of every epoch's order.
class Sampler {
 public:
  Sampler(int64_t n, int64_t batch, bool shuffle, uint64_t seed, int rank = 0, int world = 1);
  /// The epoch (1-based) step `step` falls in.
  int64_t epoch_of(int64_t step) const { return ((step - 1) * b_) / shard_ + 1; }
  /// The B sample indices of step `step`.
  std::vector<int64_t> indices(int64_t step);

 private:
  const std::vector<int64_t>& order(int64_t epoch);
  int64_t n_, b_;
  bool shuffle_;
  uint64_t seed_;
  int rank_, world_;
  int64_t shard_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace ferry
