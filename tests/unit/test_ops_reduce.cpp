#include <limits>

#include "op_tester.h"

namespace ferry::testing {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor F16_(const std::vector<float>& v, std::vector<int64_t> dims) {
  Tensor t = Tensor::allocate(DType::kF16, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<uint16_t>()[i] = f32_to_f16(v[i]);
  return t;
}

bool message_has(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// [[1, 2, 3], [4, 5, 6]]
Tensor X23() { return T_({1, 2, 3, 4, 5, 6}, {2, 3}); }

TEST(ReduceSum, AxesAttributeOldOpset) {
  auto out = OpTester("ReduceSum", 11).attr("axes", std::vector<int64_t>{1}).input(X23()).run();
  expect_near(out[0], T_({6, 15}, {2, 1}));
  auto nk = OpTester("ReduceSum", 11).attr("axes", std::vector<int64_t>{0}).attr("keepdims", 0).input(X23()).run();
  expect_near(nk[0], T_({5, 7, 9}, {3}));
}

TEST(ReduceSum, AxesInputFromOpset13) {
  auto out = OpTester("ReduceSum", 13).input(X23()).const_input(I64_({-1}, {1})).run();
  expect_near(out[0], T_({6, 15}, {2, 1}));
  auto nk = OpTester("ReduceSum", 13).attr("keepdims", 0).input(X23()).const_input(I64_({0, 1}, {2})).run();
  expect_near(nk[0], T_({21}, {}));
}

TEST(ReduceSum, AxesAsRuntimeInput) {
  OpTester t("ReduceSum", 13);
  t.input(X23()).input(I64_({1}, {1}));
  auto out = t.run();
  expect_near(out[0], T_({6, 15}, {2, 1}));
  // Axes unknown before running: keepdims keeps the rank.
  const TensorType& ty = t.last_model()->graph.value_types["out0"];
  ASSERT_TRUE(ty.shape.has_value());
  EXPECT_EQ(ty.shape->rank(), 2);

  OpTester t2("ReduceSum", 13);
  t2.attr("keepdims", 0).input(X23()).input(I64_({1}, {1}));
  expect_near(t2.run()[0], T_({6, 15}, {2}));
  EXPECT_FALSE(t2.last_model()->graph.value_types["out0"].shape.has_value());
}

TEST(ReduceSum, EmptyAxesReducesAllOrIsNoop) {
  auto all = OpTester("ReduceSum", 13).input(X23()).run();
  expect_near(all[0], T_({21}, {1, 1}));
  auto all2 = OpTester("ReduceSum", 13).input(X23()).const_input(I64_({}, {0})).run();
  expect_near(all2[0], T_({21}, {1, 1}));
  auto noop = OpTester("ReduceSum", 13).attr("noop_with_empty_axes", 1).input(X23()).run();
  expect_near(noop[0], X23());
  auto noop2 = OpTester("ReduceSum", 13).attr("noop_with_empty_axes", 1).input(X23()).input(I64_({}, {0})).run();
  expect_near(noop2[0], X23());
  auto noop3 = OpTester("ReduceMean", 18).attr("noop_with_empty_axes", 1).input(X23()).no_input().run();
  expect_near(noop3[0], X23());
  auto old = OpTester("ReduceMax", 11).attr("keepdims", 0).input(X23()).run();
  expect_near(old[0], T_({6}, {}));
}

TEST(ReduceSum, NoopIgnoredWhenAxesGiven) {
  auto out = OpTester("ReduceSum", 13).attr("noop_with_empty_axes", 1).input(X23()).const_input(I64_({0}, {1})).run();
  expect_near(out[0], T_({5, 7, 9}, {1, 3}));
}

TEST(ReduceMean, OpsetVariants) {
  auto a = OpTester("ReduceMean", 17).attr("axes", std::vector<int64_t>{-1}).input(X23()).run();
  expect_near(a[0], T_({2, 5}, {2, 1}));
  auto b = OpTester("ReduceMean", 18).input(X23()).const_input(I64_({1}, {1})).run();
  expect_near(b[0], T_({2, 5}, {2, 1}));
  auto c = OpTester("ReduceMean", 18).attr("keepdims", 0).input(X23()).const_input(I64_({0}, {1})).run();
  expect_near(c[0], T_({2.5f, 3.5f, 4.5f}, {3}));
}

TEST(ReduceMean, AxesAttributeAtOpset18IsAnError) {
  auto r = OpTester("ReduceMean", 18).attr("axes", std::vector<int64_t>{1}).input(X23()).run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(message_has(r.status(), "ReduceMean_under_test")) << r.status().message();
}

TEST(ReduceMaxMin, Values) {
  auto mx = OpTester("ReduceMax", 18).attr("keepdims", 0).input(X23()).const_input(I64_({0}, {1})).run();
  expect_near(mx[0], T_({4, 5, 6}, {3}));
  auto mn = OpTester("ReduceMin", 13).attr("axes", std::vector<int64_t>{1}).input(T_({3, -1, 2, 0, 9, 8}, {2, 3})).run();
  expect_near(mn[0], T_({-1, 0}, {2, 1}));
  auto i = OpTester("ReduceMax", 13).attr("keepdims", 0).input(Tensor::from_vector<int32_t>({-5, 7, 2}, {3})).run();
  EXPECT_EQ(i[0].dtype(), DType::kI32);
  EXPECT_EQ(i[0].to_int64_vector(), (std::vector<int64_t>{7}));
}

TEST(ReduceMax, PropagatesNaN) {
  auto out = OpTester("ReduceMax", 13).attr("axes", std::vector<int64_t>{1}).attr("keepdims", 0)
                 .input(T_({1, kNaN, 3, 4, 5, 6}, {2, 3})).run();
  expect_near(out[0], T_({kNaN, 6}, {2}));
}

TEST(ReduceMax, Bool) {
  auto out = OpTester("ReduceMax", 20).attr("keepdims", 0).input(Tensor::from_vector<bool>({false, true, false, false}, {2, 2}))
                 .const_input(I64_({1}, {1})).run();
  EXPECT_EQ(out[0].dtype(), DType::kBool);
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1, 0}));
}

