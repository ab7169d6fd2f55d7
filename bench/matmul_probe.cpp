// Micro-benchmark for the transformer matmuls (issue 22): oneDNN 2.6 f32 matmul with constant
// weights, [M, K] x [K, N] + bias (+ optional GELU post-op), as dnnl_matmul.cpp runs it (weights
// tag::any, reordered once) against alternatives:
//   whole    one primitive for all M rows, the threads of the OpenMP team (ferry's path)
//   pad16    weights oneDNN keeps plain stored with rows 16 floats longer (dnnl_matmul.cpp pads a
//            row stride of a multiple of 256 floats: cpu::padded_plain_weights); with ILV, ILVPAD=1
//            pads both oneDNN variants
//   wtag=T   weights forced to a given blocked tag instead of any
//   rows=R   the caller cuts M into panels of R rows, one primitive call each
//   rowgemm  1 thread: cpu::RowGemm (src/backends/cpu/row_gemm.h), ferry's own kernel with the
//            next weight sliver prefetched (with COLD=1 also cold)
//   nsplit   2+ threads: each thread runs a 1-thread primitive on its own N/T columns (weights
//            packed per column block), instead of oneDNN splitting the work itself
// Build:
//   g++ -O2 -std=c++17 -fopenmp -Isrc bench/matmul_probe.cpp src/backends/cpu/row_gemm.cpp -ldnnl -o /tmp/matmul_probe
//   OMP_NUM_THREADS=1 /tmp/matmul_probe [M K N [gelu]]     (no args: the whole table)
// Prints ms per call (median of 15 timed batches) and GFLOP/s. CPUTIME=1 (1 thread): thread CPU time.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "backends/cpu/row_gemm.h"
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <ctime>
#include <string>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

// CPUTIME=1: the calling thread's CPU time instead of wall time (1 thread on a loaded machine: the
// time the thread was descheduled does not count; cache interference from others still does).
static double now() {
  static const bool cpu = std::getenv("CPUTIME") != nullptr;
  if (cpu) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double time_ms(const std::function<void()>& f, double flop) {
  f();
  f();
  // calls per batch so that one batch is ~20 ms
  double t0 = now();
  f();
  double one = std::max(now() - t0, 1e-6);
  int reps = std::max(1, static_cast<int>(0.02 / one));
  std::vector<double> v;
  for (int b = 0; b < 15; ++b) {
    double t = now();
    for (int r = 0; r < reps; ++r) f();
    v.push_back((now() - t) / reps);
  }
  std::sort(v.begin(), v.end());
  (void)flop;
  return v[v.size() / 2] * 1e3;
}

// COLD=1: also the same call with the caches flushed before each call (96 MB of other traffic, not
// timed), as in a model whose weights do not fit the last-level cache; median of 21 calls.
static std::vector<float> g_junk;
// The input x is read back into the caches after the flush (in a model the previous node just wrote it).
static const float* g_warm = nullptr;
static size_t g_warm_n = 0;
static double time_cold_ms(const std::function<void()>& f) {
  if (g_junk.empty()) g_junk.assign(24 << 20, 1.f);
  std::vector<double> v;
  float s = 0;
  for (int r = 0; r < 41; ++r) {
    for (size_t i = 0; i < g_junk.size(); i += 16) { g_junk[i] += 1.f; s += g_junk[i]; }
    for (size_t i = 0; i < g_warm_n; i += 16) s += g_warm[i];
    double t = now();
    f();
    v.push_back(now() - t);
  }
  if (s == 0.5f) std::printf(" ");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e3;
}

static double time_cold_once(const std::function<void()>& f) {
  if (g_junk.empty()) g_junk.assign(24 << 20, 1.f);
  float s = 0;
  static const bool hot = std::string(std::getenv("ILV") ? std::getenv("ILV") : "") == "hot";  // ILV=hot: no flush
  if (!hot)
    for (size_t i = 0; i < g_junk.size(); i += 16) { g_junk[i] += 1.f; s += g_junk[i]; }
  for (size_t i = 0; i < g_warm_n; i += 16) s += g_warm[i];
  if (s == 0.5f) std::printf(" ");
  const double t = now();
  f();
  return (now() - t) * 1e3;
}

struct Prob {
  int64_t M, K, N;
  bool gelu;
};

static engine eng(engine::kind::cpu, 0);
static stream st(eng);

struct Mm {
  matmul prim;
  memory w;
  memory::desc sd, dd, bd;
};

// One primitive for [m, K] x W[:, n0:n0+n] with src/dst row strides ldA / ldC.
static Mm make(const std::vector<float>& W, int64_t K, int64_t N, int64_t m, int64_t n0, int64_t n, int64_t lda,
               int64_t ldc, bool gelu, tag wtag, bool huge = std::getenv("HUGE") != nullptr, int64_t pad = 0) {
  Mm r;
  r.sd = memory::desc({m, K}, dt::f32, memory::dims{lda, 1});
  r.dd = memory::desc({m, n}, dt::f32, memory::dims{ldc, 1});
  r.bd = memory::desc({1, n}, dt::f32, tag::ab);
  memory::desc wd({K, n}, dt::f32, wtag);
  post_ops ops;
  if (gelu) ops.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(ops);
  matmul::primitive_desc pd(matmul::desc(r.sd, wd, r.bd, r.dd), attr, eng);
  // pad > 0: where oneDNN keeps the weights plain, their rows pad floats longer (ferry pads a row
  // stride of a multiple of 256 floats by 16: cpu::padded_plain_weights)
  if (pad > 0 && pd.weights_desc() == memory::desc({K, n}, dt::f32, tag::ab)) {
    pd = matmul::primitive_desc(matmul::desc(r.sd, memory::desc({K, n}, dt::f32, memory::dims{n + pad, 1}), r.bd, r.dd),
                                attr, eng);
  }
  r.prim = matmul(pd);
  // user weights: columns n0..n0+n of W [K, N] (row stride N)
  memory::desc ud({K, n}, dt::f32, memory::dims{N, 1});
  memory u(ud, eng, const_cast<float*>(W.data() + n0));
  if (huge) {  // HUGE=1: packed weights on transparent huge pages (madvise)
    const size_t bytes = (pd.weights_desc().get_size() + (2u << 20) - 1) & ~size_t((2u << 20) - 1);
    void* mem = std::aligned_alloc(2u << 20, bytes);
    madvise(mem, bytes, MADV_HUGEPAGE);
    std::memset(mem, 0, bytes);
    r.w = memory(pd.weights_desc(), eng, mem);
  } else {
    r.w = memory(pd.weights_desc(), eng);
  }
  reorder(u, r.w).execute(st, u, r.w);
  st.wait();
  return r;
}

static void exec(Mm& p, const float* x, const float* b, float* y) {
  memory mx(p.sd, eng, const_cast<float*>(x)), mb(p.bd, eng, const_cast<float*>(b)), my(p.dd, eng, y);
  p.prim.execute(st, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, p.w}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, my}});
  st.wait();
}

