// Batch splitting (runtime/batch_split.h): which graphs keep batch rows apart, and that a batch
// run in parts gives what the whole batch gives.
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "graph_builder.h"
#include "runtime/batch_split.h"
#include "runtime/batch_split_parts.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

using testing::GraphBuilder;

using testing::random_tensor;

Attribute ints(std::vector<int64_t> v) { return GraphBuilder::ints(std::move(v)); }

// x[N,3,8,8] -> Conv(4x3x3x3, pad 1) -> Relu -> (+ x through a 1x1 conv) -> GlobalAveragePool
// -> Flatten -> Gemm(4 -> 5) -> Softmax(axis 1).
std::shared_ptr<Model> small_cnn() {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 3, 8, 8});
  std::string w = b.initializer("w", random_tensor({4, 3, 3, 3}, 1));
  std::string w1 = b.initializer("w1", random_tensor({4, 3, 1, 1}, 2));
  std::string fc = b.initializer("fc", random_tensor({5, 4}, 3));
  std::string fcb = b.initializer("fcb", random_tensor({5}, 4));
  std::string c = b.node("Conv", {x, w}, {{"pads", ints({1, 1, 1, 1})}});
  std::string r = b.node("Relu", {c});
  std::string s = b.node("Conv", {x, w1});
  std::string a = b.node("Add", {r, s});
  std::string p = b.node("GlobalAveragePool", {a});
  std::string f = b.node("Flatten", {p}, {{"axis", GraphBuilder::i(1)}});
  std::string g = b.node("Gemm", {f, fc, fcb}, {{"transB", GraphBuilder::i(1)}});
  b.output(b.node("Softmax", {g}, {{"axis", GraphBuilder::i(1)}}));
  return b.build();
}

TEST(BatchSplit, ConvNetKeepsRowsApart) {
  const BatchSplitInfo info = analyze_batch_split(small_cnn()->graph);
  EXPECT_TRUE(info.separable) << info.why_not;
  EXPECT_EQ(info.symbol, "d0");
  EXPECT_EQ(info.largest_row_bytes, 4 * 8 * 8 * 4);  // the conv outputs: 4 channels of 8x8 floats
}

// Graphs that mix rows, each named by the node that does it.
TEST(BatchSplit, GraphsThatMixRowsAreNotSplit) {
  struct Case {
    const char* what;
    std::function<std::string(GraphBuilder&, const std::string&)> body;
    const char* names;  // the why_not must mention this
  };
  const std::vector<Case> cases = {
      {"reduce over the batch",
       [](GraphBuilder& b, const std::string& x) { return b.node("ReduceMean", {x}, {{"axes", ints({0})}}); }, "axis 0"},
      {"reduce over everything", [](GraphBuilder& b, const std::string& x) { return b.node("ReduceSum", {x}); }, "axis 0"},
      {"transpose moving the batch",
       [](GraphBuilder& b, const std::string& x) { return b.node("Transpose", {x}, {{"perm", ints({1, 0})}}); },
       "permutation"},
      {"softmax across the batch",
       [](GraphBuilder& b, const std::string& x) { return b.node("Softmax", {x}, {{"axis", GraphBuilder::i(0)}}); },
       "axis 0"},
      {"Gemm reading the batch as K",
       [](GraphBuilder& b, const std::string& x) { return b.node("Gemm", {x, x}, {{"transA", GraphBuilder::i(1)}}); },
       "transA"},
      {"reshape merging rows",
       [](GraphBuilder& b, const std::string& x) {
         std::string shape = b.initializer("shape", Tensor::from_vector<int64_t>({-1}, {1}));
         return b.node("Reshape", {x, shape});
       },
       "Reshape"},
      {"a batch-sized constant",
       [](GraphBuilder& b, const std::string& x) {
         std::string s = b.node("Shape", {x});
         std::string z = b.node("ConstantOfShape", {s});
         return b.node("Add", {x, z});
       },
       "ConstantOfShape"},
      {"a constant stretched along the batch",
       [](GraphBuilder& b, const std::string& x) {
         std::string c = b.initializer("c", random_tensor({5, 6}, 6));  // runs for a batch of 5 (or 1) only
         return b.node("Add", {x, c});
       },
       "broadcast along the batch"},
      {"an unknown op", [](GraphBuilder& b, const std::string& x) { return b.node("NonZero", {x}); }, "NonZero"},
  };
  for (const Case& c : cases) {
    GraphBuilder b(17);
    std::string x = b.input("x", DType::kF32, {-1, 6});
    b.output(c.body(b, x));
    const BatchSplitInfo info = analyze_batch_split(b.build()->graph);
    EXPECT_FALSE(info.separable) << c.what;
    EXPECT_NE(info.why_not.find(c.names), std::string::npos) << c.what << ": " << info.why_not;
  }
  GraphBuilder fixed(17);
  fixed.output(fixed.node("Relu", {fixed.input("x", DType::kF32, {8, 6})}));
  EXPECT_FALSE(analyze_batch_split(fixed.build()->graph).separable) << "a fixed batch has no batch axis to split";
}

