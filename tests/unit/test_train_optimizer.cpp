// Tests for src/train/optimizer.h and lr_schedule.h against PyTorch: tests/unit/data/
// gen_optim_refs.py runs torch (one python start for all cases) into a folder of the build tree
// named after the script's hash, reused by later runs. Without python3 + torch the comparisons
// are skipped (FERRY_PYTHON picks the interpreter; default /usr/bin/python3, Debian's torch).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "io/npy.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/optimizer_kernels.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The references folder, generated on first use; "" (and `why`) when python/torch is missing.
const std::string& refs_dir(std::string* why) {
  static std::string dir, reason;
  static bool done = false;
  if (!done) {
    done = true;
    const std::string script = std::string(FERRY_SOURCE_DIR) + "/tests/unit/data/gen_optim_refs.py";
    const char* env = std::getenv("FERRY_PYTHON");
    const std::string python = env ? env : "/usr/bin/python3";
    const size_t h = std::hash<std::string>{}(read_text(script) + python);
    const fs::path target = fs::path(FERRY_BINARY_DIR) / "test_data" / ("optim_refs_" + std::to_string(h));
    if (fs::exists(target / "torch_version.txt")) {
      dir = target.string();
    } else {
      const fs::path tmp = target.string() + ".tmp" + std::to_string(getpid());
      std::error_code ec;
      fs::create_directories(tmp, ec);
      const std::string cmd = python + " " + script + " " + tmp.string() + " > " + (tmp / "log.txt").string() + " 2>&1";
      if (std::system(cmd.c_str()) != 0) {
        reason = "no PyTorch references (" + cmd + " failed: " + read_text(tmp / "log.txt") + ")";
        fs::remove_all(tmp, ec);
      } else {
        fs::rename(tmp, target, ec);  // a concurrent test process may have won: use its folder
        if (ec) fs::remove_all(tmp, ec);
        dir = target.string();
      }
    }
  }
  *why = reason;
  return dir;
}

#define REFS_OR_SKIP(var)                          \
  std::string _why;                                \
  const std::string var = refs_dir(&_why);         \
  if (var.empty()) GTEST_SKIP() << _why;

std::vector<std::vector<std::string>> read_cases(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> row;
    std::string w;
    while (ls >> w) row.push_back(w);
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

std::map<std::string, Tensor> load_npz(const std::string& path) {
  auto r = read_npz(path);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  std::map<std::string, Tensor> m;
  if (r.is_ok()) {
    for (auto& [k, t] : r.value()) m[k] = t;
  }
  return m;
}

// Largest |a - b| / max(|b|, 1e-3) and how many elements differ at all.
struct Diff {
  double max_rel = 0;
  int64_t mismatches = 0;
};
Diff compare(const Tensor& got, const Tensor& want) {
  Diff d;
  EXPECT_EQ(got.dims(), want.dims());
  if (got.dims() != want.dims()) return Diff{1e30, 1};
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double a = got.data<float>()[i], b = want.data<float>()[i];
    if (a != b) ++d.mismatches;
    d.max_rel = std::max(d.max_rel, std::abs(a - b) / std::max(std::abs(b), 1e-3));
  }
  return d;
}

OptimizerConfig config_of(const std::vector<std::string>& row) {
  OptimizerConfig c;
  c.kind = row[1];
  c.lr = std::stod(row[2]);
  c.momentum = std::stod(row[3]);
  c.dampening = std::stod(row[4]);
  if (row[5] != "default") c.weight_decay = std::stod(row[5]);
  c.nesterov = row[6] == "1";
  c.beta1 = std::stod(row[7]);
  c.beta2 = std::stod(row[8]);
  c.eps = std::stod(row[9]);
  c.amsgrad = row[10] == "1";
  return c;
}

// Runs steps [begin, end) of a reference case on `params` (clones of the npz's initial values).
void run_steps(Optimizer& opt, std::map<std::string, Tensor>& ref, std::vector<Tensor>& params, int begin, int end) {
  const Tensor& lrs = ref["lr"];
  for (int s = begin; s < end; ++s) {
    std::vector<ParamRef> refs;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string g = std::string("g").append(std::to_string(s)).append("_").append(std::to_string(i));
      refs.push_back({std::string("p").append(std::to_string(i)), &params[i], ref.count(g) ? &ref[g] : nullptr});
    }
    Status st = opt.step(refs, lrs.data<double>()[s]);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
}

class TrainOptimTorchIsa : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { optim::force_baseline_for_testing(GetParam()); }
  void TearDown() override { optim::force_baseline_for_testing(false); }
};

