// The backend interface: what a device is, which nodes it runs, and the kernels it makes.
// A new device (an NPU) implements this and registers itself; the runtime needs no change.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ops/registry.h"

namespace ferry {

/// A node's kernel on one backend. Lifecycle: created once per node (pack weights here),
/// then compute() for each run.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status compute(KernelContext& ctx) = 0;
  /// The executor is about to drop the graph's copy of constant input `i` (a weight only kernels
  /// read: ExecutorOptions::release_weights). A kernel that keeps its own form of it (packed
  /// weights), and can serve every later run (other shapes, thread counts, its fallback) without
  /// the graph's, returns true and drops its own reference to the original once its form is made,
  /// so the weight is held once; false (the default) keeps the graph's copy.
  virtual bool release_constant_input(size_t i) {
    (void)i;
    return false;
  }
};

/// For a kernel that released constant input `index` (Kernel::release_constant_input): runs its
/// reference kernel `fallback` (shapes or types its fast path does not take) on `ctx`'s inputs with
/// input `index`, which the executor no longer passes, given as `input` (the kernel's weights back),
/// and sets `ctx`'s outputs from it.
Status run_fallback_with_input(KernelFn fallback, KernelContext& ctx, int64_t index, const Value& input);

/// Node attribute (int) pinning a node's kernel: one of Backend::kernel_choices, set by `ferry compile
/// --tune` (compiler/tuner.h); -1: the reference kernel. The backend honours it in create_kernel; a
/// pin its kernels no longer match (the pinned kernel declines the node, or the index is out of range:
/// a file tuned by another build or on another ISA) falls back to the unpinned choice.
inline constexpr const char* kKernelChoiceAttr = "ferry.impl";

/// What a backend's kernels packed of their constant weights while `ferry compile` made them
/// (Backend::begin_prepack, compiler/prepack.h).
class WeightPrepack {
 public:
  virtual ~WeightPrepack() = default;
  /// Stores on `graph`'s nodes what the kernels made since begin_prepack packed of their own
  /// weights (node attributes the backend's kernels use in place at a later load); adds the nodes
  /// and bytes stored to `nodes` and `bytes`.
  virtual void store(Graph& graph, int64_t* nodes, int64_t* bytes) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu-ref", "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  /// A line about the device for `ferry doctor` / `ferry info`.
  virtual std::string description() const = 0;
  /// Whether this backend runs `node` (resolved to `schema`); when not, `why` says why.
  virtual bool supports(const Node& node, const OpSchema& schema, std::string* why) const = 0;
  /// Element types this backend's kernel for `schema` accepts on input 0 (empty: any type).
  /// Optional to override: defaults to what the reference kernel accepts.
  virtual std::vector<DType> supported_types(const OpSchema& schema) const { return schema.types; }
  /// Makes the kernel for a node this backend supports. `graph` is the graph holding the node:
  /// its value_types give the shapes known at load time, its initializers the constant inputs
  /// (weights to pre-pack).
  virtual StatusOr<std::unique_ptr<Kernel>> create_kernel(const Node& node, const OpSchema& schema,
                                                          const Graph& graph) = 0;
  /// The graph rewrites this backend has kernels to profit from, by name: a graph pass that makes
  /// nodes only some devices run well declares the trait it needs (GraphPass::needs, passes/
  /// passes.inc) and the pipeline runs it only for a backend listing that trait. The traits the
  /// passes name today: "channels_last" (CNN regions in NHWC: nhwc_layout), "attention_qkv_views"
  /// (an Attention reading q/k/v as strided Slices of one QKV tensor), "fused_inverted_residual"
  /// (com.ferry.InvertedResidual), "bf16_conv" (Conv/ConvGrad on bf16 operands: amp_bf16_fold),
  /// "blocked_training_layout" (com.ferry Blocked nChwBc training regions). A new device opts in
  /// by listing them; the passes do not change. Default: none (the portable passes only).
  virtual std::vector<std::string> graph_traits() const { return {}; }
  /// `ferry compile` (compiler/prepack.h): removes what an earlier compile stored on `graph`'s nodes
  /// and starts recording, on the calling thread, the weights the kernels this backend creates pack,
  /// until the returned object goes; the compiler then makes the graph's kernels and calls store().
  /// nullptr (the default): the backend packs nothing ahead of the load.
  virtual std::unique_ptr<WeightPrepack> begin_prepack(Graph& graph) {
    (void)graph;
    return nullptr;
  }
  /// `ferry compile --tune` (compiler/tuner.h): whether this backend has several kernels for
  /// `node`'s op, so that timing them may pay (asked before the node's inputs are known).
  /// Default: none.
  virtual bool has_kernel_choices(const Node& node) const {
    (void)node;
    return false;
  }
  /// The kernels that accept `node`, as kKernelChoiceAttr values in the order create_kernel tries
  /// them (the first is the one it makes unpinned); the reference kernel (-1) is the tuner's to add.
  virtual StatusOr<std::vector<int>> kernel_choices(const Node& node, const OpSchema& schema, const Graph& graph) {
    (void)node;
    (void)schema;
    (void)graph;
    return std::vector<int>{};
  }
  /// Threads the backend's kernels may use (0: the machine's cores).
  virtual void set_num_threads(int threads) { (void)threads; }
  /// Optional (device backends that keep values in their own memory). Called after the kernels of
  /// `graph` are created, with the values its nodes on this backend produce that must reach host
  /// memory: read by a node on another backend, a graph output, or seen by an observer. The
  /// backend may skip copying the other values back. Never called: every value goes to the host.
  virtual void set_host_values(const Graph& graph, const std::vector<std::string>& host_values) {
    (void)graph;
    (void)host_values;
  }
};

using BackendFactory = std::unique_ptr<Backend> (*)();

struct BackendEntry {
  const char* name;        // device name in --device
  const char* summary;
  /// Makes the backend of a built-in device; nullptr for a module.
  BackendFactory factory;
  /// Optional, for devices that take an index or may be absent ("cuda", "cuda:1"): used by
  /// make_backend instead of `factory` for "<name>" and "<name>:<suffix>"; fails when the device
  /// is not there, saying why.
  StatusOr<std::unique_ptr<Backend>> (*open)(const std::string& device) = nullptr;
  /// A backend module (backends/backend_module.h): the shared library's file name, opened when
  /// make_backend is first asked for "<name>" or "<name>:<suffix>"; nullptr for built-in ones.
  const char* module = nullptr;
};

/// Every backend compiled in or built as a module (listing one does not load it).
const std::vector<BackendEntry>& backend_entries();
/// Makes the backend for a --device value ("cpu", "cpu-ref", "cuda:1"), loading its module when
/// it is one; the error lists the known ones, or says why a module or device cannot be opened.
StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device);
/// Backend::graph_traits() of a --device value without opening a device: a built-in backend's
/// ("cpu", "cpu-ref"); none for an unknown name, a device taking an index or a backend module
/// (those are asked where their Backend is made: Executor::create optimizes with it).
std::vector<std::string> device_graph_traits(const std::string& device);

}  // namespace ferry
