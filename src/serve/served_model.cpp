// The dynamic batcher and instances of one served model version; see served_model.h.
#include "serve/served_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace ferry::serve {

using Clock = std::chrono::steady_clock;

namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count()));
}

// Same dims apart from the batch axis for every input: the requests can share one execution.
bool same_row_shapes(const InferRequest& a, const InferRequest& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const auto& x = a.inputs[i].second.dims();
    const Tensor* other = nullptr;
    for (const auto& [n, t] : b.inputs)
      if (n == a.inputs[i].first) other = &t;
    if (!other || other->dims().size() != x.size() || other->dtype() != a.inputs[i].second.dtype()) return false;
    if (!std::equal(x.begin() + 1, x.end(), other->dims().begin() + 1)) return false;
  }
  return true;
}

}  // namespace

StatusOr<std::shared_ptr<ServedModel>> ServedModel::load(const std::string& name, int64_t version, const std::string& path,
                                                         inference::ModelConfig config, const ServeOptions& options,
                                                         std::vector<std::string>* warnings, const OutputLabels& labels) {
  std::shared_ptr<ServedModel> m(new ServedModel());
  m->name_ = name;
  m->version_ = version;
  int instances = 0;
  for (const auto& g : config.instance_group()) instances += std::max(1, g.count());
  instances = std::max(1, instances);
  int total = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int per_instance = std::max(1, total / instances);
  auto it = config.parameters().find("threads");
  if (it != config.parameters().end()) {
    const std::string& s = it->second.string_value();
    if (!s.empty() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      per_instance = std::max(1, std::stoi(s));
  }
  SessionOptions so;
  so.device = options.device;
  so.threads = per_instance;
  const std::string where = name + "/config.pbtxt";
  // parameters "precision": the mode an .onnx model is rewritten for at load. A .ferry file's
  // mode was fixed by `ferry compile`: Session::open refuses another, naming the file and both
  // modes; the config's field is what serve adds to that message.
  auto pit = config.parameters().find("precision");
  if (pit != config.parameters().end()) {
    auto mode = parse_precision_mode(pit->second.string_value());
    if (!mode.is_ok()) return mode.status().with_context(where + ": parameters \"precision\"");
    so.precision = mode.value();
  }
  auto session = Session::open_file(path, so);
  if (!session.is_ok()) {
    if (so.precision && session.status().code() == StatusCode::kInvalidArgument)
      return session.status().with_context(where + ": parameters \"precision\" is '" + pit->second.string_value() + "' (" +
                                           precision_mode_name(*so.precision) + ")");
    return session.status();
  }
  m->session_ = session.value();
  // As Session::open_file tells a compiled model from an ONNX one.
  const std::string file = std::filesystem::path(path).filename().string();
  const bool compiled = (file.size() > 6 && file.compare(file.size() - 6, 6, ".ferry") == 0) || is_compiled_model_file(path);
  complete_backend_fields(&config, file, compiled);
  RETURN_IF_ERROR(complete_and_validate(&config, m->session_->inputs(), m->session_->outputs(), m->session_->batch_sizes(),
                                        where, warnings, options.auto_complete_config));
  // Instances may have changed if the config gained its default group.
  instances = 0;
  for (const auto& g : config.instance_group()) instances += std::max(1, g.count());
  m->threads_per_instance_ = per_instance;
  m->max_batch_ = config.max_batch_size();
  m->dynamic_batching_ = config.has_dynamic_batching() && m->max_batch_ > 0;
  if (config.has_dynamic_batching()) {
    const auto& db = config.dynamic_batching();
    m->max_delay_ = std::chrono::microseconds(db.max_queue_delay_microseconds());
    m->max_queue_size_ = db.default_queue_policy().max_queue_size();
    m->default_timeout_us_ = db.default_queue_policy().default_timeout_microseconds();
    m->allow_timeout_override_ = db.default_queue_policy().allow_timeout_override();
    m->target_batch_ = m->max_batch_;
    if (db.preferred_batch_size_size() > 0)
      m->target_batch_ = *std::max_element(db.preferred_batch_size().begin(), db.preferred_batch_size().end());
  }
  m->instances_ = std::max(1, instances);
  m->run_inline_ = !m->dynamic_batching_ || m->max_delay_.count() == 0;
  m->inputs_ = input_specs(config);
  m->outputs_ = output_specs(config);
  m->input_reshapes_ = input_reshapes(config);
  m->output_reshapes_ = output_reshapes(config);
  for (TensorSpec& o : m->outputs_) {
    auto l = labels.find(o.name);
    if (l != labels.end()) o.labels = l->second;
  }
  m->signature_.name = name;
  m->signature_.version = version;
  m->signature_.platform = config.platform().empty() ? config.backend() : config.platform();  // Triton's model metadata
  m->signature_.max_batch = config.max_batch_size();
  m->signature_.inputs = m->inputs_;
  m->signature_.outputs = m->outputs_;
  m->config_ = std::move(config);
  m->stats_.max_batch = std::max<int64_t>(1, m->max_batch_);
  m->stats_.batch_count.reset(new std::atomic<uint64_t>[m->stats_.max_batch + 1]());
  m->stats_.batch_ns.reset(new std::atomic<uint64_t>[m->stats_.max_batch + 1]());
  for (int i = 0; i < instances; ++i) m->threads_.emplace_back([raw = m.get()] { raw->instance_loop(); });
  return m;
}

ServedModel::~ServedModel() { stop(); }

namespace {

bool same_specs(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].dims != b[i].dims) return false;
  return true;
}

}  // namespace

