// The static memory planner (runtime/memory_plan.h) and the executor's arena (runtime/arena.h):
// offsets never overlap for tensors alive at once, in place only when legal, and a planned run
// computes what a heap-only run computes, across input shape changes and concurrent runs.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "pass_test_util.h"
#include "runtime/memory_plan.h"

namespace ferry {
namespace {

using testing::ModelBuilder;

bool overlap_in_time(const BufferRequest& a, const BufferRequest& b) { return a.first <= b.last && b.first <= a.last; }

bool overlap_in_memory(int64_t off_a, int64_t size_a, int64_t off_b, int64_t size_b) {
  return off_a < off_b + size_b && off_b < off_a + size_a;
}

// Every pair alive at the same time (and not sharing memory in place) gets disjoint bytes.
void expect_no_conflicts(const std::vector<BufferRequest>& reqs, const MemoryPlan& plan) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kArenaAlignment, 0);
    EXPECT_LE(plan.offsets[i] + reqs[i].nbytes, plan.arena_bytes);
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      const bool shared = (plan.in_place[j] && reqs[j].reuse == static_cast<int32_t>(i)) ||
                          (plan.in_place[i] && reqs[i].reuse == static_cast<int32_t>(j));
      if (shared || !overlap_in_time(reqs[i], reqs[j])) continue;
      EXPECT_FALSE(overlap_in_memory(plan.offsets[i], reqs[i].nbytes, plan.offsets[j], reqs[j].nbytes))
          << "requests " << i << " and " << j << " are alive together and overlap";
    }
  }
}

TEST(MemoryPlan, ChainReusesMemoryOfDeadTensors) {
  // a -> b -> c -> d: each tensor dies when the next is made, so two buffers suffice.
  std::vector<BufferRequest> reqs = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  MemoryPlan plan = plan_memory(reqs);
  expect_no_conflicts(reqs, plan);
  EXPECT_EQ(plan.total_bytes, 4 * 1024);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024);
  EXPECT_EQ(plan.in_place_count, 0);
}

TEST(MemoryPlan, LiveTensorsNeverOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> reqs;
    for (int i = 0; i < 60; ++i) {
      BufferRequest r;
      r.nbytes = 1 + static_cast<int64_t>(rng() % 5000);
      r.first = static_cast<int32_t>(rng() % 40);
      r.last = r.first + static_cast<int32_t>(rng() % 10);
      reqs.push_back(r);
    }
    MemoryPlan plan = plan_memory(reqs);
    expect_no_conflicts(reqs, plan);
    EXPECT_LE(plan.arena_bytes, plan.total_bytes);
  }
}

TEST(MemoryPlan, InPlaceWhenTheInputDiesAtTheStep) {
  std::vector<BufferRequest> reqs = {{4096, 0, 1}, {4096, 1, 2, /*reuse=*/0}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_TRUE(plan.in_place[1]);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes, 4096);
  EXPECT_EQ(plan.in_place_count, 1);
}

