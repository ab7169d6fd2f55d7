// oneDNN's blocked activation layout nChw16c as a logical shape of the IR (pass
// train_blocked_layout, ops in grad_blocked.cpp): a tensor [N, C, H, W] with C % 16 == 0 is held as
// [N, C/16, H, W, 16], which is exactly nChw16c in memory, so elementwise ops, Sum, the executor's
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

constexpr int64_t kLayoutBlock = 16;

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

/// [N, C, S...] -> [N, C/16, S..., 16]; C % 16 == 0 is the caller's to check.
inline std::vector<int64_t> blocked_dims(const std::vector<int64_t>& d) {
  std::vector<int64_t> b = d;
  b[1] = d[1] / kLayoutBlock;
  b.push_back(kLayoutBlock);
  return b;
}

/// [N, C/16, S..., 16] -> [N, C, S...].
inline std::vector<int64_t> plain_dims(const std::vector<int64_t>& b) {
  std::vector<int64_t> d(b.begin(), b.end() - 1);
  d[1] = b[1] * b.back();
  return d;
}

/// Copies plain [N, C, S] (S = product of the spatial dims) into blocked order, or back
/// (`to_plain`), elements of `esize` bytes.
inline void convert_blocked(const void* from, void* to, int64_t N, int64_t C, int64_t S, size_t esize, bool to_plain) {
  const int64_t CB = C / kLayoutBlock;
  const char* src = static_cast<const char*>(from);
  char* dst = static_cast<char*>(to);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t j = 0; j < kLayoutBlock; ++j) {
        const int64_t c = cb * kLayoutBlock + j;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t p = (n * C + c) * S + s, b = ((n * CB + cb) * S + s) * kLayoutBlock + j;
          std::memcpy(dst + (to_plain ? p : b) * esize, src + (to_plain ? b : p) * esize, esize);
        }
      }
}

}  // namespace ferry
