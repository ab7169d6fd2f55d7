// Winograd F(2x2, 3x3) on NHWC f32 (see winograd.h). Transforms (Lavin & Gray's matrices):
//   U = G g G^T      G   = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
//   V = B^T d B      B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   Y = A^T M A      A^T = [1 1 1 0; 0 1 -1 -1]
// with d a 4x4 input patch (stride 2 between tiles) and M[e] = V[e] x U[e] for the 16 elements e;
// F(4x4, 3x3) (plan.tile 4) the same with 6x6 patches (stride 4), 36 elements (matrices below).
// The transforms run along the channels (contiguous in NHWC), one row of pointers per patch element.
#include "backends/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <unordered_map>

#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/vec_math.h"
#include "common/env_switch.h"

namespace ferry::cpu {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

// V and M of one block together stay under this many bytes: measured on 14x14x256 batch 8, one
// thread, 196-tile blocks (6.3 MiB) ran as fast as 49 and faster than 392 or 16.
constexpr int64_t kBlockBytes = int64_t{8} << 20;

// v[e * estride + c] = (B^T d B)[e] for the 4x4 patch whose row i, column j, channel c is
// rows[i * 4 + j][c].
FERRY_VEC void input_tile(const float* const* rows, int64_t cin, float* v, int64_t estride) {
#pragma omp simd
  for (int64_t c = 0; c < cin; ++c) {
    float t[16];
    for (int j = 0; j < 4; ++j) {  // B^T d, one column j at a time
      const float d0 = rows[j][c], d1 = rows[4 + j][c], d2 = rows[8 + j][c], d3 = rows[12 + j][c];
      t[j] = d0 - d2;
      t[4 + j] = d1 + d2;
      t[8 + j] = d2 - d1;
      t[12 + j] = d1 - d3;
    }
    for (int i = 0; i < 4; ++i) {  // (B^T d) B, row i
      const float a0 = t[4 * i], a1 = t[4 * i + 1], a2 = t[4 * i + 2], a3 = t[4 * i + 3];
      v[(4 * i) * estride + c] = a0 - a2;
      v[(4 * i + 1) * estride + c] = a1 + a2;
      v[(4 * i + 2) * estride + c] = a2 - a1;
      v[(4 * i + 3) * estride + c] = a1 - a3;
    }
  }
}

// F(4x4, 3x3): the same for a 6x6 patch (rows[i * 6 + j]), 36 elements, with Lavin & Gray's
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
FERRY_VEC void input_tile6(const float* const* rows, int64_t cin, float* v, int64_t estride) {
#pragma omp simd
  for (int64_t c = 0; c < cin; ++c) {
    float t[36];
    #pragma GCC unroll 6
    for (int j = 0; j < 6; ++j) {  // B^T d, one column j at a time
      const float d0 = rows[j][c], d1 = rows[6 + j][c], d2 = rows[12 + j][c], d3 = rows[18 + j][c],
                  d4 = rows[24 + j][c], d5 = rows[30 + j][c];
      t[j] = 4.f * d0 - 5.f * d2 + d4;
      t[6 + j] = d3 + d4 - 4.f * (d1 + d2);
      t[12 + j] = 4.f * (d1 - d2) + d4 - d3;
      t[18 + j] = 2.f * (d3 - d1) + d4 - d2;
      t[24 + j] = 2.f * (d1 - d3) + d4 - d2;
      t[30 + j] = 4.f * d1 - 5.f * d3 + d5;
    }
    #pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {  // (B^T d) B, row i
      const float a0 = t[6 * i], a1 = t[6 * i + 1], a2 = t[6 * i + 2], a3 = t[6 * i + 3], a4 = t[6 * i + 4],
                  a5 = t[6 * i + 5];
      float* o = v + (6 * i) * estride + c;
      o[0] = 4.f * a0 - 5.f * a2 + a4;
      o[estride] = a3 + a4 - 4.f * (a1 + a2);
      o[2 * estride] = 4.f * (a1 - a2) + a4 - a3;
      o[3 * estride] = 2.f * (a3 - a1) + a4 - a2;
      o[4 * estride] = 2.f * (a1 - a3) + a4 - a2;
      o[5 * estride] = 4.f * a1 - 5.f * a3 + a5;
    }
  }
}

