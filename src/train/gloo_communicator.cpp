// Communicator on Gloo (TCP transport): the only file that includes Gloo. Gloo's own algorithms
// do the work (gloo::allreduce: ring; gloo::broadcast, allgather, barrier); Gloo reports errors
// and timeouts by exceptions, which stop here and become Status. Operations run in call order on
// one worker thread, each with the job's timeout.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <vector>

#include "common/env_switch.h"
#include "train/comm_backends.h"
#include "train/tcp_store.h"

namespace ferry {
namespace {
// Objects deliberately never destroyed (Gloo contexts whose peers failed: their destructors may
// block), kept reachable from a static list so leak checkers do not report them.
void keep_until_exit(std::shared_ptr<void> p) {
  static std::mutex* mu = new std::mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>;
  std::lock_guard<std::mutex> lock(*mu);
  kept->push_back(std::move(p));
}
}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

// Gloo's address exchange through the rendezvous store (keys under "gloo/"). Gloo's interface
// reports failures by exceptions, so this adapter throws gloo::IoException.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<TcpStoreClient> store, double timeout_s) : store_(std::move(store)), timeout_s_(timeout_s) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = store_->set("gloo/" + key, data);
    if (!s.is_ok()) throw gloo::IoException(s.message());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->get("gloo/" + key, timeout_s_);
    if (!v.is_ok()) throw gloo::IoException(v.status().message());
    return v.value();
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(0)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back("gloo/" + k);
    const double t = timeout.count() > 0 ? static_cast<double>(timeout.count()) / 1000.0 : timeout_s_;
    Status s = store_->wait(prefixed, t);
    if (!s.is_ok()) throw gloo::IoException(s.message());
  }

 private:
  std::shared_ptr<TcpStoreClient> store_;
  double timeout_s_;
};

