// What the host CPU can run, for tests whose fast path exists only on some CPUs (oneDNN's bf16
// kernels need AVX-512: avx512_core emulates bf16, avx512_core_bf16 has it natively; an AVX2 host
// runs bf16 nodes on the reference kernels). A test of such a path checks the answer everywhere
// and that the fast kernel was taken only where the CPU has what it needs.
#pragma once

namespace ferry::test {

/// oneDNN's avx512_core: AVX-512 F, BW, VL and DQ (bf16 convolutions and matmuls, emulated).
inline bool cpu_has_avx512_core() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

}  // namespace ferry::test
