// Partitioning with CPU fallback: a device that claims part of the ops gets those, the CPU runs
// the rest, results equal the reference, and the reported copies are the tensors that cross.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "op_tester.h"
#include "partial_backend.h"
#include "runtime/executor.h"

namespace ferry::testing {
namespace {

// x -> Relu -> Sigmoid -> Add(relu, sigmoid) -> Tanh -> out ; the device lacks Sigmoid.
std::shared_ptr<Model> chain_model(const std::vector<int64_t>& dims) {
  GraphBuilder b;
  const std::string x = b.input("x", DType::kF32, dims);
  const std::string r = b.node("Relu", {x});
  const std::string s = b.node("Sigmoid", {r});
  const std::string a = b.node("Add", {r, s});
  b.output(b.node("Tanh", {a}));
  return b.build();
}

Tensor seeded(std::vector<int64_t> dims) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = static_cast<float>((i * 37 % 19) - 9) / 4.0f;
  return t;
}

Tensor run_on(std::shared_ptr<Model> m, std::unique_ptr<Backend> device, const Tensor& x, Executor** keep,
              std::unique_ptr<Executor>* owner) {
  auto ex = Executor::create(m, std::move(device), ExecutorOptions{.opt_level = 0});
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return Tensor();
  *owner = std::move(ex).value();
  *keep = owner->get();
  NamedTensors out;
  Status st = (*owner)->run({{"x", x}}, &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return st.is_ok() ? out[0].second : Tensor();
}

Tensor reference(std::shared_ptr<Model> m, const Tensor& x) {
  auto ex = Executor::create(m, ExecutorOptions{.device = "cpu-ref"});
  EXPECT_TRUE(ex.is_ok());
  NamedTensors out;
  EXPECT_TRUE(ex.value()->run({{"x", x}}, &out).is_ok());
  return out[0].second;
}

TEST(Partition, PartialDeviceFallsBackToCpuWithVisibleCopies) {
  auto m = chain_model({2, 3});
  const Tensor x = seeded({2, 3});
  Executor* ex = nullptr;
  std::unique_ptr<Executor> owner;
  Tensor got = run_on(m, std::make_unique<PartialBackend>(std::set<std::string>{"Relu", "Add", "Tanh"}), x, &ex, &owner);
  ASSERT_NE(ex, nullptr);
  expect_near(got, reference(m, x), 0, 0);  // same kernels, same order: bit-identical

  const PartitionPlan& plan = ex->partitions();
  ASSERT_EQ(plan.partitions.size(), 3u);
  EXPECT_EQ(plan.partitions[0].backend, "test-partial");
  EXPECT_EQ(plan.partitions[0].num_nodes, 1u);
  EXPECT_EQ(plan.partitions[1].backend, "cpu");
  EXPECT_EQ(plan.partitions[1].num_nodes, 1u);
  EXPECT_EQ(plan.partitions[2].num_nodes, 2u);
  ASSERT_EQ(plan.fallbacks.size(), 1u);
  EXPECT_EQ(m->graph.nodes[plan.fallbacks[0].node].op_type, "Sigmoid");
  EXPECT_NE(plan.fallbacks[0].reason.find("not claimed"), std::string::npos);
  // Crossings: x up, relu down (Sigmoid reads it on the host), sigmoid up, the output down.
  ASSERT_EQ(plan.boundaries(), 4);
  const int64_t tensor_bytes = 2 * 3 * 4;
  EXPECT_EQ(plan.static_bytes(), 4 * tensor_bytes);
  EXPECT_EQ(ex->last_transfers().boundaries, 4);
  EXPECT_EQ(ex->last_transfers().bytes, 4 * tensor_bytes);
}

TEST(Partition, BytesComeFromTheTensorsOfTheRunWhenShapesAreDynamic) {
  auto m = chain_model({-1, 5});
  Executor* ex = nullptr;
  std::unique_ptr<Executor> owner;
  const Tensor x = seeded({7, 5});
  Tensor got = run_on(m, std::make_unique<PartialBackend>(std::set<std::string>{"Relu", "Add", "Tanh"}), x, &ex, &owner);
  ASSERT_NE(ex, nullptr);
  expect_near(got, reference(m, x), 0, 0);
  EXPECT_EQ(ex->partitions().static_bytes(), -1);  // unknown before running
  EXPECT_EQ(ex->last_transfers().boundaries, 4);
  EXPECT_EQ(ex->last_transfers().bytes, 4 * 7 * 5 * 4);
  NamedTensors out;  // a second run at another size counts afresh
  ASSERT_TRUE(ex->run({{"x", seeded({2, 5})}}, &out).is_ok());
  EXPECT_EQ(ex->last_transfers().bytes, 4 * 2 * 5 * 4);
}

TEST(Partition, DeviceTakingEverythingMovesOnlyInputsAndOutputs) {
  auto m = chain_model({4});
  Executor* ex = nullptr;
  std::unique_ptr<Executor> owner;
  const Tensor x = seeded({4});
  Tensor got = run_on(m, std::make_unique<PartialBackend>(std::set<std::string>{"Relu", "Sigmoid", "Add", "Tanh"}), x,
                      &ex, &owner);
  ASSERT_NE(ex, nullptr);
  expect_near(got, reference(m, x), 0, 0);
  EXPECT_EQ(ex->partitions().partitions.size(), 1u);
  EXPECT_EQ(ex->last_transfers().boundaries, 2);
  EXPECT_EQ(ex->last_transfers().bytes, 2 * 4 * 4);
}

TEST(Partition, NoFallbackIsAnErrorNamingTheNode) {
  auto m = chain_model({2, 3});
  ExecutorOptions o;
  o.allow_fallback = false;
  auto ex = Executor::create(m, std::make_unique<PartialBackend>(std::set<std::string>{"Relu", "Add", "Tanh"}), o);
  ASSERT_FALSE(ex.is_ok());
  EXPECT_NE(ex.status().message().find("Sigmoid_1"), std::string::npos) << ex.status().message();
  EXPECT_NE(ex.status().message().find("--no-fallback"), std::string::npos) << ex.status().message();
}

TEST(Partition, CpuDeviceHasOnePartitionAndNoCopies) {
  auto m = chain_model({2, 3});
  auto ex = Executor::create(m, ExecutorOptions{.device = "cpu"});
  ASSERT_TRUE(ex.is_ok());
  NamedTensors out;
  ASSERT_TRUE(ex.value()->run({{"x", seeded({2, 3})}}, &out).is_ok());
  EXPECT_EQ(ex.value()->partitions().partitions.size(), 1u);
  EXPECT_EQ(ex.value()->partitions().boundaries(), 0);
  EXPECT_EQ(ex.value()->last_transfers().bytes, 0);
}

}  // namespace
}  // namespace ferry::testing
