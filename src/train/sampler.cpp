#include "train/sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "common/splitmix64.h"
#include "train/ddp.h"

namespace ferry {

Sampler::Sampler(int64_t n, int64_t batch, bool shuffle, uint64_t seed, int rank, int world)
    : n_(n), b_(batch), shuffle_(shuffle), seed_(seed), rank_(rank), world_(world), shard_(shard_size(n, world)) {}

std::vector<int64_t> Sampler::indices(int64_t step) {
  std::vector<int64_t> out;
  for (int64_t r = (step - 1) * b_; r < step * b_; ++r) {
    const int64_t epoch = r / shard_;
    out.push_back(shard_row(order(epoch), r % shard_, rank_, world_));
  }
  return out;
}

const std::vector<int64_t>& Sampler::order(int64_t epoch) {
  if (epoch != cached_epoch_) {
    perm_.resize(static_cast<size_t>(n_));
    std::iota(perm_.begin(), perm_.end(), 0);
    if (shuffle_) {
      std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch) + 1)));
      for (int64_t i = n_ - 1; i > 0; --i) {  // Fisher-Yates, independent of the library's shuffle
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(j)]);
      }
    }
    cached_epoch_ = epoch;
  }
  return perm_;
}

}  // namespace ferry
