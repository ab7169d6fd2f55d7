// inverted_residual_fusion + com.ferry.InvertedResidual: an expand 1x1 + Clip -> depthwise 3x3 + Clip
// -> project 1x1 (+ residual Add) chain on a wide image becomes one node; its reference kernel and
// the cpu kernel (cpu::InvertedResidual, checked to run) give the unfused graph's outputs, on one
// thread and on two (bands of rows), at stride 1 with the residual, at stride 2 on an odd width, and
// without the expand. The cpu backend offers the pass's trait only on CPUs with the kernel's AVX-512F
// (elsewhere the op's reference kernel would run, far slower than the unfused convolutions): there these tests check
// that it declines, then fuse with FERRY_INVERTED_RESIDUAL_ANY_CPU=1 to check the rewrite and the
// reference kernel all the same.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "backends/cpu/inverted_residual.h"
#include "pass_test_util.h"

namespace ferry::testing {
namespace {

Tensor rnd(std::vector<int64_t> dims, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

// in [2, 8, h, w] -> stem 1x1 + Relu = x (the block then sits inside nhwc_layout's channels-last region,
// whose first convolution reads NCHW) -> expand 1x1 -> Clip(0, 6) -> depthwise 3x3 (stride) -> Clip(0, 6)
// -> project 1x1 (+ x); cmid 0: no expand
std::shared_ptr<Model> block(int64_t cin, int64_t cmid, int64_t cout, int64_t h, int64_t w, int64_t stride,
                             int64_t batch = 2) {
  ModelBuilder b(17);
  auto in = b.input("x", {batch, 8, h, w});
  auto x = b.node("Relu", {b.node("Conv", {in, b.constant(rnd({cin, 8, 1, 1}, 7, 0.5f)), b.constant(rnd({cin}, 8, 0.5f))})});
  std::string e = x;
  if (cmid > 0) {
    e = b.node("Conv", {x, b.constant(rnd({cmid, cin, 1, 1}, 1, 0.5f)), b.constant(rnd({cmid}, 2, 0.5f))});
    e = b.node("Clip", {e, b.scalar(0.f), b.scalar(6.f)});
  } else {  // no expand (MobileNetV2's first block)
    cmid = cin;
  }
  auto d = b.node("Conv", {e, b.constant(rnd({cmid, 1, 3, 3}, 3, 0.5f)), b.constant(rnd({cmid}, 4, 0.5f))},
                  {{"group", int_attr(cmid)}, {"pads", ints_attr({1, 1, 1, 1})}, {"strides", ints_attr({stride, stride})}});
  d = b.node("Clip", {d, b.scalar(0.f), b.scalar(6.f)});
  auto y = b.node("Conv", {d, b.constant(rnd({cout, cmid, 1, 1}, 5, 0.3f)), b.constant(rnd({cout}, 6, 0.5f))});
  if (stride == 1 && cin == cout) y = b.node("Add", {y, x});
  b.output(b.node("Relu", {y}));  // something after the block, so its output is not the graph's
  return b.build();
}

std::shared_ptr<Model> optimize(const Model& m, bool fuse) {
  std::shared_ptr<Model> copy = m.clone();
  OptimizeOptions oo;
  oo.device_traits = device_graph_traits("cpu");  // the trait comes with AVX-512F (or ..._ANY_CPU=1)
  if (!fuse) oo.disabled.push_back("inverted_residual_fusion");
  Status st = optimize_model(copy.get(), oo);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return copy;
}

// fuse: the pass on, and forced on CPUs without the fast kernel (after checking that it declines there).
std::shared_ptr<Model> optimized(const Model& m, bool fuse) {
  if (!fuse || cpu::InvertedResidual::available()) return optimize(m, fuse);
  EXPECT_EQ(count_ops(*optimize(m, true), "InvertedResidual"), 0) << "fused without AVX-512F";
  EXPECT_EQ(setenv("FERRY_INVERTED_RESIDUAL_ANY_CPU", "1", 1), 0);
  std::shared_ptr<Model> forced = optimize(m, true);
  unsetenv("FERRY_INVERTED_RESIDUAL_ANY_CPU");
  return forced;
}

NamedTensors run_threads(std::shared_ptr<const Model> m, const NamedTensors& feeds, int threads) {
  ExecutorOptions eo;
  eo.device = "cpu";
  eo.opt_level = 0;  // already optimized
  eo.threads = threads;
  auto ex = Executor::create(std::move(m), eo);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors out;
  if (!ex.is_ok()) return out;
  Status s = ex.value()->run(feeds, &out);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

// Batch 2 runs whole images per thread at 2 threads, batch 1 bands of rows.
void check(int64_t cin, int64_t cmid, int64_t cout, int64_t h, int64_t w, int64_t stride, int64_t batch) {
  SCOPED_TRACE("cin " + std::to_string(cin) + " cmid " + std::to_string(cmid) + " cout " + std::to_string(cout) + " " +
               std::to_string(h) + "x" + std::to_string(w) + " stride " + std::to_string(stride) + " batch " +
               std::to_string(batch));
  auto model = block(cin, cmid, cout, h, w, stride, batch);
  auto on = optimized(*model, true), off = optimized(*model, false);
  EXPECT_EQ(count_ops(*on, "InvertedResidual"), 1);
  EXPECT_EQ(count_ops(*on, "FusedConv"), 1);  // the stem
  EXPECT_EQ(count_ops(*off, "InvertedResidual"), 0);
  NamedTensors feeds = random_feeds(*model);
  const NamedTensors want = run_model(model, feeds);  // the original graph on cpu-ref
  ASSERT_EQ(want.size(), 1u);
  // The new op's reference kernel.
  const NamedTensors ref = run_model(on, feeds);
  ASSERT_EQ(ref.size(), 1u);
  expect_near(ref[0].second, want[0].second, 1e-5, 1e-5);
  // The cpu kernel, on one thread and on two.
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    const int64_t calls = cpu::InvertedResidual::available() ? cpu::InvertedResidual::calls() : 0;
    const NamedTensors got = run_threads(on, feeds, threads), got_off = run_threads(off, feeds, threads);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got_off.size(), 1u);
    if (cpu::InvertedResidual::available()) {
      EXPECT_GT(cpu::InvertedResidual::calls(), calls);
    }
    expect_near(got[0].second, want[0].second, 1e-4, 1e-4);
    expect_near(got[0].second, got_off[0].second, 1e-4, 1e-4);
  }
}

TEST(CpuInvertedResidual, StrideOneWithResidualEqualsTheThreeConvolutions) {
  check(24, 144, 24, 6, 28, 1, 2);
  check(24, 144, 24, 6, 28, 1, 1);
}

TEST(CpuInvertedResidual, StrideTwoOddWidthEqualsTheThreeConvolutions) { check(16, 40, 20, 7, 29, 2, 1); }

TEST(CpuInvertedResidual, DepthwiseAndProjectWithoutExpandEqualTheTwoConvolutions) { check(20, 0, 16, 5, 30, 1, 1); }

TEST(CpuInvertedResidual, NarrowImagesStayUnfused) {
  auto model = block(24, 48, 24, 6, 14, 1);  // 14 pixels wide: below the pass's limit
  EXPECT_EQ(count_ops(*optimized(*model, true), "InvertedResidual"), 0);
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

// A hand-made InvertedResidual with a depthwise weight of the wrong channel count: shape inference
// names the input and the shape it wanted.
TEST(CpuInvertedResidual, WrongWeightShapeIsAnErrorNamingTheInput) {
  auto m = std::make_shared<Model>();
  m->opset_imports[""] = 17;
  m->opset_imports["com.ferry"] = 1;
  Graph& g = m->graph;
  g.inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape::of({1, 8, 8, 4})}});
  g.value_types["x"] = g.inputs[0].type;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> ws = {
      {"we", {8, 4, 1, 1}}, {"be", {8}}, {"wd", {7, 1, 3, 3}}, {"bd", {8}}, {"wp", {4, 8, 1, 1}}, {"bp", {4}}};
  Node n;
  n.name = "block";
  n.op_type = "InvertedResidual";
  n.domain = "com.ferry";
  n.inputs = {"x"};
  for (const auto& [name, dims] : ws) {
    g.initializers[name] = rnd(dims, 9, 1.f);
    g.value_types[name] = g.initializers[name].type();
    n.inputs.push_back(name);
  }
  n.outputs = {"y"};
  g.nodes.push_back(n);
  g.outputs.push_back(ValueInfo{"y", {}});
  const Status st = infer_shapes(m.get());
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("'Wd'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[8,1,3,3]"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ferry::testing
