// Triton's trace extension: a sample of inference requests (one in trace_rate, at most
// trace_count) is traced at the levels trace_level names. TIMESTAMPS: its timestamps, one JSON
// object a line: REQUEST_START (the front end took it), QUEUE_START, COMPUTE_START,
// COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END (the batcher's steps), REQUEST_END (the
// response is ready). TENSORS: a line per input as it was queued (TENSOR_QUEUE_INPUT) and per
// output the model gave (TENSOR_BACKEND_OUTPUT), Triton's {"id", "activity", "tensor": {"name",
// "data", "shape", "dtype"}}. A trace's lines are written together, before its response is sent:
// to --trace-file while log_frequency is 0, else to --trace-file.0, .1, ..., log_frequency traces
// a file. Settings are global or per model (a model's override copies the global ones it does not
// name), read and changed over HTTP (/v2[/models/M]/trace/setting) and gRPC (TraceSetting). While
// no setting traces, a request costs one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "serve/inference_types.h"

namespace ferry::serve {

struct TraceSettings {
  bool timestamps = false;     // trace_level TIMESTAMPS
  bool tensors = false;        // trace_level TENSORS (neither: OFF)
  uint64_t rate = 1000;        // one traced request in `rate`
  int64_t count = -1;          // traces left (-1: no limit)
  uint64_t log_frequency = 0;  // 0: traces appended to the trace file; N: to FILE.0, FILE.1, ..., N traces a file
  bool on() const { return (timestamps || tensors) && count != 0; }
};

class Tracer {
 public:
  /// `file` "" : no trace file (settings can be read, but tracing cannot be turned on).
  static StatusOr<std::unique_ptr<Tracer>> open(const std::string& file, TraceSettings global);
  ~Tracer();

  /// The id of a request to trace (0: not traced); counts the request against trace_rate.
  uint64_t sample(const std::string& model) {
    if (!any_on_.load(std::memory_order_relaxed)) return 0;
    return sample_slow(model);
  }
  /// A sampled request's inputs as it is queued: kept for its record when its level has TENSORS
  /// (nothing otherwise).
  void record_inputs(uint64_t id, const TensorList& inputs);
  /// Writes one traced request's record: its timestamps (TIMESTAMPS), the inputs record_inputs
  /// kept and `outputs` (TENSORS; null: it has none, it failed).
  void record(uint64_t id, const std::string& model, int64_t version, const std::string& request_id, int64_t request_start_ns,
              const InferTimestamps& ts, int64_t request_end_ns, const TensorList* outputs = nullptr);
  static int64_t now_ns();

  /// The settings of `model` ("" : the global ones) as name -> values (Triton's: strings, trace_level a list).
  std::vector<std::pair<std::string, std::vector<std::string>>> settings(const std::string& model) const;
  /// Applies named settings to the global ones or a model's (all or none; a model's first update
  /// copies the global ones; an empty update of a model removes its override). nullopt value:
  /// that setting of the model reverts to the global one.
  Status update(const std::string& model, const std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>>& changes);

  /// HTTP: GET's body, and POST's body applied.
  std::string settings_json(const std::string& model) const;
  Status update_json(const std::string& model, std::string_view body);

 private:
  Tracer() = default;
  // A sampled request until its record is written: the scope whose settings sampled it ("" the
  // global ones), its levels, and its TENSOR_QUEUE_INPUT lines.
  struct Pending {
    std::string scope;
    bool timestamps = false, tensors = false;
    std::string input_lines;
  };
  // Where a scope's traces go while its log_frequency is N > 0: FILE.<index>, `traces` written to it.
  struct IndexedFile {
    std::FILE* f = nullptr;
    uint64_t traces = 0, frequency = 0;
  };
  uint64_t sample_slow(const std::string& model);
  void refresh_any_on();  // lock held
  /// The settings of a scope: a model's override, else the global ones (lock held).
  const TraceSettings& scope_settings(const std::string& scope) const;
  /// Writes one trace's lines where `scope`'s log_frequency sends them (lock held).
  void write_trace(const std::string& scope, const std::string& lines);

  mutable std::mutex mu_;
  std::string file_;
  std::FILE* out_ = nullptr;
  TraceSettings global_;
  std::map<std::string, TraceSettings> models_;
  std::map<std::string, uint64_t> seen_;  // requests per scope ("" global), for trace_rate
  std::map<uint64_t, Pending> pending_;
  std::map<std::string, IndexedFile> indexed_;  // per scope
  uint64_t next_file_index_ = 0;
  uint64_t next_id_ = 0;
  std::atomic<bool> any_on_{false};
};

}  // namespace ferry::serve
