// Einsum and Det.
#include "op_tester.h"

namespace ferry::testing {
namespace {

using std::vector;

TEST(Einsum, MatMulTransposeAndImplicitOutput) {
  Tensor a = T_({1, 2, 3, 4, 5, 6}, {2, 3}), b = T_({1, 0, 0, 1, 1, 1}, {3, 2});
  auto mm = OpTester("Einsum", 12).attr("equation", "ij,jk->ik").input(a).input(b).run();
  expect_near(mm[0], T_({4, 5, 10, 11}, {2, 2}));
  auto implicit = OpTester("Einsum", 12).attr("equation", "ij,jk").input(a).input(b).run();
  expect_near(implicit[0], T_({4, 5, 10, 11}, {2, 2}));
  auto tr = OpTester("Einsum", 12).attr("equation", "ij->ji").input(a).run();
  expect_near(tr[0], T_({1, 4, 2, 5, 3, 6}, {3, 2}));
  // Implicit output sorts the letters: "ba" -> "ab" is a transpose.
  auto sorted = OpTester("Einsum", 12).attr("equation", "ba").input(a).run();
  expect_near(sorted[0], T_({1, 4, 2, 5, 3, 6}, {3, 2}));
}

TEST(Einsum, TraceDiagonalSumOuter) {
  Tensor m = T_({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  auto trace = OpTester("Einsum", 12).attr("equation", "ii").input(m).run();
  expect_near(trace[0], T_({15}, {}));
  auto diag = OpTester("Einsum", 12).attr("equation", "ii->i").input(m).run();
  expect_near(diag[0], T_({1, 5, 9}, {3}));
  auto sum = OpTester("Einsum", 12).attr("equation", "ij->").input(m).run();
  expect_near(sum[0], T_({45}, {}));
  auto rows = OpTester("Einsum", 12).attr("equation", "ij->i").input(m).run();
  expect_near(rows[0], T_({6, 15, 24}, {3}));
  auto outer = OpTester("Einsum", 12).attr("equation", "i,j->ij").input(T_({1, 2}, {2})).input(T_({3, 4, 5}, {3})).run();
  expect_near(outer[0], T_({3, 4, 5, 6, 8, 10}, {2, 3}));
  auto dot3 = OpTester("Einsum", 12).attr("equation", "i,i,i->").input(T_({1, 2}, {2})).input(T_({3, 4}, {2}))
                  .input(T_({5, 6}, {2})).run();
  expect_near(dot3[0], T_({1 * 3 * 5 + 2 * 4 * 6}, {}));
}

TEST(Einsum, EllipsisBatchMatMulWithBroadcast) {
  // [2, 1, 2] x [2, 1]: '...' of the second operand is empty (broadcast).
  Tensor a = T_({1, 2, 3, 4}, {2, 1, 2}), b = T_({10, 1}, {2, 1});
  auto out = OpTester("Einsum", 12).attr("equation", "...ij,...jk->...ik").input(a).input(b).run();
  expect_near(out[0], T_({12, 34}, {2, 1, 1}));
  // Batch diagonal with spaces in the equation.
  Tensor x = T_({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  auto bd = OpTester("Einsum", 12).attr("equation", "...ii ->...i").input(x).run();
  expect_near(bd[0], T_({1, 4, 5, 8}, {2, 2}));
  // Implicit output puts '...' first.
  auto imp = OpTester("Einsum", 12).attr("equation", "i...").input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).run();
  expect_near(imp[0], T_({1, 4, 2, 5, 3, 6}, {3, 2}));
  // '...' axes missing from an explicit output are summed.
  auto summed = OpTester("Einsum", 12).attr("equation", "...i->i").input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).run();
  expect_near(summed[0], T_({5, 7, 9}, {3}));
}

TEST(Einsum, IntegerAndDouble) {
  auto i = OpTester("Einsum", 12).attr("equation", "ij,j->i").input(I64_({1, 2, 3, 4}, {2, 2})).input(I64_({5, 6}, {2})).run();
  EXPECT_EQ(i[0].dtype(), DType::kI64);
  EXPECT_EQ(i[0].to_int64_vector(), (vector<int64_t>{17, 39}));
  auto d = OpTester("Einsum", 12).attr("equation", "i,i").input(Tensor::from_vector<double>({0.1, 0.2}, {2}))
               .input(Tensor::from_vector<double>({3, 4}, {2})).run();
  EXPECT_EQ(d[0].dtype(), DType::kF64);
  EXPECT_NEAR(d[0].get_double(0), 1.1, 1e-15);
}

TEST(Einsum, SymbolicShapeInference) {
  OpTester t("Einsum", 12);
  t.attr("equation", "bij,bjk->bik").input(T_(vector<float>(12, 1), {2, 2, 3})).input(T_(vector<float>(24, 1), {2, 3, 4}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(2), Dim(3)}));
  auto out = t.run();
  EXPECT_EQ(t.last_model()->graph.value_types.at("out0").shape->to_string(), "[n,2,4]");
  expect_near(out[0], T_(vector<float>(16, 3), {2, 2, 4}));
}

TEST(Einsum, Errors) {
  Tensor a = T_({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "ij,jk->ik").input(a).input(a).run_status().is_ok());  // j: 3 vs 2
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "ij,jk->ik").input(a).run_status().is_ok());  // 2 terms, 1 input
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "ijk").input(a).run_status().is_ok());  // rank
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "i1").input(a).run_status().is_ok());  // bad character
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "ij->iz").input(a).run_status().is_ok());  // unknown output letter
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "ij->ii").input(a).run_status().is_ok());  // repeated output letter
  EXPECT_FALSE(OpTester("Einsum", 12).attr("equation", "i..j").input(a).run_status().is_ok());  // broken ellipsis
  EXPECT_FALSE(OpTester("Einsum", 12).input(a).run_status().is_ok());  // no equation
}

TEST(Det, TwoByTwoThreeByThreeAndBatch) {
  auto two = OpTester("Det", 11).input(T_({1, 2, 3, 4}, {2, 2})).run();
  expect_near(two[0], T_({-2}, {}));
  // Needs a row swap (zero first pivot).
  auto three = OpTester("Det", 11).input(T_({0, 1, 2, 1, 0, 3, 4, -3, 8}, {3, 3})).run();
  expect_near(three[0], T_({-2}, {}), 1e-5);
  auto batch = OpTester("Det", 11).input(T_({1, 2, 3, 4, 2, 0, 0, 2, 1, 2, 2, 4}, {3, 2, 2})).run();
  expect_near(batch[0], T_({-2, 4, 0}, {3}));
  auto d = OpTester("Det", 11).input(Tensor::from_vector<double>({2, 1, 1, 3}, {1, 2, 2})).run();
  EXPECT_EQ(d[0].dtype(), DType::kF64);
  EXPECT_DOUBLE_EQ(d[0].get_double(0), 5.0);
}

TEST(Det, Errors) {
  EXPECT_FALSE(OpTester("Det", 11).input(T_({1, 2, 3, 4, 5, 6}, {2, 3})).run_status().is_ok());
  EXPECT_FALSE(OpTester("Det", 11).input(T_({1, 2}, {2})).run_status().is_ok());
  EXPECT_FALSE(OpTester("Det", 11).input(I64_({1, 2, 3, 4}, {2, 2})).run_status().is_ok());
}

}  // namespace
}  // namespace ferry::testing
