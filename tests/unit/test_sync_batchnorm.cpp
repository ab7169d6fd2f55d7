// --sync-bn's ops (com.ferry SyncBatchNormTraining / SyncBatchNormTrainingGrad, src/ops/grad_norm_pool.cpp)
// between two in-process ranks (threads, each with its own ops/kernel_collectives.h): every rank's
// outputs equal plain BatchNormTraining(Grad) on the ranks' batches concatenated, as
// torch.nn.SyncBatchNorm's do; without collectives they are plain BatchNorm; the gradient
// definition's finite-difference check; a failed exchange names the node; the trainer's
// CommunicatorCollectives gathers over Gloo.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "grad_net.h"
#include "op_tester.h"
#include "ops/kernel_collectives.h"
#include "train/ddp.h"
#include "train/tcp_store.h"
#include "two_ranks.h"

namespace ferry::testing {
namespace {

using namespace grad_net;

// The ranks of one process: exchange() returns once every rank gave its values, all of them in rank order.
class InProcessGroup {
 public:
  explicit InProcessGroup(int world) : world_(world), slots_(static_cast<size_t>(world)) {}
  int world() const { return world_; }
  std::vector<float> exchange(int rank, std::vector<float> mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t round = round_;
    slots_[static_cast<size_t>(rank)] = std::move(mine);
    if (++arrived_ == world_) {
      result_.clear();
      for (const auto& s : slots_) result_.insert(result_.end(), s.begin(), s.end());
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

 private:
  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<float>> slots_;
  std::vector<float> result_;
  int arrived_ = 0;
  int64_t round_ = 0;
};

class InProcessRank final : public KernelCollectives {
 public:
  InProcessRank(InProcessGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world(); }
  Status allreduce_sum(std::span<float> data) override {
    std::vector<float> all = group_->exchange(rank_, std::vector<float>(data.begin(), data.end()));
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = 0;
      for (int r = 0; r < world_size(); ++r) data[i] += all[r * data.size() + i];
    }
    return Status::ok();
  }
  Status allgather(std::span<const float> mine, std::span<float> all) override {
    std::vector<float> got = group_->exchange(rank_, std::vector<float>(mine.begin(), mine.end()));
    std::copy(got.begin(), got.end(), all.begin());
    return Status::ok();
  }

 private:
  InProcessGroup* group_;
  int rank_;
};

// Rows [begin, end) of a [N, ...] tensor.
Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t per = t.numel() / t.dim(0);
  std::vector<double> v = t.to_double_vector();
  std::vector<int64_t> dims = t.dims();
  dims[0] = end - begin;
  return cast_tensor(Tensor::from_vector<double>(std::vector<double>(v.begin() + begin * per, v.begin() + end * per), dims),
                     t.dtype())
      .value();
}

std::vector<Tensor> bn_forward(const char* op, const Tensor& x, const std::vector<Tensor>& p, const std::string& device) {
  return OpTester(op, 1, "com.ferry")
      .attr("epsilon", 1e-3f)
      .attr("momentum", 0.9f)
      .input(x)
      .input(p[0])
      .input(p[1])
      .input(p[2])
      .input(p[3])
      .outputs(5)
      .run(device);
}

std::vector<Tensor> bn_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& scale,
                                const std::vector<Tensor>& fwd, const std::string& device) {
  return OpTester(op, 1, "com.ferry").input(dy).input(x).input(scale).input(fwd[3]).input(fwd[4]).outputs(3).run(device);
}

// Two ranks with unequal batches (3 and 2 rows: the global statistics weigh them by count).
void two_ranks_equal_whole_batch(DType dt, const std::string& device, double tol) {
  auto cast = [&](Tensor t) { return cast_tensor(t, dt).value(); };
  const Tensor x = cast(random_f64({5, 3, 2, 3}, 11, -2.0, 3.0)), dy = cast(random_f64({5, 3, 2, 3}, 12));
  const std::vector<Tensor> p = {cast(random_f64({3}, 13, 0.5, 1.5)), cast(random_f64({3}, 14)), cast(random_f64({3}, 15)),
                                 cast(random_f64({3}, 16, 0.5, 2.0))};
  const std::vector<Tensor> whole = bn_forward("BatchNormTraining", x, p, "cpu-ref");
  const std::vector<Tensor> whole_grad = bn_backward("BatchNormTrainingGrad", dy, x, p[0], whole, "cpu-ref");
  const int64_t split[3] = {0, 3, 5};
  InProcessGroup group(2);
  std::vector<Tensor> fwd[2], grad[2];
  auto rank = [&](int r) {
    InProcessRank mine(&group, r);
    ScopedKernelCollectives installed(&mine);
    const Tensor xr = rows(x, split[r], split[r + 1]);
    fwd[r] = bn_forward("SyncBatchNormTraining", xr, p, device);
    grad[r] = bn_backward("SyncBatchNormTrainingGrad", rows(dy, split[r], split[r + 1]), xr, p[0], fwd[r], device);
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_near(fwd[r][0], rows(whole[0], split[r], split[r + 1]), tol, tol);
    for (int k = 1; k < 5; ++k) expect_near(fwd[r][k], whole[k], tol, tol);  // running and saved statistics: global
    expect_near(grad[r][0], rows(whole_grad[0], split[r], split[r + 1]), tol, tol);
  }
  // dScale and dB stay local (DDP's allreduce sums them): the ranks' add up to the whole batch's.
  for (int k = 1; k < 3; ++k) {
    std::vector<double> a = grad[0][k].to_double_vector(), b = grad[1][k].to_double_vector();
    for (size_t c = 0; c < a.size(); ++c) a[c] += b[c];
    expect_near(Tensor::from_vector<double>(a, {3}), cast_tensor(whole_grad[k], DType::kF64).value(), tol, tol);
  }
}

TEST(SyncBatchNorm, TwoRanksEqualBatchNormOfTheWholeBatch) { two_ranks_equal_whole_batch(DType::kF64, "cpu-ref", 1e-12); }

// On the cpu backend (which runs the reference kernel for these ops: the collectives are the thread's).
TEST(SyncBatchNorm, TwoRanksOnCpuInF32) { two_ranks_equal_whole_batch(DType::kF32, "cpu", 2e-5); }

TEST(SyncBatchNorm, WithoutCollectivesItIsPlainBatchNorm) {
  const Tensor x = random_f64({4, 2, 3}, 21, -1.0, 2.0), dy = random_f64({4, 2, 3}, 22);
  const std::vector<Tensor> p = {random_f64({2}, 23, 0.5, 1.5), random_f64({2}, 24), random_f64({2}, 25),
                                 random_f64({2}, 26, 0.5, 2.0)};
  const std::vector<Tensor> plain = bn_forward("BatchNormTraining", x, p, "cpu-ref");
  const std::vector<Tensor> sync = bn_forward("SyncBatchNormTraining", x, p, "cpu-ref");
  for (int k = 0; k < 5; ++k) expect_near(sync[k], plain[k], 0, 0);
  const std::vector<Tensor> gp = bn_backward("BatchNormTrainingGrad", dy, x, p[0], plain, "cpu-ref");
  const std::vector<Tensor> gs = bn_backward("SyncBatchNormTrainingGrad", dy, x, p[0], sync, "cpu-ref");
  for (int k = 0; k < 3; ++k) expect_near(gs[k], gp[k], 1e-13, 1e-13);
}

TEST(SyncBatchNorm, GradientsOfXScaleBias) {
  for (int outputs : {5, 1}) {
    SCOPED_TRACE(outputs == 5 ? "saved statistics exposed" : "statistics recomputed");
    Net n;
    std::string x = n.in("x", random_f64({4, 3, 2, 3}, 40));
    std::string sc = n.in("scale", random_f64({3}, 41));
    std::string b = n.in("b", random_f64({3}, 42));
    std::string m = n.init("mean", random_f64({3}, 43));
    std::string v = n.init("var", random_f64({3}, 44, 0.5, 2.0));
    n.out(n.node("SyncBatchNormTraining", {x, sc, b, m, v}, {{"epsilon", f(1e-5f)}}, outputs, "com.ferry")[0]);
    expect_gradients_match(n.build(), n.feeds, {"x", "scale", "b"});
  }
}

class FailingRank final : public KernelCollectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  Status allreduce_sum(std::span<float>) override { return invalid_argument("allreduce failed: rank 1 was lost"); }
  Status allgather(std::span<const float>, std::span<float>) override { return invalid_argument("allreduce failed: rank 1 was lost"); }
};

