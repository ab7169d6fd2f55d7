// The executor's per-node and per-run path (issue 22, engineer B): the kernels see their inputs
// through the run's reused pointer buffer (KernelContext's view constructor), the feeds check
// names every problem for a few inputs (searched linearly) and for many (a map), and the oneDNN
// plan cache's unlocked last-entry check hands back the plan of the key asked for.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/dnnl_plan_cache.h"
#include "pass_test_util.h"

namespace ferry {
namespace {

using testing::ModelBuilder;

Tensor filled(std::vector<int64_t> dims, float start) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

TEST(KernelContextView, SeesTheCallersInputsWithoutCopying) {
  Node node;
  node.op_type = "Add";
  node.inputs = {"a", "", "b"};
  node.outputs = {"y"};
  const Value a(filled({2}, 1.f)), b(filled({3}, 5.f));
  const Value* ptrs[] = {&a, nullptr, &b};
  std::vector<Value> outs(1);
  KernelContext ctx(node, 17, ptrs, 3, &outs);
  EXPECT_EQ(ctx.num_inputs(), 3);
  EXPECT_TRUE(ctx.has_input(0));
  EXPECT_FALSE(ctx.has_input(1));  // omitted
  EXPECT_TRUE(ctx.has_input(2));
  EXPECT_FALSE(ctx.has_input(3));  // past the end
  EXPECT_EQ(&ctx.input(0), &a.tensor);
  EXPECT_EQ(&ctx.input_value(2), &b);
  // The owning constructor behaves the same.
  KernelContext owned(node, 17, std::vector<const Value*>{&a, nullptr, &b}, &outs);
  EXPECT_EQ(owned.num_inputs(), 3);
  EXPECT_FALSE(owned.has_input(1));
  EXPECT_EQ(&owned.input(2), &b.tensor);
}

// "x<i>" (built with += : gcc 12's -Wrestrict misfires on "x" + std::to_string(i)).
std::string input_name(int i) {
  std::string s = "x";
  s += std::to_string(i);
  return s;
}

// y = x0 + x1 + ... (a chain of Adds over n inputs of shape [batch, 4], the batch symbolic).
std::shared_ptr<Model> sum_model(int n) {
  ModelBuilder b;
  std::vector<std::string> xs;
  for (int i = 0; i < n; ++i) xs.push_back(b.input(input_name(i), {2, 4}));
  std::string acc = xs[0];
  for (int i = 1; i < n; ++i) acc = b.node("Add", {acc, xs[static_cast<size_t>(i)]});
  auto y = b.node("Relu", {acc});
  b.output(y);
  std::shared_ptr<Model> m = b.build();
  for (ValueInfo& v : m->graph.inputs) v.type.shape->dims[0] = Dim::symbolic("batch");
  return m;
}

NamedTensors sum_feeds(int n, int64_t batch) {
  NamedTensors feeds;
  for (int i = 0; i < n; ++i) feeds.emplace_back(input_name(i), filled({batch, 4}, static_cast<float>(i) - 3.f));
  return feeds;
}

void expect_error(Executor& ex, const NamedTensors& feeds, const std::string& part) {
  NamedTensors out;
  const Status st = ex.run(feeds, &out);
  ASSERT_FALSE(st.is_ok()) << "expected an error containing: " << part;
  EXPECT_NE(st.message().find(part), std::string::npos) << st.message();
}

// 3 inputs take the linear search, 20 the map: both must accept the right feeds in any order,
// compute the sum, and name each kind of wrong feed.
TEST(ExecutorFeeds, FewAndManyInputsCheckedAlike) {
  for (int n : {3, 20}) {
    SCOPED_TRACE(n);
    for (const char* device : {"cpu-ref", "cpu"}) {
      SCOPED_TRACE(device);
      ExecutorOptions eo;
      eo.device = device;
      auto made = Executor::create(sum_model(n), eo);
      ASSERT_TRUE(made.is_ok()) << made.status().to_string();
      Executor& ex = *made.value();
      for (int64_t batch : {2, 3, 2}) {  // the arena plan recorded, reused, then a second shape
        NamedTensors feeds = sum_feeds(n, batch);
        std::reverse(feeds.begin(), feeds.end());  // feeds in any order
        NamedTensors out;
        ASSERT_TRUE(ex.run(feeds, &out).is_ok());
        ASSERT_EQ(out.size(), 1u);
        ASSERT_EQ(out[0].second.dims(), (std::vector<int64_t>{batch, 4}));
        for (int64_t k = 0; k < out[0].second.numel(); ++k) {
          float want = 0.f;
          for (int i = 0; i < n; ++i) want += static_cast<float>(i) - 3.f + 0.25f * static_cast<float>(k);
          EXPECT_FLOAT_EQ(out[0].second.data<float>()[k], want > 0.f ? want : 0.f) << "element " << k;
        }
      }
      NamedTensors unknown = sum_feeds(n, 2);
      unknown.emplace_back("nope", filled({2, 4}, 0.f));
      expect_error(ex, unknown, "'nope' is not an input of the model");
      NamedTensors twice = sum_feeds(n, 2);
      twice.push_back(twice[1]);
      expect_error(ex, twice, "input 'x1' is given twice");
      NamedTensors missing = sum_feeds(n, 2);
      missing.pop_back();
      expect_error(ex, missing, "input '" + input_name(n - 1) + "' (f32[batch,4]) was not given");
      NamedTensors rank = sum_feeds(n, 2);
      rank[0].second = filled({8}, 0.f);
      expect_error(ex, rank, "input 'x0': the model expects f32[batch,4] (rank 2), given f32[8] (rank 1)");
      NamedTensors fixed = sum_feeds(n, 2);
      fixed[1].second = filled({2, 5}, 0.f);
      expect_error(ex, fixed, "dimension 1 is 5, the model fixes it at 4");
      NamedTensors symbol = sum_feeds(n, 2);
      symbol.back().second = filled({3, 4}, 0.f);
      expect_error(ex, symbol, "('batch') is 3, but another input binds 'batch' to 2");
    }
  }
}

// A kernel that leaves an output unset is an error naming the node and the output; an omitted
// output ("") is not.
TEST(ExecutorFeeds, OmittedOutputsAreNotMissingOnes) {
  ModelBuilder b;
  auto x = b.input("x", {2, 3});
  auto y = b.node("Dropout", {x}, {}, 2);  // outputs: y, mask
  b.graph().nodes.back().outputs[1] = "";  // the mask omitted
  b.output(y);
  auto m = b.build();
  for (const char* device : {"cpu-ref", "cpu"}) {
    ExecutorOptions eo;
    eo.device = device;
    auto made = Executor::create(m, eo);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    NamedTensors out;
    const Tensor in = filled({2, 3}, -1.f);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(made.value()->run({{"x", in}}, &out).is_ok()) << device;
      ASSERT_EQ(out.size(), 1u);
      for (int64_t k = 0; k < in.numel(); ++k) EXPECT_EQ(out[0].second.data<float>()[k], in.data<float>()[k]);
    }
  }
}

struct CountedPlan {
  int64_t value = 0;
};

// The last entry is checked without the lock: alternating keys and threads asking for different
// keys at once must each get the plan made for their key, each made once.
TEST(PlanCache, LastEntryFastPathReturnsThePlanOfTheKey) {
  cpu::PlanCache<CountedPlan> cache;
  std::atomic<int> made{0};
  const auto make = [&made](const std::vector<int64_t>& key, CountedPlan* p) {
    ++made;
    p->value = key[0] * 100 + key[1];
    return Status::ok();
  };
  for (int r = 0; r < 3; ++r)
    for (int64_t k : {1, 2, 1, 1, 3}) {
      auto p = cache.get({k, 7}, make);
      ASSERT_TRUE(p.is_ok());
      EXPECT_EQ(p.value()->value, k * 100 + 7);
    }
  EXPECT_EQ(made.load(), 3);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int64_t k = (i + t) % 5;
        auto p = cache.get({k, 9}, make);
        if (!p.is_ok() || p.value()->value != k * 100 + 9) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(made.load(), 3 + 5);
  // A failed make publishes nothing: the next call with that key tries again.
  int fails = 0;
  const auto failing = [&fails](const std::vector<int64_t>&, CountedPlan*) {
    ++fails;
    return unsupported("no plan");
  };
  EXPECT_FALSE(cache.get({42, 0}, failing).is_ok());
  EXPECT_FALSE(cache.get({42, 0}, failing).is_ok());
  EXPECT_EQ(fails, 2);
  auto again = cache.get({1, 7}, make);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again.value()->value, 107);
}

}  // namespace
}  // namespace ferry
