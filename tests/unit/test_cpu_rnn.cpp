// The cpu backend's RNN / GRU / LSTM kernels (src/backends/cpu/rnn.cpp) against the reference
// kernels: every direction, layout, optional input, sequence_lens, clip, GRU linear_before_reset and
// LSTM input_forget / peepholes, on random shapes (hidden sizes off the vector width, batch sizes
// that use every row-block of the small GEMM). Each case also checks that the optimized kernel
// accepted the node (so a silent fallback to the reference cannot pass), and that nodes it does not
// cover fall back with the same answers, and that concurrent runs of one loaded model agree.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <thread>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/rnn_gates.h"
#include "backends/cpu/small_gemm.h"
#include "op_tester.h"
#include "ops/op_util.h"
#include "ops/registry.h"

namespace ferry::testing {
namespace {

using std::vector;

Tensor randn(vector<int64_t> dims, std::mt19937& rng, float scale = 1.f) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = nd(rng);
  return t;
}

struct RnnCase {
  std::string op = "LSTM";
  std::string direction = "forward";
  int64_t layout = 0, S = 4, B = 3, I = 5, H = 7;
  bool bias = true, h0 = true, c0 = true, peepholes = false, seq_lens = false;
  bool clip = false, linear_before_reset = false, input_forget = false;
  bool bf16 = false;  // every float input in bf16 (a bf16 precision mode)
  vector<std::string> activations;  // empty: the defaults
  uint32_t seed = 1;

  int64_t gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  std::string describe() const {
    return op + " " + direction + " layout " + std::to_string(layout) + " S" + std::to_string(S) + " B" +
           std::to_string(B) + " I" + std::to_string(I) + " H" + std::to_string(H) + (bias ? " B" : "") +
           (h0 ? " h0" : "") + (c0 ? " c0" : "") + (peepholes ? " P" : "") + (seq_lens ? " lens" : "") +
           (clip ? " clip" : "") + (linear_before_reset ? " lbr" : "") + (input_forget ? " input_forget" : "") +
           (bf16 ? " bf16" : "");
  }

  OpTester tester() const {
    std::mt19937 rng(seed);
    auto rnd = [&](vector<int64_t> dims, float scale) {
      Tensor t = randn(std::move(dims), rng, scale);
      return bf16 ? cast_tensor(t, DType::kBF16).value() : t;
    };
    const int64_t D = direction == "bidirectional" ? 2 : 1, G = gates();
    const bool lstm = op == "LSTM";
    OpTester t(op, 14);
    t.attr("hidden_size", H).attr("direction", direction).attr("layout", layout);
    if (clip) t.attr("clip", 0.7f);
    if (op == "GRU") t.attr("linear_before_reset", linear_before_reset ? 1 : 0);
    if (lstm) t.attr("input_forget", input_forget ? 1 : 0);
    if (!activations.empty()) t.attr("activations", activations);
    t.input(rnd(layout == 0 ? vector<int64_t>{S, B, I} : vector<int64_t>{B, S, I}, 1.f));
    t.const_input(rnd({D, G * H, I}, 0.4f));
    t.const_input(rnd({D, G * H, H}, 0.4f));
    const int last = lstm && peepholes ? 7 : lstm && c0 ? 6 : h0 ? 5 : seq_lens ? 4 : bias ? 3 : 2;
    if (last >= 3) bias ? (void)t.const_input(rnd({D, 2 * G * H}, 0.3f)) : (void)t.no_input();
    if (last >= 4) {
      if (seq_lens) {
        vector<int32_t> lens(static_cast<size_t>(B));
        std::uniform_int_distribution<int32_t> ud(0, static_cast<int32_t>(S));
        for (int64_t b = 0; b < B; ++b) lens[b] = b == 0 ? static_cast<int32_t>(S) : b == 1 ? 0 : ud(rng);
        t.input(Tensor::from_vector<int32_t>(lens, {B}));
      } else {
        t.no_input();
      }
    }
    const vector<int64_t> state = layout == 0 ? vector<int64_t>{D, B, H} : vector<int64_t>{B, D, H};
    if (last >= 5) h0 ? (void)t.input(rnd(state, 0.5f)) : (void)t.no_input();
    if (last >= 6) c0 ? (void)t.input(rnd(state, 0.5f)) : (void)t.no_input();
    if (last >= 7) t.const_input(rnd({D, 3 * H}, 0.3f));
    t.outputs(lstm ? 3 : 2);
    return t;
  }