TEST(ReduceProd, Values) {
  auto out = OpTester("ReduceProd", 18).attr("keepdims", 0).input(X23()).const_input(I64_({1}, {1})).run();
  expect_near(out[0], T_({6, 120}, {2}));
  auto i = OpTester("ReduceProd", 13).attr("keepdims", 0).input(I64_({-2, 3, 4}, {3})).run();
  EXPECT_EQ(i[0].to_int64_vector(), (std::vector<int64_t>{-24}));
}

TEST(ReduceNorms, L1L2SumSquare) {
  Tensor x = T_({1, -2, 3, -4, 5, -6}, {2, 3});
  auto l1 = OpTester("ReduceL1", 13).attr("axes", std::vector<int64_t>{1}).attr("keepdims", 0).input(x).run();
  expect_near(l1[0], T_({6, 15}, {2}));
  auto l2 = OpTester("ReduceL2", 18).attr("keepdims", 0).input(x).const_input(I64_({0}, {1})).run();
  expect_near(l2[0], T_({4.1231056256f, 5.3851648071f, 6.7082039325f}, {3}));
  auto ss = OpTester("ReduceSumSquare", 13).attr("keepdims", 0).input(x).run();
  expect_near(ss[0], T_({91}, {}));
  auto il1 = OpTester("ReduceL1", 13).attr("keepdims", 0).input(I64_({-3, 4}, {2})).run();
  EXPECT_EQ(il1[0].to_int64_vector(), (std::vector<int64_t>{7}));
}

TEST(ReduceLog, LogSumAndLogSumExp) {
  auto ls = OpTester("ReduceLogSum", 13).attr("keepdims", 0).input(X23()).run();
  expect_near(ls[0], T_({3.0445224377f}, {}));
  auto lse = OpTester("ReduceLogSumExp", 18).attr("keepdims", 0).input(X23()).const_input(I64_({1}, {1})).run();
  expect_near(lse[0], T_({3.4076059644f, 6.4076059644f}, {2}));
  // Stable for large values; -inf entries are ignored; all -inf gives -inf.
  auto big = OpTester("ReduceLogSumExp", 13).attr("axes", std::vector<int64_t>{1}).attr("keepdims", 0)
                 .input(T_({1000, 1000, -kInf, 0, -kInf, -kInf}, {3, 2})).run();
  expect_near(big[0], T_({1000.6931471806f, 0, -kInf}, {3}));
}

