// Cold-weights convolution probe (issue 22): one NHWC oneDNN convolution (+bias, +sum, ReLU) timed with
// its packed weights evicted from the caches before each call (96 MB of other traffic), plain and with
// the weights software-prefetched in one burst just before the primitive call, against hot caches;
// ferry's cpu::ConvRows on the same shape (cold and hot); with a 9th argument also im2col + oneDNN
// matmul (stride 1). Variants run interleaved, one call each per round; p50 of ROUNDS (21) rounds.
// Found (1 thread, load ~4): the burst prefetch gains on the 7x7 3x3 alone in some runs, nothing in
// the model (FERRY_CONV_PREFETCH experiment, not kept); ConvRows 0.85-0.9x oneDNN's time on 7x7 outputs.
// Build: g++ -O2 -std=c++17 -mavx512f -fopenmp -Isrc bench/conv_prefetch_probe.cpp src/backends/cpu/conv_rows.cpp -ldnnl -o /tmp/conv_prefetch_probe
// Run:   OMP_NUM_THREADS=1 /tmp/conv_prefetch_probe N H W CIN COUT K STRIDE [SUM]
//        e.g. 1 7 7 512 512 3 1 0 (ResNet-50 layer4 3x3), 1 7 7 512 2048 1 1 1, 1 14 14 1024 2048 1 2 0
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/conv_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <list>
#include <string>
#include <cstdlib>
#include <ctime>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

