// The static memory estimate behind --memory-limit: sizes, liveness, the limit's message.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "runtime/memory_estimate.h"

namespace ferry {
namespace {

using testing::GraphBuilder;

TEST(MemoryEstimate, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("4096").value(), 4096);
  EXPECT_EQ(parse_byte_size("512K").value(), 512 * 1024);
  EXPECT_EQ(parse_byte_size("2G").value(), int64_t(2) << 30);
  EXPECT_EQ(parse_byte_size("1.5GiB").value(), int64_t(3) << 29);
  EXPECT_EQ(parse_byte_size("3mb").value(), 3 << 20);
  EXPECT_FALSE(parse_byte_size("").is_ok());
  EXPECT_FALSE(parse_byte_size("lots").is_ok());
  EXPECT_FALSE(parse_byte_size("2X").is_ok());
  EXPECT_FALSE(parse_byte_size("0").is_ok());
}

// x[b,256] -> Relu a -> Relu c -> Add(a, c): a is alive until the Add, so the peak holds a, c and y.
std::shared_ptr<Model> chain() {
  GraphBuilder b(17);
  std::string x = b.input("x", DType::kF32, {-1, 256});
  std::string a = b.node("Relu", {x});
  std::string c = b.node("Relu", {a});
  b.output(b.node("Add", {a, c}));
  return b.build();
}

TEST(MemoryEstimate, CountsLiveTensorsAtThePeak) {
  auto m = chain();
  auto est = estimate_memory(*m, {{"x", {4, 256}}});
  ASSERT_TRUE(est.is_ok()) << est.status().to_string();
  const int64_t t = 4 * 256 * 4;
  EXPECT_EQ(est.value().input_bytes, t);
  EXPECT_EQ(est.value().weight_bytes, 0);
  EXPECT_EQ(est.value().peak_activation_bytes, 3 * t);  // a, c and the output at the Add
  EXPECT_EQ(est.value().unknown_values, 0);
}

TEST(MemoryEstimate, UnboundSymbolIsAnError) {
  auto m = chain();
  auto est = estimate_memory(*m, {});
  ASSERT_FALSE(est.is_ok());
  EXPECT_NE(est.status().message().find("'x'"), std::string::npos) << est.status().message();
}

TEST(MemoryEstimate, LimitNamesNeedLimitAndLargestBatch) {
  auto m = chain();
  const int64_t per_sample = 4 * 256 * 4;  // input + three activations of 256 floats
  Status st = check_memory_limit(*m, {{"x", {16, 256}}}, per_sample * 10);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("largest batch that fits is 10"), std::string::npos) << st.message();
  EXPECT_TRUE(check_memory_limit(*m, {{"x", {10, 256}}}, per_sample * 10).is_ok());
}

}  // namespace
}  // namespace ferry