TEST(BatchSplit, PartsAreSizedByTheCache) {
  BatchSplitInfo info;
  info.separable = true;
  info.largest_row_bytes = 3 << 20;  // ResNet-50's stem output: 3 MiB per image
  const int64_t l3 = int64_t{32} << 20;
  EXPECT_EQ(batch_split_rows(info, 1, l3), 0);
  EXPECT_EQ(batch_split_rows(info, 4, l3), 0);   // 12 MiB: within half the cache
  EXPECT_EQ(batch_split_rows(info, 8, l3), 2);   // 3 rows fit three times over; 2 divides 8
  EXPECT_EQ(batch_split_rows(info, 9, l3), 3);
  EXPECT_EQ(batch_split_rows(info, 7, l3), 1);   // prime: one row at a time
  info.largest_row_bytes = 64 << 20;
  EXPECT_EQ(batch_split_rows(info, 2, l3), 1);
  info.separable = false;
  EXPECT_EQ(batch_split_rows(info, 8, l3), 0);
}

std::unique_ptr<Executor> executor(std::shared_ptr<Model> m, int64_t split_rows, int threads = 0) {
  ExecutorOptions eo;
  eo.device = "cpu";
  eo.batch_split_rows = split_rows;
  eo.threads = threads;
  auto ex = Executor::create(std::move(m), eo);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  return std::move(ex.value());
}

TEST(BatchSplit, PartsGiveTheWholeBatchsResult) {
  if (std::getenv("FERRY_BATCH_SPLIT")) GTEST_SKIP() << "FERRY_BATCH_SPLIT overrides the options under test";
  auto model = small_cnn();
  const Tensor x = random_tensor({5, 3, 8, 8}, 7);
  NamedTensors whole, parts;
  auto ex_whole = executor(model, 0);
  ASSERT_TRUE(ex_whole->run({{"x", x}}, &whole).is_ok());
  EXPECT_EQ(ex_whole->last_split_rows(), 0);
  auto ex_parts = executor(model, 2);  // parts of 2, 2 and 1 rows
  for (int rep = 0; rep < 2; ++rep) {   // the second run reuses the parts' memory plans
    Status st = ex_parts->run({{"x", x}}, &parts);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(ex_parts->last_split_rows(), 2);
    ASSERT_EQ(parts.size(), 1u);
    ASSERT_EQ(parts[0].second.dims(), (std::vector<int64_t>{5, 5}));
    for (int64_t i = 0; i < whole[0].second.numel(); ++i)
      ASSERT_NEAR(parts[0].second.data<float>()[i], whole[0].second.data<float>()[i], 1e-6) << "element " << i;
  }
  // Each row on its own, too: the parts are the rows' own results, not a mix.
  for (int64_t row = 0; row < 5; ++row) {
    NamedTensors one;
    ASSERT_TRUE(ex_whole->run({{"x", x.outer_slice(row, 1).clone()}}, &one).is_ok());
    for (int64_t k = 0; k < 5; ++k) ASSERT_NEAR(one[0].second.data<float>()[k], parts[0].second.data<float>()[row * 5 + k], 1e-6);
  }
}