static double now() {
  timespec ts;
  static const bool wall = getenv("WALL") != nullptr;  // WALL=1: wall time (for several threads)
  clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static std::vector<float> junk(24 << 20);  // 96 MB
static float flush() {
  float s = 0;
  for (size_t i = 0; i < junk.size(); i += 16) { junk[i] += 1.f; s += junk[i]; }
  return s;
}
// Burst prefetch of [p, p + n): kind 0 none, 1 prefetcht0, 2 prefetcht1, 3 prefetcht2, 4 four
// interleaved prefetcht1 streams, 5 a read loop (loads summed).
static float prefetch(const char* p, size_t n, int kind) {
  float s = 0;
  switch (kind) {
    case 1: for (size_t i = 0; i < n; i += 64) _mm_prefetch(p + i, _MM_HINT_T0); break;
    case 2: for (size_t i = 0; i < n; i += 64) _mm_prefetch(p + i, _MM_HINT_T1); break;
    case 3: for (size_t i = 0; i < n; i += 64) _mm_prefetch(p + i, _MM_HINT_T2); break;
    case 4: {
      const size_t q = n / 4 / 64 * 64;
      for (size_t i = 0; i < q; i += 64)
        for (int j = 0; j < 4; ++j) _mm_prefetch(p + j * q + i, _MM_HINT_T1);
      for (size_t i = 4 * q; i < n; i += 64) _mm_prefetch(p + i, _MM_HINT_T1);
      break;
    }
    case 5: {
      __m512 acc = _mm512_setzero_ps();
      for (size_t i = 0; i + 64 <= n; i += 64) acc = _mm512_add_ps(acc, _mm512_loadu_ps(reinterpret_cast<const float*>(p + i)));
      float lanes[16];
      _mm512_storeu_ps(lanes, acc);
      for (float v : lanes) s += v;
      break;
    }
    default: break;
  }
  return s;
}

int main(int argc, char** argv) {
  if (argc < 8) { std::fprintf(stderr, "usage: N H W CIN COUT K STRIDE [SUM]\n"); return 2; }
  const int N = atoi(argv[1]), H = atoi(argv[2]), W = atoi(argv[3]), C = atoi(argv[4]), O = atoi(argv[5]), K = atoi(argv[6]),
            S = atoi(argv[7]), sum = argc > 8 ? atoi(argv[8]) : 0;
  const int P = K / 2, OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  std::vector<float> x((size_t)N * H * W * C), w((size_t)O * C * K * K), b(O, 0.1f), y((size_t)N * OH * OW * O, 0.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 97) * 0.01f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = ((i * 7) % 31) * 0.001f - 0.01f;
  post_ops ops;
  if (sum) ops.append_sum(1.f);
  ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(ops);
  attr.set_scratchpad_mode(scratchpad_mode::user);
  memory::desc src({N, C, H, W}, dt::f32, tag::nhwc), dst({N, O, OH, OW}, dt::f32, tag::nhwc),
      wany({O, C, K, K}, dt::f32, tag::any), bmd({O}, dt::f32, tag::x);
  auto cd = convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src, wany, bmd, dst,
                                      {S, S}, {P, P}, {P, P});
  convolution_forward::primitive_desc cpd(cd, attr, eng);
  memory wu({{O, C, K, K}, dt::f32, tag::oihw}, eng, w.data());
  memory wc(cpd.weights_desc(), eng);
  reorder(wu, wc).execute(st, wu, wc);
  memory xs(src, eng, x.data()), ys(dst, eng, y.data()), bs(bmd, eng, b.data()), sc(cpd.scratchpad_desc(), eng);
  convolution_forward conv(cpd);
  const char* wp = static_cast<const char*>(wc.get_data_handle());
  const size_t wbytes = cpd.weights_desc().get_size();
  float sink = 0;
  const double gf = 2.0 * N * OH * OW * O * C * K * K * 1e-9;
  std::printf("%dx%dx%d %d->%d k%d s%d sum%d: %s, weights %.1f MB, %.3f GFLOP\n", N, H, W, C, O, K, S, sum,
              cpd.impl_info_str(), wbytes / 1e6, gf);
  // Variants, run interleaved (one call of each per round, the caches flushed before each cold one):
  // a name, whether cold, the call.
  struct Variant { std::string name; bool cold; std::function<void()> fn; std::vector<double> t; };
  std::vector<Variant> vs;
  auto conv_call = [&] {
    conv.execute(st, {{DNNL_ARG_SRC, xs}, {DNNL_ARG_WEIGHTS, wc}, {DNNL_ARG_BIAS, bs}, {DNNL_ARG_DST, ys}, {DNNL_ARG_SCRATCHPAD, sc}});
    st.wait();
  };
  vs.push_back({"conv hot", false, conv_call, {}});
  const char* names[] = {"none", "t0", "t1", "t2", "t1x4", "read"};
  for (int k = 0; k <= 5; ++k)
    vs.push_back({std::string("conv cold prefetch ") + names[k], true, [&, k] { sink += prefetch(wp, wbytes, k); conv_call(); }, {}});
  const int64_t M = (int64_t)N * OH * OW, KK = (int64_t)C * K * K;
  std::vector<float> wk, col, y2;
  std::list<matmul> mms;
  std::list<memory> mems;
  auto im2col = [&] {
    for (int n = 0; n < N; ++n)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          float* r = &col[(((size_t)n * OH + oh) * OW + ow) * KK];
          for (int kh = 0; kh < K; ++kh)
            for (int kw = 0; kw < K; ++kw, r += C) {
              const int ih = oh - P + kh, iw = ow - P + kw;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) std::fill(r, r + C, 0.f);
              else std::copy_n(&x[(((size_t)n * H + ih) * W + iw) * C], C, r);
            }
        }
  };
  if (S == 1 && K > 1 && argc > 9) {  // im2col + oneDNN matmul (weights any / BA16a64b / BA16a48b)
    wk.resize((size_t)KK * O); col.resize((size_t)M * KK); y2.resize((size_t)M * O);
    for (int o = 0; o < O; ++o)
      for (int c = 0; c < C; ++c)
        for (int kh = 0; kh < K; ++kh)
          for (int kw = 0; kw < K; ++kw) wk[((size_t)(kh * K + kw) * C + c) * O + o] = w[(((size_t)o * C + c) * K + kh) * K + kw];
    for (tag wt : {tag::any, tag::BA16a64b, tag::BA16a48b}) {
      memory::desc ms({M, KK}, dt::f32, tag::ab), md({M, O}, dt::f32, tag::ab), mw({KK, O}, dt::f32, wt), mb({1, O}, dt::f32, tag::ab);
      matmul::primitive_desc mpd(matmul::desc(ms, mw, mb, md), attr, eng);
      memory wmu({{KK, O}, dt::f32, tag::ab}, eng, wk.data());
      mems.emplace_back(mpd.weights_desc(), eng);
      memory wm = mems.back();
      reorder(wmu, wm).execute(st, wmu, wm);
      memory xm(ms, eng, col.data()), ym(md, eng, y2.data()), bm(mb, eng, b.data()), sm(mpd.scratchpad_desc(), eng);
      mms.emplace_back(mpd);
      matmul& mm = mms.back();
      const std::string nm = std::string("im2col+matmul(") + (wt == tag::any ? "any" : wt == tag::BA16a64b ? "a64" : "a48") + ")";
      auto call = [&, xm, ym, bm, sm, wm] {
        im2col();
        mm.execute(st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}, {DNNL_ARG_SCRATCHPAD, sm}});
        st.wait();
      };
      vs.push_back({nm + " hot", false, call, {}});
      vs.push_back({nm + " cold", true, call, {}});
    }
  }
  std::vector<float> y3(y.size());
  ferry::cpu::ConvRows rows_conv(w.data(), b.data(), O, C, K, K, S, S, P, P);
  auto rows_call = [&] { rows_conv.run(x.data(), N, H, W, nullptr, y3.data(), true); };
  vs.push_back({"ConvRows hot", false, rows_call, {}});
  vs.push_back({"ConvRows cold", true, rows_call, {}});
  const int rounds = getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 21;
  for (auto& v : vs) v.fn();
  for (int r = 0; r < rounds; ++r)
    for (auto& v : vs) {
      if (v.cold) sink += flush();
      else v.fn();
      const double t0 = now();
      v.fn();
      v.t.push_back((now() - t0) * 1e3);
    }
  for (auto& v : vs) {
    std::sort(v.t.begin(), v.t.end());
    std::printf("  %-32s p50 %.3f ms  p25 %.3f  (%.0f GFLOP/s)\n", v.name.c_str(), v.t[v.t.size() / 2], v.t[v.t.size() / 4],
                gf / v.t[v.t.size() / 2] * 1e3);
  }
  if (!sum) {
    double md = 0, mx = 0;
    for (size_t i = 0; i < y.size(); ++i) md = std::max(md, (double)std::abs(y[i] - y3[i])), mx = std::max(mx, (double)std::abs(y[i]));
    std::printf("  max |conv - ConvRows| %.3g (max |y| %.3g)\n", md, mx);
  }
  if (!y2.empty()) {
    double md = 0;
    for (size_t i = 0; i < y.size(); ++i) md = std::max(md, (double)std::abs(y[i] - y2[i]));
    std::printf("  max |conv - matmul| %.3g (sum post-op: both accumulate over the rounds when SUM=1)\n", md);
  }
  return sink == 12345.f;
}
