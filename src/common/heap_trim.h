#pragma once
// Gives the heap's freed pages back to the system (glibc's malloc_trim), for the few places that
// free a large, one-off set of small allocations: a recording run's temporaries, released weights,
// a checkpoint's parsed tensors.
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ferry {

inline void trim_heap() {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  malloc_trim(0);
#endif
  // Under ASan or TSan the sanitizer's allocator owns the heap and glibc's is never set up:
  // malloc_trim would initialise it on first call, and ptmalloc_init is not thread-safe, so two
  // runs finishing at once read a half-linked arena list (a SEGV in mtrim, seen on CI's ASan stage
  // in RunTerminate.FromAnotherThreadEndsEveryRunUsingIt). There is nothing of glibc's to trim.
}

}  // namespace ferry
