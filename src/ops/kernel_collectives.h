// Collectives that an op's kernel needs across the ranks of a data-parallel job: the synchronized
// BatchNorm (com.ferry SyncBatchNormTraining / SyncBatchNormTrainingGrad, src/ops/grad_norm_pool.cpp)
// exchanges its per-channel statistics through them, as torch.nn.SyncBatchNorm does through its
// process group. The trainer installs one, backed by its Communicator (train/communicator.h: Gloo
// now, NCCL/HCCL later), on the thread that runs the training graph; kernels ask
// kernel_collectives(). None installed: a world of one (the kernels use the local batch).
#pragma once

#include <span>

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