// out[k][c] = max(lo, (A^T M A)[k] + bias[c] + z[k][c]) for the 2x2 outputs k = i * 2 + j, with
// M[e][c] = m[e * estride + c].
FERRY_VEC void output_tile(const float* m, int64_t estride, int64_t cout, const float* bias, const float* const* z,
                           float* const* out, float lo) {
#pragma omp simd
  for (int64_t c = 0; c < cout; ++c) {
    float s[8];
    for (int j = 0; j < 4; ++j) {  // A^T M, one column j at a time
      const float m0 = m[j * estride + c], m1 = m[(4 + j) * estride + c], m2 = m[(8 + j) * estride + c],
                  m3 = m[(12 + j) * estride + c];
      s[j] = m0 + m1 + m2;
      s[4 + j] = m1 - m2 - m3;
    }
    for (int i = 0; i < 2; ++i) {  // (A^T M) A, row i
      const float a0 = s[4 * i], a1 = s[4 * i + 1], a2 = s[4 * i + 2], a3 = s[4 * i + 3];
      const float y0 = a0 + a1 + a2 + bias[c] + z[2 * i][c], y1 = a1 - a2 - a3 + bias[c] + z[2 * i + 1][c];
      out[2 * i][c] = y0 < lo ? lo : y0;  // NaN stays NaN
      out[2 * i + 1][c] = y1 < lo ? lo : y1;
    }
  }
}

// F(4x4, 3x3): the 4x4 outputs k = i * 4 + j of a 36-element M, A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0;
// 0 1 1 4 4 0; 0 1 -1 8 -8 1].
FERRY_VEC void output_tile6(const float* m, int64_t estride, int64_t cout, const float* bias, const float* const* z,
                            float* const* out, float lo) {
#pragma omp simd
  for (int64_t c = 0; c < cout; ++c) {
    float s[24];
    #pragma GCC unroll 6
    for (int j = 0; j < 6; ++j) {  // A^T M, one column j at a time
      const float m0 = m[j * estride + c], m1 = m[(6 + j) * estride + c], m2 = m[(12 + j) * estride + c],
                  m3 = m[(18 + j) * estride + c], m4 = m[(24 + j) * estride + c], m5 = m[(30 + j) * estride + c];
      const float p12 = m1 + m2, n12 = m1 - m2, p34 = m3 + m4, n34 = m3 - m4;
      s[j] = m0 + p12 + p34;
      s[6 + j] = n12 + 2.f * n34;
      s[12 + j] = p12 + 4.f * p34;
      s[18 + j] = n12 + 8.f * n34 + m5;
    }
    #pragma GCC unroll 6
    for (int i = 0; i < 4; ++i) {  // (A^T M) A, row i
      const float a0 = s[6 * i], a1 = s[6 * i + 1], a2 = s[6 * i + 2], a3 = s[6 * i + 3], a4 = s[6 * i + 4],
                  a5 = s[6 * i + 5];
      const float p12 = a1 + a2, n12 = a1 - a2, p34 = a3 + a4, n34 = a3 - a4, b = bias[c];
      const float y[4] = {a0 + p12 + p34, n12 + 2.f * n34, p12 + 4.f * p34, n12 + 8.f * n34 + a5};
      #pragma GCC unroll 6
      for (int k = 0; k < 4; ++k) {
        const float r = y[k] + b + z[4 * i + k][c];
        out[4 * i + k][c] = r < lo ? lo : r;  // NaN stays NaN
      }
    }
  }
}

// U = G g G^T of OIHW weights, as [a * a][cin][cout] for the tile `a` = 4 (F(2x2, 3x3):
// G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]) or 6 (F(4x4, 3x3): G = [1/4 0 0; -1/6 -1/6 -1/6;
// -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]), computed in double.
std::vector<float> transform_weights(const float* w, int64_t cout, int64_t cin, int a) {
  static const double g4[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5}, {0, 0, 1}};
  static const double g6[6][3] = {{1. / 4, 0, 0},           {-1. / 6, -1. / 6, -1. / 6}, {-1. / 6, 1. / 6, -1. / 6},
                                  {1. / 24, 1. / 12, 1. / 6}, {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
  const double(*G)[3] = a == 6 ? g6 : g4;
  std::vector<float> out(static_cast<size_t>(a * a * cin * cout));
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t i = 0; i < cin; ++i) {
      const float* g = w + (o * cin + i) * 9;
      double t[6][3];  // G g
      for (int r = 0; r < a; ++r)
        for (int j = 0; j < 3; ++j) t[r][j] = G[r][0] * g[j] + G[r][1] * g[3 + j] + G[r][2] * g[6 + j];
      for (int r = 0; r < a; ++r)  // (G g) G^T
        for (int k = 0; k < a; ++k)
          out[static_cast<size_t>(((r * a + k) * cin + i) * cout + o)] =
              static_cast<float>(t[r][0] * G[k][0] + t[r][1] * G[k][1] + t[r][2] * G[k][2]);
    }
  return out;
}

}  // namespace

