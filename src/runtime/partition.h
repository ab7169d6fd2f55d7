// Graph partitioning with CPU fallback: which backend runs each node of the main graph, and which
// values cross between the device and the host.
//
// The device backend is asked about every node (an ORT-style capability query through
// Backend::supports); the nodes it does not take run on the host backend ("cpu") when fallback
// is allowed. A node with subgraphs (If/Loop/Scan) goes to the device only when the device takes
// it and every node of its bodies; its bodies then run where it runs. When the device is the host
// itself ("cpu", "cpu-ref") there is one partition and nothing crosses.
//
// Crossings: a value produced on one side and read on the other is copied once per inference
// (one copy serves every reader on that side). Graph inputs live on the host and graph outputs
// must end there, so inputs read by device nodes and outputs produced by device nodes cross too.
// Initializers are constants: they move once, at load, and are not counted per inference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// Which side of the boundary a node or value is on.
enum class Side : uint8_t { kDevice = 0, kHost = 1 };

/// A maximal run of consecutive main-graph nodes on one backend.
struct Partition {
  std::string backend;     // backend name ("cuda:0", "cpu")
  Side side = Side::kDevice;
  size_t first_node = 0;   // index in Graph::nodes
  size_t num_nodes = 0;
};

/// One value copied between the sides per inference.
struct Crossing {
  std::string value;
  Side from = Side::kHost;
  Side to = Side::kDevice;
  /// Bytes when the value's shape is known before running (value_types); -1 when dynamic.
  int64_t static_bytes = -1;
};

/// A node the device does not take, and why.
struct FallbackNode {
  size_t node = 0;
  std::string reason;
};

struct PartitionPlan {
  std::string device;              // the device backend's name
  std::string host;                // the host backend's name ("" when the device is the host)
  std::vector<Side> node_side;     // per main-graph node
  std::vector<Partition> partitions;
  std::vector<Crossing> crossings;
  std::vector<FallbackNode> fallbacks;

  /// Number of crossings (device<->host copies per inference).
  int64_t boundaries() const { return static_cast<int64_t>(crossings.size()); }
  /// Sum of the crossings' static bytes; -1 when any of them is dynamic.
  int64_t static_bytes() const;
};

/// Asks `device` about each node of model.graph. `host` runs what the device does not take
/// (nullptr: the device is the host, no fallback needed). Without `allow_fallback`, the first
/// node the device does not take is an error naming the node, the op and the reason.
StatusOr<PartitionPlan> plan_partitions(const Model& model, const Backend& device, const Backend* host,
                                        bool allow_fallback);

/// Whether the backend computes in host memory (the CPU backends): nothing crosses then.
bool is_host_backend(const Backend& backend);

/// Whether `backend` runs `node` and every node of its subgraphs (opsets from `model`);
/// when not, `why` names the first node it does not take.
bool backend_takes(const Model& model, const Backend& backend, const Node& node, std::string* why);

}  // namespace ferry