// Both element loops (AVX2+FMA where the CPU has it, and baseline x86-64) against torch.
TEST_P(TrainOptimTorchIsa, StepsStateRoundTripAndNoneGrads) {
  REFS_OR_SKIP(dir);
  const auto cases = read_cases(dir + "/optim_cases.txt");
  ASSERT_EQ(cases.size(), 11u);
  double worst = 0;
  std::printf("  %s loops\n", GetParam() ? "baseline" : "best available");
  for (const auto& row : cases) {
    SCOPED_TRACE(row[0]);
    const OptimizerConfig cfg = config_of(row);
    const int nparams = std::stoi(row[11]);
    auto ref = load_npz(dir + "/optim_" + row[0] + ".npz");
    auto fresh = [&] {
      std::vector<Tensor> params;
      for (int i = 0; i < nparams; ++i) params.push_back(ref[std::string("p").append(std::to_string(i))].clone());
      return params;
    };
    // Straight 10 steps.
    auto made = make_optimizer(cfg);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    std::vector<Tensor> params = fresh();
    run_steps(*made.value(), ref, params, 0, 10);
    Diff total;
    for (int i = 0; i < nparams; ++i) {
      const Diff d = compare(params[i], ref[std::string("final_p").append(std::to_string(i))]);
      total.max_rel = std::max(total.max_rel, d.max_rel);
      total.mismatches += d.mismatches;
    }
    EXPECT_LE(total.max_rel, 1e-6);
    std::printf("  %-20s max rel diff vs torch %.3g, %lld elements not bit-identical\n", row[0].c_str(),
                total.max_rel, static_cast<long long>(total.mismatches));
    worst = std::max(worst, total.max_rel);

    // 5 steps, state() compared with torch's, loaded into a fresh optimizer, 5 more steps.
    auto first = make_optimizer(cfg).value();
    std::vector<Tensor> p2 = fresh();
    run_steps(*first, ref, p2, 0, 5);
    const std::map<std::string, Tensor> state = first->state();
    int torch_entries = 0;
    for (const auto& [key, t] : ref) {
      if (key.rfind("mid.", 0) != 0) continue;
      ++torch_entries;
      const size_t dot = key.find('.', 4);
      const std::string ours = key.substr(4, dot - 4) + "/" + key.substr(dot + 1);
      ASSERT_TRUE(state.count(ours)) << "missing state " << ours;
      EXPECT_LE(compare(state.at(ours), t).max_rel, 1e-6) << ours;
    }
    EXPECT_EQ(static_cast<int>(state.size()), torch_entries);
    auto second = make_optimizer(cfg).value();
    Status st = second->load_state(state);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    run_steps(*second, ref, p2, 5, 10);
    for (int i = 0; i < nparams; ++i) {
      const Diff d = compare(p2[i], params[i]);
      EXPECT_EQ(d.mismatches, 0) << "resumed run differs from the straight run, param " << i;
    }
  }
  RecordProperty("max_rel_diff_vs_torch", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(TrainOptim, TrainOptimTorchIsa, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Baseline" : "Best"; });

ScheduleConfig schedule_of(const std::vector<std::string>& row) {
  ScheduleConfig c;
  c.kind = row[1];
  c.total_steps = std::stoll(row[3]);
  c.warmup_steps = std::stoll(row[4]);
  c.step_size = std::stoll(row[5]);
  c.gamma = std::stod(row[6]);
  c.eta_min = std::stod(row[7]);
  if (row[8] != "none") c.max_lr = std::stod(row[8]);
  c.pct_start = std::stod(row[9]);
  return c;
}

TEST(TrainOptimTorch, SchedulesMatchGetLastLr) {
  REFS_OR_SKIP(dir);
  const auto cases = read_cases(dir + "/sched_cases.txt");
  ASSERT_EQ(cases.size(), 11u);
  for (const auto& row : cases) {
    SCOPED_TRACE(row[0]);
    const ScheduleConfig c = schedule_of(row);
    const double base = std::stod(row[2]);
    auto want = read_npy(dir + "/sched_" + row[0] + ".npy");
    ASSERT_TRUE(want.is_ok()) << want.status().to_string();
    const int64_t n = std::stoll(row[10]);
    ASSERT_EQ(want.value().numel(), n);
    auto sched = LrSchedule::create(c, base);
    ASSERT_TRUE(sched.is_ok()) << sched.status().to_string();
    int64_t not_exact = 0;
    double max_rel = 0;
    for (int64_t s = 0; s < n; ++s) {
      const double w = want.value().data<double>()[s];
      const double got = sched.value().lr();
      EXPECT_EQ(sched.value().step(), s);
      if (got != w) ++not_exact;
      max_rel = std::max(max_rel, std::abs(got - w) / std::max(std::abs(w), 1e-300));
      EXPECT_NEAR(got, w, 1e-12 * std::abs(w)) << "step " << s;
      if (s % 7 == 3) {
        EXPECT_EQ(lr_at(c, base, s), got) << "lr_at step " << s;
      }
      sched.value().advance();
    }
    EXPECT_EQ(not_exact, 0) << "max rel diff " << max_rel;
    // Backwards: each lr_at call replays from step 0 (forwards it continues from the last call).
    for (int64_t s = n - 1; s >= 0; s -= 5) EXPECT_EQ(lr_at(c, base, s), want.value().data<double>()[s]) << s;
  }
}

TEST(TrainOptimTorch, ClipGradNormMatches) {
  REFS_OR_SKIP(dir);
  const auto cases = read_cases(dir + "/clip_cases.txt");
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& row : cases) {
    SCOPED_TRACE(row[0]);
    auto ref = load_npz(dir + "/clip_" + row[0] + ".npz");
    std::vector<Tensor> grads;
    for (int i = 0; i < std::stoi(row[2]); ++i) grads.push_back(ref[std::string("g").append(std::to_string(i))].clone());
    std::vector<Tensor*> ptrs;
    for (Tensor& g : grads) ptrs.push_back(&g);
    ptrs.insert(ptrs.begin() + 1, nullptr);  // a None gradient is skipped
    // The baseline loops give the same bits as the AVX2 ones.
    std::vector<Tensor> base_grads;
    for (Tensor& g : grads) base_grads.push_back(g.clone());
    std::vector<Tensor*> base_ptrs;
    for (Tensor& g : base_grads) base_ptrs.push_back(&g);
    optim::force_baseline_for_testing(true);
    auto base_norm = clip_grad_norm(base_ptrs, std::stod(row[1]));
    optim::force_baseline_for_testing(false);
    auto norm = clip_grad_norm(ptrs, std::stod(row[1]));
    ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
    ASSERT_TRUE(base_norm.is_ok());
    EXPECT_EQ(base_norm.value(), norm.value());
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_EQ(compare(base_grads[i], grads[i]).mismatches, 0);
    const double want = ref["total_norm"].data<float>()[0];
    EXPECT_NEAR(norm.value(), want, 1e-6 * want);
    double max_rel = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      max_rel = std::max(max_rel, compare(grads[i], ref[std::string("c").append(std::to_string(i))]).max_rel);
    }
    EXPECT_LE(max_rel, 1e-6);
    std::printf("  clip %-12s norm rel diff %.3g, grads max rel diff %.3g\n", row[0].c_str(),
                std::abs(norm.value() - want) / want, max_rel);
  }
}

// ---- Without torch --------------------------------------------------------------------------

Tensor filled(std::vector<int64_t> dims, float v) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v + 0.25f * static_cast<float>(i);
  return t;
}

