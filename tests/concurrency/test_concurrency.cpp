// One loaded model run from 8 threads at once, many times, with different inputs: every result
// must be bit-identical to the single-threaded run of the same input (issue "Hardening", item 5).
// The same binary runs under ThreadSanitizer in `make test-asan` (a FERRY_TSAN build of this target only).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../unit/graph_builder.h"
#include "onnx/onnx_import.h"
#include "runtime/executor.h"
#include "runtime/run_control.h"

namespace ferry {
namespace {

using testing::GraphBuilder;

using testing::random_tensor;

Attribute ints_attr(std::vector<int64_t> v) { return GraphBuilder::ints(std::move(v)); }

// A small transformer-ish block: MatMul + bias, Softmax, LayerNorm-like arithmetic, Transpose.
std::shared_ptr<Model> mlp_block() {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {4, 16, 32});
  std::string w = b.initializer("w", random_tensor({32, 32}, 7));
  std::string bias = b.initializer("b", random_tensor({32}, 8));
  std::string h = b.node("Add", {b.node("MatMul", {x, w}), bias});
  std::string s = b.node("Softmax", {h});
  std::string t = b.node("Transpose", {s}, {{"perm", ints_attr({0, 2, 1})}});
  std::string m = b.node("MatMul", {s, t});
  b.output(b.node("Tanh", {m}));
  return b.build();
}

// A classifier head: few rows against constant weights (the small-GEMM panels' case).
std::shared_ptr<Model> gemv_block() {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {2, 96});
  std::string w1 = b.initializer("w1", random_tensor({96, 64}, 9));
  std::string w2 = b.initializer("w2", random_tensor({64, 10}, 10));
  std::string h = b.node("Relu", {b.node("MatMul", {x, w1})});
  b.output(b.node("MatMul", {h, w2}));
  return b.build();
}

// Transformer-like products (batch axis symbolic: the plans, and so the forms, are made at the first
// runs): 16 rows x [64, 96] takes RowGemm at 1 thread, x [96, 40] oneDNN's packed form.
std::shared_ptr<Model> packed_matmul_block() {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 16, 64});
  std::string w1 = b.initializer("w1", random_tensor({64, 96}, 11));
  std::string w2 = b.initializer("w2", random_tensor({96, 40}, 12));
  std::string h = b.node("Relu", {b.node("MatMul", {x, w1})});
  b.output(b.node("MatMul", {h, w2}));
  return b.build();
}

std::shared_ptr<Model> demo_cnn() {
  auto m = load_onnx_model(std::string(FERRY_SOURCE_DIR) + "/demo/digits_cnn.onnx");
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? m.value() : nullptr;
}

bool bit_identical(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i].second;
    const Tensor& y = b[i].second;
    if (x.dtype() != y.dtype() || x.dims() != y.dims() || x.nbytes() != y.nbytes()) return false;
    if (std::memcmp(x.raw(), y.raw(), static_cast<size_t>(x.nbytes())) != 0) return false;
  }
  return true;
}

