// cpu::InvertedResidual (src/backends/cpu/inverted_residual.h: expand 1x1 + ReLU6 -> depthwise 3x3 +
// ReLU6 -> project 1x1 (+ residual) one output row at a time) against the same block as three oneDNN
// NHWC convolutions (what ferry runs without it), on MobileNetV2's 11 block shapes at batch NB (1).
// Interleaved, one call each per round, p50 of ROUNDS (31) rounds; CPU time of the calling thread
// (WALL=1: wall time, for several threads). Prints the max abs difference of the two outputs.
// Found (1 thread, load 3.9-5.8 on the 2 cores, p50 ms oneDNN x3 -> InvertedResidual): with hot
// caches (the default: each block's tensors stay in L2 / the 32 MB L3 between calls) about equal on
// the wide blocks, 112x112 s2 0.53-0.56 -> 0.44-0.58, 56x56 0.42-0.49 -> 0.45-0.47, 28x28
// 0.16 -> 0.17, and slower on 14x14 and 7x7 (0.71-0.85x: their per-row GEMMs re-read 0.1-0.6 MB of
// weights for 7-14 pixels); with FLUSH=48 (the caches cold, as other work leaves them) 112x112 s2
// 1.22 -> 0.64 ms, 56x56 s1 0.87 -> 0.51, 56x56 s2 0.45 -> 0.30, 28x28 0.27 -> 0.19 and 0.19 ->
// 0.14, 14x14 1.18x to 0.88x, 7x7 0.74-0.77x. So inverted_residual_fusion takes images >= 28 wide.
// Build: g++ -O2 -std=c++17 -fopenmp -Isrc bench/inverted_residual_probe.cpp src/backends/cpu/inverted_residual.cpp -ldnnl -o /tmp/ir_probe
// Run:   OMP_NUM_THREADS=1 /tmp/ir_probe
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/inverted_residual.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

static double now() {
  timespec ts;
  static const bool wall = getenv("WALL") != nullptr;
  clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void fill(float* p, size_t n, float scale, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t i = 0; i < n; ++i) p[i] = u(g) * scale;
}

