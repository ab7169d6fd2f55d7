// One copy of each parameter in a training run (issue 40): the source model shares its trained
// initializers' storage with the training graph's values (share_trained_initializers), a resumed
// checkpoint is copied into that storage rather than beside it and its optimizer state adopted
// (Optimizer::adopt_state), and a checkpoint takes the optimizer's state without copying it
// (Optimizer::state_view), while state() stays a snapshot; an evaluation's executor holds each
// weight it packs once (the BatchNorm-folded convolution weights released once packed).
#include <gtest/gtest.h>

#include <cstring>

#include "format/checkpoint.h"
#include "grad/registry.h"
#include "train/evaluate.h"
#include "train/optimizer.h"
#include "train/train_step.h"
#include "train/training_graph.h"

namespace ferry {
namespace {

Tensor filled(std::vector<int64_t> dims, float v) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v + 0.01f * static_cast<float>(i);
  return t;
}

// x[2,4] -> Gemm(w1, b1) -> BatchNormalization(g, beta, rm, rv) -> Relu -> Gemm(w2, b2) -> y[2,5].
std::shared_ptr<Model> mlp() {
  auto m = std::make_shared<Model>();
  m->opset_imports[""] = 17;
  Graph& g = m->graph;
  auto init = [&](const std::string& name, Tensor t) {
    g.value_types[name] = t.type();
    g.initializers[name] = std::move(t);
  };
  init("w1", filled({3, 4}, 0.1f));
  init("b1", filled({3}, 0.f));
  init("g", filled({3}, 1.f));
  init("beta", filled({3}, 0.f));
  init("rm", filled({3}, 0.f));
  init("rv", filled({3}, 1.f));
  init("w2", filled({5, 3}, -0.2f));
  init("b2", filled({5}, 0.f));
  g.inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape::of({2, 4})}});
  g.value_types["x"] = g.inputs.back().type;
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    Node n;
    n.op_type = op;
    n.name = out;
    n.inputs = std::move(in);
    n.outputs = {out};
    if (op == "Gemm") n.attrs["transB"] = attr_int(1);
    g.nodes.push_back(n);
  };
  node("Gemm", {"x", "w1", "b1"}, "h");
  node("BatchNormalization", {"h", "g", "beta", "rm", "rv"}, "hn");
  node("Relu", {"hn"}, "hr");
  node("Gemm", {"hr", "w2", "b2"}, "y");
  g.outputs.push_back(ValueInfo{"y", {}});
  return m;
}

TEST(TrainCopies, SourceSharesTheTrainedInitializers) {
  std::shared_ptr<Model> source = mlp();
  TrainGraphOptions o;
  o.batch_size = 2;
  auto tg = build_train_graph(*source, o);
  ASSERT_TRUE(tg.is_ok()) << tg.status().to_string();
  // build_train_graph leaves the source as it was: its own storage beside the graph's values.
  for (const auto& [name, t] : tg.value().initial) EXPECT_NE(source->graph.initializers.at(name).raw(), t.raw()) << name;
  const int64_t released = share_trained_initializers(source.get(), tg.value());
  int64_t bytes = 0;
  for (const auto& [name, t] : tg.value().initial) {
    bytes += t.nbytes();
    EXPECT_EQ(source->graph.initializers.at(name).raw(), t.raw()) << name << " (parameters and BN statistics)";
  }
  EXPECT_EQ(tg.value().initial.size(), 8u);
  EXPECT_EQ(released, bytes);
  EXPECT_EQ(share_trained_initializers(source.get(), tg.value()), 0) << "a second call has nothing left to release";
  // The training graph itself holds no parameter: they are its inputs.
  for (const auto& p : tg.value().params) EXPECT_EQ(tg.value().model->graph.find_initializer(p), nullptr) << p;
  // Training writes the values in place, so the source (the evaluation's and export's model) sees them.
  Tensor w1 = tg.value().initial.at("w1");
  w1.mutable_data<float>()[0] = 42.f;
  EXPECT_EQ(source->graph.initializers.at("w1").data<float>()[0], 42.f);
}

