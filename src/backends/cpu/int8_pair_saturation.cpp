// The no-VNNI pair saturation of oneDNN's u8 x s8 products: the weight split and the scan of the
// unsplit convolution's repair (int8_pair_saturation.h).
#include "backends/cpu/int8_pair_saturation.h"

#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_parallel.h"

namespace ferry::cpu {
namespace {

#if defined(__x86_64__)
// The pairs g (bytes 2g, 2g + 1) of a[0, bytes) whose sum is 256 or more, bytes a multiple of 32, each
// passed to `hit`; false as soon as `hit` returns false. The source is read in 128-byte steps whose pairs
// are all small (the common case: ~1% of a Relu's output values are >= 128) with one test.
// 0xFFFF per pair (bytes 2g, 2g + 1 of the 32 at a) whose sum is 256 or more (a0 + a1 <= 510: maddubs by ones is exact).
__attribute__((target("avx2"), always_inline)) inline __m256i large_mask(const uint8_t* a) {
  return _mm256_cmpgt_epi16(_mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)), _mm256_set1_epi8(1)),
                            _mm256_set1_epi16(255));
}

// The large pairs of large_mask(m) at byte i, each passed to `hit`; false as soon as `hit` returns false.
template <typename Hit>
__attribute__((target("avx2"), always_inline)) inline bool report(int64_t i, __m256i m, Hit& hit) {
  auto mask = static_cast<uint32_t>(_mm256_movemask_epi8(m));  // 2 bits per pair
  while (mask != 0) {
    const int bit = __builtin_ctz(mask);
    if (!hit((i + bit) / 2)) return false;
    mask &= ~(3u << bit);
  }
  return true;
}

// The pairs g (bytes 2g, 2g + 1) of a[0, bytes) whose sum is 256 or more, bytes a multiple of 32, each
// passed to `hit`; false as soon as `hit` returns false. The source is read in 128-byte steps whose pairs
// are all small (the common case: ~1% of a Relu's output values are >= 128) with one test.
template <typename Hit>
__attribute__((target("avx2"))) bool large_pairs_avx2(const uint8_t* a, int64_t bytes, Hit& hit) {
  int64_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i m0 = large_mask(a + i), m1 = large_mask(a + i + 32), m2 = large_mask(a + i + 64), m3 = large_mask(a + i + 96);
    const __m256i any = _mm256_or_si256(_mm256_or_si256(m0, m1), _mm256_or_si256(m2, m3));
    if (_mm256_testz_si256(any, any)) continue;
    if (!report(i, m0, hit) || !report(i + 32, m1, hit) || !report(i + 64, m2, hit) || !report(i + 96, m3, hit)) return false;
  }
  for (; i < bytes; i += 32)
    if (!report(i, large_mask(a + i), hit)) return false;
  return true;
}
#endif

// Every pair g (bytes 2g, 2g + 1 of a[0, bytes), bytes even) whose sum is 256 or more (the others cannot
// saturate: 255 * 128 fits in int16), in order, passed to `hit`; false as soon as `hit` returns false.
template <typename Hit>
bool large_pairs(const uint8_t* a, int64_t bytes, Hit& hit) {
  int64_t c = 0;
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    c = bytes / 32 * 32;
    if (!large_pairs_avx2(a, c, hit)) return false;
  }
#endif
  for (; c + 1 < bytes; c += 2)
    if (a[c] + a[c + 1] >= 256 && !hit(c / 2)) return false;
  return true;
}

}  // namespace

bool int8_pairs_saturate() {
  static const bool v = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    // the VNNI bits of dnnl_cpu_isa_avx512_core_vnni (0x67, in bf16 and amx too) and dnnl_cpu_isa_avx2_vnni (0x407)
    return (isa & 0x40u) == 0 && (isa & 0x400u) == 0;
  }();
  return v;
}

bool needs_split(const Tensor& w) {
  if (!int8_pairs_saturate()) return false;
  const int8_t* v = w.data<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i)
    if (v[i] > 64 || v[i] < -64) return true;
  return false;
}

Tensor split_weights(const Tensor& w, int64_t outer, std::vector<int64_t> dims) {
  const int64_t block = w.numel() / outer;
  Tensor s = Tensor::allocate(DType::kI8, std::move(dims));
  const int8_t* src = w.data<int8_t>();
  int8_t* d = s.mutable_data<int8_t>();
  for (int64_t o = 0; o < outer; ++o, src += block, d += 2 * block)
    for (int64_t i = 0; i < block; ++i) {
      const int w1 = src[i] >> 1;  // arithmetic shift: floor(w / 2), in [-64, 63]
      d[i] = static_cast<int8_t>(w1);
      d[block + i] = static_cast<int8_t>(src[i] - w1);  // in [-64, 64]
    }
  return s;
}