  // Runs on cpu-ref and cpu; compares every output; returns whether the optimized kernel took the node.
  bool check() const {
    SCOPED_TRACE(describe());
    auto ref = tester().run("cpu-ref");
    OpTester t = tester();
    auto cpu = t.run("cpu");
    EXPECT_EQ(ref.size(), cpu.size());
    for (size_t i = 0; i < ref.size() && i < cpu.size(); ++i) {
      if (!bf16) {
        expect_near(cpu[i], ref[i], 2e-5, 1e-4);
        continue;
      }
      // Both compute in f32 from the same bf16 values: at most a rounding step of bf16 apart.
      EXPECT_EQ(cpu[i].dtype(), DType::kBF16);
      expect_near(cast_tensor(cpu[i], DType::kF32).value(), cast_tensor(ref[i], DType::kF32).value(), 1e-2, 8e-3);
    }
    const Graph& g = t.last_model()->graph;
    const OpSchema* schema = op_registry().find("", op, 14);
    const auto* factories = cpu_kernel_table().find("", op);
    if (!schema || !factories || g.nodes.empty()) return false;
    auto k = factories->front()(g.nodes[0], *schema, g);
    return k.is_ok() && k.value() != nullptr;
  }
};

TEST(CpuRnn, SmallGemmMatchesPlainLoops) {
  std::mt19937 rng(7);
  const bool vector_kernel = __builtin_cpu_supports("avx512f") ||
                             (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 17})
    for (int64_t N : {1, 15, 16, 33, 64, 130}) {
      const int64_t K = 11, ldb = N + 3, ldc = N + 5;
      Tensor a = randn({M, K}, rng), b = randn({K, ldb}, rng), bias = randn({N}, rng);
      const cpu::PanelMatrix packed = cpu::pack_panels(K, N, b.data<float>(), ldb, 1);
      vector<float> c(static_cast<size_t>(M * ldc), -1.f);
      cpu::small_gemm(M, a.data<float>(), K, packed, bias.data<float>(), c.data(), ldc);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < ldc; ++n) {
          if (n >= N) {
            ASSERT_EQ(c[m * ldc + n], -1.f) << "wrote past N at " << m << "," << n;
            continue;
          }
          double want = bias.data<float>()[n];
          for (int64_t k = 0; k < K; ++k) want += double(a.data<float>()[m * K + k]) * b.data<float>()[k * ldb + n];
          ASSERT_NEAR(c[m * ldc + n], want, 1e-4) << "M " << M << " N " << N << " at " << m << "," << n;
          if (vector_kernel) {  // the AVX-512 and AVX2 blocks: the bias, then FMA with k ascending, bit for bit
            float model = bias.data<float>()[n];
            for (int64_t k = 0; k < K; ++k) model = std::fma(a.data<float>()[m * K + k], b.data<float>()[k * ldb + n], model);
            ASSERT_EQ(std::memcmp(&c[m * ldc + n], &model, sizeof(float)), 0)
                << "M " << M << " N " << N << " at " << m << "," << n << ": " << c[m * ldc + n] << " vs " << model;
          }
        }
    }
}