// With 2 intra-op threads and an even number of parts, the parts run side by side, one per thread
// (batch_split_parts.h); the result is still the whole batch's, row for row.
TEST(BatchSplit, PartsSideBySideGiveTheWholeBatchsResult) {
  if (std::getenv("FERRY_BATCH_SPLIT") || std::getenv("FERRY_SPLIT_LANES"))
    GTEST_SKIP() << "FERRY_BATCH_SPLIT / FERRY_SPLIT_LANES override the options under test";
  struct Unset {
    ~Unset() { unsetenv("FERRY_SPLIT_LANES"); }
  } unset;
  setenv("FERRY_SPLIT_LANES", "2", 1);
  EXPECT_EQ(batch_split_lanes(1), 1);
  auto model = small_cnn();
  const Tensor x = random_tensor({8, 3, 8, 8}, 11);
  NamedTensors whole, parts;
  auto ex_whole = executor(model, 0, 2);
  ASSERT_TRUE(ex_whole->run({{"x", x}}, &whole).is_ok());
  auto ex_parts = executor(model, 2, 2);  // 4 parts of 2 rows: 2 at a time
  EXPECT_EQ(batch_split_lanes(4), 2);
  EXPECT_EQ(batch_split_lanes(3), 1);  // uneven: one part after the other
  for (int rep = 0; rep < 3; ++rep) {  // the first runs record the parts' memory plans, then reuse them
    const int64_t before = batch_split_concurrent_runs();
    Status st = ex_parts->run({{"x", x}}, &parts);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(ex_parts->last_split_rows(), 2);
    EXPECT_EQ(batch_split_concurrent_runs(), before + 1) << "the parts did not run side by side";
    EXPECT_EQ(omp_get_max_threads(), 2) << "the caller's intra-op threads were not restored";
    ASSERT_EQ(parts.size(), 1u);
    ASSERT_EQ(parts[0].second.dims(), (std::vector<int64_t>{8, 5}));
    for (int64_t i = 0; i < whole[0].second.numel(); ++i)
      ASSERT_NEAR(parts[0].second.data<float>()[i], whole[0].second.data<float>()[i], 1e-6) << "element " << i;
  }
  // 6 rows in parts of 2: 3 parts, one after the other.
  const int64_t before = batch_split_concurrent_runs();
  ASSERT_TRUE(ex_parts->run({{"x", x.outer_slice(0, 6).clone()}}, &parts).is_ok());
  EXPECT_EQ(batch_split_concurrent_runs(), before);
  for (int64_t i = 0; i < parts[0].second.numel(); ++i)
    ASSERT_NEAR(parts[0].second.data<float>()[i], whole[0].second.data<float>()[i], 1e-6) << "element " << i;
}

TEST(BatchSplit, GraphThatMixesRowsRunsWhole) {
  if (std::getenv("FERRY_BATCH_SPLIT")) GTEST_SKIP() << "FERRY_BATCH_SPLIT overrides the options under test";
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 4});
  std::string m = b.node("ReduceMean", {x}, {{"axes", ints({0})}, {"keepdims", GraphBuilder::i(1)}});
  b.output(b.node("Sub", {x, m}));
  auto ex = executor(b.build(), 1);
  const Tensor in = random_tensor({6, 4}, 9);
  NamedTensors out;
  ASSERT_TRUE(ex->run({{"x", in}}, &out).is_ok());
  EXPECT_EQ(ex->last_split_rows(), 0);
  for (int64_t c = 0; c < 4; ++c) {  // columns of x minus their mean over the batch sum to zero
    double sum = 0;
    for (int64_t r = 0; r < 6; ++r) sum += out[0].second.data<float>()[r * 4 + c];
    EXPECT_NEAR(sum, 0.0, 1e-5);
  }
}

