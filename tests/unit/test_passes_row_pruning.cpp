// Pass row_pruning: a Gather/Slice of rows moves above the row-independent nodes that produce its
// input, so only the rows read are computed. The ViT-like block below is what torch 1.13 exports for
// torchvision's vit_b_16 (nn.MultiheadAttention in [S, B, E], the class token gathered at the end);
// it is optimized with the whole level-2 pipeline, with and without the pass.
#include <cmath>
#include <random>

#include "pass_test_util.h"

namespace ferry::testing {
namespace {

constexpr int64_t kB = 2, kS = 5, kE = 8, kH = 2, kDh = 4, kClasses = 3;

Tensor random_tensor(std::vector<int64_t> dims, std::mt19937* rng, float scale = 0.5f) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = nd(*rng);
  return t;
}

Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

// One encoder block, a final LayerNorm, the class token and the head. `extra_output`: the residual
// after attention is also a graph output (then its rows are needed whole). `shape_of_input_transpose`:
// the residual stream is reshaped to [batch, -1, E] with the batch read from Shape of the block's input
// Transpose (as BERT's export builds its mask shape).
std::shared_ptr<Model> vit_like(bool extra_output = false, bool shape_of_input_transpose = false) {
  std::mt19937 rng(11);
  ModelBuilder b(17);
  auto x = b.input("x", {kB, kS, kE});
  auto ln = [&](const std::string& v) {
    return b.node("LayerNormalization", {v, b.constant(random_tensor({kE}, &rng)), b.constant(random_tensor({kE}, &rng))},
                  {{"axis", int_attr(-1)}});
  };
  auto t = b.node("Transpose", {ln(x)}, {{"perm", ints_attr({1, 0, 2})}});
  auto qkv = b.node("Add", {b.constant(random_tensor({3 * kE}, &rng)),
                            b.node("MatMul", {t, b.constant(random_tensor({kE, 3 * kE}, &rng))})});
  auto part = [&](int64_t k) {
    return b.node("Slice", {qkv, b.constant(i64({k * kE})), b.constant(i64({(k + 1) * kE})), b.constant(i64({2}))});
  };
  auto heads = [&](const std::string& v) { return b.node("Reshape", {v, b.constant(i64({kS, -1, kDh}))}); };
  auto q = b.node("Transpose", {heads(part(0))}, {{"perm", ints_attr({1, 0, 2})}});
  auto k = b.node("Transpose", {heads(part(1))}, {{"perm", ints_attr({1, 2, 0})}});
  auto v = b.node("Transpose", {heads(part(2))}, {{"perm", ints_attr({1, 0, 2})}});
  auto s = b.node("MatMul", {b.node("Div", {q, b.scalar(2.0f)}), k});
  auto o = b.node("MatMul", {b.node("Softmax", {s}, {{"axis", int_attr(-1)}}), v});
  auto om = b.node("Reshape", {b.node("Transpose", {o}, {{"perm", ints_attr({1, 0, 2})}}), b.constant(i64({-1, kE}))});
  Attribute tb = int_attr(1);
  auto proj = b.node("Gemm", {om, b.constant(random_tensor({kE, kE}, &rng)), b.constant(random_tensor({kE}, &rng))},
                     {{"transB", tb}});
  auto pt = b.node("Transpose", {b.node("Reshape", {proj, b.constant(i64({kS, -1, kE}))})}, {{"perm", ints_attr({1, 0, 2})}});
  auto r1 = b.node("Add", {pt, x});
  auto f1 = b.node("Add", {b.constant(random_tensor({4 * kE}, &rng)),
                           b.node("MatMul", {ln(r1), b.constant(random_tensor({kE, 4 * kE}, &rng))})});
  auto erf = b.node("Erf", {b.node("Div", {f1, b.scalar(1.4142135f)})});
  auto gelu = b.node("Mul", {b.node("Mul", {f1, b.node("Add", {erf, b.scalar(1.0f)})}), b.scalar(0.5f)});
  auto f2 = b.node("Add", {b.constant(random_tensor({kE}, &rng)),
                           b.node("MatMul", {gelu, b.constant(random_tensor({4 * kE, kE}, &rng))})});
  auto r2 = b.node("Add", {r1, f2});
  if (shape_of_input_transpose) {
    auto batch = b.node("Gather", {b.node("Shape", {t}), b.constant(Tensor::scalar<int64_t>(1))}, {{"axis", int_attr(0)}});
    auto target = b.node("Concat", {b.node("Unsqueeze", {batch, b.constant(i64({0}))}), b.constant(i64({-1, kE}))},
                         {{"axis", int_attr(0)}});
    r2 = b.node("Reshape", {r2, target});
  }
  auto cls = b.node("Gather", {ln(r2), b.constant(Tensor::scalar<int64_t>(0))}, {{"axis", int_attr(1)}});
  b.output(b.node("Gemm", {cls, b.constant(random_tensor({kClasses, kE}, &rng)), b.constant(random_tensor({kClasses}, &rng))},
                  {{"transB", tb}}));
  if (extra_output) b.output(r1);
  auto m = b.build();
  // The batch is symbolic, as in the exports.
  ValueInfo& in = m->graph.inputs[0];
  in.type.shape->dims[0] = Dim::symbolic("batch");
  m->graph.value_types["x"] = in.type;
  for (const Node& n : m->graph.nodes)
    for (const std::string& out : n.outputs) m->graph.value_types.erase(out);
  Status st = infer_shapes(m.get());
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return m;
}

std::shared_ptr<Model> optimized(const Model& m, bool prune, int* changes = nullptr, bool layout = true) {
  std::shared_ptr<Model> copy = m.clone();
  OptimizeOptions oo;
  oo.opt_level = 2;
  if (!prune) oo.disabled.push_back("row_pruning");
  if (!layout) oo.disabled.push_back("attention_layout");
  OptimizeReport report;
  Status st = optimize_model(copy.get(), oo, &report);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  for (const PassRecord& r : report.passes)
    if (r.name == (prune ? "row_pruning" : "attention_layout") && changes) *changes = r.changes;
  return copy;
}

const Node* find_op(const Model& m, const std::string& op) {
  for (const Node& n : m.graph.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

// The token count of an activation: [S, B, ...] or [B, S, ...] with the batch the dim not known.
int64_t tokens_of(const Model& m, const std::string& v) {
  const TensorType* t = m.graph.find_type(v);
  if (!t || !t->shape || t->shape->rank() < 2) return -1;
  const Shape& s = *t->shape;
  return s.dims[0].is_known() ? s.dims[0].value : s.dims[1].is_known() ? s.dims[1].value : -1;
}

int64_t dim_of(const Model& m, const std::string& v, int64_t axis) {
  const TensorType* t = m.graph.find_type(v);
  if (!t || !t->shape || axis >= t->shape->rank() || !t->shape->dims[axis].is_known()) return -1;
  return t->shape->dims[axis].value;
}

// The feeds with a concrete batch for the symbolic model.
NamedTensors feeds_for_batch() {
  std::mt19937 rng(3);
  return {{"x", random_tensor({kB, kS, kE}, &rng, 1.0f)}};
}

TEST(RowPruning, ViTBlockComputesTheClassTokenRowOnly) {
  auto model = vit_like();
  int changes = 0;
  auto pruned = optimized(*model, true, &changes);
  auto full = optimized(*model, false);
  EXPECT_GT(changes, 0);
  // The attention's queries are the class token's row only; keys and values keep all rows.
  const Node* att = find_op(*pruned, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(tokens_of(*pruned, att->inputs[0]), 1);
  EXPECT_EQ(tokens_of(*pruned, att->inputs[1]), kS);
  const Node* full_att = find_op(*full, "Attention");
  ASSERT_NE(full_att, nullptr);
  EXPECT_EQ(tokens_of(*full, full_att->inputs[0]), kS);
  // Every product after the attention (out-projection, MLP) has 1 token row; only QKV keeps kS.
  int full_rows = 0, one_row = 0;
  for (const Node& n : pruned->graph.nodes) {
    if (n.op_type != "FusedMatMul" && n.op_type != "MatMul" && n.op_type != "Gemm") continue;
    const TensorType* t = pruned->graph.find_type(n.outputs[0]);
    ASSERT_TRUE(t && t->shape);
    const Shape& s = *t->shape;
    if (s.rank() == 3) {
      // [S, B, N] (QKV, out-projection) or [B, S, N] (MLP): the batch is the dim not known.
      const int64_t tokens = s.dims[0].is_known() ? s.dims[0].value : s.dims[1].value;
      (tokens == 1 ? one_row : full_rows) += 1;
    }
  }
  EXPECT_EQ(full_rows, 1);  // QKV
  EXPECT_EQ(one_row, 3);    // out-projection, MLP up, MLP down
  int layernorm_rows_1 = 0;
  for (const Node& n : pruned->graph.nodes)
    if (n.op_type == "LayerNorm") layernorm_rows_1 += dim_of(*pruned, n.outputs[0], 1) == 1;
  EXPECT_EQ(layernorm_rows_1, 2);  // ln_2 and the final one (ln_1 feeds the keys)
  // Same outputs as the unoptimized graph, on the reference and on the cpu kernels.
  NamedTensors feeds = feeds_for_batch();
  NamedTensors want = run_model(model, feeds);
  NamedTensors ref = run_model(pruned, feeds), cpu = run_model(pruned, feeds, "cpu"), cpu_full = run_model(full, feeds, "cpu");
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(cpu.size(), 1u);
  ASSERT_EQ(cpu_full.size(), 1u);
  expect_near(ref[0].second, want[0].second, 1e-5, 1e-5);
  expect_near(cpu[0].second, want[0].second, 1e-5, 1e-4);
  expect_near(cpu[0].second, cpu_full[0].second, 1e-5, 1e-4);
}

TEST(RowPruning, ViTBlockInTheSequenceFirstLayout) {
  // Without attention_layout the block stays in torch's [S, B, E] (Gemm out-projection between
  // Reshapes): the pass goes through it there too.
  auto model = vit_like();
  int changes = 0;
  auto pruned = optimized(*model, true, &changes, /*layout=*/false);
  EXPECT_GT(changes, 0);
  const Node* att = find_op(*pruned, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(dim_of(*pruned, att->inputs[0], 0), 1);
  EXPECT_EQ(dim_of(*pruned, att->inputs[1], 0), kS);
  EXPECT_EQ(count_ops(*pruned, "Gemm"), 1);  // the head; the out-projection is a 1-row FusedMatMul
  NamedTensors feeds = feeds_for_batch();
  NamedTensors want = run_model(model, feeds), got = run_model(pruned, feeds, "cpu");
  ASSERT_EQ(got.size(), 1u);
  expect_near(got[0].second, want[0].second, 1e-5, 1e-4);
}

TEST(AttentionLayout, RunsTheBlockInBatchFirstLayout) {
  // The Transposes around the attention go, the out-projection takes bias and residual.
  auto model = vit_like();
  int changes = 0;
  auto opt = optimized(*model, false, &changes);
  auto before = optimized(*model, false, nullptr, /*layout=*/false);
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(count_ops(*opt, "Transpose"), 0);
  EXPECT_EQ(count_ops(*before, "Transpose"), 2);
  EXPECT_EQ(count_ops(*opt, "Gemm"), 1);  // the head
  int with_residual = 0;
  for (const Node& n : opt->graph.nodes) with_residual += n.op_type == "FusedMatMul" && n.inputs.size() == 4;
  EXPECT_EQ(with_residual, 2);  // out-projection and MLP down
  const Node* att = find_op(*opt, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(att->attr("out_perm")->ints, (std::vector<int64_t>{0, 2, 1, 3}));
  NamedTensors feeds = feeds_for_batch();
  NamedTensors want = run_model(model, feeds), ref = run_model(opt, feeds), cpu = run_model(opt, feeds, "cpu");
  ASSERT_EQ(cpu.size(), 1u);
  ASSERT_EQ(ref.size(), 1u);
  expect_near(ref[0].second, want[0].second, 1e-5, 1e-5);
  expect_near(cpu[0].second, want[0].second, 1e-5, 1e-4);
}

TEST(AttentionLayout, InputTransposeReadByShapeGoes) {
  // A Shape of the input Transpose (symbolic batch) reads Shape(X) permuted instead: no Transpose is left.
  auto model = vit_like(false, /*shape_of_input_transpose=*/true);
  int changes = 0;
  auto opt = optimized(*model, false, &changes);
  auto before = optimized(*model, false, nullptr, /*layout=*/false);
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(count_ops(*opt, "Transpose"), 0);
  EXPECT_EQ(count_ops(*before, "Transpose"), 2);
  NamedTensors feeds = feeds_for_batch();
  NamedTensors want = run_model(model, feeds), ref = run_model(opt, feeds), cpu = run_model(opt, feeds, "cpu");
  ASSERT_EQ(cpu.size(), 1u);
  ASSERT_EQ(ref.size(), 1u);
  expect_near(ref[0].second, want[0].second, 1e-5, 1e-5);
  expect_near(cpu[0].second, want[0].second, 1e-5, 1e-4);
}

TEST(AttentionQkvViews, AttentionReadsTheQkvProductInPlace) {
  // After attention_layout the three Slices of the QKV product (and their Reshapes) become one
  // Reshape read through q_slice / k_slice / v_slice; same outputs on the reference and cpu kernels.
  auto model = vit_like();
  auto opt = optimized(*model, false);
  std::shared_ptr<Model> off = model->clone();
  OptimizeOptions oo;
  oo.disabled = {"row_pruning", "attention_qkv_views"};
  ASSERT_TRUE(optimize_model(off.get(), oo).is_ok());
  EXPECT_EQ(count_ops(*opt, "Slice"), 0);
  EXPECT_EQ(count_ops(*off, "Slice"), 3);
  const Node* att = find_op(*opt, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(att->inputs[0], att->inputs[2]);
  ASSERT_NE(att->attr("k_slice"), nullptr);
  EXPECT_EQ(att->attr("k_slice")->ints, (std::vector<int64_t>{2, kH, 2 * kH}));
  EXPECT_EQ(dim_of(*opt, att->inputs[0], 2), 3 * kH);
  NamedTensors feeds = feeds_for_batch();
  NamedTensors want = run_model(model, feeds), ref = run_model(opt, feeds), cpu = run_model(opt, feeds, "cpu"),
               cpu_off = run_model(off, feeds, "cpu");
  ASSERT_EQ(cpu.size(), 1u);
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(cpu_off.size(), 1u);
  expect_near(ref[0].second, want[0].second, 1e-5, 1e-5);
  expect_near(cpu[0].second, want[0].second, 1e-5, 1e-4);
  expect_near(cpu[0].second, cpu_off[0].second, 1e-6, 1e-6);
}

TEST(RowPruning, StopsAtAValueReadWhole) {
  // The residual after attention is also an output: the MLP shrinks, the attention does not.
  auto model = vit_like(/*extra_output=*/true);
  int changes = 0;
  auto pruned = optimized(*model, true, &changes);
  EXPECT_GT(changes, 0);
  const Node* att = find_op(*pruned, "Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(tokens_of(*pruned, att->inputs[0]), kS);
  NamedTensors feeds = feeds_for_batch();
  NamedTensors want = run_model(model, feeds), got = run_model(pruned, feeds, "cpu");
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    expect_near(got[i].second, want[i].second, 1e-5, 1e-4);
  }
}

TEST(RowPruning, DoesNotMoveWhenAnotherReaderNeedsAllRows) {
  // y = LayerNorm(x @ W): Gather(y, 0) and Relu(y) both read y, so nothing moves.
  std::mt19937 rng(5);
  ModelBuilder b(17);
  auto x = b.input("x", {2, 6, 8});
  auto y = b.node("LayerNormalization", {b.node("MatMul", {x, b.constant(random_tensor({8, 8}, &rng))}),
                                         b.constant(random_tensor({8}, &rng))},
                  {{"axis", int_attr(-1)}});
  b.output(b.node("Gather", {y, b.constant(Tensor::scalar<int64_t>(2))}, {{"axis", int_attr(1)}}));
  b.output(b.node("Relu", {y}));
  auto model = b.build();
  int changes = -1;
  auto opt = run_pass(*model, "row_pruning", &changes);
  EXPECT_EQ(changes, 0);
  EXPECT_EQ(opt->graph.nodes.size(), model->graph.nodes.size());
  EXPECT_EQ(count_ops(*opt, "Slice"), 0);
}

TEST(RowPruning, MovesASliceThroughBroadcastOperands) {
  // Slice rows 1..3 of (x * c + z) on axis 1: x and z are sliced, c ([1, 8], broadcast) is not;
  // the product stops at x's MatMul whose input is also read by ReduceSum.
  std::mt19937 rng(9);
  ModelBuilder b(17);
  auto x = b.input("x", {2, 6, 8});
  auto z = b.input("z", {2, 6, 8});
  auto h = b.node("MatMul", {x, b.constant(random_tensor({8, 8}, &rng))});
  auto e = b.node("Add", {b.node("Mul", {h, b.constant(random_tensor({1, 8}, &rng))}), z});
  b.output(b.node("Slice", {b.node("Relu", {e}), b.constant(i64({1})), b.constant(i64({3})), b.constant(i64({1}))}));
  b.output(b.node("ReduceSum", {x}));
  auto model = b.build();
  int changes = 0;
  auto opt = run_pass(*model, "row_pruning", &changes);
  EXPECT_EQ(changes, 4);  // Relu, Add, Mul, MatMul
  const Node* mm = find_op(*opt, "MatMul");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(dim_of(*opt, mm->outputs[0], 1), 2);
  expect_same_outputs(model, opt, 1e-5);
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

TEST(ShapeInference, ConstantOfShapeOfAPartlySymbolicShape) {
  // torch's attention-mask export: Where(.., ConstantOfShape(Shape(m))) keeps m's [batch, 1, 4].
  ModelBuilder b(17);
  auto m = b.input("m", {2, 1, 4});
  auto z = b.node("ConstantOfShape", {b.node("Shape", {m})});
  b.output(b.node("Add", {z, m}));
  auto model = b.build();
  ValueInfo& in = model->graph.inputs[0];
  in.type.shape->dims[0] = Dim::symbolic("batch");
  model->graph.value_types["m"] = in.type;
  for (const Node& n : model->graph.nodes)
    for (const std::string& out : n.outputs) model->graph.value_types.erase(out);
  ASSERT_TRUE(infer_shapes(model.get()).is_ok());
  const TensorType* t = model->graph.find_type(z);
  ASSERT_TRUE(t && t->shape);
  EXPECT_EQ(t->shape->to_string(), "[batch,1,4]");
}

}  // namespace
}  // namespace ferry::testing
