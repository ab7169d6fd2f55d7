// ServedModel::enqueue's inline runs: a request that finds the queue empty and an instance idle,
// on a model that does not wait to batch, runs on the caller's thread before enqueue returns; one
// that finds every instance busy is queued and runs on an instance thread; a model with a
// batching delay never runs inline and still merges what arrives within the delay. Deterministic:
// the busy case enqueues from inside the inline run's own callback (the instance is still held).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "serve/served_model.h"
#include "serve_test_util.h"

namespace ferry::serve {
namespace {

namespace fs = std::filesystem;

struct ServeInline : ::testing::Test {
  void SetUp() override {
    dir = fs::temp_directory_path() / ("ferry_serve_inline_" + std::to_string(getpid()));
    fs::create_directories(dir);
    path = write_elementwise_model(dir, "relu.onnx", "Relu", "y");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::shared_ptr<ServedModel> load(const inference::ModelConfig& config) {
    ServeOptions options;
    options.threads = 1;
    std::vector<std::string> warnings;
    auto m = ServedModel::load("m", 1, path, config, options, &warnings);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return m.is_ok() ? m.value() : nullptr;
  }
  fs::path dir;
  std::string path;
};

InferRequest request(float v) {
  InferRequest r;
  r.inputs.emplace_back("x", Tensor::from_vector<float>({v, -v, v, -v}, {1, 4}));
  r.batch = 1;
  return r;
}

struct Answer {
  InferResult result;
  std::thread::id thread;
};

TEST_F(ServeInline, AnIdleModelWithoutBatchingDelayRunsOnTheCallersThread) {
  inference::ModelConfig config;
  config.set_max_batch_size(8);
  config.mutable_dynamic_batching();  // max_queue_delay_microseconds 0: nothing to wait for
  auto m = load(config);
  ASSERT_TRUE(m);
  std::optional<Answer> a;
  m->enqueue(request(2), [&](InferResult r) { a = Answer{std::move(r), std::this_thread::get_id()}; });
  ASSERT_TRUE(a.has_value()) << "the callback did not run before enqueue returned";
  EXPECT_EQ(a->thread, std::this_thread::get_id());
  ASSERT_TRUE(a->result.status.is_ok()) << a->result.status.to_string();
  EXPECT_EQ(a->result.outputs[0].second.data<float>()[0], 2.0f);
  EXPECT_EQ(a->result.outputs[0].second.data<float>()[1], 0.0f);
  EXPECT_EQ(m->stats().execution_count.load(), 1u);
  EXPECT_EQ(m->stats().success_count.load(), 1u);
  EXPECT_EQ(m->pending(), 0);
}

TEST_F(ServeInline, ARequestThatFindsEveryInstanceBusyIsQueuedForAnInstanceThread) {
  inference::ModelConfig config;  // one instance, no batching
  auto m = load(config);
  ASSERT_TRUE(m);
  std::promise<Answer> second;
  auto f = second.get_future();
  std::optional<Answer> first;
  m->enqueue(request(1), [&](InferResult r) {
    first = Answer{std::move(r), std::this_thread::get_id()};
    // Still inside the inline run: its instance is held, so this one must wait for it.
    m->enqueue(request(3), [&](InferResult r2) { second.set_value(Answer{std::move(r2), std::this_thread::get_id()}); });
  });
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->thread, std::this_thread::get_id());
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  Answer b = f.get();
  EXPECT_NE(b.thread, std::this_thread::get_id());
  ASSERT_TRUE(b.result.status.is_ok()) << b.result.status.to_string();
  EXPECT_EQ(b.result.outputs[0].second.data<float>()[2], 3.0f);
  EXPECT_EQ(m->stats().execution_count.load(), 2u);
  m->stop();
}

TEST_F(ServeInline, AModelWithABatchingDelayQueuesAndMergesRequests) {
  inference::ModelConfig config;
  config.set_max_batch_size(8);
  config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(5000000);
  config.mutable_dynamic_batching()->add_preferred_batch_size(2);
  auto m = load(config);
  ASSERT_TRUE(m);
  std::promise<Answer> pa, pb;
  auto fa = pa.get_future(), fb = pb.get_future();
  m->enqueue(request(1), [&](InferResult r) { pa.set_value(Answer{std::move(r), std::this_thread::get_id()}); });
  m->enqueue(request(5), [&](InferResult r) { pb.set_value(Answer{std::move(r), std::this_thread::get_id()}); });
  ASSERT_EQ(fa.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_EQ(fb.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  Answer a = fa.get(), b = fb.get();
  EXPECT_NE(a.thread, std::this_thread::get_id());
  ASSERT_TRUE(a.result.status.is_ok() && b.result.status.is_ok());
  EXPECT_EQ(a.result.outputs[0].second.data<float>()[0], 1.0f);
  EXPECT_EQ(b.result.outputs[0].second.data<float>()[0], 5.0f);
  EXPECT_EQ(m->stats().execution_count.load(), 1u);  // one batch of 2
  EXPECT_EQ(m->stats().inference_count.load(), 2u);
}

}  // namespace
}  // namespace ferry::serve