void ServedModel::retire(std::shared_ptr<ServedModel> successor) {
  if (successor && (successor.get() == this || successor->max_batch_ != max_batch_ || !same_specs(successor->inputs_, inputs_) ||
                    !same_specs(successor->outputs_, outputs_)))
    successor = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (successor) successor_ = std::move(successor);
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  std::unique_lock<std::mutex> lock(mu_);  // inline runs still going (enqueue's callers)
  cv_.wait(lock, [&] { return busy_ == 0; });
}

void ServedModel::enqueue(InferRequest request, InferCallback done, InlinePolicy policy) {
  Entry e;
  e.request = std::move(request);
  e.done = std::move(done);
  e.enqueued = Clock::now();
  e.deadline = Clock::time_point::max();
  uint64_t timeout = default_timeout_us_;
  const uint64_t own = e.request.timeout_us;
  if (own > 0 && (allow_timeout_override_ || timeout == 0) && (timeout == 0 || own < timeout)) timeout = own;
  if (timeout > 0) e.deadline = e.enqueued + std::chrono::microseconds(timeout);
  pending_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    std::shared_ptr<ServedModel> next = successor_;
    lock.unlock();
    if (next && (!e.request.version_pinned || next->version_ == version_)) {
      pending_.fetch_sub(1, std::memory_order_relaxed);
      next->enqueue(std::move(e.request), std::move(e.done), policy);
      return;
    }
    finish(e, {resource_exhausted("model '" + name_ + "' version " + std::to_string(version_) + " is being unloaded"),
               FailureReason::kRejected, {}});
    return;
  }
  if (max_queue_size_ > 0 && queue_.size() >= max_queue_size_) {
    lock.unlock();
    finish(e, {resource_exhausted("inference request for model '" + name_ + "' rejected: the queue is full (max_queue_size " +
                                  std::to_string(max_queue_size_) + "); retry later or raise dynamic_batching."
                                  "default_queue_policy.max_queue_size"),
               FailureReason::kRejected, {}});
    return;
  }
  const int busy_limit = policy == InlinePolicy::kNever ? 0 : policy == InlinePolicy::kIdle ? 1 : instances_;
  if (run_inline_ && queue_.empty() && busy_ < busy_limit && recent_run_ns_.load(std::memory_order_relaxed) < kInlineMaxNs) {
    ++busy_;
    lock.unlock();
    std::vector<Entry> batch;
    batch.push_back(std::move(e));
    run_batch(std::move(batch));
    lock.lock();
    --busy_;
    // Requests queued meanwhile (every instance was busy) wait for a free one; retire() for the end.
    const bool wake = !queue_.empty() || stopping_;
    lock.unlock();
    if (wake) cv_.notify_all();
    return;
  }
  std::shared_ptr<Cancellation> cancel = e.request.cancelled;
  queue_.push_back(std::move(e));
  lock.unlock();
  cv_.notify_one();
  if (cancel) cancel->listen(weak_from_this());  // (set already: on_cancel runs now)
}

