// Collectives that an op's kernel needs across the ranks of a data-parallel job: the synchronized
// BatchNorm (com.ferry SyncBatchNormTraining / SyncBatchNormTrainingGrad, src/ops/grad_norm_pool.cpp)
// exchanges its per-channel statistics through them, as torch.nn.SyncBatchNorm does through its
// process group. The trainer installs one, backed by its Communicator (train/communicator.h: Gloo
// now, NCCL/HCCL later), on the thread that runs the training graph; kernels ask
// kernel_collectives(). None installed: a world of one (the kernels use the local batch).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

class KernelCollectives {
 public:
  virtual ~KernelCollectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Sums `data` over the ranks in place and returns once it is done (or failed: the error says
  /// which rank was lost or that the timeout passed). Every rank calls it in the same order.
  virtual Status allreduce_sum(std::span<float> data) = 0;
  /// Every rank's `mine` (the same size on all ranks), in rank order, into `all`
  /// (world_size() * mine.size() values).
  virtual Status allgather(std::span<const float> mine, std::span<float> all) = 0;
};

/// The collectives installed on the calling thread, or nullptr (a world of one). The executor
/// runs a graph's nodes on the thread that called run(), so a kernel sees its trainer's.
KernelCollectives* kernel_collectives();

/// SyncBatchNorm's two exchanges, shared by its reference and optimized kernels, through the calling
/// thread's collectives (a world of one leaves the values as they are). Each double travels as two
/// floats (the value rounded, then the remainder), so the ranks combine near-double values, and
/// every rank combines the same gathered values in rank order: the results agree bit for bit.
/// `what` names the node for errors.
/// Forward: `stats` = [count, mean_0, m2_0, mean_1, m2_1, ...] of the local batch (m2: the sum of
/// squared deviations per channel) become the global ones: the ranks' merged in rank order (Chan
/// et al.'s pairwise update), ranks without rows left out, as batch_norm_gather_stats_with_counts.
Status sync_batchnorm_moments(std::vector<double>* stats, const std::string& what);
/// Backward: `sums` = [count, sum(dY)_0, sum(dY * (X - mean))_0, ...] become the sums over the ranks.
Status sync_batchnorm_grad_sums(std::vector<double>* sums, const std::string& what);

/// Installs `c` on the calling thread for its lifetime (the previous one comes back after).
class ScopedKernelCollectives {
 public:
  explicit ScopedKernelCollectives(KernelCollectives* c);
  ~ScopedKernelCollectives();
  ScopedKernelCollectives(const ScopedKernelCollectives&) = delete;
  ScopedKernelCollectives& operator=(const ScopedKernelCollectives&) = delete;

 private:
  KernelCollectives* previous_;
};

}  // namespace ferry