WinogradConv3x3::WinogradConv3x3(const float* w, const float* bias, int64_t cout, int64_t cin)
    : cout_(cout), cin_(cin), w_(w), bias_(static_cast<size_t>(cout), 0.f) {
  if (bias) std::copy(bias, bias + cout, bias_.begin());
}

namespace {
std::atomic<int64_t> g_packings{0};
}  // namespace

int64_t WinogradConv3x3::packings() { return g_packings.load(); }

const memory* WinogradConv3x3::packed_weights(const memory::desc& want, int64_t n0) {
  for (auto& p : packed_)
    if (p.desc == want && p.n0 == n0) return &p.mem;
  ++g_packings;
  const int64_t e = want.dims()[0], n = want.dims()[2];
  // made per packing: plans are few, U is large
  std::vector<float> u = transform_weights(w_, cout_, cin_, e == 36 ? 6 : 4);
  memory user(memory::desc({e, cin_, n}, memory::data_type::f32, memory::dims{cin_ * cout_, cout_, 1}), dnnl_engine(),
              u.data() + n0);
  memory packed(want, dnnl_engine());
  dnnl::reorder(user, packed).execute(dnnl_stream(), user, packed);
  dnnl_stream().wait();
  packed_.push_back(Packed{want, n0, packed});
  return &packed_.back().mem;
}

// The tiles [begin, end) of range `i` of `threads`, and calls fn(first tile, count) for its blocks
// of at most `block` tiles, split evenly (100 tiles at a 64-tile limit run as 50 + 50).
template <typename F>
void for_each_block(int64_t tiles, int threads, int i, int64_t block, F fn) {
  const int64_t begin = tiles * i / threads, end = tiles * (i + 1) / threads, n = end - begin;
  if (n <= 0) return;
  const int64_t blocks = (n + block - 1) / block;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = begin + n * b / blocks, hi = begin + n * (b + 1) / blocks;
    fn(lo, hi - lo);
  }
}

// Output channels [n0, n0 + n) of slice `s` of `slices` (multiples of 16 when split).
void slice_range(int64_t cout, int slices, int s, int64_t* n0, int64_t* n) {
  const int64_t groups = slices > 1 ? cout / 16 : 1, unit = slices > 1 ? 16 : cout;
  *n0 = groups * s / slices * unit;
  *n = s + 1 == slices ? cout - *n0 : groups * (s + 1) / slices * unit - *n0;
}

int WinogradConv3x3::default_tile(int64_t cin, int64_t cout, int64_t n, int64_t h, int64_t w) {
  const char* e = env_value("FERRY_WINOGRAD_TILE");
  if (e && (std::string(e) == "2" || std::string(e) == "4")) return std::atoi(e);
  // F(4x4, 3x3) does up to 1.78x fewer multiplications than F(2x2, 3x3) (36 products per 16
  // outputs, not 16 per 4) but costs more per tile in the transforms, wastes more on partial tiles
  // (14x14: 16 tiles of 4x4 cover 256 pixels, 1.36x fewer products only), and its U is 2.25x larger.
  // Measured (`ferry` standalone probe, best of 3 x 0.25 s, F(2x2) time / F(4x4) time, load 4.5-5.5
  // on 2 cores), 1 thread: 1x56x56 64->64 1.98-2.26, 1x28x28 128->128 1.43-1.78, 2x28x28 1.85,
  // 1x12x16 384->128 1.38-1.72, 1x24x32 128->64 1.25-1.34; 2 threads: 1x56x56 1.58, 1x28x28 1.56,
  // 1x12x16 1.44-1.73. Not taken: where the tiles save less than 1.5x the products (1x14x14 256->256
  // 0.95-1.16 on 1 thread, 0.86-0.95 on 2; 2x14x14 64->64 0.76-0.82), on 512x512 channels (U 37.7
  // MB: 1x7x7 0.54, 8x7x7 1.00) and below 12x12 (not measured).
  const int64_t t2 = n * ((h + 1) / 2) * ((w + 1) / 2), t4 = n * ((h + 3) / 4) * ((w + 3) / 4);
  if (h < 12 || w < 12 || cin * cout > 256 * 256) return 2;
  if (t2 * 16 * 2 >= t4 * 36 * 3) return 4;
  // At 1 thread with 128+ tiles of 4x4 (a batch of 8 on 14x14) 1.33x fewer products already pay:
  // ResNet-50 b8's five layer3 3x3s (8x14x14 256->256, 1.36x) took 24.9-26.7 -> 22.6-24.0 ms per run
  // (`ferry profile -t 1 -b 8`, CPU ms, 4 interleaved rounds, load 4.8-5.3 on 2 cores; F(4x4) was
  // faster in every round). Not measured at 2 threads (there F(4x4) on 1x14x14 was 0.86-0.95x as fast,
  // above); FERRY_WINOGRAD_TILE4_BATCH=0 keeps F(2x2) for these.
  static const bool batch4 = [] {
    const char* e = env_value("FERRY_WINOGRAD_TILE4_BATCH");
    return !(e && std::string(e) == "0");
  }();
  return batch4 && omp_get_max_threads() == 1 && t4 >= 128 && t2 * 16 * 3 >= t4 * 36 * 4 ? 4 : 2;
}

