// What grad_blocked.cpp's blocked BatchNorm kernels did, for tests: a silent fallback to the
// reference kernel (any operand layout or dtype the fast loops do not take) gives the same numbers
// several times slower, so only these counts tell the two apart.
#pragma once

#include <cstdint>

namespace ferry::cpu {

/// Runs of com.ferry Blocked(BatchNormTraining) and Blocked(BatchNormTrainingGrad) on the cpu
/// backend since the process started: by the kernels' own nChw16c loops (f32 / bf16), and handed
/// to the reference kernel.
struct BlockedBnCounts {
  int64_t forward = 0, grad = 0;                    // own loops
  int64_t forward_fallback = 0, grad_fallback = 0;  // reference kernel
};
BlockedBnCounts blocked_bn_counts();

}  // namespace ferry::cpu
