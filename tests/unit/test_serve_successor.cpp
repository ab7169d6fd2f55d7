// ServedModel::retire: a request that found a version just before a reload (or a new version)
// replaced it, and reaches the old queue after the swap, goes on to the successor when that takes
// the same tensors and, for a request that named its version, has the same number; otherwise it is
// refused ("being unloaded"). Deterministic: the request is enqueued after retire().
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "serve/served_model.h"
#include "serve_test_util.h"

namespace ferry::serve {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<ServedModel> load(int64_t version, const std::string& path) {
  inference::ModelConfig config;
  config.set_name("m");
  ServeOptions options;
  options.threads = 1;
  std::vector<std::string> warnings;
  auto m = ServedModel::load("m", version, path, config, options, &warnings);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? m.value() : nullptr;
}

InferResult run(ServedModel& m, bool pinned) {
  InferRequest r;
  r.inputs.emplace_back("x", Tensor::from_vector<float>({1, 2, 3, 4}, {1, 4}));
  r.batch = 1;
  r.version_pinned = pinned;
  auto done = std::make_shared<std::promise<InferResult>>();
  auto f = done->get_future();
  m.enqueue(std::move(r), [done](InferResult res) { done->set_value(std::move(res)); });
  if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) return {internal_error("no answer in 30 s"), FailureReason::kOther, {}};
  return f.get();
}

TEST(ServeSuccessor, ARetiredVersionForwardsWhatItsSuccessorTakes) {
  std::string leaf = "ferry_serve_successor_";
  leaf += std::to_string(getpid());
  const fs::path dir = fs::temp_directory_path() / leaf;
  fs::create_directories(dir);
  const std::string add = write_elementwise_model(dir, "add.onnx", "Add", "z");
  const std::string mul = write_elementwise_model(dir, "mul.onnx", "Mul", "z");
  const std::string relu = write_elementwise_model(dir, "relu.onnx", "Relu", "r");  // another output name: other tensors
  auto v1 = load(1, add), v1_reloaded = load(1, mul), v2 = load(2, add), other = load(3, relu);
  ASSERT_TRUE(v1 && v1_reloaded && v2 && other);

  // A reload of version 1: even a request that named version 1 goes on (and Mul ran, not Add).
  v1->retire(v1_reloaded);
  InferResult r = run(*v1, /*pinned=*/true);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].second.data<float>()[3], 16.0f);

  // Version 2 replaces version 1: a request that named version 1 is refused, one that named no
  // version goes on to version 2 (Add).
  v1_reloaded->retire(v2);
  r = run(*v1_reloaded, /*pinned=*/true);
  EXPECT_FALSE(r.status.is_ok());
  EXPECT_NE(r.status.message().find("is being unloaded"), std::string::npos) << r.status.message();
  r = run(*v1_reloaded, /*pinned=*/false);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  EXPECT_EQ(r.outputs[0].second.data<float>()[3], 8.0f);
  EXPECT_EQ(r.version, 2);  // the response names the version that ran it

  // A successor with other tensors takes nothing; a plain stop forwards nothing.
  v2->retire(other);
  r = run(*v2, /*pinned=*/false);
  EXPECT_NE(r.status.message().find("is being unloaded"), std::string::npos) << r.status.to_string();
  other->stop();
  r = run(*other, /*pinned=*/false);
  EXPECT_NE(r.status.message().find("is being unloaded"), std::string::npos) << r.status.to_string();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace ferry::serve