void ServedModel::on_cancel() {
  const auto now = Clock::now();
  std::vector<Entry> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = take_dropped(now);
  }
  // The queue only shrank: no batch is due sooner, the batcher need not wake.
  drop(dropped, now);
}

std::vector<ServedModel::Entry> ServedModel::take_dropped(Clock::time_point now) {
  std::vector<Entry> dropped;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((it->request.cancelled && it->request.cancelled->is_set()) || now >= it->deadline) {
      dropped.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

void ServedModel::drop(std::vector<Entry>& dropped, Clock::time_point now) {
  for (Entry& e : dropped) {
    if (e.request.cancelled && e.request.cancelled->is_set())
      finish(e, {invalid_argument("request cancelled: the client disconnected"), FailureReason::kCanceled, {}});
    else
      finish(e, {resource_exhausted("inference request for model '" + name_ + "' timed out after waiting " +
                                    std::to_string(ns_between(e.enqueued, now) / 1000) + " us in the queue (timeout " +
                                    std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(e.deadline - e.enqueued).count()) +
                                    " us)"),
                 FailureReason::kRejected, {}});
  }
}

void ServedModel::finish(Entry& e, InferResult result) {
  const auto now = Clock::now();
  const uint64_t ns = ns_between(e.enqueued, now);
  if (result.status.is_ok()) {
    stats_.success_count.fetch_add(1, std::memory_order_relaxed);
    stats_.success_ns.fetch_add(ns, std::memory_order_relaxed);
    // The latency histogram counts successes, as Triton's request durations do: a queue-full
    // rejection answered at once would otherwise pull its percentiles down under overload.
    const uint64_t us = ns / 1000;
    size_t b = 0;
    while (b < kLatencyBucketsUs.size() && us > kLatencyBucketsUs[b]) ++b;
    stats_.latency_buckets[b].fetch_add(1, std::memory_order_relaxed);
    stats_.latency_sum_us.fetch_add(us, std::memory_order_relaxed);
  } else {
    stats_.fail_count.fetch_add(1, std::memory_order_relaxed);
    stats_.fail_ns.fetch_add(ns, std::memory_order_relaxed);
    stats_.fail_by_reason[static_cast<int>(result.reason)].fetch_add(1, std::memory_order_relaxed);
  }
  if (result.status.is_ok()) result.version = version_;
  result.timestamps.queue_start = std::chrono::duration_cast<std::chrono::nanoseconds>(e.enqueued.time_since_epoch()).count();
  InferCallback done = std::move(e.done);
  pending_.fetch_sub(1, std::memory_order_relaxed);
  if (done) done(std::move(result));
}

std::vector<ServedModel::Entry> ServedModel::take_batch(std::unique_lock<std::mutex>& lock) {
  std::vector<Entry> batch;
  if (queue_.empty()) return batch;
  if (!dynamic_batching_) {
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
    return batch;
  }
  // Rows that fit with the oldest request (same shapes apart from the batch axis), FIFO.
  const InferRequest& first = queue_.front().request;
  int64_t rows = 0;
  std::vector<size_t> picked;
  for (size_t i = 0; i < queue_.size() && rows < max_batch_; ++i) {
    const InferRequest& r = queue_[i].request;
    if (rows + r.batch > max_batch_) continue;
    if (i > 0 && !same_row_shapes(first, r)) continue;
    picked.push_back(i);
    rows += r.batch;
  }
  const bool full = rows >= target_batch_;
  const auto due = queue_.front().enqueued + max_delay_;
  if (!full && !stopping_ && Clock::now() < due) {
    // Wake at the delay's end, or earlier when a queued request's timeout comes first.
    auto wake = due;
    for (const Entry& e : queue_) wake = std::min(wake, e.deadline);
    cv_.wait_until(lock, wake);
    return batch;  // the caller looks again (the queue may have changed)
  }
  for (auto it = picked.rbegin(); it != picked.rend(); ++it) {
    batch.push_back(std::move(queue_[*it]));
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(*it));
  }
  std::reverse(batch.begin(), batch.end());
  return batch;
}

