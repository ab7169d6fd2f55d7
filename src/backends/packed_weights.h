// What a kernel holds beside the graph: the bytes of its own (packed) forms of its weights.
#pragma once

#include <cstdint>

namespace ferry {

/// Implemented, beside Kernel, by the kernels that keep their own form of constant weights
/// (oneDNN's packed MatMul/Gemm and convolution weights, small_gemm panels, RowGemm, Winograd,
/// conv_rows). Executor::resident_bytes asks every kernel for it (a kernel without it holds 0).
/// A mixin rather than a virtual on Kernel: the packing kernels are few and backend.h is read by
/// every kernel of every backend.
class PackedWeightsHolder {
 public:
  virtual ~PackedWeightsHolder() = default;
  /// Bytes of the forms this kernel made of its weights and holds now (not the graph's copy it
  /// may still reference); the forms a later run makes for other shapes or thread counts add.
  virtual int64_t packed_weight_bytes() const = 0;
};

}  // namespace ferry
