// A node's attributes read while a cpu kernel is made (its plan), outside a shape rule or a run.
#pragma once

#include <string>

#include "common/status.h"
#include "ops/registry.h"

namespace ferry::cpu {

/// An AttrReader whose error() names the node as a shape rule's does (kInvalidModel), so the
/// attribute parsers shared with the shape rules (ops/conv_pool_util.h) serve the kernels' plans:
/// the one definition for the oneDNN kernels and the training kernels.
class NodeAttrs : public AttrReader {
 public:
  using AttrReader::AttrReader;
  Status error(const std::string& msg) const { return invalid_model(node().describe() + ": " + msg); }
};

}  // namespace ferry::cpu