TEST(TrainCopies, AReplacedClassifierKeepsTheSourcesOwn) {
  std::shared_ptr<Model> source = mlp();
  TrainGraphOptions o;
  o.batch_size = 2;
  o.num_classes = 7;
  auto tg = build_train_graph(*source, o);
  ASSERT_TRUE(tg.is_ok()) << tg.status().to_string();
  share_trained_initializers(source.get(), tg.value());
  EXPECT_EQ(tg.value().initial.at("w2").dims(), (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(source->graph.initializers.at("w2").dims(), (std::vector<int64_t>{5, 3})) << "the source's classifier is another shape";
  EXPECT_NE(source->graph.initializers.at("w2").raw(), tg.value().initial.at("w2").raw());
  EXPECT_EQ(source->graph.initializers.at("w1").raw(), tg.value().initial.at("w1").raw());
}

TEST(TrainCopies, CheckpointTakesTheStateUncopiedAndResumesInPlace) {
  OptimizerConfig c;
  c.kind = "adamw";
  auto opt = make_optimizer(c).value();
  std::map<std::string, Tensor> values = {{"w", filled({2, 3}, 1.f)}};
  Tensor grad = filled({2, 3}, 0.5f);
  ASSERT_TRUE(opt->step({{"w", &values.at("w"), &grad}}, 0.1).is_ok());
  const auto view = opt->state_view();
  const auto snapshot = opt->state();
  ASSERT_EQ(view.size(), 3u);  // step/w, exp_avg/w, exp_avg_sq/w
  EXPECT_NE(view.at("exp_avg/w").raw(), snapshot.at("exp_avg/w").raw()) << "state() is a copy";
  Checkpoint ck;
  add_checkpoint_tensors(values, *opt, nullptr, &ck);
  EXPECT_EQ(ck.tensors.at("optim/exp_avg/w").raw(), view.at("exp_avg/w").raw()) << "the checkpoint shares the live state";
  EXPECT_EQ(ck.tensors.at("param/w").raw(), values.at("w").raw());
  EXPECT_EQ(view.at("exp_avg/w").data<float>()[0], snapshot.at("exp_avg/w").data<float>()[0]);

  // Resume: the weights are copied into the run's own storage, the optimizer state taken as read.
  Checkpoint saved;
  saved.tensors["param/w"] = filled({2, 3}, 7.f);
  for (const auto& [name, t] : snapshot) saved.tensors["optim/" + name] = t;
  const void* exp_avg = snapshot.at("exp_avg/w").raw();
  std::map<std::string, Tensor> resumed = {{"w", filled({2, 3}, 0.f)}};
  const void* storage = resumed.at("w").raw();
  auto fresh = make_optimizer(c).value();
  Status st = restore_checkpoint_tensors(&saved, "ck", &resumed, fresh.get(), nullptr, "");
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(resumed.at("w").raw(), storage);
  EXPECT_EQ(resumed.at("w").data<float>()[5], 7.05f);
  EXPECT_TRUE(saved.tensors.empty()) << "the checkpoint's tensors are consumed";
  EXPECT_EQ(fresh->state_view().at("exp_avg/w").raw(), exp_avg) << "the state is adopted, not copied";
  EXPECT_EQ(fresh->state_view().at("step/w").data<float>()[0], 1.f);
  // load_state still copies.
  auto copied = make_optimizer(c).value();
  ASSERT_TRUE(copied->load_state(snapshot).is_ok());
  EXPECT_NE(copied->state_view().at("exp_avg/w").raw(), exp_avg);
  // A mismatched checkpoint is refused and leaves the storage alone.
  saved.tensors["param/w"] = filled({3, 2}, 9.f);
  st = restore_checkpoint_tensors(&saved, "ck", &resumed, fresh.get(), nullptr, "");
  EXPECT_NE(st.message().find("'w' is f32[3,2], the model wants f32[2,3]"), std::string::npos) << st.message();
  EXPECT_EQ(resumed.at("w").data<float>()[0], 7.f);
}

// x[b,3,8,8] -> Conv(16x3x3x3) -> BatchNormalization -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> y[b,5].
std::shared_ptr<Model> small_cnn() {
  auto m = std::make_shared<Model>();
  m->opset_imports[""] = 17;
  Graph& g = m->graph;
  auto init = [&](const std::string& name, Tensor t) {
    g.value_types[name] = t.type();
    g.initializers[name] = std::move(t);
  };
  init("cw", filled({16, 3, 3, 3}, -0.2f));
  init("g", filled({16}, 1.f));
  init("beta", filled({16}, 0.f));
  init("rm", filled({16}, 0.1f));
  init("rv", filled({16}, 1.f));
  init("w", filled({5, 16}, -0.1f));
  init("b", filled({5}, 0.f));
  g.inputs.push_back(ValueInfo{"x", TensorType{DType::kF32, Shape{{Dim::symbolic("batch"), Dim(3), Dim(8), Dim(8)}}}});
  g.value_types["x"] = g.inputs.back().type;
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    Node n;
    n.op_type = op;
    n.name = out;
    n.inputs = std::move(in);
    n.outputs = {out};
    if (op == "Gemm") n.attrs["transB"] = attr_int(1);
    if (op == "Conv") n.attrs["pads"] = attr_ints({1, 1, 1, 1});
    g.nodes.push_back(n);
  };
  node("Conv", {"x", "cw"}, "c");
  node("BatchNormalization", {"c", "g", "beta", "rm", "rv"}, "cn");
  node("Relu", {"cn"}, "cr");
  node("GlobalAveragePool", {"cr"}, "p");
  node("Flatten", {"p"}, "f");
  node("Gemm", {"f", "w", "b"}, "y");
  g.outputs.push_back(ValueInfo{"y", {}});
  return m;
}

// An evaluation runs one batch (evaluate_dataset pads the last): made for it, the executor packs the
// convolution's BatchNorm-folded weights when it is made and drops that copy (ResNet-50: 91 MiB
// beside the packed forms during each evaluation otherwise), with the same outputs.
TEST(TrainCopies, EvaluationExecutorHoldsFoldedWeightsOnlyPacked) {
  std::shared_ptr<Model> source = small_cnn();
  TrainGraphOptions o;
  o.batch_size = 2;
  auto tg = build_train_graph(*source, o);
  ASSERT_TRUE(tg.is_ok()) << tg.status().to_string();
  share_trained_initializers(source.get(), tg.value());
  const Tensor trained = tg.value().initial.at("cw").clone();
  TrainConfig c;
  c.threads = 1;
  c.batch_size = 2;
  auto fixed = make_eval_executor(c, *source, tg.value(), tg.value().initial, 2);
  auto symbolic = make_eval_executor(c, *source, tg.value(), tg.value().initial, 0);
  ASSERT_TRUE(fixed.is_ok()) << fixed.status().to_string();
  ASSERT_TRUE(symbolic.is_ok()) << symbolic.status().to_string();
  const int64_t folded = 16 * 3 * 3 * 3 * 4;
  EXPECT_LE(fixed.value()->resident_bytes().weights + folded, symbolic.value()->resident_bytes().weights)
      << "the folded convolution weights stayed beside their packed form";
  Tensor x = filled({2, 3, 8, 8}, -1.f);
  NamedTensors a, b;
  ASSERT_TRUE(fixed.value()->run({{"x", x}}, &a).is_ok());
  ASSERT_TRUE(symbolic.value()->run({{"x", x}}, &b).is_ok());
  ASSERT_EQ(a[0].second.dims(), b[0].second.dims());
  EXPECT_EQ(std::memcmp(a[0].second.raw(), b[0].second.raw(), static_cast<size_t>(a[0].second.nbytes())), 0);
  // The trained weights themselves stay the trainer's.
  EXPECT_EQ(std::memcmp(tg.value().initial.at("cw").raw(), trained.raw(), static_cast<size_t>(trained.nbytes())), 0);
}

}  // namespace
}  // namespace ferry
