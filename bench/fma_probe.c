// Peak f32 FMA rate of one core, to tell a slower core (a shared host: another VM on the sibling
// hyperthread, a lower clock) from a loaded machine when `ferry bench` figures move (issue 22), and
// the yardstick of the training step's fraction of peak (issue 37: bench/train_side_by_side.py runs
// one probe per thread at once and sums them).
// 12 independent FMA chains (AVX-512 where the compiler targets it, AVX2 + FMA otherwise: 12 of the
// 16 ymm registers, enough to cover 2 FMA pipes x 4-5 cycles of latency), no memory traffic; prints
// GFLOP/s per CPU-second (descheduled time excluded) and the on-core share, per burst.
//   gcc -O3 -march=native -o /tmp/fma_probe bench/fma_probe.c && /tmp/fma_probe 5
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#if defined(__AVX512F__)
typedef __m512 vec;
enum { LANES = 16 };
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
static float hsum(vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
enum { LANES = 8 };
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float hsum(vec v) { float f[8]; _mm256_storeu_ps(f, v); return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7]; }
#else
#error "fma_probe needs AVX-512F or AVX2+FMA: build with -march=native (or -mavx512f / -mavx2 -mfma)"
#endif
int main(int argc, char** argv) {
  int bursts = argc > 1 ? atoi(argv[1]) : 10;
  vec a[12], m = SET1(0.999999f), c = SET1(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = SET1((float)i);
  long iters = 320000000L / LANES;  // 7.7 GFLOP a burst at either width
  for (int b = 0; b < bursts; ++b) {
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    for (long k = 0; k < iters; ++k)
      _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) a[i] = FMA(a[i], m, c);
    double w = now(CLOCK_MONOTONIC) - w0, cp = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    double flop = (double)iters * 12 * LANES * 2;
    printf("burst %d: %.1f GFLOP/s per CPU-second, on a core %.0f%%, %.1f GFLOP/s wall\n", b,
           flop / cp * 1e-9, 100 * cp / w, flop / w * 1e-9);
  }
  float s = 0; for (int i = 0; i < 12; ++i) s += hsum(a[i]);
  return s == 12345.f;
}
