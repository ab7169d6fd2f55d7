// SplitMix64's finalizer (Steele, Lea and Flood, 2014): the one 64-bit mixer behind ferry's derived
// randomness (dropout masks, the trainer's shuffles and per-sample seeds, ImageFolder's
// replacement draws). Changing it changes every seeded result, so it is defined once.
#pragma once

#include <cstdint>

namespace ferry {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace ferry