// One feed per thread for the model's first input (unknown dims as 1), seeds from `seed`, and what
// `ex` answers to each, run one at a time: the results every concurrent run must equal.
void feeds_and_expected(const Model& model, Executor* ex, int threads, uint32_t seed, std::vector<NamedTensors>* feeds,
                        std::vector<NamedTensors>* expected) {
  const ValueInfo& in = model.graph.inputs[0];
  std::vector<int64_t> dims;
  for (const Dim& d : in.type.shape->dims) dims.push_back(d.is_known() ? d.value : 1);
  feeds->assign(threads, {});
  expected->assign(threads, {});
  for (int t = 0; t < threads; ++t) {
    (*feeds)[t] = {{in.name, random_tensor(dims, seed + t)}};
    Status st = ex->run((*feeds)[t], &(*expected)[t]);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
}

void run_concurrently(std::shared_ptr<const Model> model, const std::string& device) {
  ASSERT_NE(model, nullptr);
  ExecutorOptions options;
  options.device = device;
  options.threads = 1;
  auto created = Executor::create(model, options);
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  Executor* ex = created.value().get();
  constexpr int kThreads = 8;
  constexpr int kIterations = 25;
  std::vector<NamedTensors> feeds, expected;
  feeds_and_expected(*model, ex, kThreads, 100, &feeds, &expected);
  if (::testing::Test::HasFatalFailure()) return;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        NamedTensors out;
        if (!ex->run(feeds[t], &out).is_ok()) {
          ++errors;
          continue;
        }
        if (!bit_identical(out, expected[t])) ++mismatches;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(errors.load(), 0) << device;
  EXPECT_EQ(mismatches.load(), 0) << device << ": results differ from the single-threaded run";
}

// Executors of one model sharing their kernels' weight forms (ExecutorOptions::shared_forms, as a
// compiler Session's pool does for ferry serve's instances): every executor starts at once, so the
// forms (oneDNN's packed layouts, the small-GEMM panels) are asked for by several threads at the same
// time; each executor's results equal an executor with forms of its own, bit for bit.
void run_sharing_forms(std::shared_ptr<const Model> model) {
  ASSERT_NE(model, nullptr);
  ExecutorOptions own;
  own.device = "cpu";
  own.threads = 1;
  auto alone = Executor::create(model, own);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
  constexpr int kThreads = 4;
  constexpr int kIterations = 5;
  std::vector<NamedTensors> feeds, expected;
  feeds_and_expected(*model, alone.value().get(), kThreads, 200, &feeds, &expected);
  if (::testing::Test::HasFatalFailure()) return;
  ExecutorOptions shared = own;
  shared.shared_forms = std::make_shared<SharedWeightForms>();
  std::vector<std::unique_ptr<Executor>> pool;
  for (int t = 0; t < kThreads; ++t) {
    auto created = Executor::create(model, shared);
    ASSERT_TRUE(created.is_ok()) << created.status().to_string();
    pool.push_back(std::move(created).value());
  }
  std::atomic<int> mismatches{0}, errors{0}, ready{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();  // first runs together
      for (int i = 0; i < kIterations; ++i) {
        NamedTensors out;
        if (!pool[t]->run(feeds[t], &out).is_ok()) {
          ++errors;
          continue;
        }
        if (!bit_identical(out, expected[t])) ++mismatches;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "an executor sharing forms differs from one with its own";
  EXPECT_GT(shared.shared_forms->made(), 0) << "no form was shared: the test shows nothing";
}

std::unique_ptr<Executor> demo_executor(std::shared_ptr<const Model> model) {
  ExecutorOptions options;
  options.device = "cpu";
  options.threads = 1;
  auto created = Executor::create(std::move(model), options);
  EXPECT_TRUE(created.is_ok()) << created.status().to_string();
  return created.is_ok() ? std::move(created).value() : nullptr;
}

// RunOptions.terminate (runtime/run_control.h): a flag set during a run ends it before the next
// node; cleared, the next run is whole and equal to a run without the flag.
TEST(RunTerminate, EndsTheRunBeforeTheNextNode) {
  std::shared_ptr<const Model> model = demo_cnn();
  ASSERT_NE(model, nullptr);
  std::unique_ptr<Executor> ex = demo_executor(model);
  ASSERT_NE(ex, nullptr);
  const NamedTensors feeds = {{"image", random_tensor({2, 1, 28, 28}, 5)}};
  NamedTensors expected;
  ASSERT_TRUE(ex->run(feeds, &expected).is_ok());
  std::atomic<bool> terminate{false};
  int nodes_run = 0;
  ex->set_observer([&](const Node&, const std::vector<Value>&, double) { ++nodes_run, terminate.store(true); },
                   /*keeps_outputs=*/false);
  NamedTensors out;
  Status st;
  {
    ScopedRunTerminate scope(&terminate);
    EXPECT_EQ(run_terminate_flag(), &terminate);
    st = ex->run(feeds, &out);
  }
  EXPECT_EQ(run_terminate_flag(), nullptr);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(kRunTerminatedMessage), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("(before node"), std::string::npos) << st.to_string();
  EXPECT_EQ(nodes_run, 1);
  terminate.store(false);
  ex->set_observer([&](const Node&, const std::vector<Value>&, double) { ++nodes_run; }, /*keeps_outputs=*/false);
  {
    ScopedRunTerminate scope(&terminate);
    st = ex->run(feeds, &out);
  }
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_GT(nodes_run, 2);
  EXPECT_TRUE(bit_identical(out, expected));
}

// One flag shared by runs on several threads: setting it ends them all (ThreadSanitizer checks
// the flag's reads against the store).
TEST(RunTerminate, FromAnotherThreadEndsEveryRunUsingIt) {
  std::unique_ptr<Executor> ex = demo_executor(demo_cnn());
  ASSERT_NE(ex, nullptr);
  const NamedTensors feeds = {{"image", random_tensor({4, 1, 28, 28}, 6)}};
  std::atomic<bool> terminate{false};
  std::atomic<int> started{0}, ended{0}, other_errors{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&] {
      ScopedRunTerminate scope(&terminate);
      bool counted = false;
      for (int i = 0; i < 100000; ++i) {
        NamedTensors out;
        Status st = ex->run(feeds, &out);
        if (!st.is_ok()) {
          if (st.message().find(kRunTerminatedMessage) != std::string::npos) ++ended;
          else ++other_errors;
          return;
        }
        if (!counted) ++started, counted = true;
      }
    });
  }
  while (started.load() + other_errors.load() < 4) std::this_thread::yield();
  terminate.store(true);
  for (auto& w : workers) w.join();
  EXPECT_EQ(ended.load(), 4);
  EXPECT_EQ(other_errors.load(), 0);
}

TEST(Concurrency, DemoCnnOnReferenceBackend) { run_concurrently(demo_cnn(), "cpu-ref"); }
TEST(Concurrency, DemoCnnOnCpuBackend) { run_concurrently(demo_cnn(), "cpu"); }
TEST(Concurrency, MatMulSoftmaxOnReferenceBackend) { run_concurrently(mlp_block(), "cpu-ref"); }
TEST(Concurrency, MatMulSoftmaxOnCpuBackend) { run_concurrently(mlp_block(), "cpu"); }
TEST(Concurrency, DemoCnnExecutorsSharingWeightForms) { run_sharing_forms(demo_cnn()); }
TEST(Concurrency, GemvExecutorsSharingWeightForms) { run_sharing_forms(gemv_block()); }
TEST(Concurrency, PackedMatMulExecutorsSharingWeightForms) { run_sharing_forms(packed_matmul_block()); }

}  // namespace
}  // namespace ferry