// x[N,3,16,16] -> Conv(8, 3x3 pad 1) -> Relu -> Conv(8, 3x3 stride 2 pad 1) -> Relu -> a residual
// block at 8x8 (Conv + Add of its input) -> GlobalAveragePool -> Flatten -> Gemm(8 -> 5): the 16x16
// tensors take 8 KiB a row, the 8x8 ones 2 KiB.
std::shared_ptr<Model> two_stage_cnn() {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 3, 16, 16});
  std::string w1 = b.initializer("w1", random_tensor({8, 3, 3, 3}, 21));
  std::string w2 = b.initializer("w2", random_tensor({8, 8, 3, 3}, 22));
  std::string w3 = b.initializer("w3", random_tensor({8, 8, 3, 3}, 23));
  std::string fc = b.initializer("fc", random_tensor({5, 8}, 24));
  std::string c1 = b.node("Conv", {x, w1}, {{"pads", ints({1, 1, 1, 1})}});
  std::string r1 = b.node("Relu", {c1});
  std::string c2 = b.node("Conv", {r1, w2}, {{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}});
  std::string r2 = b.node("Relu", {c2});
  std::string c3 = b.node("Conv", {r2, w3}, {{"pads", ints({1, 1, 1, 1})}});
  std::string a = b.node("Add", {c3, r2});
  std::string p = b.node("GlobalAveragePool", {a});
  std::string f = b.node("Flatten", {p}, {{"axis", GraphBuilder::i(1)}});
  b.output(b.node("Gemm", {f, fc}, {{"transB", GraphBuilder::i(1)}}));
  return b.build();
}

TEST(BatchSplitFront, CutsWhereOneValueIsLive) {
  auto model = two_stage_cnn();
  const Graph& g = model->graph;
  const BatchSplitInfo info = analyze_batch_split(g);
  ASSERT_TRUE(info.separable) << info.why_not;
  const std::vector<BatchSplitCut> cuts = batch_split_cuts(g, info);
  std::vector<int64_t> after;
  for (const BatchSplitCut& c : cuts) {
    after.push_back(c.after);
    EXPECT_EQ(c.value, g.nodes[static_cast<size_t>(c.after)].outputs[0]) << "cut after node " << c.after;
  }
  // Not after the residual block's Conv (its input is live too), nor after the last node.
  EXPECT_EQ(after, (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(cuts[0].back_row_bytes, 8 * 16 * 16 * 4);
  EXPECT_EQ(cuts[2].value_row_bytes, 8 * 8 * 8 * 4);
  EXPECT_EQ(cuts[2].back_row_bytes, 8 * 8 * 8 * 4);
  // 4 rows whose back must fit 4 x 2 KiB: the first cut after which only 8x8 tensors remain.
  const BatchSplitCut* c = choose_front_cut(cuts, 4, 4 * 2048);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->after, 2);
  EXPECT_EQ(choose_front_cut(cuts, 4, 4 * 2048 - 1)->after, 6);  // only after the pool has read its 8x8 input
  EXPECT_EQ(choose_front_cut(cuts, 4, 4 * 32 - 1), nullptr);     // not even the pooled tensor fits
  EXPECT_EQ(choose_front_cut(cuts, 4, 0), nullptr);
}

TEST(BatchSplitFront, NoSingleValueCutFindsNone) {
  // x feeds both branches up to their Add, the last node: two values are live at every place.
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 3, 8, 8});
  std::string c1 = b.node("Conv", {x, b.initializer("w1", random_tensor({4, 3, 1, 1}, 31))});
  std::string c2 = b.node("Conv", {x, b.initializer("w2", random_tensor({4, 3, 1, 1}, 32))});
  b.output(b.node("Add", {c1, c2}));
  auto model = b.build();
  const BatchSplitInfo info = analyze_batch_split(model->graph);
  ASSERT_TRUE(info.separable) << info.why_not;
  EXPECT_TRUE(batch_split_cuts(model->graph, info).empty());
  BatchSplitInfo mixed = info;
  mixed.separable = false;
  EXPECT_TRUE(batch_split_cuts(two_stage_cnn()->graph, mixed).empty()) << "a graph that mixes rows has no cut";
}

std::unique_ptr<Executor> front_executor(std::shared_ptr<Model> m, int64_t split_rows, int64_t front_bytes, int threads = 1,
                                         int opt_level = -1) {
  ExecutorOptions eo;
  eo.opt_level = opt_level;
  eo.device = "cpu";
  eo.batch_split_rows = split_rows;
  eo.split_front_bytes = front_bytes;
  eo.threads = threads;
  auto ex = Executor::create(std::move(m), eo);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  return std::move(ex.value());
}