Status WinogradConv3x3::make_plan(int64_t n, int64_t h, int64_t w, Plan* plan, int64_t block_tiles, int slices,
                                  int tile) {
  if (n < 1 || h < 1 || w < 1) return invalid_argument("winograd: empty input");
  std::lock_guard<std::mutex> lock(mu_);
  if (tile == 0) tile = default_tile(cin_, cout_, n, h, w);
  if (tile != 2 && tile != 4) return invalid_argument("winograd: output tile " + std::to_string(tile) + " (2 or 4)");
  plan->n = n;
  plan->h = h;
  plan->w = w;
  plan->tile = tile;
  plan->elems = (tile + 2) * (tile + 2);
  const int64_t E = plan->elems;
  plan->tiles_h = (h + tile - 1) / tile;
  plan->tiles_w = (w + tile - 1) / tile;
  plan->tiles = n * plan->tiles_h * plan->tiles_w;
  plan->block = block_tiles > 0 ? block_tiles : std::max<int64_t>(16, kBlockBytes / (E * 4 * (cin_ + cout_)));
  // Threads share the tiles, each with its own matmuls (made single-threaded below, as they run
  // inside one parallel region): one fork-join per run, where a transform / matmul / transform
  // sequence of oneDNN-threaded steps took three per block (measured far slower on a loaded machine).
  // Fewer than 64 tiles a thread: the threads split the output channels instead (each streams its
  // part of U once and keeps every row of the products).
  const int threads = std::max(1, omp_get_max_threads());
  if (slices <= 0) slices = threads > 1 && plan->tiles < 64 * threads && cout_ % 16 == 0 && cout_ >= 64 * threads ? threads : 1;
  if (slices > 1 && (cout_ % 16 != 0 || cout_ / 16 < slices))
    return invalid_argument("winograd: " + std::to_string(cout_) + " output channels in " + std::to_string(slices) + " slices");
  plan->slices = slices;
  const int64_t ranges = std::max<int64_t>(1, std::min<int64_t>(threads / slices, plan->tiles / 8));
  plan->threads = static_cast<int>(ranges) * slices;
  std::vector<std::pair<int64_t, int>> sizes;  // (m, slice)
  for (int i = 0; i < plan->threads; ++i)
    for_each_block(plan->tiles, static_cast<int>(ranges), i / slices, plan->block, [&](int64_t, int64_t m) {
      const std::pair<int64_t, int> key(m, i % slices);
      if (std::find(sizes.begin(), sizes.end(), key) == sizes.end()) sizes.push_back(key);
    });
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);  // the matmuls are planned for one thread each
  try {
    plan->gemms.clear();
    for (const auto& [m, slice] : sizes) {
      Plan::Gemm g;
      g.m = m;
      slice_range(cout_, slices, slice, &g.n0, &g.n);
      const memory::desc src({E, m, cin_}, memory::data_type::f32, tag::abc);
      const memory::desc wd({E, cin_, g.n}, memory::data_type::f32, tag::any);
      const memory::desc dst({E, m, g.n}, memory::data_type::f32, tag::abc);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wd, dst), concurrent_attr(), dnnl_engine());
      g.prim = dnnl::matmul(pd);
      g.weights = packed_weights(pd.weights_desc(), g.n0);
      plan->gemms.push_back(std::move(g));
      plan->scratchpad_bytes = std::max(plan->scratchpad_bytes, pd.scratchpad_desc().get_size());
    }
  } catch (const dnnl::error& e) {
    omp_set_num_threads(saved_threads);
    return internal_error(std::string("winograd matmul: ") + e.what());
  }
  omp_set_num_threads(saved_threads);
  return Status::ok();
}