// FLUSH=MB: that many MB of other traffic before each call (a model's other layers between two runs
// of a block), default 0.
static std::vector<float> junk;
static float flush() {
  static const size_t mb = getenv("FLUSH") ? atoi(getenv("FLUSH")) : 0;
  if (!mb) return 0;
  if (junk.empty()) junk.assign(mb << 18, 1.f);
  float s = 0;
  for (size_t i = 0; i < junk.size(); i += 16) { junk[i] += 1.f; s += junk[i]; }
  return s;
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  struct S {
    int cin, cmid, cout, h, s, res;
  };
  const std::vector<S> ss = {{16, 96, 24, 112, 2, 0},  {24, 144, 24, 56, 1, 1},  {24, 144, 32, 56, 2, 0},
                             {32, 192, 32, 28, 1, 1},  {32, 192, 64, 28, 2, 0},  {64, 384, 64, 14, 1, 1},
                             {64, 384, 96, 14, 1, 0},  {96, 576, 96, 14, 1, 1},  {96, 576, 160, 14, 2, 0},
                             {160, 960, 160, 7, 1, 1}, {160, 960, 320, 7, 1, 0}};
  const int N = getenv("NB") ? atoi(getenv("NB")) : 1;
  const int rounds = getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 31;
  const int threads = omp_get_max_threads();
  double sum_d = 0, sum_o = 0;
  const int only = getenv("ONLY") ? atoi(getenv("ONLY")) : -1;  // one shape (its index) only
  for (size_t si = 0; si < ss.size(); ++si) {
    const S& s = ss[si];
    if (only >= 0 && static_cast<int>(si) != only) continue;
    const int H = s.h, Ho = (H + 2 - 3) / s.s + 1;
    std::vector<float> x(size_t(N) * H * H * s.cin), we(size_t(s.cmid) * s.cin), be(s.cmid), wd(size_t(s.cmid) * 9),
        bd(s.cmid), wp(size_t(s.cout) * s.cmid), bp(s.cout), z(size_t(N) * Ho * Ho * s.cout);
    fill(x.data(), x.size(), 1.f, 1);
    fill(we.data(), we.size(), 0.3f, 2);
    fill(be.data(), be.size(), 0.3f, 3);
    fill(wd.data(), wd.size(), 0.5f, 4);
    fill(bd.data(), bd.size(), 0.3f, 5);
    fill(wp.data(), wp.size(), 0.2f, 6);
    fill(bp.data(), bp.size(), 0.3f, 7);
    fill(z.data(), z.size(), 1.f, 8);
    // oneDNN: three NHWC convolutions, ReLU6 post-ops, the residual as a sum post-op
    memory::desc xd({N, s.cin, H, H}, dt::f32, tag::nhwc), ed({N, s.cmid, H, H}, dt::f32, tag::nhwc),
        dd({N, s.cmid, Ho, Ho}, dt::f32, tag::nhwc), yd({N, s.cout, Ho, Ho}, dt::f32, tag::nhwc);
    post_ops relu6;
    relu6.append_eltwise(1, algorithm::eltwise_clip, 0, 6);
    primitive_attr a6;
    a6.set_post_ops(relu6);
    post_ops sum;
    if (s.res) sum.append_sum(1.f);
    primitive_attr asum;
    asum.set_post_ops(sum);
    auto pd1 = convolution_forward::primitive_desc(
        {prop_kind::forward_inference, algorithm::convolution_direct, xd,
         memory::desc({s.cmid, s.cin, 1, 1}, dt::f32, tag::any), memory::desc({s.cmid}, dt::f32, tag::x), ed, {1, 1},
         {0, 0}, {0, 0}},
        a6, eng);
    auto pd2 = convolution_forward::primitive_desc(
        {prop_kind::forward_inference, algorithm::convolution_direct, ed,
         memory::desc({s.cmid, 1, 1, 3, 3}, dt::f32, tag::any), memory::desc({s.cmid}, dt::f32, tag::x), dd,
         {s.s, s.s}, {1, 1}, {1, 1}},
        a6, eng);
    auto pd3 = convolution_forward::primitive_desc(
        {prop_kind::forward_inference, algorithm::convolution_direct, dd,
         memory::desc({s.cout, s.cmid, 1, 1}, dt::f32, tag::any), memory::desc({s.cout}, dt::f32, tag::x), yd, {1, 1},
         {0, 0}, {0, 0}},
        asum, eng);
    auto reorder_w = [&](const memory::desc& want, memory::desc user, float* p) {
      memory u(user, eng, p), m(want, eng);
      reorder(u, m).execute(st, u, m);
      st.wait();
      return m;
    };
    memory mw1 = reorder_w(pd1.weights_desc(), memory::desc({s.cmid, s.cin, 1, 1}, dt::f32, tag::oihw), we.data());
    memory mw2 = reorder_w(pd2.weights_desc(), memory::desc({s.cmid, 1, 1, 3, 3}, dt::f32, tag::goihw), wd.data());
    memory mw3 = reorder_w(pd3.weights_desc(), memory::desc({s.cout, s.cmid, 1, 1}, dt::f32, tag::oihw), wp.data());
    memory mx(xd, eng, x.data()), me(ed, eng), md(dd, eng), my(yd, eng);
    memory mb1(memory::desc({s.cmid}, dt::f32, tag::x), eng, be.data()), mb2(memory::desc({s.cmid}, dt::f32, tag::x), eng, bd.data()),
        mb3(memory::desc({s.cout}, dt::f32, tag::x), eng, bp.data());
    memory sp1(pd1.scratchpad_desc(), eng), sp2(pd2.scratchpad_desc(), eng), sp3(pd3.scratchpad_desc(), eng);
    convolution_forward c1(pd1), c2(pd2), c3(pd3);
    float* yp = static_cast<float*>(my.get_data_handle());
    auto dnnl_run = [&] {
      if (s.res) std::copy(z.begin(), z.end(), yp);
      c1.execute(st, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw1}, {DNNL_ARG_BIAS, mb1}, {DNNL_ARG_DST, me}, {DNNL_ARG_SCRATCHPAD, sp1}});
      c2.execute(st, {{DNNL_ARG_SRC, me}, {DNNL_ARG_WEIGHTS, mw2}, {DNNL_ARG_BIAS, mb2}, {DNNL_ARG_DST, md}, {DNNL_ARG_SCRATCHPAD, sp2}});
      c3.execute(st, {{DNNL_ARG_SRC, md}, {DNNL_ARG_WEIGHTS, mw3}, {DNNL_ARG_BIAS, mb3}, {DNNL_ARG_DST, my}, {DNNL_ARG_SCRATCHPAD, sp3}});
      st.wait();
    };
    const float inf = INFINITY;
    ferry::cpu::InvertedResidual ir(we.data(), be.data(), s.cin, s.cmid, {0.f, 6.f}, wd.data(), bd.data(), s.s,
                                    {0.f, 6.f}, wp.data(), bp.data(), s.cout, {-inf, inf});
    std::vector<float> y2(z.size());
    auto own_run = [&] {
      if (s.res) std::copy(z.begin(), z.end(), y2.begin());  // in place, as the memory plan may give it
      ir.run(x.data(), N, H, H, s.res ? y2.data() : nullptr, y2.data(), threads);
    };
    dnnl_run();
    own_run();
    double maxd = 0, maxy = 0;
    for (size_t i = 0; i < y2.size(); ++i) {
      maxd = std::max(maxd, double(std::fabs(y2[i] - yp[i])));
      maxy = std::max(maxy, double(std::fabs(yp[i])));
    }
    std::vector<double> td, to;
    for (int r = 0; r < rounds; ++r) {
      flush();
      const double t0 = now();
      dnnl_run();
      const double t1 = now();
      flush();
      const double t2 = now();
      own_run();
      const double t3 = now();
      td.push_back(t1 - t0);
      to.push_back(t3 - t2);
    }
    std::sort(td.begin(), td.end());
    std::sort(to.begin(), to.end());
    const double pd = td[td.size() / 2] * 1e3, po = to[to.size() / 2] * 1e3;
    sum_d += pd;
    sum_o += po;
    std::printf("%3d->%4d->%4d %3dx%-3d s%d res%d: oneDNN x3 %.3f ms, InvertedResidual %.3f ms (%.2fx), max |diff| %.2e (max |y| %.2f)\n",
                s.cin, s.cmid, s.cout, H, H, s.s, s.res, pd, po, pd / po, maxd, maxy);
  }
  std::printf("sum: oneDNN %.3f ms, InvertedResidual %.3f ms\n", sum_d, sum_o);
}