TEST(Reduce, EmptySetValues) {
  // Reducing a zero-size axis: each output element reduces an empty set.
  Tensor x = T_({}, {2, 0});
  auto one = [&](const char* op, int64_t opset = 13) {
    auto out = OpTester(op, opset).attr("axes", std::vector<int64_t>{1}).attr("keepdims", 0).input(x).run();
    EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2})) << op;
    return out[0].get_double(0);
  };
  EXPECT_EQ(one("ReduceSum", 11), 0.0);
  EXPECT_EQ(one("ReduceProd"), 1.0);
  EXPECT_EQ(one("ReduceMax"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(one("ReduceMin"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(one("ReduceL1"), 0.0);
  EXPECT_EQ(one("ReduceL2"), 0.0);
  EXPECT_EQ(one("ReduceSumSquare"), 0.0);
  EXPECT_EQ(one("ReduceLogSum"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(one("ReduceLogSumExp"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(one("ReduceMean")));
  // Integers: the type's limits.
  auto imax = OpTester("ReduceMax", 13).attr("keepdims", 0).input(Tensor::from_vector<int32_t>({}, {0})).run();
  EXPECT_EQ(imax[0].get_int64(0), std::numeric_limits<int32_t>::min());
  auto imin = OpTester("ReduceMin", 13).attr("keepdims", 0).input(Tensor::from_vector<int32_t>({}, {0})).run();
  EXPECT_EQ(imin[0].get_int64(0), std::numeric_limits<int32_t>::max());
}

TEST(Reduce, ZeroSizeKeptDim) {
  // The zero-size dim is not reduced: the output is empty.
  auto out = OpTester("ReduceSum", 13).input(T_({}, {0, 3})).const_input(I64_({1}, {1})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 1}));
}

TEST(Reduce, NonContiguousAxes) {
  // x [2, 2, 2] = 0..7; reduce axes 0 and 2 -> per middle index.
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7};
  auto out = OpTester("ReduceSum", 13).attr("keepdims", 0).input(T_(v, {2, 2, 2})).const_input(I64_({0, 2}, {2})).run();
  expect_near(out[0], T_({0 + 1 + 4 + 5, 2 + 3 + 6 + 7}, {2}));
  auto k = OpTester("ReduceMax", 13).attr("axes", std::vector<int64_t>{2, 0}).input(T_(v, {2, 2, 2})).run();
  expect_near(k[0], T_({5, 7}, {1, 2, 1}));
}

TEST(Reduce, DuplicateAndOutOfRangeAxesAreErrors) {
  auto dup = OpTester("ReduceSum", 13).input(X23()).const_input(I64_({1, -1}, {2})).run_status();
  ASSERT_FALSE(dup.is_ok());
  EXPECT_TRUE(message_has(dup.status(), "ReduceSum_under_test")) << dup.status().message();
  auto dup_rt = OpTester("ReduceSum", 13).input(X23()).input(I64_({0, 0}, {2})).run_status();
  EXPECT_FALSE(dup_rt.is_ok());
  auto oor = OpTester("ReduceMean", 13).attr("axes", std::vector<int64_t>{2}).input(X23()).run_status();
  ASSERT_FALSE(oor.is_ok());
  EXPECT_TRUE(message_has(oor.status(), "ReduceMean_under_test")) << oor.status().message();
  auto oor_rt = OpTester("ReduceMean", 18).input(X23()).input(I64_({-3}, {1})).run_status();
  ASSERT_FALSE(oor_rt.is_ok());
  EXPECT_TRUE(message_has(oor_rt.status(), "ReduceMean_under_test")) << oor_rt.status().message();
}

TEST(Reduce, Float16) {
  auto out = OpTester("ReduceMean", 13).attr("axes", std::vector<int64_t>{1}).attr("keepdims", 0)
                 .input(F16_({1, 2, 3, 4}, {2, 2})).run();
  ASSERT_EQ(out[0].dtype(), DType::kF16);
  expect_near(out[0], F16_({1.5f, 3.5f}, {2}));
  auto s = OpTester("ReduceSum", 13).attr("keepdims", 0).input(F16_({0.5f, 0.25f}, {2})).run();
  expect_near(s[0], F16_({0.75f}, {}));
}

TEST(Reduce, IntegerMeanTruncates) {
  auto out = OpTester("ReduceMean", 13).attr("keepdims", 0).input(I64_({1, 2}, {2})).run();
  EXPECT_EQ(out[0].dtype(), DType::kI64);
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1}));
}