std::string error_of(const OptimizerConfig& c) {
  auto r = make_optimizer(c);
  return r.is_ok() ? "" : r.status().message();
}

TEST(TrainOptimConfig, DefaultsAsTorch) {
  OptimizerConfig c;
  EXPECT_EQ(effective_lr(c), 0.01);
  EXPECT_EQ(effective_weight_decay(c), 0.0);
  c.kind = "adam";
  EXPECT_EQ(effective_lr(c), 1e-3);
  EXPECT_EQ(effective_weight_decay(c), 0.0);
  c.kind = "adamw";
  EXPECT_EQ(effective_weight_decay(c), 0.01);
  c.weight_decay = 0.0;
  EXPECT_EQ(effective_weight_decay(c), 0.0);
}

TEST(TrainOptimConfig, BadConfigsNameTheOption) {
  struct Case {
    std::function<void(OptimizerConfig&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](OptimizerConfig& c) { c.kind = "rmsprop"; }, "optimizer 'rmsprop' is not known"},
      {[](OptimizerConfig& c) { c.lr = -0.1; }, "invalid learning rate"},
      {[](OptimizerConfig& c) { c.lr = std::nan(""); }, "invalid learning rate"},
      {[](OptimizerConfig& c) { c.momentum = -1; }, "invalid momentum"},
      {[](OptimizerConfig& c) { c.weight_decay = -1e-4; }, "invalid weight_decay"},
      {[](OptimizerConfig& c) { c.nesterov = true; }, "nesterov momentum requires a momentum > 0"},
      {[](OptimizerConfig& c) { c.nesterov = true, c.momentum = 0.9, c.dampening = 0.1; }, "zero dampening"},
      {[](OptimizerConfig& c) { c.amsgrad = true; }, "amsgrad is an option of adam"},
      {[](OptimizerConfig& c) { c.kind = "adam", c.beta1 = 1.0; }, "invalid beta1 1"},
      {[](OptimizerConfig& c) { c.kind = "adamw", c.beta2 = -0.1; }, "invalid beta2"},
      {[](OptimizerConfig& c) { c.kind = "adam", c.eps = -1; }, "invalid epsilon"},
      {[](OptimizerConfig& c) { c.kind = "adam", c.momentum = 0.9; }, "options of sgd"},
  };
  for (const Case& k : cases) {
    OptimizerConfig c;
    k.edit(c);
    const std::string msg = error_of(c);
    EXPECT_NE(msg.find(k.expect), std::string::npos) << "got: '" << msg << "', expected: " << k.expect;
  }
  OptimizerConfig ok;
  ok.nesterov = true;
  ok.momentum = 0.9;
  EXPECT_EQ(error_of(ok), "");
}