void ServedModel::instance_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Work when an instance is free (inline runs take instances too).
    cv_.wait(lock, [&] { return (stopping_ && queue_.empty()) || (!queue_.empty() && busy_ < instances_); });
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    // Timed-out requests leave the queue first, and cancelled ones that on_cancel has not taken yet.
    const auto now = Clock::now();
    std::vector<Entry> dropped = take_dropped(now);
    std::vector<Entry> batch = queue_.empty() ? std::vector<Entry>() : take_batch(lock);
    const bool more = !queue_.empty();
    if (!batch.empty()) ++busy_;
    lock.unlock();
    if (more && !batch.empty()) cv_.notify_one();  // another instance may take the rest
    drop(dropped, now);
    if (batch.empty()) {
      lock.lock();
      continue;
    }
    run_batch(std::move(batch));
    lock.lock();
    --busy_;
    if (stopping_ && busy_ == 0) cv_.notify_all();  // retire() waits for the inline runs' end
  }
}

StatusOr<Tensor> ServedModel::reshaped(const Tensor& t, const TensorReshape& r) const {
  const size_t lead = max_batch_ > 0 ? 1 : 0;
  if (t.rank() < static_cast<int64_t>(lead)) return invalid_argument("a scalar has no batch axis");
  std::vector<int64_t> dims(t.dims().begin(), t.dims().begin() + static_cast<std::ptrdiff_t>(lead));
  auto rest = reshape_dims(std::vector<int64_t>(t.dims().begin() + static_cast<std::ptrdiff_t>(lead), t.dims().end()), r.from, r.to);
  if (!rest.is_ok()) return rest.status();
  dims.insert(dims.end(), rest.value().begin(), rest.value().end());
  return t.reshaped(std::move(dims));
}

