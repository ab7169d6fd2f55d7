// Peak f32 FMA rate of one core, to tell a slower core (a shared host: another VM on the sibling
// hyperthread, a lower clock) from a loaded machine when `ferry bench` figures move (issue 22).
// 12 independent AVX-512 FMA chains, no memory traffic; prints GFLOP/s per CPU-second
// (descheduled time excluded) and the on-core share, per burst of 7.7 GFLOP.
//   gcc -O3 -mavx512f -o /tmp/fma_probe bench/fma_probe.c && /tmp/fma_probe 5
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
  int bursts = argc > 1 ? atoi(argv[1]) : 10;
  __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps((float)i);
  for (int b = 0; b < bursts; ++b) {
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    long iters = 20000000;
    for (long k = 0; k < iters; ++k)
      _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
    double w = now(CLOCK_MONOTONIC) - w0, cp = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    double flop = (double)iters * 12 * 16 * 2;
    printf("burst %d: %.1f GFLOP/s per CPU-second, on a core %.0f%%\n", b, flop / cp * 1e-9, 100 * cp / w);
  }
  float s = 0; for (int i = 0; i < 12; ++i) s += _mm512_reduce_add_ps(a[i]);
  return s == 12345.f;
}