Status WinogradConv3x3::run(const Plan& p, const float* x, const float* z, float* y, bool relu) const {
  const int64_t cin = cin_, cout = cout_;
  const float lo = relu ? 0.f : -std::numeric_limits<float>::infinity();
  const int64_t per_image = p.tiles_h * p.tiles_w, E = p.elems;
  const int ts = p.tile, a = p.tile + 2;  // output tile side, input patch side
  const auto tile_origin = [&](int64_t t, int64_t* img, int64_t* oy, int64_t* ox) {
    *img = t / per_image;
    const int64_t r = t % per_image;
    *oy = ts * (r / p.tiles_w);
    *ox = ts * (r % p.tiles_w);
  };
  std::atomic<bool> failed{false};
  std::string error;
  // Inside another parallel region (or with fewer threads than planned), one thread runs every range.
#pragma omp parallel for num_threads(p.threads) schedule(static)
  for (int i = 0; i < p.threads; ++i) {
    // This thread's V (then cin zeros: the padding's source) and M (then cout zeros, the residual
    // when there is none, and a cout sink for the missing pixels of partial tiles).
    float* v = static_cast<float*>(scratch_data(static_cast<size_t>(E * p.block * cin + cin) * sizeof(float), ScratchSlot::kSrc));
    float* zeros = v + E * p.block * cin;
    std::fill(zeros, zeros + cin, 0.f);
    float* m = static_cast<float*>(scratch_data(static_cast<size_t>(E * p.block * cout + 2 * cout) * sizeof(float), ScratchSlot::kDst));
    float* zero_out = m + E * p.block * cout;
    float* sink = zero_out + cout;
    std::fill(zero_out, zero_out + cout, 0.f);
    void* pad = p.scratchpad_bytes ? scratch_data(p.scratchpad_bytes, ScratchSlot::kScratchpad) : nullptr;
    const int slice = i % p.slices;
    int64_t n0, nn;
    slice_range(cout, p.slices, slice, &n0, &nn);
    for_each_block(p.tiles, p.threads / p.slices, i / p.slices, p.block, [&](int64_t t0, int64_t count) {
      if (failed.load(std::memory_order_relaxed)) return;
      const float* rows[36];
      for (int64_t t = 0; t < count; ++t) {
        int64_t img, oy, ox;
        tile_origin(t0 + t, &img, &oy, &ox);
        for (int r = 0; r < a; ++r)
          for (int c = 0; c < a; ++c) {
            const int64_t iy = oy - 1 + r, ix = ox - 1 + c;
            rows[r * a + c] = iy < 0 || iy >= p.h || ix < 0 || ix >= p.w ? zeros : x + ((img * p.h + iy) * p.w + ix) * cin;
          }
        if (a == 6)
          input_tile6(rows, cin, v + t * cin, count * cin);
        else
          input_tile(rows, cin, v + t * cin, count * cin);
      }
      const Plan::Gemm* g = nullptr;
      for (const auto& cand : p.gemms)
        if (cand.m == count && cand.n0 == n0) g = &cand;
      try {
        if (!g) throw dnnl::error(dnnl_runtime_error, "no matmul planned for this block");
        const memory sm({{E, count, cin}, memory::data_type::f32, tag::abc}, dnnl_engine(), v);
        const memory dm({{E, count, nn}, memory::data_type::f32, tag::abc}, dnnl_engine(), m);
        std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, *g->weights}, {DNNL_ARG_DST, dm}};
        if (pad)
          args[DNNL_ARG_SCRATCHPAD] =
              memory({{static_cast<int64_t>(p.scratchpad_bytes)}, memory::data_type::u8, tag::a}, dnnl_engine(), pad);
        dnnl::stream& s = dnnl_stream();
        g->prim.execute(s, args);
        s.wait();
      } catch (const dnnl::error& e) {
#pragma omp critical(ferry_winograd_error)
        error = std::string("winograd matmul: ") + e.what();
        failed.store(true);
        return;
      }
      float* out[16];
      const float* zr[16];
      for (int64_t t = 0; t < count; ++t) {
        int64_t img, oy, ox;
        tile_origin(t0 + t, &img, &oy, &ox);
        for (int r = 0; r < ts; ++r)
          for (int c = 0; c < ts; ++c) {
            const int64_t yy = oy + r, xx = ox + c;
            const bool in = yy < p.h && xx < p.w;
            const int64_t off = ((img * p.h + yy) * p.w + xx) * cout;
            out[r * ts + c] = in ? y + off + n0 : sink;
            zr[r * ts + c] = in && z ? z + off + n0 : zero_out;
          }
        if (a == 6)
          output_tile6(m + t * nn, count * nn, nn, bias_.data() + n0, zr, out, lo);
        else
          output_tile(m + t * nn, count * nn, nn, bias_.data() + n0, zr, out, lo);
      }
    });
  }
  if (failed.load()) return internal_error(error);
  return Status::ok();
}

}  // namespace ferry::cpu
