// Batch splitting: a large batch run as several smaller ones, one after the other, when the graph
// computes every row of its batch on its own and the whole batch's activations would not stay in
// the CPU's last-level cache. A memory-bound network (MobileNet, EfficientNet, ResNet at batch 8)
// then streams each layer's tensors through the cache instead of through DRAM; the results are
// those of running each part as its own batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ferry {

struct BatchSplitInfo {
  /// Every output row depends only on the same row of the inputs (axis 0 of every graph input
  /// is the same symbolic dimension, and no node mixes rows).
  bool separable = false;
  /// Why not, naming the first node or input that mixes rows (for logs and tests).
  std::string why_not;
  /// The symbol of the batch axis ("batch").
  std::string symbol;
  /// The largest intermediate tensor's bytes per batch row (0: not every size is known).
  int64_t largest_row_bytes = 0;
};

/// Decides from the graph's inferred types and its nodes' attributes; conservative: an op it does
/// not know makes the graph not separable.
BatchSplitInfo analyze_batch_split(const Graph& g);

/// Rows per part for a batch of `rows` (0: run it whole): parts whose largest tensor, times three,
/// fits in `cache_bytes`, and that divide the batch evenly; split only when the whole batch's
/// largest tensor exceeds half the cache.
int64_t batch_split_rows(const BatchSplitInfo& info, int64_t rows, int64_t cache_bytes);

/// A place in the node order where the graph can be cut for a split of only its front: nodes
/// [0, after] run as batch parts, each part's `value` goes into one whole-batch tensor, and the
/// nodes after run once on the whole batch. Exactly one value is live across it (produced at or
/// before `after` or a graph input, read after it or a graph output): `value`, a batched tensor
/// of known size whose axis 0 is the batch (every layout the runtime uses is batch-outermost and
/// dense, so part i's rows are one contiguous block of the whole).
struct BatchSplitCut {
  int64_t after = -1;
  std::string value;
  int64_t producer = -1;        // the node that makes `value` (at or before `after`)
  int64_t producer_output = 0;  // and which of its outputs it is
  int64_t value_row_bytes = 0;
  /// The largest batched tensor the nodes after the cut read or make, bytes per row.
  int64_t back_row_bytes = 0;
};

/// Every such place of a separable graph, in node order (empty when `info` is not separable).
std::vector<BatchSplitCut> batch_split_cuts(const Graph& g, const BatchSplitInfo& info);

/// The cut for a split batch of `rows`: the first (so the front keeps every larger tensor) whose
/// back's largest tensor, at the whole batch, is at most `back_bytes`; nullptr when none is.
const BatchSplitCut* choose_front_cut(const std::vector<BatchSplitCut>& cuts, int64_t rows, int64_t back_bytes);

/// The last-level cache's size in bytes (sysconf), or 32 MiB when the system does not say.
int64_t last_level_cache_bytes();

}  // namespace ferry