class Work : public CommWork {
 public:
  explicit Work(std::string what) : what_(std::move(what)) {}
  Status wait(double timeout_s) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done_; }))
      return invalid_argument(what_ + " did not complete within " + std::to_string(static_cast<int>(timeout_s)) +
                              " s: a peer stopped answering; raise --dist-timeout if it was only slow");
    return status_;
  }
  bool done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void finish(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(s);
    done_ = true;
    cv_.notify_all();
  }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const DistConfig& c, std::shared_ptr<TcpStoreClient> store, std::unique_ptr<TcpStoreServer> server)
      : config_(c), store_(std::move(store)), server_(std::move(server)) {}

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    // An operation blocked on a silent peer would hold the join until Gloo's timeout: the process
    // is leaving with an error then, so let the worker go.
    if (worker_.joinable()) {
      if (busy_.load()) worker_.detach();
      else worker_.join();
    }
    if (busy_.load() || broken_.load()) {
      // Gloo's destructors may wait on pairs that errored or are still busy; leave them to the exit.
      keep_until_exit(std::move(context_));
      keep_until_exit(std::move(device_));
    } else if (store_) {
      store_->goodbye();
    }
  }

  Status connect(double timeout_s) {
    try {
      gloo::transport::tcp::attr attr;
      const char* iface = env_value("GLOO_SOCKET_IFNAME");
      if (iface && *iface) attr.iface = iface;
      else attr.hostname = store_->local_ip().empty() ? config_.master_addr : store_->local_ip();
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(config_.rank, config_.world_size);
      ctx->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
      StoreAdapter adapter(store_, timeout_s);
      ctx->connectFullMesh(adapter, device_);
      ctx->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_s * 1000)));
      context_ = ctx;
    } catch (const std::exception& e) {
      broken_ = true;
      return invalid_argument("rank " + std::to_string(config_.rank) + ": Gloo could not connect the ranks (rendezvous " +
                              config_.address() + "): " + e.what() +
                              "; on several hosts set GLOO_SOCKET_IFNAME to the interface the hosts share");
    }
    worker_ = std::thread([this] { loop(); });
    return Status::ok();
  }

  int rank() const override { return config_.rank; }
  int world_size() const override { return config_.world_size; }
  std::string backend() const override { return "gloo"; }
  double timeout_s() const override { return config_.timeout_s; }

  std::shared_ptr<CommWork> allreduce_sum(std::span<float> data) override {
    return enqueue("allreduce of " + std::to_string(data.size()) + " floats", [this, data](uint32_t tag) {
      gloo::AllreduceOptions o(context_);
      o.setOutput(data.data(), data.size());
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      o.setTag(tag);
      o.setTimeout(timeout());
      gloo::allreduce(o);
    });
  }

  std::shared_ptr<CommWork> broadcast(std::span<float> data, int root) override {
    return enqueue("broadcast from rank " + std::to_string(root), [this, data, root](uint32_t tag) {
      gloo::BroadcastOptions o(context_);
      o.setOutput(data.data(), data.size());
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(timeout());
      gloo::broadcast(o);
    });
  }

  StatusOr<std::vector<int64_t>> allgather(int64_t value) override {
    auto in = std::make_shared<int64_t>(value);
    auto out = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(config_.world_size));
    auto w = enqueue("allgather", [this, in, out](uint32_t tag) {
      gloo::AllgatherOptions o(context_);
      o.setInput(in.get(), 1);
      o.setOutput(out->data(), out->size());
      o.setTag(tag);
      o.setTimeout(timeout());
      gloo::allgather(o);
    });
    RETURN_IF_ERROR(w->wait(config_.timeout_s + 5));
    return *out;
  }

  Status barrier() override {
    auto w = enqueue("barrier", [this](uint32_t tag) {
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(timeout());
      gloo::barrier(o);
    });
    return w->wait(config_.timeout_s + 5);
  }

  std::vector<int> lost_ranks(double grace_s) override {
    const auto t0 = Clock::now();
    for (;;) {
      auto lost = store_->lost_ranks();
      if (!lost.is_ok()) return {0};  // the store's host is gone
      if (!lost.value().empty()) return lost.value();
      if (std::chrono::duration<double>(Clock::now() - t0).count() >= grace_s) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  using Op = std::function<void(uint32_t tag)>;
  struct Item {
    std::shared_ptr<Work> work;
    Op op;
  };

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_s * 1000));
  }

  std::shared_ptr<CommWork> enqueue(std::string what, Op op) {
    auto w = std::make_shared<Work>(std::move(what));
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{w, std::move(op)});
    cv_.notify_all();
    return w;
  }

  void loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      if (broken_) {
        busy_ = false;
        item.work->finish(first_error_);
        continue;
      }
      std::string failure;
      try {
        item.op(next_tag_++);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      Status result = Status::ok();
      if (!failure.empty()) {
        broken_ = true;
        first_error_ = describe_failure(item.work->what(), failure);
        result = first_error_;
      }
      // Not busy before the waiter wakes: a waiter that then destroys the communicator joins this
      // thread instead of detaching it (a detached worker would write into freed memory).
      busy_ = false;
      item.work->finish(result);
    }
  }

  // Names the lost rank when the rendezvous saw one leave; otherwise a peer is alive but silent.
  Status describe_failure(const std::string& what, const std::string& gloo_message) {
    const std::vector<int> lost = lost_ranks(3.0);
    std::string msg = what + " failed: ";
    if (!lost.empty())
      msg += describe_ranks(lost) + " was lost (its process exited or was killed); stopping. The last checkpoint is intact: "
             "restart the job with --resume";
    else
      msg += "a peer did not answer within --dist-timeout (" + std::to_string(static_cast<int>(config_.timeout_s)) +
             " s) or the connection broke; stopping. Restart with --resume";
    msg += " [gloo: " + gloo_message.substr(0, 300) + "]";
    return invalid_argument(msg);
  }

  DistConfig config_;
  std::shared_ptr<TcpStoreClient> store_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::atomic<bool> busy_{false};
  std::atomic<bool> broken_{false};
  Status first_error_;
  uint32_t next_tag_ = 1;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> create_gloo_communicator(const DistConfig& config,
                                                                 std::shared_ptr<TcpStoreClient> store,
                                                                 std::unique_ptr<TcpStoreServer> server,
                                                                 double connect_timeout_s) {
  auto c = std::make_unique<GlooCommunicator>(config, std::move(store), std::move(server));
  RETURN_IF_ERROR(c->connect(connect_timeout_s));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace ferry
