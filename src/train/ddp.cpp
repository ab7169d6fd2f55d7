// Data-parallel training over a Communicator (see ddp.h).
#include "train/ddp.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

namespace ferry {
namespace {
using Clock = std::chrono::steady_clock;
}

std::vector<BucketLayout> assign_buckets(const std::vector<std::string>& params, const std::vector<int64_t>& numels,
                                         const BucketOptions& options) {
  std::vector<BucketLayout> out;
  BucketLayout cur;
  for (size_t k = params.size(); k-- > 0;) {  // reverse order: backward produces the last layers first
    cur.params.push_back(params[k]);
    cur.offsets.push_back(cur.numel);
    cur.numel += numels[k];
    const int64_t cap = out.empty() ? options.first_bucket_bytes : options.bucket_bytes;
    if (cur.numel * static_cast<int64_t>(sizeof(float)) >= cap) {
      out.push_back(std::move(cur));
      cur = BucketLayout();
    }
  }
  if (!cur.params.empty()) out.push_back(std::move(cur));
  return out;
}

Status CommunicatorCollectives::allreduce_sum(std::span<float> data) {
  const auto t0 = Clock::now();
  Status s = comm_->allreduce_sum(data)->wait(comm_->timeout_s() + 5);
  wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return s;
}

double CommunicatorCollectives::take_wait_ms() {
  const double ms = wait_ms_;
  wait_ms_ = 0;
  return ms;
}

Status CommunicatorCollectives::allgather(std::span<const float> mine, std::span<float> all) {
  const size_t n = mine.size();
  if (all.size() != n * static_cast<size_t>(comm_->world_size()))
    return internal_error("allgather of " + std::to_string(n) + " values per rank into " + std::to_string(all.size()) +
                          " for " + std::to_string(comm_->world_size()) + " ranks");
  std::fill(all.begin(), all.end(), 0.0f);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(comm_->rank())));
  return allreduce_sum(all);
}

StatusOr<std::unique_ptr<DataParallel>> DataParallel::join(const DistConfig& config) {
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, create_communicator(config));
  return std::unique_ptr<DataParallel>(new DataParallel(std::move(comm)));
}

DataParallel::~DataParallel() {
  // Buckets still in flight (the step failed): wait for them, bounded, so their buffers outlive them.
  for (auto& w : works_)
    if (w) (void)w->wait(comm_->timeout_s() + 5);
}

Status DataParallel::agree(const std::string& what, int64_t value) {
  ASSIGN_OR_RETURN(std::vector<int64_t> all, comm_->allgather(value));
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      return invalid_argument("rank " + std::to_string(r) + " and rank 0 disagree on " + what + " (" +
                              std::to_string(all[r]) + " vs " + std::to_string(all[0]) +
                              "): start every rank with the same command line, data and checkpoint");
  return Status::ok();
}

Status DataParallel::broadcast_from_rank0(std::map<std::string, Tensor>* state) {
  std::vector<std::pair<Tensor*, std::shared_ptr<CommWork>>> works;
  for (auto& [name, t] : *state) {
    if (t.dtype() != DType::kF32 || t.numel() == 0) continue;
    works.emplace_back(&t, comm_->broadcast(std::span<float>(t.mutable_data<float>(), static_cast<size_t>(t.numel())), 0));
  }
  Status first;
  for (auto& [t, w] : works) {
    Status s = w->wait(comm_->timeout_s() + 5);
    if (first.is_ok() && !s.is_ok()) first = s.with_context("broadcasting the parameters from rank 0");
  }
  return first;
}

Status DataParallel::plan(const std::vector<std::string>& params, const std::map<std::string, std::string>& grad_outputs,
                          const std::map<std::string, Tensor>& values, const BucketOptions& options) {
  std::vector<std::string> trained;
  std::vector<int64_t> numels;
  for (const auto& p : params) {
    if (!grad_outputs.count(p)) continue;
    const Tensor& v = values.at(p);
    if (v.dtype() != DType::kF32)
      return unsupported("data-parallel training averages f32 gradients; parameter '" + p + "' is " +
                         v.type().to_string());
    trained.push_back(p);
    numels.push_back(v.numel());
  }
  layout_ = assign_buckets(trained, numels, options);
  flat_.assign(layout_.size(), {});
  seen_.assign(layout_.size(), {});
  pending_.assign(layout_.size(), 0);
  works_.assign(layout_.size(), nullptr);
  for (size_t b = 0; b < layout_.size(); ++b) {
    flat_[b].assign(static_cast<size_t>(layout_[b].numel), 0.f);
    for (size_t s = 0; s < layout_[b].params.size(); ++s) {
      where_[layout_[b].params[s]] = {b, s};
      output_to_param_[grad_outputs.at(layout_[b].params[s])] = layout_[b].params[s];
    }
  }
  return Status::ok();
}