TEST(MemoryPlan, NoInPlaceWhenTheInputIsReadLater) {
  std::vector<BufferRequest> reqs = {{4096, 0, 3}, {4096, 1, 2, 0}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_FALSE(plan.in_place[1]);
  expect_no_conflicts(reqs, plan);
  EXPECT_EQ(plan.arena_bytes, 8192);
}

TEST(MemoryPlan, NoInPlaceIntoASmallerBuffer) {
  std::vector<BufferRequest> reqs = {{1024, 0, 1}, {4096, 1, 2, 0}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_FALSE(plan.in_place[1]);
  expect_no_conflicts(reqs, plan);
}

TEST(MemoryPlan, OneBufferIsTakenOverOnlyOnce) {
  // Two outputs of step 1 both ask for input 0's memory (never read afterwards): only one gets it.
  std::vector<BufferRequest> reqs = {{256, 0, 1}, {256, 1, 1, 0}, {256, 1, 2, 0}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_EQ(plan.in_place_count, 1);
  expect_no_conflicts(reqs, plan);
}

TEST(MemoryPlan, NoInPlaceOverATensorMadeAtTheSameStep) {
  std::vector<BufferRequest> reqs = {{256, 1, 1}, {256, 1, 2, 0}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_FALSE(plan.in_place[1]);
  expect_no_conflicts(reqs, plan);
}

TEST(MemoryPlan, InPlaceChainsShareOneBuffer) {
  std::vector<BufferRequest> reqs = {{512, 0, 1}, {512, 1, 2, 0}, {512, 2, 3, 1}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_EQ(plan.in_place_count, 2);
  EXPECT_EQ(plan.arena_bytes, 512);
}

TEST(MemoryPlan, InPlaceOnlyForElementwiseOps) {
  EXPECT_TRUE(op_may_run_in_place("", "Relu"));
  EXPECT_TRUE(op_may_run_in_place("", "Add"));
  EXPECT_FALSE(op_may_run_in_place("", "Softmax"));
  EXPECT_FALSE(op_may_run_in_place("", "MatMul"));
  EXPECT_FALSE(op_may_run_in_place("", "Cast"));
  EXPECT_FALSE(op_may_run_in_place("com.ferry", "Relu"));
}

// x -> Exp -> Reshape (a view) -> Sqrt -> Neg -> Abs (output), with Exp also read by a late Mul.
std::shared_ptr<Model> chain_model() {
  ModelBuilder b;
  auto x = b.input("x", {4, 8});
  auto e = b.node("Exp", {x});
  auto r = b.node("Reshape", {e, b.constant(Tensor::from_vector<int64_t>({-1, 4}, {2}))});
  auto s = b.node("Sqrt", {r});
  auto n = b.node("Neg", {s});
  auto a = b.node("Abs", {n});
  auto back = b.node("Reshape", {a, b.constant(Tensor::from_vector<int64_t>({-1, 8}, {2}))});
  auto late = b.node("Mul", {back, e});
  auto out = b.node("Sigmoid", {late});
  b.output(out);
  b.output(a);
  std::shared_ptr<Model> m = b.build();
  m->graph.inputs[0].type.shape = std::nullopt;  // any batch: the plan follows the input shape
  return m;
}

Tensor random_input(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Tensor t = Tensor::allocate(DType::kF32, {rows, 8});
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
  return t;
}

std::unique_ptr<Executor> make_executor(std::shared_ptr<Model> m, bool plan) {
  ExecutorOptions eo;
  eo.device = "cpu-ref";
  eo.plan_memory = plan;
  auto ex = Executor::create(std::move(m), eo);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  return std::move(ex.value());
}

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].second.dims(), b[i].second.dims());
    for (int64_t k = 0; k < a[i].second.numel(); ++k)
      ASSERT_EQ(a[i].second.data<float>()[k], b[i].second.data<float>()[k]) << a[i].first << " element " << k;
  }
}

TEST(ExecutorArena, PlannedRunsMatchHeapRunsAcrossShapes) {
  auto m = chain_model();
  auto planned = make_executor(m, true);
  auto heap = make_executor(m, false);
  std::vector<NamedTensors> kept;  // outputs of earlier runs must survive later runs untouched
  std::vector<NamedTensors> expected;
  const int64_t rows[] = {4, 4, 4, 2, 2, 4, 6};
  for (int i = 0; i < 7; ++i) {
    NamedTensors feeds = {{"x", random_input(rows[i], static_cast<uint32_t>(i))}};
    NamedTensors got, want;
    ASSERT_TRUE(planned->run(feeds, &got).is_ok());
    ASSERT_TRUE(heap->run(feeds, &want).is_ok());
    expect_same(got, want);
    kept.push_back(got);
    expected.push_back(want);
  }
  for (size_t i = 0; i < kept.size(); ++i) expect_same(kept[i], expected[i]);
  MemoryStats stats = planned->memory_stats();
  EXPECT_TRUE(stats.planned);
  EXPECT_GT(stats.tensors, 0);
  EXPECT_LT(stats.arena_bytes, stats.tensor_bytes);
  EXPECT_GE(stats.in_place, 1);  // Sqrt over the dead Reshape view of Exp, Neg over Sqrt
  EXPECT_FALSE(heap->memory_stats().planned);
}

// release_idle_arenas (ferry train before an evaluation): the idle run's arena goes, and the next
// run binds a new one from the stored plan with the same results.
TEST(ExecutorArena, IdleArenasReleasedAndBoundAgain) {
  auto m = chain_model();
  auto planned = make_executor(m, true);
  auto heap = make_executor(m, false);
  NamedTensors feeds = {{"x", random_input(64, 7)}};
  NamedTensors want, got;
  ASSERT_TRUE(heap->run(feeds, &want).is_ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(planned->run(feeds, &got).is_ok());  // records, then binds the arena
  const int64_t bound = planned->resident_bytes().arena;
  EXPECT_GT(bound, 0);
  planned->release_idle_arenas();
  EXPECT_EQ(planned->resident_bytes().arena, 0);
  for (int i = 0; i < 2; ++i) {
    got.clear();
    ASSERT_TRUE(planned->run(feeds, &got).is_ok());
    expect_same(got, want);
  }
  EXPECT_EQ(planned->resident_bytes().arena, bound);
  EXPECT_TRUE(planned->memory_stats().planned);
}

TEST(ExecutorArena, ObserverThatKeepsOutputsSeesIntactValues) {
  auto m = chain_model();
  auto ex = make_executor(m, true);
  NamedTensors feeds = {{"x", random_input(4, 1)}};
  NamedTensors out;
  ASSERT_TRUE(ex->run(feeds, &out).is_ok());  // records a plan
  std::vector<std::pair<std::string, Tensor>> seen;
  ex->set_observer([&](const Node& node, const std::vector<Value>& outs, double) {
    seen.emplace_back(node.op_type, outs[0].tensor);
  });
  ASSERT_TRUE(ex->run(feeds, &out).is_ok());
  ASSERT_EQ(seen.size(), 8u);
  // Sqrt's output, kept by the observer, still holds sqrt(exp(x)) after the later nodes ran.
  const Tensor& x = feeds[0].second;
  const Tensor& s = seen[2].second;
  ASSERT_EQ(seen[2].first, "Sqrt");
  for (int64_t k = 0; k < x.numel(); ++k) EXPECT_FLOAT_EQ(s.data<float>()[k], std::sqrt(std::exp(x.data<float>()[k])));
}

TEST(ExecutorArena, ConcurrentRunsDoNotShareMemory) {
  auto m = chain_model();
  auto planned = make_executor(m, true);
  auto heap = make_executor(m, false);
  std::vector<NamedTensors> feeds, want(4);
  for (uint32_t t = 0; t < 4; ++t) {
    feeds.push_back({{"x", random_input(4 + 2 * t, 100 + t)}});
    ASSERT_TRUE(heap->run(feeds[t], &want[t]).is_ok());
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        NamedTensors got;
        if (!planned->run(feeds[t], &got).is_ok()) ++failures[t];
        for (size_t o = 0; o < got.size(); ++o)
          for (int64_t k = 0; k < got[o].second.numel(); ++k)
            if (got[o].second.data<float>()[k] != want[t][o].second.data<float>()[k]) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace ferry
