// The pipeline around the passes (passes/pipeline.h): FERRY_DISABLE_PASSES skips passes by name.
#include <algorithm>
#include <cstdlib>

#include "backends/backend.h"
#include "pass_test_util.h"

namespace ferry::testing {
namespace {

std::shared_ptr<Model> relu_identity_model() {
  ModelBuilder b;
  auto x = b.input("x", {2, 3});
  auto a = b.node("Identity", {x});
  auto y = b.node("Relu", {a});
  b.output(y);
  return b.build();
}

int changes_of(const OptimizeReport& r, const std::string& pass) {
  for (const PassRecord& p : r.passes)
    if (p.name == pass) return p.changes;
  return -1;  // not run
}

TEST(PassPipeline, DisablePassesFromTheEnvironment) {
  auto m = relu_identity_model();
  OptimizeOptions oo;
  oo.opt_level = 1;
  {
    auto copy = m->clone();
    OptimizeReport r;
    ASSERT_TRUE(optimize_model(copy.get(), oo, &r).is_ok());
    EXPECT_EQ(changes_of(r, "identity_removal"), 1);
    EXPECT_EQ(count_ops(*copy, "Identity"), 0);
  }
  ::setenv("FERRY_DISABLE_PASSES", "constant_folding,identity_removal", 1);
  {
    auto copy = m->clone();
    OptimizeReport r;
    Status s = optimize_model(copy.get(), oo, &r);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(changes_of(r, "identity_removal"), -1);
    EXPECT_EQ(count_ops(*copy, "Identity"), 1);
  }
  ::setenv("FERRY_DISABLE_PASSES", "identity_removal,no_such_pass", 1);
  {
    auto copy = m->clone();
    Status s = optimize_model(copy.get(), oo);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'no_such_pass'"), std::string::npos) << s.to_string();
  }
  ::unsetenv("FERRY_DISABLE_PASSES");
}

// Passes name no device: each declares the trait it needs (GraphPass::needs) and the pipeline runs it
// only for a backend listing that trait. The device-specific passes are the five below, the cpu
// backend lists every trait a pass needs, cpu-ref none.
bool lists(const std::vector<std::string>& traits, const std::string& t) {
  return std::find(traits.begin(), traits.end(), t) != traits.end();
}

// The cpu backend lists a trait a pass needs when its CPU has what the kernels need: InvertedResidual's
// AVX-512F (or FERRY_INVERTED_RESIDUAL_ANY_CPU=1), oneDNN's native bf16 (avx512_bf16; not with
// FERRY_AMP_NATIVE=0); the passes test no CPU feature themselves.
TEST(PassPipeline, TheCpuBackendOffersTheCpuDependentTraitsWhereTheCpuHasThem) {
  __builtin_cpu_init();
  const bool avx512f = __builtin_cpu_supports("avx512f") != 0, bf16 = __builtin_cpu_supports("avx512bf16") != 0;
  std::vector<std::string> cpu = device_graph_traits("cpu");
  EXPECT_EQ(lists(cpu, "fused_inverted_residual"), avx512f);
  EXPECT_EQ(lists(cpu, "bf16_conv"), bf16);
  ASSERT_EQ(setenv("FERRY_INVERTED_RESIDUAL_ANY_CPU", "1", 1), 0);
  ASSERT_EQ(setenv("FERRY_AMP_NATIVE", "0", 1), 0);
  cpu = device_graph_traits("cpu");
  unsetenv("FERRY_INVERTED_RESIDUAL_ANY_CPU");
  unsetenv("FERRY_AMP_NATIVE");
  EXPECT_TRUE(lists(cpu, "fused_inverted_residual"));
  EXPECT_FALSE(lists(cpu, "bf16_conv"));
  for (const char* t : {"channels_last", "attention_qkv_views", "blocked_training_layout"}) EXPECT_TRUE(lists(cpu, t)) << t;
}

TEST(PassPipeline, PassesRunForTheBackendsWithTheirTrait) {
  const std::vector<std::string> cpu = device_graph_traits("cpu");
  std::vector<std::string> needing;
  for (const GraphPass& p : graph_passes()) {
    if (!p.needs) continue;
    needing.push_back(p.name);
    const std::string needs = p.needs;
    EXPECT_TRUE(lists(cpu, needs) || needs == "fused_inverted_residual" || needs == "bf16_conv")
        << p.name << " needs '" << p.needs << "', which the cpu backend does not list";
  }
  EXPECT_EQ(needing, (std::vector<std::string>{"attention_qkv_views", "nhwc_layout", "inverted_residual_fusion",
                                               "amp_bf16_fold", "train_blocked_layout"}));
  EXPECT_TRUE(device_graph_traits("cpu-ref").empty());
  EXPECT_TRUE(device_graph_traits("no_such_device").empty());
  for (const GraphPass& p : graph_passes()) {
    OptimizeOptions oo;
    EXPECT_TRUE(pass_applies(p, oo)) << p.name << ": no device named, every pass applies";
    oo.device_traits = cpu;
    EXPECT_EQ(pass_applies(p, oo), p.needs == nullptr || lists(cpu, p.needs)) << p.name;
    oo.device_traits = device_graph_traits("cpu-ref");
    EXPECT_EQ(pass_applies(p, oo), p.needs == nullptr) << p.name;
    oo.device_traits = std::vector<std::string>{"channels_last"};  // a device opting into one pass
    EXPECT_EQ(pass_applies(p, oo), p.needs == nullptr || std::string(p.name) == "nhwc_layout") << p.name;
  }
}

}  // namespace
}  // namespace ferry::testing