void expect_same(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].second.dims(), want[k].second.dims());
    for (int64_t i = 0; i < want[k].second.numel(); ++i)
      ASSERT_NEAR(got[k].second.data<float>()[i], want[k].second.data<float>()[i], 1e-5) << "element " << i;
  }
}

// The front as parts, the back on the whole batch: the unsplit run's result, with the memory plans
// of both phases recorded, then reused.
TEST(BatchSplitFront, FrontPartsThenWholeBatchGiveTheUnsplitResult) {
  if (std::getenv("FERRY_BATCH_SPLIT") || std::getenv("FERRY_SPLIT_FRONT") || std::getenv("FERRY_SPLIT_LANES"))
    GTEST_SKIP() << "FERRY_BATCH_SPLIT / FERRY_SPLIT_FRONT / FERRY_SPLIT_LANES override the options under test";
  auto model = two_stage_cnn();
  const Tensor x = random_tensor({8, 3, 16, 16}, 25);
  NamedTensors whole, out;
  auto ex_whole = front_executor(model, 0, 0);
  ASSERT_TRUE(ex_whole->run({{"x", x}}, &whole).is_ok());
  // 8 rows of 2 KiB at the back: the 8x8 tensors fit, the 16x16 ones do not.
  auto ex = front_executor(model, 2, 8 * 2048);
  const Graph& g = ex->model().graph;  // the optimized graph (Conv + Relu fused, NHWC)
  const std::vector<BatchSplitCut> cuts = batch_split_cuts(g, ex->batch_split());
  const BatchSplitCut* want = choose_front_cut(cuts, 8, 8 * 2048);
  ASSERT_NE(want, nullptr);
  for (int rep = 0; rep < 3; ++rep) {
    Status st = ex->run({{"x", x}}, &out);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(ex->last_split_rows(), 2);
    EXPECT_EQ(ex->last_split_cut(), want->after);
    expect_same(out, whole);
  }
  EXPECT_TRUE(ex->memory_stats().planned);
  // Off: the whole graph as parts, as before.
  auto ex_off = front_executor(model, 2, 0);
  ASSERT_TRUE(ex_off->run({{"x", x}}, &out).is_ok());
  EXPECT_EQ(ex_off->last_split_rows(), 2);
  EXPECT_EQ(ex_off->last_split_cut(), -1);
  expect_same(out, whole);
  // A back too small for any cut's tensors: the whole graph as parts.
  auto ex_small = front_executor(model, 2, 16);
  ASSERT_TRUE(ex_small->run({{"x", x}}, &out).is_ok());
  EXPECT_EQ(ex_small->last_split_rows(), 2);
  EXPECT_EQ(ex_small->last_split_cut(), -1);
  expect_same(out, whole);
}

TEST(BatchSplitFront, NoCutFallsBackToTheWholeGraphAsParts) {
  if (std::getenv("FERRY_BATCH_SPLIT") || std::getenv("FERRY_SPLIT_FRONT")) GTEST_SKIP() << "env overrides the options";
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 3, 8, 8});
  std::string c1 = b.node("Conv", {x, b.initializer("w1", random_tensor({4, 3, 1, 1}, 31))});
  std::string c2 = b.node("Conv", {x, b.initializer("w2", random_tensor({4, 3, 1, 1}, 32))});
  b.output(b.node("Mul", {c1, c2}));
  auto model = b.build();
  const Tensor x6 = random_tensor({6, 3, 8, 8}, 33);
  NamedTensors whole, out;
  ASSERT_TRUE(front_executor(model, 0, 0, 1, 1)->run({{"x", x6}}, &whole).is_ok());
  // Opt level 1: no NHWC layout, whose Transpose back at the end would leave one value live before it.
  auto ex = front_executor(model, 2, int64_t{1} << 30, 1, 1);
  EXPECT_TRUE(batch_split_cuts(ex->model().graph, ex->batch_split()).empty());
  ASSERT_TRUE(ex->run({{"x", x6}}, &out).is_ok());
  EXPECT_EQ(ex->last_split_rows(), 2);
  EXPECT_EQ(ex->last_split_cut(), -1);
  expect_same(out, whole);
}