TEST(TrainOptimStep, NoneGradSkippedAndBadParamsRefused) {
  OptimizerConfig c;
  c.kind = "adam";
  auto opt = make_optimizer(c).value();
  Tensor a = filled({2, 3}, 1), b = filled({4}, -1), ga = filled({2, 3}, 0.5f);
  const Tensor b0 = b.clone();
  ASSERT_TRUE(opt->step({{"a", &a, &ga}, {"b", &b, nullptr}}, 0.1).is_ok());
  EXPECT_EQ(compare(b, b0).mismatches, 0);
  const auto s = opt->state();
  EXPECT_EQ(s.count("exp_avg/b"), 0u);
  EXPECT_EQ(s.count("exp_avg/a"), 1u);
  EXPECT_EQ(s.at("step/a").data<float>()[0], 1.0f);

  Tensor gb_bad = filled({5}, 0);
  Status st = opt->step({{"b", &b, &gb_bad}}, 0.1);
  EXPECT_NE(st.message().find("parameter 'b' is [4] but its gradient is [5]"), std::string::npos) << st.message();
  st = opt->step({{"a", &a, &ga}, {"a", &a, &ga}}, 0.1);
  EXPECT_NE(st.message().find("'a' is listed twice"), std::string::npos) << st.message();
  st = opt->step({{"a", &a, &ga}}, -1);
  EXPECT_NE(st.message().find("learning rate -1"), std::string::npos) << st.message();
  Tensor ints = Tensor::allocate(DType::kI64, {2});
  st = opt->step({{"i", &ints, nullptr}}, 0.1);
  EXPECT_NE(st.message().find("parameter 'i' is i64"), std::string::npos) << st.message();
}

TEST(TrainOptimState, LoadStateValidates) {
  OptimizerConfig c;
  c.kind = "adamw";
  auto opt = make_optimizer(c).value();
  Tensor a = filled({2, 3}, 1), ga = filled({2, 3}, 0.5f);
  ASSERT_TRUE(opt->step({{"a", &a, &ga}}, 0.1).is_ok());
  std::map<std::string, Tensor> s = opt->state();

  auto fresh = make_optimizer(c).value();
  auto bad = s;
  bad["momentum_buffer/a"] = filled({2, 3}, 0);
  EXPECT_NE(fresh->load_state(bad).message().find("'momentum_buffer/a' is not an entry of this optimizer"),
            std::string::npos);
  bad = s;
  bad.erase("exp_avg_sq/a");
  EXPECT_NE(fresh->load_state(bad).message().find("lacks 'exp_avg_sq/a'"), std::string::npos);
  bad = s;
  bad["exp_avg/a"] = filled({3, 2}, 0);
  EXPECT_NE(fresh->load_state(bad).message().find("'exp_avg_sq/a' is [2,3] but 'exp_avg/a' is [3,2]"),
            std::string::npos);
  bad = s;
  bad["step/a"] = Tensor::scalar<float>(1.5f);
  EXPECT_NE(fresh->load_state(bad).message().find("'step/a' is 1.5"), std::string::npos);
  bad = s;
  bad["exp_avg/a"] = Tensor::allocate(DType::kF64, {2, 3});
  EXPECT_NE(fresh->load_state(bad).message().find("'exp_avg/a' is f64"), std::string::npos);

  // Shapes against the parameters are checked at the next step.
  ASSERT_TRUE(fresh->load_state(s).is_ok());
  Tensor other = filled({6}, 1), gother = filled({6}, 1);
  Status st = fresh->step({{"a", &other, &gother}}, 0.1);
  EXPECT_NE(st.message().find("optimizer state 'exp_avg/a' is [2,3] but parameter 'a' is [6]"), std::string::npos)
      << st.message();

  // SGD without momentum has no state, and refuses a momentum buffer.
  auto sgd = make_optimizer(OptimizerConfig{}).value();
  EXPECT_TRUE(sgd->state().empty());
  EXPECT_FALSE(sgd->load_state({{"momentum_buffer/a", filled({2}, 0)}}).is_ok());
  OptimizerConfig m;
  m.momentum = 0.9;
  auto sgdm = make_optimizer(m).value();
  ASSERT_TRUE(sgdm->load_state({{"momentum_buffer/a", filled({2}, 0)}}).is_ok());
  st = sgdm->step({{"a", &a, &ga}}, 0.1);
  EXPECT_NE(st.message().find("'momentum_buffer/a' is [2] but parameter 'a' is [2,3]"), std::string::npos);
}

