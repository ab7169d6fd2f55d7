// The no-VNNI pair saturation of oneDNN's u8 x s8 products: the weight split and the scan of the
// unsplit convolution's repair (int8_pair_saturation.h).
#include "backends/cpu/int8_pair_saturation.h"

#include <dnnl.hpp>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) int64_t large_pairs_avx2(const uint8_t* a, int64_t bytes, int32_t* js) {
  const __m256i ones = _mm256_set1_epi8(1), lim = _mm256_set1_epi16(255);
  int64_t n = 0;
  for (int64_t i = 0; i < bytes; i += 32) {
    const __m256i s = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)), ones);  // a0 + a1 <= 510
    auto mask = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpgt_epi16(s, lim)));  // 2 bits per pair
    while (mask != 0) {
      const int bit = __builtin_ctz(mask);
      js[n++] = static_cast<int32_t>((i + bit) / 2);
      mask &= ~(3u << bit);
    }
  }
  return n;
}
#endif

// The pairs j (channels 2j, 2j + 1) of the C bytes at `a` whose sum is 256 or more (the others cannot
// saturate: 255 * 128 fits in int16), into js; their count.
int64_t large_pairs(const uint8_t* a, int64_t C, int32_t* js) {
  int64_t c = 0, n = 0;
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    n = large_pairs_avx2(a, C / 32 * 32, js);
    c = C / 32 * 32;
  }
#endif
  for (; c + 1 < C; c += 2)
    if (a[c] + a[c + 1] >= 256) js[n++] = static_cast<int32_t>(c / 2);
  return n;
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
  fixup_ = std::move(v);
  fix_pair_.assign(static_cast<size_t>(J), 0);
  for (int64_t j = 0; j < J; ++j)
    for (int64_t t = 0; t < KH * KW; ++t) fix_pair_[j] |= !fixup_[static_cast<size_t>(t * J + j)].empty();
  kh_ = KH;
  kw_ = KW;
  return true;
}

bool SaturatingPairs::find(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims,
                           const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& dil,
                           const std::array<int64_t, 2>& pad, const uint8_t* x, int64_t limit, std::vector<int64_t>* out) const {
  const int64_t N = in_dims[0], H = in_dims[1], W = in_dims[2], C = in_dims[3];
  const int64_t OH = out_dims[1], OW = out_dims[2], M = out_dims[3], KH = kh_, KW = kw_, J = C / 2;
  std::vector<int32_t> js(static_cast<size_t>(J));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ih = 0; ih < H; ++ih)
      for (int64_t iw = 0; iw < W; ++iw) {
        const uint8_t* a = x + ((n * H + ih) * W + iw) * C;
        const int64_t large = large_pairs(a, C, js.data());
        for (int64_t k = 0; k < large; ++k) {
          const int64_t j = js[k];
          if (!fix_pair_[j]) continue;
          const int a0 = a[2 * j], a1 = a[2 * j + 1];
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t th = ih + pad[0] - kh * dil[0];  // oh * stride
            if (th < 0 || th % stride[0] != 0 || th / stride[0] >= OH) continue;
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t tw = iw + pad[1] - kw * dil[1];
              if (tw < 0 || tw % stride[1] != 0 || tw / stride[1] >= OW) continue;
              const int64_t base = ((n * OH + th / stride[0]) * OW + tw / stride[1]) * M;
              for (const Viol& v : fixup_[static_cast<size_t>((kh * KW + kw) * J + j)]) {
                const int s = a0 * v.w0 + a1 * v.w1;
                if (s > 32767 || s < -32768) out->push_back(base + v.m);
              }
            }
          }
        }
        if (static_cast<int64_t>(out->size()) > 2 * limit) return false;
      }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return static_cast<int64_t>(out->size()) <= limit;
}

}  // namespace ferry::cpu
