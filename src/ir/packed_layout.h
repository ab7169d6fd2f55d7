// A weight stored once, in the packed (blocked) layout a kernel uses (issue 40): `ferry compile`
// marks a node whose kernel packed its own weights as attributes kPackedLayoutAttr (how the packed
// bytes map to the plain tensor) and kPackedInputAttr (which input), and the writer then stores
// that input's initializer as a reference to the node's packed bytes (TensorRef.layout) instead of
// a second, plain copy. The reader makes it a deferred tensor (ir/tensor.h LazyBytes): the kernel
// that uses the packed bytes in place never reads the plain form; anything else that reads it (the
// reference kernels, another machine's kernels, `ferry compare`) gets it unpacked here on first read.
//
// The layout is ferry's, not oneDNN's (no ISA or library version in it): a blocked layout as
// int64s [n, dims[n], plain_strides[n], packed_strides[n], offset0, nblks, blks[nblks],
// idxs[nblks]] over n logical dims whose product is the tensor's element count. Element x (an
// index into dims) sits at sum(x[d] * plain_strides[d]) in the plain tensor and, in the packed
// bytes, at offset0 + inner + sum(outer[d] * packed_strides[d]) where, for blocks j = nblks-1 .. 0
// (innermost last), inner gains (x'[idxs[j]] % blks[j]) * (product of the later blocks) and
// x'[idxs[j]] /= blks[j], and outer = x' (oneDNN's blocked memory descriptor, format_kind blocked).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// Node attribute (uint8 tensor): the packed bytes of a node's weights, as its kernel uses them
/// (backends/cpu/prepacked.h, whose kPackedAttr this is).
inline constexpr const char* kPackedBytesAttr = "ferry.packed";
/// Node attribute (ints): the layout of the node's kPackedBytesAttr bytes.
inline constexpr const char* kPackedLayoutAttr = "ferry.packed_layout";
/// Node attribute (int): the input whose initializer the packed bytes hold.
inline constexpr const char* kPackedInputAttr = "ferry.packed_input";

/// Checks `layout` against a tensor of `numel` elements of `elem_size` bytes and `packed_bytes` of
/// packed data: well formed, the plain strides a dense permutation of the dims (every element
/// written once), every packed offset inside the bytes. Errors (kInvalidModel) start with `where`.
Status check_packed_layout(const std::vector<int64_t>& layout, int64_t numel, int64_t elem_size, uint64_t packed_bytes,
                           const std::string& where);

/// How a graph's weights are stored (`ferry info`): plain (in place, or in memory from an .onnx
/// file), only in a kernel's packed layout (a .ferry file's deferred tensors, Tensor::pending, not
/// yet unpacked), and the packed forms stored beside plain weights (a MatMul's, whose form depends
/// on the run's thread count). Reads no weight (nothing is unpacked).
struct StoredWeights {
  int64_t plain_bytes = 0, plain_count = 0;
  int64_t packed_only_bytes = 0, packed_only_count = 0;  // the packed bytes stored for them
  int64_t packed_beside_bytes = 0, packed_beside_nodes = 0;
};
StoredWeights stored_weights(const Graph& graph);

/// The initializers a graph can hold only as their packed form: a node carries that form with its
/// layout (compiler/prepack.h) and nothing else in the graph reads the initializer. By name; the
/// pointers are into the nodes' attributes.
struct PackedOnlyWeight {
  const Tensor* packed = nullptr;
  const std::vector<int64_t>* layout = nullptr;
};
std::map<std::string, PackedOnlyWeight> packed_only_weights(const Graph& graph);

/// A deferred tensor (Tensor::deferred) of `dtype` and `dims` whose plain bytes are unpacked from
/// `packed` (kept alive by it) on first read. `layout` must have passed check_packed_layout.
Tensor unpacked_on_read(Tensor packed, std::vector<int64_t> layout, DType dtype, std::vector<int64_t> dims);

/// Writes the plain tensor (numel * elem_size bytes at `plain`) from `packed`. `layout` must have
/// passed check_packed_layout.
void unpack_layout(const std::vector<int64_t>& layout, const void* packed, void* plain, int64_t elem_size);

}  // namespace ferry
