// oneDNN's blocked activation layouts nChw16c / nChw8c as a logical shape of the IR (pass
// train_blocked_layout, ops in grad_blocked.cpp): a tensor [N, C, H, W] with C % B == 0 is held as
// [N, C/B, H, W, B] (B = 16 or 8, the shape's last dim), which is exactly nChwBc in memory, so elementwise ops, Sum, the executor's
// memory plan and its in-place rules work on it unchanged. One rule for the shape rules, the
// reference kernels, the cpu kernels and the training memory plan.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace ferry {

/// The block of a tensor that does not say its own (com.ferry ToBlocked / Blocked without the
/// attribute `block`): nChw16c, oneDNN's layout on AVX-512 CPUs.
constexpr int64_t kLayoutBlock = 16;

/// The blocks a blocked tensor may have: 16 (nChw16c, AVX-512) or 8 (nChw8c, AVX2: oneDNN's jit
/// convolutions there read and write nChw8c, so a 16-block would cost two reorders a convolution).
inline bool valid_layout_block(int64_t b) { return b == 8 || b == 16; }

/// The block the pass train_blocked_layout gives the training graph on this CPU: the one oneDNN's
/// convolutions use here (16 with AVX-512F, 8 otherwise). ResNet-50 b8 on an AVX2 host: 210
/// nChw8c <-> nChw16c reorders a step gone (issue 37).
inline int64_t host_layout_block() {
#if defined(__x86_64__) || defined(__i386__)
  static const int64_t b = __builtin_cpu_supports("avx512f") ? 16 : 8;
  return b;
#else
  return kLayoutBlock;
#endif
}

/// The block a com.ferry ToBlocked / Blocked node writes its blocked outputs in (attribute `block`).
inline int64_t node_layout_block(const Node& n) {
  const Attribute* a = n.attr("block");
  return a ? a->i : kLayoutBlock;
}

/// The node attributes of com.ferry Blocked (grad_blocked.cpp): bit i of `blocked_inputs` /
/// `blocked_outputs` says input / output i is held blocked.
inline bool blocked_bit(const Node& n, const char* attr, size_t i) {
  const Attribute* a = n.attr(attr);
  return a && i < 63 && ((a->i >> i) & 1);
}
inline bool input_blocked(const Node& n, size_t i) { return blocked_bit(n, "blocked_inputs", i); }
inline bool output_blocked(const Node& n, size_t i) { return blocked_bit(n, "blocked_outputs", i); }

/// The op a com.ferry Blocked node runs (its `op` attribute), else the node's own op type.
inline std::string inner_op(const Node& n) {
  if (n.domain == "com.ferry" && n.op_type == "Blocked")
    if (const Attribute* a = n.attr("op")) return a->s;
  return n.op_type;
}

/// [N, C, S...] -> [N, C/B, S..., B]; C % B == 0 is the caller's to check.
inline std::vector<int64_t> blocked_dims(const std::vector<int64_t>& d, int64_t block) {
  std::vector<int64_t> b = d;
  b[1] = d[1] / block;
  b.push_back(block);
  return b;
}

/// [N, C/B, S..., B] -> [N, C, S...].
inline std::vector<int64_t> plain_dims(const std::vector<int64_t>& b) {
  std::vector<int64_t> d(b.begin(), b.end() - 1);
  d[1] = b[1] * b.back();
  return d;
}

/// Copies plain [N, C, S] (S = product of the spatial dims) into blocked order (blocks of `block`
/// channels), or back (`to_plain`), elements of `esize` bytes.
inline void convert_blocked(const void* from, void* to, int64_t N, int64_t C, int64_t S, size_t esize, bool to_plain,
                            int64_t block) {
  const int64_t CB = C / block;
  const char* src = static_cast<const char*>(from);
  char* dst = static_cast<char*>(to);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t j = 0; j < block; ++j) {
        const int64_t c = cb * block + j;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t p = (n * C + c) * S + s, b = ((n * CB + cb) * S + s) * block + j;
          std::memcpy(dst + (to_plain ? p : b) * esize, src + (to_plain ? b : p) * esize, esize);
        }
      }
}

}  // namespace ferry
