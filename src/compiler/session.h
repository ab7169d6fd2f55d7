// A loaded model ready to run from many threads at once: what the C API's model handle wraps.
// Holds the compiled gears (or one ONNX model) and a pool of executors per gear: a call takes an
// idle executor (or makes one), so concurrent calls never share run state; the executors' kernels
// take their forms of the weights from one SharedWeightForms (each form made once for the pool).
// A batch that is not a gear runs on the smallest gear above it, inputs zero-padded, batched
// outputs cut back.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "format/compiled_model.h"
#include "passes/precision.h"
#include "runtime/executor.h"

namespace ferry {

struct SessionOptions {
  /// "" = the device the model was compiled for ("cpu" for ONNX models).
  std::string device;
  /// Intra-op threads; 0 = the tuned count stored in the file, else the machine's cores.
  int threads = 0;
  /// Shown every node of every run (all executors of the pool, from the threads that run them:
  /// it must be thread-safe); it only looks, so runs keep the memory plan (the profiler).
  NodeObserver observer;
  /// Precision mode (passes/precision.h). An ONNX model is rewritten for it at load, after the
  /// optimization pipeline and before its weights are packed, as `ferry compile --precision-mode`
  /// does. A compiled model's mode was fixed when it was compiled: another mode here fails the
  /// open, naming both. Unset: the file's own (force_fp32 for an ONNX model).
  std::optional<PrecisionMode> precision;
};

/// Per-run options (ONNX Runtime's RunOptions).
struct SessionRunOptions {
  /// Set from any thread to end the runs given it: a run not started fails at once, a run in
  /// progress before its next node, with kRunTerminatedMessage (runtime/run_control.h).
  const std::atomic<bool>* terminate = nullptr;
};

class Session {
 public:
  /// Loads a .ferry file or an .onnx model (optimized at load), picked by the file's magic.
  static StatusOr<std::shared_ptr<Session>> open_file(const std::string& path, const SessionOptions& options = {});
  /// Loads a .ferry model from memory (copied into an aligned buffer).
  static StatusOr<std::shared_ptr<Session>> open_memory(const void* data, size_t size, const SessionOptions& options = {});
  /// Wraps a compiled model; prepares one executor per gear (kernels created, weights packed).
  static StatusOr<std::shared_ptr<Session>> open(CompiledModel model, const SessionOptions& options = {});
  ~Session();

  /// Inputs and outputs with the shapes of the largest gear.
  const std::vector<ValueInfo>& inputs() const;
  const std::vector<ValueInfo>& outputs() const;
  /// The compiled batch sizes (empty: one plan at fixed shapes).
  std::vector<int64_t> batch_sizes() const;
  const std::string& device() const { return device_; }
  const CompiledModel& compiled() const { return model_; }

  /// Runs the model; safe to call from many threads at once. Feeds in any order, by name;
  /// outputs in the model's order.
  Status run(const NamedTensors& feeds, NamedTensors* outputs);
  Status run(const NamedTensors& feeds, NamedTensors* outputs, const SessionRunOptions& options);

 private:
  struct Gear;
  Session() = default;
  StatusOr<std::unique_ptr<Executor>> acquire(Gear& gear);
  void release(Gear& gear, std::unique_ptr<Executor> ex);
  Status run_padded(Gear& gear, int64_t batch, const NamedTensors& feeds, NamedTensors* outputs);
  void set_run_threads() const;

  CompiledModel model_;
  std::string device_;
  ExecutorOptions executor_options_;
  NodeObserver observer_;
  std::vector<std::unique_ptr<Gear>> gears_;
};

}  // namespace ferry
