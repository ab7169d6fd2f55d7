// Pre-packed weights: oneDNN kernels (dnnl_conv, dnnl_matmul) reorder constant weights into the
// blocked layout their primitive wants. `ferry compile` stores those packed bytes on the node
// (attributes kPackedAttr / kPackedKeyAttr, docs/format.md), and at load a kernel uses them in
// place from the file's mapping instead of reordering again. The key names the kernel kind, the
// oneDNN version, the CPU ISA oneDNN dispatches to and the exact memory descriptor, so any
// mismatch (another machine, another oneDNN) falls back to packing at load: never a wrong layout.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "ir/graph.h"
#include "ir/packed_layout.h"

namespace ferry::cpu {

/// Node attribute (uint8 tensor): the packed weight bytes.
inline constexpr const char* kPackedAttr = kPackedBytesAttr;  // ir/packed_layout.h
/// Node attribute (string): what the bytes are (see packed_key).
inline constexpr const char* kPackedKeyAttr = "ferry.packed_key";

/// "KIND|oneDNN X.Y.Z|isa N|<hex of the memory descriptor>" for weights packed into `want`.
std::string packed_key(const char* kind, const dnnl::memory::desc& want);

/// `node`'s constant weights (`user()`, a view of the initializer) in layout `want`: the bytes
/// stored on the node by `ferry compile` when their key matches (no copy; the node's attribute
/// keeps the mapping alive as long as the node lives), else a new buffer reordered from `user()`.
/// `user` is called only to reorder: a weight the file stores only packed is never unpacked when
/// its stored bytes serve.
/// `kind` names the kernel ("dnnl_conv", "dnnl_matmul"). Under a PackRecorder, a reorder made
/// here is recorded for the compiler.
dnnl::memory packed_weights(const Node& node, const char* kind, const dnnl::memory::desc& want,
                            const std::function<dnnl::memory()>& user);

/// What a kernel packed while a PackRecorder was active on the thread.
struct PackedWeights {
  std::string key;
  Tensor bytes;                  // uint8 [size]
  const void* source = nullptr;  // the weights it was packed from (the initializer's data)
  /// How the packed bytes map to the plain weights (ir/packed_layout.h), when the packing is a
  /// pure permutation with padding (same element type, no compensation); empty otherwise.
  std::vector<int64_t> layout;
};

/// While alive, records on this thread the first weights each node packs, by the node's first
/// output (unique in a graph). Used by the compiler around creating an executor for a gear.
class PackRecorder {
 public:
  PackRecorder();
  ~PackRecorder();
  PackRecorder(const PackRecorder&) = delete;
  PackRecorder& operator=(const PackRecorder&) = delete;
  std::map<std::string, PackedWeights> by_output;
};

/// Backend::begin_prepack of the cpu backend: removes the packed attributes on `graph`'s nodes and
/// records, under a PackRecorder, what the kernels made next pack; store() puts the bytes packed
/// from a node's own weights on that node.
std::unique_ptr<WeightPrepack> begin_prepack(Graph& graph);

/// Process-wide counts of packed_weights calls: served from stored bytes, reordered at load.
struct PackCounts {
  int64_t stored = 0;
  int64_t reordered = 0;
};
PackCounts pack_counts();

}  // namespace ferry::cpu