void ServedModel::run_batch(std::vector<Entry> batch) {
  const auto start = Clock::now();
  for (Entry& e : batch) {
    stats_.queue_count.fetch_add(1, std::memory_order_relaxed);
    stats_.queue_ns.fetch_add(ns_between(e.enqueued, start), std::memory_order_relaxed);
  }
  int64_t rows = 0;
  for (Entry& e : batch) rows += e.request.batch;
  // Inputs: one request's own tensors, or the requests' rows concatenated along the batch axis.
  NamedTensors feeds;
  Status st = Status::ok();
  if (batch.size() == 1) {
    feeds = batch[0].request.inputs;
  } else {
    for (const auto& [name, first] : batch[0].request.inputs) {
      std::vector<int64_t> dims = first.dims();
      dims[0] = rows;
      auto t = Tensor::try_allocate(first.dtype(), dims);
      if (!t.is_ok()) {
        st = t.status();
        break;
      }
      Tensor merged = std::move(t).value();
      if (merged.dtype() == DType::kString) {  // BYTES: the elements are strings, not raw bytes
        size_t k = 0;
        for (Entry& e : batch)
          for (const auto& [n, x] : e.request.inputs)
            if (n == name)
              for (const std::string& v : x.strings()) merged.mutable_strings()[k++] = v;
        feeds.emplace_back(name, std::move(merged));
        continue;
      }
      char* dst = static_cast<char*>(merged.mutable_raw());
      for (Entry& e : batch)
        for (const auto& [n, x] : e.request.inputs)
          if (n == name) {
            std::memcpy(dst, x.raw(), static_cast<size_t>(x.nbytes()));
            dst += x.nbytes();
          }
      feeds.emplace_back(name, std::move(merged));
    }
  }
  // config.pbtxt `reshape`: the shape the model takes.
  for (auto& [name, t] : feeds)
    for (const TensorReshape& r : input_reshapes_)
      if (st.is_ok() && r.name == name) {
        auto x = reshaped(t, r);
        if (x.is_ok()) t = std::move(x).value();
        else st = x.status().with_context("model '" + name_ + "': input '" + name + "': its reshape");
      }
  const auto infer_start = Clock::now();
  NamedTensors outputs;
  if (st.is_ok()) st = session_->run(feeds, &outputs);
  const auto infer_end = Clock::now();
  const uint64_t infer_ns = ns_between(infer_start, infer_end);
  const uint64_t recent = recent_run_ns_.load(std::memory_order_relaxed);
  recent_run_ns_.store(recent == 0 ? infer_ns : (3 * recent + infer_ns) / 4, std::memory_order_relaxed);
  stats_.compute_input_ns.fetch_add(ns_between(start, infer_start), std::memory_order_relaxed);
  stats_.compute_infer_ns.fetch_add(infer_ns, std::memory_order_relaxed);
  stats_.execution_count.fetch_add(1, std::memory_order_relaxed);
  stats_.inference_count.fetch_add(static_cast<uint64_t>(rows), std::memory_order_relaxed);
  if (rows >= 1 && rows <= stats_.max_batch) {
    stats_.batch_count[rows].fetch_add(1, std::memory_order_relaxed);
    stats_.batch_ns[rows].fetch_add(infer_ns, std::memory_order_relaxed);
  }
  stats_.last_inference_ms.store(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch()).count()),
                                 std::memory_order_relaxed);
  if (!st.is_ok()) {
    for (Entry& e : batch)
      finish(e, {st.with_context("model '" + name_ + "' version " + std::to_string(version_)), FailureReason::kBackend, {}});
    return;
  }
  // The batch's steps, for the trace extension (each request's queue start is its own, in finish()).
  auto steady_ns = [](Clock::time_point t) { return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(); };
  InferTimestamps ts;
  ts.compute_start = steady_ns(start);
  ts.compute_input_end = steady_ns(infer_start);
  ts.compute_output_start = steady_ns(infer_end);
  auto ran = [&ts](NamedTensors outs) {
    InferResult r{Status::ok(), FailureReason::kOther, std::move(outs)};
    r.timestamps = ts;
    r.timestamps.compute_end = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    return r;
  };
  // Outputs in the config's order; each request gets its rows.
  NamedTensors ordered;
  for (const TensorSpec& o : outputs_) {
    bool found = false;
    for (auto& [n, t] : outputs)
      if (n == o.name) {
        ordered.emplace_back(n, t);
        found = true;
        for (const TensorReshape& r : output_reshapes_)
          if (r.name == n) {
            auto x = reshaped(t, r);  // config.pbtxt `reshape`: the model's shape -> dims
            if (!x.is_ok()) {
              for (Entry& e : batch)
                finish(e, {x.status().with_context("model '" + name_ + "': output '" + n + "': the config's reshape"),
                           FailureReason::kBackend, {}});
              return;
            }
            ordered.back().second = std::move(x).value();
          }
      }
    if (!found) {
      for (Entry& e : batch)
        finish(e, {internal_error("model '" + name_ + "' produced no output '" + o.name + "'"), FailureReason::kBackend, {}});
      return;
    }
  }
  if (batch.size() == 1) {
    finish(batch[0], ran(std::move(ordered)));
  } else {
    for (auto& [n, t] : ordered)
      if (t.rank() == 0 || t.dim(0) != rows) {
        for (Entry& e : batch)
          finish(e, {internal_error("model '" + name_ + "': output '" + n + "' has dims " + dims_to_string(t.dims()) +
                                    ", not " + std::to_string(rows) + " rows of the merged batch"),
                     FailureReason::kBackend, {}});
        return;
      }
    int64_t offset = 0;
    for (Entry& e : batch) {
      NamedTensors mine;
      for (auto& [n, t] : ordered) {
        if (t.dtype() != DType::kString) {
          mine.emplace_back(n, t.outer_slice(offset, e.request.batch));
          continue;
        }
        std::vector<int64_t> dims = t.dims();  // BYTES: outer_slice views raw bytes; copy the rows' strings
        dims[0] = e.request.batch;
        Tensor part = Tensor::allocate(DType::kString, dims);
        const size_t per_row = static_cast<size_t>(t.numel() / rows);
        std::copy_n(t.strings().begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(offset) * per_row),
                    per_row * static_cast<size_t>(e.request.batch), part.mutable_strings().begin());
        mine.emplace_back(n, std::move(part));
      }
      offset += e.request.batch;
      finish(e, ran(std::move(mine)));
    }
  }
  stats_.compute_output_ns.fetch_add(ns_between(infer_end, Clock::now()), std::memory_order_relaxed);
}

}  // namespace ferry::serve
