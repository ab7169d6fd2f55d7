// Memory bandwidth of this process (a STREAM-style triad a = b + s * c over arrays far larger than
// the last-level cache), to tell a host whose memory bandwidth other tenants share (it falls when
// they stream) from a slower engine when 2-thread `ferry bench` figures move (issue 22). Run one
// copy, then two at once: two copies each near the one-copy figure mean the bandwidth scales to
// both cores; each near half means the two cores share what one gets.
// Prints GB/s (bytes read and written per wall second) per burst.
//   gcc -O2 -o /tmp/bw_probe bench/bw_probe.c && /tmp/bw_probe 5
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
  int bursts = argc > 1 ? atoi(argv[1]) : 5;
  const size_t n = (size_t)32 << 20;  // 32M floats: 128 MiB an array, 384 MiB in all
  float* a = malloc(n * sizeof(float));
  float* b = malloc(n * sizeof(float));
  float* c = malloc(n * sizeof(float));
  if (!a || !b || !c) return 1;
  for (size_t i = 0; i < n; ++i) { a[i] = 0; b[i] = (float)(i & 1023); c[i] = 1.0f; }
  const float s = 0.5f;
  for (int r = 0; r < bursts; ++r) {
    double t0 = now();
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    double w = now() - t0;
    printf("burst %d: %.1f GB/s\n", r, 3.0 * n * sizeof(float) / w * 1e-9);
  }
  double sum = 0;
  for (size_t i = 0; i < n; i += 4096) sum += a[i];
  free(a); free(b); free(c);
  return sum == 12345.0;
}
