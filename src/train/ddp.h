// Data-parallel training with PyTorch DDP's semantics, over a Communicator: the state broadcast
// from rank 0 at start, gradients averaged in buckets (about 25 MB, the first about 1 MB, in
// reverse parameter order) whose allreduce starts as soon as the executor has produced a
// bucket's last gradient, so communication overlaps the rest of backward.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"
#include "ops/kernel_collectives.h"
#include "runtime/executor.h"
#include "train/communicator.h"

namespace ferry {

struct BucketOptions {
  int64_t first_bucket_bytes = 1 << 20;   // torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
  int64_t bucket_bytes = 25 << 20;        // DDP's bucket_cap_mb = 25
};

/// One bucket: the parameters it holds (in the order they sit in its flat buffer).
struct BucketLayout {
  std::vector<std::string> params;
  std::vector<int64_t> offsets;  // in floats
  int64_t numel = 0;
};

/// DDP's bucket assignment: parameters in reverse order, a bucket closed once it reaches its cap.
std::vector<BucketLayout> assign_buckets(const std::vector<std::string>& params, const std::vector<int64_t>& numels,
                                         const BucketOptions& options = {});

/// The DistributedSampler's pick: element `i` of rank `rank`'s shard of an epoch whose order is
/// `order` (n rows, padded to a multiple of world by wrapping around).
inline int64_t shard_row(const std::vector<int64_t>& order, int64_t i, int rank, int world) {
  const int64_t n = static_cast<int64_t>(order.size());
  return order[static_cast<size_t>((static_cast<int64_t>(rank) + i * world) % n)];
}
/// Rows per rank per epoch: ceil(n / world).
inline int64_t shard_size(int64_t n, int world) { return (n + world - 1) / world; }

/// A Communicator as the kernels see it (ops/kernel_collectives.h), for --sync-bn: blocking
/// operations queued behind whatever is in flight (buckets), so every rank issues them in one
/// order. allgather is an allreduce of each rank's values in its own slot (zeros elsewhere, exact
/// in floats), so any backend with an allreduce serves.
class CommunicatorCollectives final : public KernelCollectives {
 public:
  explicit CommunicatorCollectives(Communicator* comm) : comm_(comm) {}
  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->world_size(); }
  Status allreduce_sum(std::span<float> data) override;
  Status allgather(std::span<const float> mine, std::span<float> all) override;
  /// Milliseconds the kernels spent in these operations (waiting for the peers and for the
  /// operations queued before theirs) since the last call.
  double take_wait_ms();

 private:
  Communicator* comm_;
  double wait_ms_ = 0;
};

class DataParallel {
 public:
  /// Joins the job (create_communicator); the error names missing ranks and the address.
  static StatusOr<std::unique_ptr<DataParallel>> join(const DistConfig& config);
  ~DataParallel();

  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  Communicator& communicator() { return *comm_; }
  /// The communicator for kernels (--sync-bn); install it with ScopedKernelCollectives.
  KernelCollectives* kernel_collectives() { return &kernel_collectives_; }
  /// Milliseconds the kernels spent in kernel_collectives() since the last call (--sync-bn).
  double take_kernel_wait_ms() { return kernel_collectives_.take_wait_ms(); }

  /// Fails on every rank unless all ranks give the same value (`what` names it in the error).
  Status agree(const std::string& what, int64_t value);
  /// Overwrites every f32 tensor of `state` (by name order) with rank 0's.
  Status broadcast_from_rank0(std::map<std::string, Tensor>* state);

  /// Plans the buckets: `params` in model order, `grad_outputs` param -> the graph output holding
  /// its gradient, `values` gives the shapes.
  Status plan(const std::vector<std::string>& params, const std::map<std::string, std::string>& grad_outputs,
              const std::map<std::string, Tensor>& values, const BucketOptions& options = {});
  /// The executor observer that copies each gradient into its bucket as it is produced and starts
  /// a bucket's allreduce once it is full (buckets start in order, the same on every rank).
  NodeObserver observer();
  /// Before each executor run. Gradient accumulation as DDP's no_sync: `sync` false for every
  /// micro-batch but the last, which reduces its gradients plus `accumulated` (the local sums of
  /// the earlier micro-batches, by param; may be null).
  void begin_step(bool sync = true, const std::map<std::string, Tensor>* accumulated = nullptr);
  /// After the run: gradients the observer did not see are taken from `grads`, every bucket is
  /// waited for, and `grads` receives the averaged gradients. *wait_ms: time spent waiting.
  Status finish_step(std::map<std::string, Tensor>* grads, double* wait_ms);
  /// The end of training: a barrier, so no rank leaves while another still needs it.
  Status finish();
  const std::vector<BucketLayout>& buckets() const { return layout_; }
  /// Buckets of the last step whose allreduce started during the run (overlapping backward).
  size_t launched_early() const { return launched_early_; }

 private:
  explicit DataParallel(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)), kernel_collectives_(comm_.get()) {}
  void take_gradient(const std::string& param, const Tensor& g, bool add_accumulated);
  void launch_ready();
  Status wait_all(double* wait_ms);

  std::unique_ptr<Communicator> comm_;
  CommunicatorCollectives kernel_collectives_;
  std::vector<BucketLayout> layout_;
  std::map<std::string, std::pair<size_t, size_t>> where_;        // param -> (bucket, slot)
  std::map<std::string, std::string> output_to_param_;            // graph output -> param
  std::vector<std::vector<float>> flat_;                          // bucket buffers
  std::vector<std::vector<bool>> seen_;                           // per bucket, per slot
  std::vector<size_t> pending_;                                   // slots not yet copied
  std::vector<std::shared_ptr<CommWork>> works_;
  size_t next_launch_ = 0;
  size_t launched_early_ = 0;
  bool sync_ = true;
  const std::map<std::string, Tensor>* accumulated_ = nullptr;
  Status observer_error_;
};

}  // namespace ferry
