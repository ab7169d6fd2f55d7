// The pipeline around the passes (passes/pipeline.h): FERRY_DISABLE_PASSES skips passes by name.
#include <cstdlib>

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

}  // namespace
}  // namespace ferry::testing
