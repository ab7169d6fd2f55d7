// ServedModel and Cancellation: a queued request whose client went away leaves the queue when its
// Cancellation is set, answered CANCELED on the setting thread, its max_queue_size slot free for
// the next request at once, not when the batcher next wakes (here a 60 s max_queue_delay away);
// a request queued under a Cancellation set already is dropped as it is queued. Deterministic:
// everything but the full batch that runs on the instance thread happens on this thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <optional>

#include "serve/served_model.h"
#include "serve_test_util.h"

namespace ferry::serve {
namespace {

namespace fs = std::filesystem;

InferRequest request(int64_t rows, std::shared_ptr<Cancellation> cancel = nullptr) {
  InferRequest r;
  r.inputs.emplace_back("x", Tensor::from_vector<float>(std::vector<float>(static_cast<size_t>(rows) * 4, 1.0f), {rows, 4}));
  r.batch = rows;
  r.cancelled = std::move(cancel);
  return r;
}

TEST(ServeCancel, ACancelledRequestLeavesTheQueueAtOnce) {
  const fs::path dir = fs::temp_directory_path() / ("ferry_serve_cancel_" + std::to_string(getpid()));
  fs::create_directories(dir);
  inference::ModelConfig config;
  config.set_max_batch_size(8);
  auto* db = config.mutable_dynamic_batching();
  db->set_max_queue_delay_microseconds(60000000);  // the batcher does not wake on its own during the test
  db->add_preferred_batch_size(2);
  db->mutable_default_queue_policy()->set_max_queue_size(1);
  ServeOptions options;
  options.threads = 1;
  std::vector<std::string> warnings;
  auto loaded = ServedModel::load("m", 1, write_elementwise_model(dir, "relu.onnx", "Relu", "y"), config, options, &warnings);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  std::shared_ptr<ServedModel> m = loaded.value();
  const auto canceled = [&] { return m->stats().fail_by_reason[static_cast<int>(FailureReason::kCanceled)].load(); };

  auto cancel = std::make_shared<Cancellation>();
  std::optional<InferResult> a;
  m->enqueue(request(1, cancel), [&](InferResult r) { a = std::move(r); });
  EXPECT_FALSE(a.has_value()) << "one row of a preferred 2: it waits in the queue";
  EXPECT_EQ(m->pending(), 1);
  std::optional<InferResult> full;
  m->enqueue(request(1), [&](InferResult r) { full = std::move(r); });
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->reason, FailureReason::kRejected) << "max_queue_size 1: the queue is full";

  cancel->set();  // the client went away
  ASSERT_TRUE(a.has_value()) << "the cancelled request was not answered when its cancellation was set";
  EXPECT_EQ(a->reason, FailureReason::kCanceled);
  EXPECT_EQ(m->pending(), 0);
  EXPECT_EQ(canceled(), 1u);

  // Its slot is free: a full batch (2 rows) is queued and runs at once.
  std::promise<InferResult> pb;
  auto fb = pb.get_future();
  m->enqueue(request(2), [&](InferResult r) { pb.set_value(std::move(r)); });
  ASSERT_EQ(fb.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  InferResult b = fb.get();
  ASSERT_TRUE(b.status.is_ok()) << b.status.to_string();
  EXPECT_EQ(b.outputs[0].second.data<float>()[7], 1.0f);

  // Queued under a cancellation set already: dropped as it is queued.
  std::optional<InferResult> c;
  m->enqueue(request(1, cancel), [&](InferResult r) { c = std::move(r); });
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->reason, FailureReason::kCanceled);
  EXPECT_EQ(canceled(), 2u);
  EXPECT_EQ(m->pending(), 0);
  m->stop();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace ferry::serve
