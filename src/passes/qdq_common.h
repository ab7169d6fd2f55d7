// What the QDQ fusion's files share (qdq_fusion.cpp, qdq_lookup_chain.cpp): a per-tensor
// QuantizeLinear / DequantizeLinear node's constant parameters, and the element-wise chains that
// become com.ferry.QLookup tables (qdq_lookup_chain.cpp; the qdq_fusion pass runs them).
#pragma once

#include <string>

#include "passes/graph_edit.h"

namespace ferry::qdq {

inline bool is_onnx(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// Scale and zero point of a per-tensor Q/DQ node with constant parameters.
struct QParams {
  std::string scale, zp;  // value names ("" zp: absent, i.e. uint8 0)
  float s = 0;
  int64_t z = 0;
  DType dt = DType::kU8;
};

// `n`'s parameters when they are per tensor and constant (a float scale > 0, an 8-bit zero point or
// none, no block size); false otherwise.
bool per_tensor_params(const Graph& g, const Node& n, QParams* p);
// The per-tensor DQ producing `v` (8-bit input), or -1.
long dq_per_tensor(const PatternContext& pc, const std::string& v, QParams* p);

// DQ(x 8-bit, per tensor) -> element-wise float ops -> Q (per tensor) ending at Q node `qi`: one
// com.ferry.QLookup with a table the covered nodes give on x's 256 values; false when not that shape.
bool fuse_qlookup(const Model& model, PatternContext& pc, long qi);
// The same chain ending at node `i` whose end is read in float: QLookup with a float table.
bool fuse_float_lookup(const Model& model, PatternContext& pc, long i);

}  // namespace ferry::qdq