// An observer that only looks sees each front node once per part and each back node once; one
// that keeps outputs gets whole-batch tensors: no split, every node once.
TEST(BatchSplitFront, ObserverSeesFrontNodesPerPartAndBackNodesOnce) {
  if (std::getenv("FERRY_BATCH_SPLIT") || std::getenv("FERRY_SPLIT_FRONT")) GTEST_SKIP() << "env overrides the options";
  auto model = two_stage_cnn();
  const Tensor x = random_tensor({8, 3, 16, 16}, 26);
  auto ex = front_executor(model, 2, 8 * 2048);
  const Graph& g = ex->model().graph;
  const std::vector<BatchSplitCut> cuts = batch_split_cuts(g, ex->batch_split());
  const BatchSplitCut* want = choose_front_cut(cuts, 8, 8 * 2048);
  ASSERT_NE(want, nullptr);
  std::map<const Node*, int> seen;
  std::map<const Node*, int64_t> rows_seen;
  std::vector<const uint8_t*> cut_rows;  // where each part's cut value was made
  ex->set_observer(
      [&](const Node& n, const std::vector<Value>& outs, double) {
        ++seen[&n];
        rows_seen[&n] = outs[0].tensor.dim(0);
        if (&n == &g.nodes[static_cast<size_t>(want->producer)])
          cut_rows.push_back(static_cast<const uint8_t*>(outs[static_cast<size_t>(want->producer_output)].tensor.raw()));
      },
      false);
  NamedTensors out;
  ASSERT_TRUE(ex->run({{"x", x}}, &out).is_ok());
  const int64_t cut = ex->last_split_cut();
  ASSERT_EQ(cut, want->after);
  // Each part made its cut value in its own rows of one whole-batch tensor: one after the other.
  ASSERT_EQ(cut_rows.size(), 4u);
  for (size_t p = 1; p < 4; ++p) EXPECT_EQ(cut_rows[p], cut_rows[0] + p * 2 * want->value_row_bytes) << "part " << p;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool front = static_cast<int64_t>(i) <= cut;
    EXPECT_EQ(seen[&g.nodes[i]], front ? 4 : 1) << g.nodes[i].describe();
    EXPECT_EQ(rows_seen[&g.nodes[i]], front ? 2 : 8) << g.nodes[i].describe();
  }
  seen.clear();
  ex->set_observer([&](const Node& n, const std::vector<Value>&, double) { ++seen[&n]; }, true);
  ASSERT_TRUE(ex->run({{"x", x}}, &out).is_ok());
  EXPECT_EQ(ex->last_split_rows(), 0);
  for (const Node& n : g.nodes) EXPECT_EQ(seen[&n], 1) << n.describe();
}

// Parts side by side (FERRY_SPLIT_LANES=2, 2 threads) for the front, then the back on both threads.
TEST(BatchSplitFront, FrontPartsSideBySide) {
  if (std::getenv("FERRY_BATCH_SPLIT") || std::getenv("FERRY_SPLIT_FRONT") || std::getenv("FERRY_SPLIT_LANES"))
    GTEST_SKIP() << "env overrides the options";
  struct Unset {
    ~Unset() { unsetenv("FERRY_SPLIT_LANES"); }
  } unset;
  setenv("FERRY_SPLIT_LANES", "2", 1);
  auto model = two_stage_cnn();
  const Tensor x = random_tensor({8, 3, 16, 16}, 27);
  NamedTensors whole, out;
  ASSERT_TRUE(front_executor(model, 0, 0, 2)->run({{"x", x}}, &whole).is_ok());
  auto ex = front_executor(model, 2, 8 * 2048, 2);
  for (int rep = 0; rep < 2; ++rep) {
    const int64_t before = batch_split_concurrent_runs();
    ASSERT_TRUE(ex->run({{"x", x}}, &out).is_ok());
    EXPECT_GE(ex->last_split_cut(), 0);
    EXPECT_EQ(batch_split_concurrent_runs(), before + 1) << "the front's parts did not run side by side";
    EXPECT_EQ(omp_get_max_threads(), 2);
    expect_same(out, whole);
  }
}

}  // namespace
}  // namespace ferry
