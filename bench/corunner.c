// Co-runners for bench/corunner_side_by_side.py: one process that takes a core away from a benchmark in
// a chosen way, until it is killed (or for SECONDS when given).
//
//   gcc -O2 -o /tmp/corunner bench/corunner.c && /tmp/corunner KIND [SECONDS]
//
// KIND:
//   busy   a plain busy loop (never sleeps, never enters the kernel)
//   membw  a triad over three 64 MiB arrays (memory bandwidth, and the last-level cache)
//   wakeup sleeps 50 us and wakes, over and over (about 20,000 wake-ups a second, little CPU)
//   yield  sched_yield() in a loop (always runnable, enters the kernel every few hundred ns)
//   faults maps 64 MiB, writes one byte per 4 KiB page, unmaps it, over and over (page faults and
//          page zeroing in the kernel, as `perf report` loading a large perf.data does)
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: corunner busy|membw|wakeup|yield|faults [SECONDS]\n");
    return 2;
  }
  const char* kind = argv[1];
  const double seconds = argc > 2 ? atof(argv[2]) : 1e9;
  const double end = now_s() + seconds;
  volatile unsigned long sink = 0;
  if (strcmp(kind, "busy") == 0) {
    while (now_s() < end)
      for (int i = 0; i < 1000000; ++i) sink += (unsigned long)i;
  } else if (strcmp(kind, "membw") == 0) {
    const size_t n = (size_t)16 << 20;  // floats: 64 MiB per array
    float* a = malloc(n * sizeof(float));
    float* b = malloc(n * sizeof(float));
    float* c = malloc(n * sizeof(float));
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < n; ++i) b[i] = 1.0f, c[i] = 2.0f;
    while (now_s() < end) {
      for (size_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
      sink += (unsigned long)a[n / 2];
    }
  } else if (strcmp(kind, "wakeup") == 0) {
    const struct timespec d = {0, 50000};
    while (now_s() < end) nanosleep(&d, NULL);
  } else if (strcmp(kind, "yield") == 0) {
    while (now_s() < end)
      for (int i = 0; i < 1000; ++i) sched_yield();
  } else if (strcmp(kind, "faults") == 0) {
    const size_t bytes = (size_t)64 << 20;
    while (now_s() < end) {
      char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return 1;
      for (size_t i = 0; i < bytes; i += 4096) p[i] = (char)i;
      sink += (unsigned long)p[bytes / 2];
      munmap(p, bytes);
    }
  } else {
    fprintf(stderr, "corunner: unknown kind '%s' (busy, membw, wakeup, yield, faults)\n", kind);
    return 2;
  }
  return (int)(sink & 0);
}