void DataParallel::begin_step(bool sync, const std::map<std::string, Tensor>* accumulated) {
  sync_ = sync;
  accumulated_ = accumulated;
  next_launch_ = 0;
  observer_error_ = Status::ok();
  for (size_t b = 0; b < layout_.size(); ++b) {
    seen_[b].assign(layout_[b].params.size(), false);
    pending_[b] = layout_[b].params.size();
    works_[b] = nullptr;
  }
}

// DDP scales each gradient by 1/world while copying it into the bucket, then sums.
void DataParallel::take_gradient(const std::string& param, const Tensor& g, bool add_accumulated) {
  const auto [b, s] = where_.at(param);
  if (seen_[b][s]) return;
  const BucketLayout& L = layout_[b];
  const int64_t n = (s + 1 < L.params.size() ? L.offsets[s + 1] : L.numel) - L.offsets[s];
  if (g.dtype() != DType::kF32 || g.numel() != n) {
    if (observer_error_.is_ok())
      observer_error_ = internal_error("gradient of '" + param + "' is " + g.type().to_string() + ", expected " +
                                       std::to_string(n) + " f32 values");
    return;
  }
  const float scale = 1.0f / static_cast<float>(comm_->world_size());
  const float* src = g.data<float>();
  float* dst = flat_[b].data() + L.offsets[s];
  const Tensor* acc = nullptr;
  if (add_accumulated && accumulated_) {
    auto it = accumulated_->find(param);
    if (it != accumulated_->end() && it->second.dtype() == DType::kF32 && it->second.numel() == n) acc = &it->second;
  }
  if (acc) {  // as .grad += g, then DDP's scaled copy into the bucket
    const float* a = acc->data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = (a[i] + src[i]) * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
  }
  seen_[b][s] = true;
  --pending_[b];
}

void DataParallel::launch_ready() {
  if (!sync_ || !observer_error_.is_ok()) return;
  while (next_launch_ < layout_.size() && pending_[next_launch_] == 0) {
    works_[next_launch_] = comm_->allreduce_sum(std::span<float>(flat_[next_launch_]));
    ++next_launch_;
  }
}

NodeObserver DataParallel::observer() {
  return [this](const Node& node, const std::vector<Value>& outputs, double) {
    if (!sync_) return;
    bool any = false;
    for (size_t k = 0; k < node.outputs.size() && k < outputs.size(); ++k) {
      auto it = output_to_param_.find(node.outputs[k]);
      if (it == output_to_param_.end() || !outputs[k].is_tensor()) continue;
      take_gradient(it->second, outputs[k].tensor, /*add_accumulated=*/true);
      any = true;
    }
    if (any) launch_ready();
  };
}

Status DataParallel::wait_all(double* wait_ms) {
  const auto t0 = Clock::now();
  Status first;
  for (auto& w : works_) {
    if (!w) continue;
    Status s = w->wait(comm_->timeout_s() + 5);
    if (first.is_ok() && !s.is_ok()) first = s;
    w = nullptr;
  }
  if (wait_ms) *wait_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return first;
}

Status DataParallel::finish_step(std::map<std::string, Tensor>* grads, double* wait_ms) {
  if (wait_ms) *wait_ms = 0;
  if (!observer_error_.is_ok()) {
    (void)wait_all(nullptr);
    return observer_error_;
  }
  if (!sync_) return Status::ok();
  launched_early_ = next_launch_;
  for (size_t b = 0; b < layout_.size(); ++b)  // gradients no node produced (graph inputs, constants)
    for (size_t s = 0; s < layout_[b].params.size(); ++s)
      if (!seen_[b][s]) {
        auto it = grads->find(layout_[b].params[s]);
        if (it == grads->end()) {
          (void)wait_all(nullptr);
          return internal_error("no gradient came out for '" + layout_[b].params[s] + "'");
        }
        take_gradient(it->first, it->second, /*add_accumulated=*/false);  // the caller's sum already
      }
  launch_ready();
  if (!observer_error_.is_ok()) {
    (void)wait_all(nullptr);
    return observer_error_;
  }
  RETURN_IF_ERROR(wait_all(wait_ms));
  for (size_t b = 0; b < layout_.size(); ++b) {
    const BucketLayout& L = layout_[b];
    for (size_t s = 0; s < L.params.size(); ++s) {
      Tensor& g = grads->at(L.params[s]);
      Tensor avg = Tensor::allocate(DType::kF32, g.dims());
      std::memcpy(avg.mutable_data<float>(), flat_[b].data() + L.offsets[s], static_cast<size_t>(g.numel()) * sizeof(float));
      g = std::move(avg);
    }
  }
  return Status::ok();
}

Status DataParallel::finish() { return comm_->barrier().with_context("at the end of training"); }

}  // namespace ferry
