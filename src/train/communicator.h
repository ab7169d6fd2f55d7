// Collectives for data-parallel training: one small interface, one implementation per library
// (Gloo now, over TCP; NCCL and HCCL for device backends later). Operations are queued in the
// order they are called and run one after another on the communicator's own thread, so every
// rank issues them in the same order, as ProcessGroupGloo does.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

/// Where this process stands in the job (torchrun's environment) and how long to wait for peers.
struct DistConfig {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 300;           // rendezvous, each collective, and the wait for a lost peer
  std::string backend = "gloo";     // "gloo"; "nccl", "hccl" to come
  bool distributed() const { return world_size > 1; }
  /// "127.0.0.1:29500"
  std::string address() const { return master_addr + ":" + std::to_string(master_port); }
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Without RANK and WORLD_SIZE the
/// result is a world of one; a partial or malformed set is an error naming the variable.
StatusOr<DistConfig> dist_config_from_env(double timeout_s);

/// An operation in flight. wait() returns its outcome, or an error once `timeout_s` passed.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual Status wait(double timeout_s) = 0;
  /// Whether the operation has finished (successfully or not).
  virtual bool done() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// The library's name ("gloo").
  virtual std::string backend() const = 0;

  /// Sums `data` over the ranks in place. The buffer must stay alive and untouched until the
  /// returned work is waited for.
  virtual std::shared_ptr<CommWork> allreduce_sum(std::span<float> data) = 0;
  /// Overwrites `data` with rank `root`'s copy.
  virtual std::shared_ptr<CommWork> broadcast(std::span<float> data, int root) = 0;
  /// Every rank's `value`, in rank order (small values: step counts, fingerprints).
  virtual StatusOr<std::vector<int64_t>> allgather(int64_t value) = 0;
  virtual Status barrier() = 0;

  /// The ranks the rendezvous saw leave without saying goodbye (a crash, SIGKILL); waits up to
  /// `grace_s` for the news of a loss to arrive. Used to name the culprit of a failed collective.
  virtual std::vector<int> lost_ranks(double grace_s) = 0;
  /// The timeout every operation and wait() uses by default.
  virtual double timeout_s() const = 0;
};

/// Joins the job: rank 0 hosts the rendezvous store at MASTER_ADDR:MASTER_PORT, the others connect
/// (retrying until the timeout); every rank must arrive within config.timeout_s, else the error
/// names the ranks that did not and the address. Then the library's connections are made.
StatusOr<std::unique_ptr<Communicator>> create_communicator(const DistConfig& config);

}  // namespace ferry