TEST(CpuRnn, VectorLstmGatesMatchDoublePrecision) {
  // The AVX-512 and AVX2 gate rows (the kernel's LSTM path on such CPUs) against the equations in
  // double, on hidden sizes off the vector widths, every variant, and gate inputs out to saturation;
  // where the CPU has both, the two give the same bits.
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 3.f);
  const float extremes[] = {-200.f, -90.f, -20.f, -8.f, 8.f, 20.f, 90.f, 200.f};
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  bool ran = false;
  for (bool peep : {false, true})
    for (bool clip : {false, true}) {
      const std::pair<const char*, cpu::LstmGatesFn> fns[] = {{"AVX-512", cpu::lstm_gates_avx512(peep, clip)},
                                                              {"AVX2", cpu::lstm_gates_avx2(peep, clip)}};
      const float clip_v = clip ? 2.5f : std::numeric_limits<float>::infinity();
      for (int64_t H : {1, 7, 8, 9, 16, 17, 40, 128})
        for (bool input_forget : {false, true}) {
          SCOPED_TRACE("H " + std::to_string(H) + (peep ? " peepholes" : "") + (clip ? " clip" : "") +
                       (input_forget ? " input_forget" : ""));
          vector<float> x(4 * H), g(4 * H), p(3 * H), c_in(H + 16, -7.f);
          for (float& v : x) v = nd(rng);
          for (float& v : g) v = nd(rng);
          for (float& v : p) v = 0.3f * nd(rng);
          for (int64_t j = 0; j < H; ++j) c_in[j] = 0.5f * nd(rng);
          for (size_t e = 0; e < std::size(extremes) && int64_t(e) < 4 * H; ++e) x[(e * 7) % (4 * H)] = extremes[e];
          vector<vector<float>> outs;  // c then h of each variant that ran
          for (const auto& [name, fn] : fns) {
            if (!fn) continue;
            SCOPED_TRACE(name);
            ran = true;
            vector<float> c = c_in, h(H + 16, -7.f);
            fn(H, x.data(), g.data(), p.data(), p.data() + H, p.data() + 2 * H, clip_v, input_forget, c.data(), h.data());
            auto in = [&](int64_t q, int64_t j, double peep_term) {
              const double v = double(x[q * H + j]) + g[q * H + j] + (peep ? peep_term : 0.0);
              return clip ? std::clamp(v, -double(clip_v), double(clip_v)) : v;
            };
            for (int64_t j = 0; j < H; ++j) {
              const double c0 = c_in[j];
              const double ig = sig(in(0, j, p[j] * c0));
              const double fg = input_forget ? 1.0 - ig : sig(in(2, j, p[2 * H + j] * c0));
              const double cn = fg * c0 + ig * std::tanh(in(3, j, 0.0));
              const double hn = sig(in(1, j, p[H + j] * cn)) * std::tanh(cn);
              ASSERT_NEAR(c[j], cn, 2e-6 * (1.0 + std::fabs(cn))) << "c at " << j;
              ASSERT_NEAR(h[j], hn, 2e-6) << "h at " << j;
            }
            for (int64_t j = H; j < H + 16; ++j) ASSERT_TRUE(c[j] == -7.f && h[j] == -7.f) << "wrote past H at " << j;
            outs.push_back(c);
            outs.push_back(h);
          }
          if (outs.size() == 4) {
            EXPECT_EQ(std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * sizeof(float)), 0) << "c: AVX-512 != AVX2";
            EXPECT_EQ(std::memcmp(outs[1].data(), outs[3].data(), outs[1].size() * sizeof(float)), 0) << "h: AVX-512 != AVX2";
          }
        }
    }
  if (!ran) GTEST_SKIP() << "no AVX-512F nor AVX2 + FMA on this CPU (or FERRY_RNN_AVX512_GATES=0): the kernel uses its plain loop";
}

TEST(CpuRnn, EveryDirectionAndLayoutMatchesReference) {
  uint32_t seed = 10;
  for (const char* op : {"RNN", "GRU", "LSTM"})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int64_t layout : {0, 1}) {
        RnnCase c;
        c.op = op, c.direction = dir, c.layout = layout, c.seed = ++seed;
        EXPECT_TRUE(c.check()) << c.describe() << ": the optimized kernel declined the node";
      }
}

TEST(CpuRnn, OptionalInputsAndAttributesMatchReference) {
  uint32_t seed = 100;
  for (const char* op : {"RNN", "GRU", "LSTM"})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int variant = 0; variant < 4; ++variant) {
        RnnCase c;
        c.op = op, c.direction = dir, c.seed = ++seed;
        c.layout = variant % 2;
        c.bias = variant != 1;
        c.h0 = variant >= 2;
        c.c0 = variant == 3;
        c.seq_lens = variant == 0 || variant == 3;
        c.clip = variant == 1 || variant == 3;
        c.linear_before_reset = variant >= 2;
        c.input_forget = variant == 2;
        c.peepholes = variant == 3;
        c.S = 1 + variant * 2, c.B = variant == 3 ? 9 : 1 + variant, c.H = variant == 2 ? 16 : 5 + variant * 4;
        EXPECT_TRUE(c.check()) << c.describe() << ": the optimized kernel declined the node";
      }
}