TEST(SyncBatchNorm, AFailedExchangeNamesTheNodeAndTheLostRank) {
  FailingRank failing;
  ScopedKernelCollectives installed(&failing);
  const std::vector<Tensor> p = {random_f64({2}, 1), random_f64({2}, 2), random_f64({2}, 3), random_f64({2}, 4, 0.5, 2.0)};
  auto r = OpTester("SyncBatchNormTraining", 1, "com.ferry")
               .input(random_f64({3, 2}, 5))
               .input(p[0])
               .input(p[1])
               .input(p[2])
               .input(p[3])
               .run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("SyncBatchNormTraining"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("rank 1 was lost"), std::string::npos) << r.status().to_string();
}

// What the trainer installs for --sync-bn: a Communicator's allreduce as allgather, over Gloo.
TEST(SyncBatchNorm, CommunicatorCollectivesOverGloo) {
  Status status[2];
  std::vector<float> gathered[2], summed[2];
  run_two_ranks(
      [&](int r, Communicator& comm) {
        CommunicatorCollectives kc(&comm);
        const std::vector<float> mine = {1.5f + r, -0.0f, 1e-30f * (r + 1)};
        gathered[r].assign(6, 99.0f);
        summed[r] = {1.0f, 2.0f * r};
        Status s = kc.allgather(mine, gathered[r]);
        if (s.is_ok()) s = kc.allreduce_sum(summed[r]);
        if (s.is_ok()) s = comm.barrier();
        return s;
      },
      status);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].is_ok()) << "rank " << r << ": " << status[r].message();
    EXPECT_EQ(gathered[r], (std::vector<float>{1.5f, 0.0f, 1e-30f, 2.5f, 0.0f, 2e-30f}));
    EXPECT_EQ(summed[r], (std::vector<float>{2.0f, 2.0f}));
  }
}

}  // namespace
}  // namespace ferry::testing
