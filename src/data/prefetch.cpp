// Background batch loading (see prefetch.h).
#include "data/prefetch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

namespace ferry {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Joins tensors [b_i, ...] along axis 0.
StatusOr<Tensor> concat_rows(const std::vector<const Tensor*>& parts, const std::string& what) {
  const Tensor& first = *parts[0];
  if (first.rank() == 0 || first.dtype() == DType::kString) {
    return internal_error("concat_batches: " + what + " is not a numeric [B, ...] tensor");
  }
  std::vector<int64_t> dims = first.dims();
  int64_t rows = 0;
  for (const Tensor* t : parts) {
    if (t->dtype() != first.dtype() || t->rank() != first.rank() ||
        !std::equal(t->dims().begin() + 1, t->dims().end(), first.dims().begin() + 1)) {
      return internal_error("concat_batches: the parts of " + what + " disagree on dtype or per-sample dims");
    }
    rows += t->dim(0);
  }
  dims[0] = rows;
  Tensor out = Tensor::allocate(first.dtype(), dims);
  auto* dst = static_cast<uint8_t*>(out.mutable_raw());
  for (const Tensor* t : parts) {
    std::memcpy(dst, t->raw(), static_cast<size_t>(t->nbytes()));
    dst += t->nbytes();
  }
  return out;
}

}  // namespace

StatusOr<Batch> concat_batches(const std::vector<Batch>& parts) {
  if (parts.empty()) return internal_error("concat_batches: no parts");
  if (parts.size() == 1) return parts[0];
  Batch out;
  for (size_t i = 0; i < parts[0].inputs.size(); ++i) {
    std::vector<const Tensor*> ts;
    for (const Batch& p : parts) {
      if (p.inputs.size() != parts[0].inputs.size() || p.inputs[i].first != parts[0].inputs[i].first) {
        return internal_error("concat_batches: the parts hold different inputs");
      }
      ts.push_back(&p.inputs[i].second);
    }
    ASSIGN_OR_RETURN(Tensor t, concat_rows(ts, "input '" + parts[0].inputs[i].first + "'"));
    out.inputs.emplace_back(parts[0].inputs[i].first, std::move(t));
  }
  std::vector<const Tensor*> labels;
  for (const Batch& p : parts) labels.push_back(&p.labels);
  ASSIGN_OR_RETURN(out.labels, concat_rows(labels, "labels"));
  for (const Batch& p : parts) out.indices.insert(out.indices.end(), p.indices.begin(), p.indices.end());
  return out;
}

Prefetcher::Prefetcher(const Dataset* dataset, int threads, int max_queued)
    : dataset_(dataset), max_queued_(std::max(1, max_queued)) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this]() { worker_loop(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

int64_t Prefetcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(jobs_.size());
}

Status Prefetcher::request(int64_t step, std::vector<int64_t> indices, uint64_t seed) {
  if (indices.empty()) return internal_error("Prefetcher::request(step " + std::to_string(step) + "): empty batch");
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.count(step) != 0) {
    return internal_error("Prefetcher::request: step " + std::to_string(step) + " is already queued");
  }
  if (static_cast<int>(jobs_.size()) >= max_queued_) {
    return internal_error("Prefetcher::request(step " + std::to_string(step) + "): " + std::to_string(jobs_.size()) +
                          " batches are already queued (the limit); take() one first");
  }
  auto job = std::make_shared<Job>();
  job->indices = std::move(indices);
  job->seed = seed;
  const int64_t n = static_cast<int64_t>(job->indices.size());
  const int64_t parts = workers_.empty() ? 1 : std::min<int64_t>(static_cast<int64_t>(workers_.size()), n);
  job->parts.resize(static_cast<size_t>(parts));
  job->part_status.resize(static_cast<size_t>(parts));
  if (!workers_.empty()) {
    for (int64_t p = 0; p < parts; ++p) {
      tasks_.push_back(Task{job, static_cast<size_t>(p), n * p / parts, n * (p + 1) / parts});
    }
  }
  jobs_[step] = std::move(job);
  work_cv_.notify_all();
  return Status::ok();
}

void Prefetcher::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this]() { return stop_ || !tasks_.empty(); });
    if (stop_) return;
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::vector<int64_t> part(task.job->indices.begin() + task.begin, task.job->indices.begin() + task.end);
    Batch batch;
    Status st = dataset_->load(part, task.job->seed, &batch);
    lock.lock();
    task.job->parts[task.part] = std::move(batch);
    task.job->part_status[task.part] = std::move(st);
    ++task.job->parts_done;
    if (task.job->parts_done == task.job->parts.size()) done_cv_.notify_all();
  }
}

StatusOr<Batch> Prefetcher::assemble(Job& job) {
  for (const Status& st : job.part_status) RETURN_IF_ERROR(st);
  return concat_batches(job.parts);
}

StatusOr<Batch> Prefetcher::take(int64_t step, double* waited_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Job> job;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = jobs_.find(step);
    if (it == jobs_.end()) {
      return internal_error("Prefetcher::take: step " + std::to_string(step) + " was not requested");
    }
    job = it->second;
    if (!workers_.empty()) {
      done_cv_.wait(lock, [&]() { return stop_ || job->parts_done == job->parts.size(); });
      if (job->parts_done != job->parts.size()) return internal_error("Prefetcher::take: shutting down");
    }
    jobs_.erase(step);
  }
  if (workers_.empty()) {
    Status st = dataset_->load(job->indices, job->seed, &job->parts[0]);
    if (waited_ms != nullptr) *waited_ms = ms_since(t0);
    RETURN_IF_ERROR(st);
    return std::move(job->parts[0]);
  }
  StatusOr<Batch> batch = assemble(*job);  // joining the parts is waiting too
  if (waited_ms != nullptr) *waited_ms = ms_since(t0);
  return batch;
}

}  // namespace ferry
