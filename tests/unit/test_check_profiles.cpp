// The embedded target profiles and rules load, and answer per op, opset and restriction.
#include <gtest/gtest.h>

#include <sstream>

#include "check/embedded_data.h"
#include "check/model_check.h"
#include "check/target_profile.h"
#include "graph_builder.h"

namespace ferry::testing {
namespace {

TEST(CheckProfiles, EveryListedTargetLoadsWithItsRules) {
  std::istringstream in{std::string(embedded_file("check/targets.tsv"))};
  std::string line;
  int listed = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find('\t'));
    ++listed;
    ASSERT_TRUE(target_profiles().count(name)) << name << " did not load";
    EXPECT_GT(target_profiles().at(name).ops.size(), 100u) << name;
    auto rules = parse_target_rules(name, std::string(embedded_file("check/rules.tsv")));
    ASSERT_TRUE(rules.is_ok()) << rules.status().to_string();
  }
  EXPECT_EQ(listed, 4);
  EXPECT_GT(target_profiles().at("tensorrt-10.1").rules.size(), 20u);
}

TEST(CheckProfiles, OpsetRulesPerLayout) {
  const auto& p = target_profiles();
  std::string why;
  int64_t fix = 0;
  EXPECT_TRUE(p.at("tensorrt-10.1").accepts("Conv", 13, &why, &fix));
  EXPECT_FALSE(p.at("tensorrt-10.1").accepts("Conv", 21, &why, &fix));
  EXPECT_EQ(fix, 20);
  EXPECT_FALSE(p.at("ascend-atc-2022").accepts("Conv", 17, &why, &fix));  // listed at 8..15
  EXPECT_EQ(fix, 15);
  EXPECT_TRUE(p.at("ascend-atc-2022").accepts("Constant", 13, &why, &fix));  // parser core
  EXPECT_TRUE(p.at("openvino").accepts("AveragePool", 19, &why, &fix));  // converter v1 covers later opsets
  EXPECT_FALSE(p.at("openvino").accepts("Det", 13, &why, &fix));
}

TEST(CheckProfiles, ComputedAxesBreakTensorRtsInitializerRule) {
  GraphBuilder b(13);
  const std::string x = b.input("x", DType::kF32, {2, 3});
  const std::string axes = b.node("Abs", {b.input("a", DType::kI64, {1})});  // computed, not an initializer
  b.output(b.node("ReduceSum", {x, axes}));
  auto m = b.build();
  auto broken = target_profiles().at("tensorrt-10.1").broken_rules(m->graph, m->graph.nodes[1], 13);
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_NE(broken[0].first.find("must be an initializer"), std::string::npos) << broken[0].first;
  auto check = check_model(*m, "tensorrt-10.1");
  ASSERT_TRUE(check.is_ok());
  EXPECT_FALSE(check.value().passed());
  EXPECT_EQ(check.value().findings.at(0).node, "ReduceSum_1");
}

TEST(CheckProfiles, UnknownTargetListsTheKnownOnes) {
  GraphBuilder b(13);
  b.output(b.node("Relu", {b.input("x", DType::kF32, {2})}));
  auto r = check_model(*b.build(), "npu-9000");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("ascend-atc-2025"), std::string::npos);
}

}  // namespace
}  // namespace ferry::testing
