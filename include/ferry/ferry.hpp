// ferry C++ API: a header-only RAII wrapper over the C API (ferry/ferry.h). Errors throw
// ferry::Error (status + message); the C library itself never throws.
//
//   ferry::Runtime rt;                               // ferry_init / ferry_finalize
//   ferry::Model model("digits.ferry");              // load (unloaded by the destructor)
//   std::vector<float> image(model.input(0).size_bytes / 4), logits(10);
//   ferry::Dataset in, out;
//   in.add(image);  out.add(logits);
//   model.execute(in, out);                          // or model.execute_async(in, out, stream)
#ifndef FERRY_FERRY_HPP_
#define FERRY_FERRY_HPP_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ferry/ferry.h"

namespace ferry {

/// A failed call: the status and ferry_last_error()'s message.
class Error : public std::runtime_error {
 public:
  Error(ferry_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  /// The C status code.
  ferry_status status() const { return status_; }

 private:
  ferry_status status_;
};

/// Throws ferry::Error when `s` is not FERRY_OK.
inline void check(ferry_status s) {
  if (s != FERRY_OK) throw Error(s, std::string(ferry_status_name(s)) + ": " + ferry_last_error());
}

/// Initializes the library for its lifetime (ferry_init / ferry_finalize).
class Runtime {
 public:
  /// Calls ferry_init().
  Runtime() { check(ferry_init()); }
  /// Calls ferry_finalize().
  ~Runtime() { ferry_finalize(); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  /// Selects the device of later model loads ("cpu", "cpu-ref", ...).
  void set_device(const std::string& name) { check(ferry_set_device(name.c_str())); }
  /// Sets the intra-op threads of later model loads (0: default).
  void set_num_threads(int threads) { check(ferry_set_num_threads(threads)); }
  /// The devices compiled in.
  static std::vector<std::string> devices() {
    int32_t n = 0;
    check(ferry_device_count(&n));
    std::vector<std::string> out;
    for (int32_t i = 0; i < n; ++i) {
      const char* name = nullptr;
      check(ferry_device_name(i, &name));
      out.emplace_back(name);
    }
    return out;
  }
};

/// An ordered list of caller-owned buffers (inputs or outputs of one execution).
class Dataset {
 public:
  /// Creates an empty dataset.
  Dataset() { check(ferry_dataset_create(&ds_)); }
  /// Destroys the dataset (not the buffers).
  ~Dataset() { ferry_dataset_destroy(ds_); }
  Dataset(Dataset&& o) noexcept : ds_(std::exchange(o.ds_, nullptr)) {}
  Dataset& operator=(Dataset&& o) noexcept {
    std::swap(ds_, o.ds_);
    return *this;
  }
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  /// Appends `size` bytes at `data` (used in place; must outlive the execution).
  void add(void* data, size_t size) { check(ferry_dataset_add_buffer(ds_, data, size)); }
  /// Appends a vector's storage.
  template <typename T>
  void add(std::vector<T>& v) { add(v.data(), v.size() * sizeof(T)); }
  /// Number of buffers.
  size_t size() const { return ferry_dataset_num_buffers(ds_); }
  /// The shape last written into output buffer `index`.
  std::vector<int64_t> dims(size_t index) const {
    int32_t rank = 0;
    int64_t d[FERRY_MAX_RANK];
    check(ferry_dataset_get_dims(ds_, index, &rank, d));
    return std::vector<int64_t>(d, d + rank);
  }
  /// The C handle.
  ferry_dataset* get() const { return ds_; }

 private:
  ferry_dataset* ds_ = nullptr;
};

/// An in-order queue of executions on a worker thread.
class Stream {
 public:
  /// Creates the stream (starts its worker).
  Stream() { check(ferry_stream_create(&s_)); }
  /// Waits for queued work and destroys the stream.
  ~Stream() { ferry_stream_destroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Waits for every queued execution; throws the first failure.
  void synchronize() { check(ferry_stream_synchronize(s_)); }
  /// The C handle.
  ferry_stream* get() const { return s_; }

 private:
  ferry_stream* s_ = nullptr;
};

/// A loaded model (compiled .ferry or .onnx). execute() may be called from many threads.
class Model {
 public:
  /// Loads a model file.
  explicit Model(const std::string& path) { check(ferry_model_load_from_file(path.c_str(), &m_)); }
  /// Loads a compiled model from memory (copied).
  Model(const void* data, size_t size) { check(ferry_model_load_from_memory(data, size, &m_)); }
  /// Unloads the model.
  ~Model() { ferry_model_unload(m_); }
  Model(Model&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  Model& operator=(Model&& o) noexcept {
    std::swap(m_, o.m_);
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  /// Number of inputs / outputs.
  size_t num_inputs() const { return ferry_model_num_inputs(m_); }
  size_t num_outputs() const { return ferry_model_num_outputs(m_); }
  /// Describes input / output `index`.
  ferry_tensor_desc input(size_t index) const {
    ferry_tensor_desc d;
    check(ferry_model_get_input_desc(m_, index, &d));
    return d;
  }
  ferry_tensor_desc output(size_t index) const {
    ferry_tensor_desc d;
    check(ferry_model_get_output_desc(m_, index, &d));
    return d;
  }
  /// The compiled batch sizes (empty: fixed shapes).
  std::vector<int64_t> batch_sizes() const {
    size_t n = 0;
    check(ferry_model_get_batch_sizes(m_, nullptr, &n));
    std::vector<int64_t> out(n);
    check(ferry_model_get_batch_sizes(m_, out.data(), &n));
    return out;
  }
  /// Runs synchronously.
  void execute(const Dataset& inputs, Dataset& outputs) { check(ferry_execute(m_, inputs.get(), outputs.get())); }
  /// Queues a run on `stream` (datasets and buffers must live until stream.synchronize()).
  void execute_async(const Dataset& inputs, Dataset& outputs, Stream& stream) {
    check(ferry_execute_async(m_, inputs.get(), outputs.get(), stream.get()));
  }
  /// The C handle.
  ferry_model* get() const { return m_; }

 private:
  ferry_model* m_ = nullptr;
};

}  // namespace ferry

#endif  // FERRY_FERRY_HPP_