TEST(Reduce, LargeIntegerSumIsExact) {
  const int64_t big = (int64_t(1) << 53) + 1;
  auto out = OpTester("ReduceSum", 13).attr("keepdims", 0).input(I64_({big, 2}, {2})).run();
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{big + 2}));
}

TEST(Reduce, SymbolicShape) {
  OpTester t("ReduceMean", 13);
  t.attr("axes", std::vector<int64_t>{-1}).input(T_({1, 2, 3, 4, 5, 6}, {2, 3}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("batch"), Dim(3)}));
  t.run();
  EXPECT_EQ(t.last_model()->graph.value_types["out0"].shape->to_string(), "[batch,1]");
}

TEST(Reduce, AxesMustBeInt64) {
  auto r = OpTester("ReduceSum", 13).input(X23()).input(Tensor::from_vector<int32_t>({1}, {1})).run_status();
  EXPECT_FALSE(r.is_ok());
}

// ---- ArgMax / ArgMin ------------------------------------------------------------------------

TEST(ArgMax, DefaultsAxis0KeepDims) {
  auto out = OpTester("ArgMax", 13).input(T_({1, 5, 3, 4, 2, 6}, {2, 3})).run();
  EXPECT_EQ(out[0].dtype(), DType::kI64);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1, 0, 1}));
}

TEST(ArgMax, NegativeAxisNoKeepDims) {
  auto out = OpTester("ArgMax", 13).attr("axis", -1).attr("keepdims", 0).input(T_({1, 5, 3, 4, 2, 6}, {2, 3})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2}));
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1, 2}));
}

TEST(ArgMax, SelectLastIndex) {
  Tensor x = T_({2, 7, 7, 1}, {4});
  auto first = OpTester("ArgMax", 12).attr("keepdims", 0).input(x).run();
  EXPECT_EQ(first[0].to_int64_vector(), (std::vector<int64_t>{1}));
  auto last = OpTester("ArgMax", 12).attr("keepdims", 0).attr("select_last_index", 1).input(x).run();
  EXPECT_EQ(last[0].to_int64_vector(), (std::vector<int64_t>{2}));
}

TEST(ArgMin, ValuesAndSelectLast) {
  Tensor x = I64_({3, 1, 1, 2, 0, 0}, {2, 3});
  auto out = OpTester("ArgMin", 13).attr("axis", 1).attr("keepdims", 0).input(x).run();
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1, 1}));
  auto last = OpTester("ArgMin", 13).attr("axis", 1).attr("keepdims", 0).attr("select_last_index", 1).input(x).run();
  EXPECT_EQ(last[0].to_int64_vector(), (std::vector<int64_t>{2, 2}));
}

TEST(ArgMax, MiddleAxis3D) {
  // [2, 2, 2] = 0..7 with a twist: argmax along axis 1.
  auto out = OpTester("ArgMax", 13).attr("axis", 1).input(T_({0, 9, 1, 2, 5, 4, 6, 3}, {2, 2, 2})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1, 0, 1, 0}));
}

TEST(ArgMax, Float16) {
  auto out = OpTester("ArgMax", 13).attr("keepdims", 0).input(F16_({0.5f, 2.0f, -1.0f}, {3})).run();
  EXPECT_EQ(out[0].to_int64_vector(), (std::vector<int64_t>{1}));
}

TEST(ArgMax, Errors) {
  auto oor = OpTester("ArgMax", 13).attr("axis", 2).input(X23()).run_status();
  ASSERT_FALSE(oor.is_ok());
  EXPECT_TRUE(message_has(oor.status(), "ArgMax_under_test")) << oor.status().message();
  auto empty = OpTester("ArgMin", 13).attr("axis", 1).input(T_({}, {2, 0})).run_status();
  EXPECT_FALSE(empty.is_ok());
}

}  // namespace
}  // namespace ferry::testing