TEST(TrainOptimClip, NonFiniteIsReportedNotApplied) {
  Tensor g0 = filled({5}, 1), g1 = filled({3}, 2);
  g1.mutable_data<float>()[1] = std::nanf("");
  const Tensor g0_before = g0.clone();
  auto r = clip_grad_norm({&g0, &g1}, 1.0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("gradient #1 [3] has a non-finite norm"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(compare(g0, g0_before).mismatches, 0);
  g1.mutable_data<float>()[1] = INFINITY;
  EXPECT_FALSE(clip_grad_norm({&g0, &g1}, 1.0).is_ok());
  EXPECT_FALSE(clip_grad_norm({&g0}, -1.0).is_ok());
  auto none = clip_grad_norm({nullptr}, 1.0);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none.value(), 0.0);
}

TEST(TrainOptimSchedule, WarmupShapeAndBadConfigs) {
  ScheduleConfig c;
  c.kind = "cosine";
  c.total_steps = 20;
  c.warmup_steps = 4;
  // Warm-up: base * (s + 1) / (W + 1), then the cosine starts at base.
  for (int s = 0; s < 4; ++s) EXPECT_NEAR(lr_at(c, 0.5, s), 0.5 * (s + 1) / 5.0, 1e-15) << s;
  EXPECT_DOUBLE_EQ(lr_at(c, 0.5, 4), 0.5);
  EXPECT_NEAR(lr_at(c, 0.5, 19), 0.5 * (1 + std::cos(M_PI * 15 / 16)) / 2, 1e-12);

  struct Bad {
    std::function<void(ScheduleConfig&)> edit;
    std::string expect;
  };
  const std::vector<Bad> bad = {
      {[](ScheduleConfig& s) { s.kind = "poly"; }, "schedule 'poly' is not known"},
      {[](ScheduleConfig& s) { s.kind = "step"; }, "step_size >= 1"},
      {[](ScheduleConfig& s) { s.kind = "cosine", s.total_steps = 5, s.warmup_steps = 5; }, "total_steps (5) > warmup_steps (5)"},
      {[](ScheduleConfig& s) { s.warmup_steps = -1; }, "warmup_steps -1 is negative"},
      {[](ScheduleConfig& s) { s.kind = "onecycle"; }, "total_steps >= 1"},
      {[](ScheduleConfig& s) { s.kind = "onecycle", s.total_steps = 10, s.warmup_steps = 2; }, "warms up by itself"},
      {[](ScheduleConfig& s) { s.kind = "onecycle", s.total_steps = 10, s.pct_start = 1.5; }, "pct_start 1.5"},
      {[](ScheduleConfig& s) { s.kind = "onecycle", s.total_steps = 10, s.pct_start = 0.1; }, "pct_start * total_steps = 1"},
  };
  for (const Bad& b : bad) {
    ScheduleConfig s;
    b.edit(s);
    const Status st = validate_schedule(s);
    EXPECT_NE(st.message().find(b.expect), std::string::npos) << "got: '" << st.message() << "', expected: " << b.expect;
    EXPECT_FALSE(LrSchedule::create(s, 0.1).is_ok());
  }
  EXPECT_FALSE(LrSchedule::create(ScheduleConfig{}, -0.1).is_ok());
}

}  // namespace
}  // namespace ferry