static void run(const Prob& pr, const char* only) {
  const int64_t M = pr.M, K = pr.K, N = pr.N;
  const int T = omp_get_max_threads();
  std::vector<float> W(K * N), x(M * K), b(N), y(M * N), yref(M * N);
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : W) v = u(g) * 0.05f;
  for (auto& v : x) v = u(g);
  for (auto& v : b) v = u(g);
  const double flop = 2.0 * M * K * N;
  g_warm = x.data();
  g_warm_n = x.size();
  // DREF=1: max difference against a double-precision product instead of oneDNN's (no GELU).
  std::vector<double> dref;
  if (std::getenv("DREF") && !pr.gelu) {
    dref.assign(M * N, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < N; ++j) dref[i * N + j] += (double)x[i * K + k] * W[k * N + j];
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) dref[i * N + j] += b[j];
  }
  auto report = [&](const char* name, double ms) {
    double maxd = 0;
    for (int64_t i = 0; i < M * N; ++i)
      maxd = std::max(maxd, dref.empty() ? (double)std::abs(y[i] - yref[i]) : std::abs(y[i] - dref[i]));
    std::printf("M=%5ld K=%4ld N=%4ld %s t=%d %-14s %8.3f ms %7.1f GFLOP/s  maxdiff %.1e\n", (long)M, (long)K, (long)N,
                pr.gelu ? "gelu" : "    ", T, name, ms, flop / ms * 1e-6, maxd);
    std::fflush(stdout);
  };
  auto want = [&](const char* n) { return !only || std::strstr(n, only); };
  // whole (ferry's path)
  {
    Mm p = make(W, K, N, M, 0, N, K, N, pr.gelu, tag::any);
    exec(p, x.data(), b.data(), yref.data());
    double ms = time_ms([&] { exec(p, x.data(), b.data(), y.data()); }, flop);
    report("whole", ms);
    if (std::getenv("COLD")) report("whole-cold", time_cold_ms([&] { exec(p, x.data(), b.data(), y.data()); }));
  }
  if (want("pad16")) {  // weights kept plain by oneDNN: rows padded by 16 floats
    Mm p = make(W, K, N, M, 0, N, K, N, pr.gelu, tag::any, std::getenv("HUGE") != nullptr, 16);
    double ms = time_ms([&] { exec(p, x.data(), b.data(), y.data()); }, flop);
    report("pad16", ms);
  }
  if (T == 1 && want("rowgemm") && ferry::cpu::RowGemm::supported(K, N)) {
    auto rg = ferry::cpu::RowGemm::create(W.data(), false, b.data(), K, N).value();  // a probe: no allocation failure expected
    auto f = [&] { rg->run(x.data(), M, K, y.data(), false, pr.gelu); };
    f();
    double ms = time_ms(f, flop);
    report("rowgemm", ms);
    if (std::getenv("COLD")) report("rowgemm-cold", time_cold_ms(f));
  }
  if (T == 1 && std::getenv("ILV") && ferry::cpu::RowGemm::supported(K, N)) {
    // ILV=1: oneDNN (ferry's path) and RowGemm alternated call by call, each after a flush (x warm):
    // the per-round ratio is robust to a loaded machine's slow phases.
    // 4 variants: oneDNN and RowGemm, each with its packed weights on 4 KiB and on huge pages.
    // ILVPAD=1: both oneDNN variants with the weight rows padded by 16 floats where oneDNN keeps them plain
    const int64_t ipad = std::getenv("ILVPAD") ? 16 : 0;
    Mm p = make(W, K, N, M, 0, N, K, N, pr.gelu, tag::any, false, ipad),
       ph = make(W, K, N, M, 0, N, K, N, pr.gelu, tag::any, true, ipad);
    auto rg = ferry::cpu::RowGemm::create(W.data(), false, b.data(), K, N, false).value();
    auto rgh = ferry::cpu::RowGemm::create(W.data(), false, b.data(), K, N, true).value();
    const char* names[4] = {"oneDNN", "oneDNN-huge", "RowGemm", "RowGemm-huge"};
    std::vector<double> t[4], ratio[4];
    for (int r = 0; r < 41; ++r) {
      double a[4];
      a[0] = time_cold_once([&] { exec(p, x.data(), b.data(), y.data()); });
      a[1] = time_cold_once([&] { exec(ph, x.data(), b.data(), y.data()); });
      a[2] = time_cold_once([&] { rg->run(x.data(), M, K, y.data(), false, pr.gelu); });
      a[3] = time_cold_once([&] { rgh->run(x.data(), M, K, y.data(), false, pr.gelu); });
      for (int v = 0; v < 4; ++v) t[v].push_back(a[v]), ratio[v].push_back(a[v] / a[0]);
    }
    for (int v = 0; v < 4; ++v) {
      std::sort(t[v].begin(), t[v].end());
      std::sort(ratio[v].begin(), ratio[v].end());
      std::printf("M=%5ld K=%4ld N=%4ld %s %s %-13s p50 %.3f ms, / oneDNN per round p25/p50/p75 %.3f %.3f %.3f\n",
                  (long)M, (long)K, (long)N, pr.gelu ? "gelu" : "    ", std::getenv("ILV"), names[v], t[v][20],
                  ratio[v][10], ratio[v][20], ratio[v][30]);
    }
    std::fflush(stdout);
  }
  if (want("wtag")) {
    const std::pair<const char*, tag> tags[] = {{"BA16a64b", tag::BA16a64b}, {"BA16a48b", tag::BA16a48b},
                                                {"BA16a32b", tag::BA16a32b}, {"ab", tag::ab}};
    for (auto& [nm, t] : tags) {
      try {
        Mm p = make(W, K, N, M, 0, N, K, N, pr.gelu, t);
        double ms = time_ms([&] { exec(p, x.data(), b.data(), y.data()); }, flop);
        report((std::string("wtag=") + nm).c_str(), ms);
      } catch (const dnnl::error& e) {
        std::printf("wtag=%s: %s\n", nm, e.what());
      }
    }
  }
  if (want("strided")) {
    // dst rows padded by 16 floats: oneDNN 2.6 takes gemm:jit (sgemm) instead of brgemm
    std::vector<float> ys(M * (N + 16));
    Mm p = make(W, K, N, M, 0, N, K, N + 16, pr.gelu, tag::any);
    double ms = time_ms([&] { exec(p, x.data(), b.data(), ys.data()); }, flop);
    for (int64_t i = 0; i < M; ++i) std::copy(ys.data() + i * (N + 16), ys.data() + i * (N + 16) + N, y.data() + i * N);
    report("strided(sgemm)", ms);
  }
  if (want("rows")) {
    for (int64_t R : {32, 64, 96}) {
      if (R >= M) continue;
      std::vector<Mm> ps;
      int64_t full = M / R, rem = M % R;
      ps.push_back(make(W, K, N, R, 0, N, K, N, pr.gelu, tag::any));
      if (rem) ps.push_back(make(W, K, N, rem, 0, N, K, N, pr.gelu, tag::any));
      double ms = time_ms(
          [&] {
            for (int64_t i = 0; i < full; ++i) exec(ps[0], x.data() + i * R * K, b.data(), y.data() + i * R * N);
            if (rem) exec(ps[1], x.data() + full * R * K, b.data(), y.data() + full * R * N);
          },
          flop);
      report((std::string("rows=") + std::to_string(R)).c_str(), ms);
    }
  }
  if (T > 1 && want("nsplit")) {
    // N split in 64-column multiples, one 1-thread primitive per thread
    std::vector<Mm> ps;
    std::vector<int64_t> n0s;
    omp_set_num_threads(1);
    const int64_t blocks = (N + 63) / 64;
    for (int t = 0; t < T; ++t) {
      int64_t b0 = blocks * t / T, b1 = blocks * (t + 1) / T;
      int64_t c0 = b0 * 64, c1 = std::min(N, b1 * 64);
      n0s.push_back(c0);
      ps.push_back(make(W, K, N, M, c0, c1 - c0, K, N, pr.gelu, tag::any));
    }
    omp_set_num_threads(T);
    double ms = time_ms(
        [&] {
#pragma omp parallel num_threads(T)
          { int t = omp_get_thread_num(); exec(ps[t], x.data(), b.data() + n0s[t], y.data() + n0s[t]); }
        },
        flop);
    report("nsplit", ms);
    // N split, each thread a dense-dst (brgemm) primitive into its own buffer, then copied into y
    std::vector<Mm> pd2;
    std::vector<std::vector<float>> bufs(T);
    omp_set_num_threads(1);
    for (int t = 0; t < T; ++t) {
      const int64_t nb = (t + 1 < T ? n0s[t + 1] : N) - n0s[t];
      bufs[t].resize(M * nb);
      pd2.push_back(make(W, K, N, M, n0s[t], nb, K, nb, pr.gelu, tag::any));
    }
    omp_set_num_threads(T);
    ms = time_ms(
        [&] {
#pragma omp parallel num_threads(T)
          {
            int t = omp_get_thread_num();
            const int64_t nb = (t + 1 < T ? n0s[t + 1] : N) - n0s[t];
            exec(pd2[t], x.data(), b.data() + n0s[t], bufs[t].data());
            for (int64_t i = 0; i < M; ++i)
              std::copy(bufs[t].data() + i * nb, bufs[t].data() + (i + 1) * nb, y.data() + i * N + n0s[t]);
          }
        },
        flop);
    report("nsplit-dense", ms);
    // M split, one 1-thread primitive per thread (what oneDNN does, from the caller)
    std::vector<Mm> pm;
    std::vector<int64_t> m0s;
    omp_set_num_threads(1);
    for (int t = 0; t < T; ++t) {
      int64_t r0 = M * t / T, r1 = M * (t + 1) / T;
      m0s.push_back(r0);
      pm.push_back(make(W, K, N, r1 - r0, 0, N, K, N, pr.gelu, tag::any));
    }
    omp_set_num_threads(T);
    ms = time_ms(
        [&] {
#pragma omp parallel num_threads(T)
          { int t = omp_get_thread_num(); exec(pm[t], x.data() + m0s[t] * K, b.data(), y.data() + m0s[t] * N); }
        },
        flop);
    report("msplit", ms);
  }
}

int main(int argc, char** argv) {
  const char* only = std::getenv("ONLY");
  if (argc >= 4) {
    run({atol(argv[1]), atol(argv[2]), atol(argv[3]), argc > 4}, only);
    return 0;
  }
  for (int64_t M : {128, 197, 1024, 1576})
    for (auto kn : {std::pair<int64_t, int64_t>{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}})
      run({M, kn.first, kn.second, kn.second == 3072}, only);
}