void copy_blocks(const uint8_t* x, int64_t blocks, int64_t block, int copies, bool flip, uint8_t* d) {
  for (int64_t b = 0; b < blocks; ++b, x += block)
    for (int c = 0; c < copies; ++c, d += block) {
      if (!flip) {
        std::memcpy(d, x, static_cast<size_t>(block));
        continue;
      }
      for (int64_t i = 0; i < block; ++i) d[i] = static_cast<uint8_t>(x[i] ^ 0x80u);
    }
}

bool SaturatingPairs::init(const Tensor& wt) {
  const int64_t M = wt.dim(0), C = wt.dim(1), KH = wt.dim(2), KW = wt.dim(3), J = C / 2;
  const int8_t* w = wt.data<int8_t>();
  std::vector<std::vector<Viol>> v(static_cast<size_t>(KH * KW * J));
  bool any = false;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < J; ++j)
      for (int64_t t = 0; t < KH * KW; ++t) {
        const int w0 = w[(m * C + 2 * j) * KH * KW + t], w1 = w[(m * C + 2 * j + 1) * KH * KW + t];
        if ((w0 > 0 && w1 > 0 && w0 + w1 > 128) || (w0 < 0 && w1 < 0 && w0 + w1 < -128)) {
          v[static_cast<size_t>(t * J + j)].push_back({static_cast<int32_t>(m), static_cast<int16_t>(w0), static_cast<int16_t>(w1)});
          any = true;
        }
      }
  if (!any) return false;  // no pair can saturate: exact unsplit
  // Each list by |w0 + w1|, largest first, and per pair j the largest over its taps: a0 w0 + a1 w1 lies within
  // +-max(a0, a1) |w0 + w1| (w0, w1 of one sign), so the scan stops where that bound fits in int16.
  for (auto& list : v)
    std::stable_sort(list.begin(), list.end(), [](const Viol& a, const Viol& b) { return std::abs(a.w0 + a.w1) > std::abs(b.w0 + b.w1); });
  fixup_ = std::move(v);
  pair_max_.assign(static_cast<size_t>(J), 0);
  for (int64_t j = 0; j < J; ++j)
    for (int64_t t = 0; t < KH * KW; ++t) {
      const auto& list = fixup_[static_cast<size_t>(t * J + j)];
      if (!list.empty()) pair_max_[j] = std::max(pair_max_[j], std::abs(list.front().w0 + list.front().w1));
    }
  kh_ = KH;
  kw_ = KW;
  return true;
}

bool SaturatingPairs::find(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims,
                           const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& dil,
                           const std::array<int64_t, 2>& pad, const uint8_t* x, int64_t limit, std::vector<int64_t>* out) const {
  const int64_t N = in_dims[0], H = in_dims[1], W = in_dims[2], C = in_dims[3];
  const int64_t OH = out_dims[1], OW = out_dims[2], M = out_dims[3], KH = kh_, KW = kw_, J = C / 2;
  if (C % 2 != 0) return false;  // (not a case of the repair's: C % 4 == 0 there) the split
  // One pass over the whole source: C is even, so no pair straddles two pixels and pair g of the
  // tensor is pair g % J of pixel g / J. Threads take 128-byte blocks, each listing into its own vector.
  const int64_t bytes = N * H * W * C;
  std::mutex mu;
  std::atomic<bool> stopped{false};
  parallel_ranges((bytes + 127) / 128, 128, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> mine;
    const int64_t first = b0 * 128, last = std::min(bytes, b1 * 128);
    const auto hit = [&](int64_t p) {
      const int64_t g = first / 2 + p, pix = g / J, j = g % J;
      const int a0 = x[2 * g], a1 = x[2 * g + 1], amax = std::max(a0, a1);
      if (amax * pair_max_[static_cast<size_t>(j)] <= 32767) return true;  // no weight pair of j saturates on these
      const int64_t iw = pix % W, ih = pix / W % H, n = pix / W / H;
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t th = ih + pad[0] - kh * dil[0];  // oh * stride
        if (th < 0 || th % stride[0] != 0 || th / stride[0] >= OH) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t tw = iw + pad[1] - kw * dil[1];
          if (tw < 0 || tw % stride[1] != 0 || tw / stride[1] >= OW) continue;
          const int64_t base = ((n * OH + th / stride[0]) * OW + tw / stride[1]) * M;
          for (const Viol& v : fixup_[static_cast<size_t>((kh * KW + kw) * J + j)]) {
            if (amax * std::abs(v.w0 + v.w1) <= 32767) break;  // nor any after it
            const int s = a0 * v.w0 + a1 * v.w1;
            if (s > 32767 || s < -32768) mine.push_back(base + v.m);
          }
        }
      }
      return static_cast<int64_t>(mine.size()) <= 2 * limit;
    };
    const bool ok = first < last && !stopped.load(std::memory_order_relaxed) ? large_pairs(x + first, last - first, hit) : true;
    std::lock_guard<std::mutex> lock(mu);
    if (!ok) stopped = true;
    out->insert(out->end(), mine.begin(), mine.end());
  });
  if (stopped) return false;
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return static_cast<int64_t>(out->size()) <= limit;
}

}  // namespace ferry::cpu