TEST(CpuRnn, GruBothResetModesWithPaddedBatch) {
  for (bool lbr : {false, true})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      RnnCase c;
      c.op = "GRU", c.direction = dir, c.linear_before_reset = lbr, c.seq_lens = true, c.clip = true;
      c.S = 6, c.B = 10, c.I = 9, c.H = 20, c.seed = lbr ? 300 : 301;
      EXPECT_TRUE(c.check()) << c.describe();
    }
}

TEST(CpuRnn, ZooSizedBidirectionalLstm) {
  // The zoo's BiLSTM layer geometry (hidden 128), batch 1 and 8, with the threads of the machine.
  for (int64_t batch : {1, 8}) {
    RnnCase c;
    c.direction = "bidirectional", c.S = 12, c.B = batch, c.I = 64, c.H = 128, c.seed = 400 + batch;
    EXPECT_TRUE(c.check()) << c.describe();
  }
}

TEST(CpuRnn, Bf16InputsComputeInF32) {
  uint32_t seed = 500;
  for (const char* op : {"RNN", "GRU", "LSTM"})
    for (const char* dir : {"forward", "bidirectional"}) {
      RnnCase c;
      c.op = op, c.direction = dir, c.bf16 = true, c.seq_lens = true, c.peepholes = true, c.seed = ++seed;
      c.layout = seed % 2;
      EXPECT_TRUE(c.check()) << c.describe() << ": the optimized kernel declined the node";
    }
}

TEST(CpuRnn, UncoveredNodesFallBackWithSameAnswers) {
  RnnCase relu;
  relu.op = "RNN", relu.activations = {"Relu"};
  EXPECT_FALSE(relu.check()) << "non-default activations must use the reference kernel";
  RnnCase lstm;
  lstm.activations = {"Sigmoid", "Tanh", "Relu"};
  EXPECT_FALSE(lstm.check());
  RnnCase defaults_spelled_out;  // the defaults named explicitly are covered
  defaults_spelled_out.op = "GRU", defaults_spelled_out.direction = "bidirectional";
  defaults_spelled_out.activations = {"Sigmoid", "Tanh", "sigmoid", "tanh"};
  EXPECT_TRUE(defaults_spelled_out.check());
}

TEST(CpuRnn, BadSequenceLensStillReportsTheReferenceError) {
  OpTester bad("LSTM", 14);
  std::mt19937 rng(5);
  bad.attr("hidden_size", int64_t{4});
  bad.input(randn({3, 2, 2}, rng)).const_input(randn({1, 16, 2}, rng)).const_input(randn({1, 16, 4}, rng));
  bad.no_input().input(Tensor::from_vector<int32_t>({3, 4}, {2}));
  auto r = bad.run_status("cpu");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("sequence_lens"), std::string::npos) << r.status().to_string();
}

TEST(CpuRnn, ConcurrentRunsOfOneModelAgree) {
  // Runs share the packed weights and the projection plans: 4 threads at once must give, bit for
  // bit, what each input gives alone.
  RnnCase c;
  c.direction = "bidirectional", c.S = 6, c.B = 3, c.H = 24;
  OpTester t = c.tester();
  t.run("cpu-ref");
  std::shared_ptr<Model> model = t.last_model();
  ASSERT_NE(model, nullptr);
  ExecutorOptions options;
  options.device = "cpu";
  options.threads = 1;
  auto created = Executor::create(model, options);
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  Executor* ex = created.value().get();
  constexpr int kThreads = 4;
  vector<NamedTensors> feeds(kThreads), expected(kThreads);
  std::mt19937 rng(9);
  for (int i = 0; i < kThreads; ++i) {
    for (const ValueInfo& in : model->graph.inputs) feeds[i].emplace_back(in.name, randn(in.type.shape->values(), rng));
    Status st = ex->run(feeds[i], &expected[i]);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  std::atomic<int> errors{0}, mismatches{0};
  vector<std::thread> workers;
  for (int i = 0; i < kThreads; ++i)
    workers.emplace_back([&, i] {
      for (int it = 0; it < 20; ++it) {
        NamedTensors out;
        if (!ex->run(feeds[i], &out).is_ok()) {
          ++errors;
          continue;
        }
        for (size_t o = 0; o < out.size(); ++o)
          if (out[o].second.nbytes() != expected[i][o].second.nbytes() ||
              std::memcmp(out[o].second.raw(), expected[i][o].second.raw(), out[o].second.nbytes()) != 0)
            ++mismatches;
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace ferry::testing
