// Kernels' own forms of constant weights (oneDNN's packed layouts, Winograd's transformed weights,
// small_gemm panels), shared by the executors of one loaded model: a compiler Session's pool (ferry
// serve's instances, the Python Session, the C API) makes each form once, whatever batch size or
// executor asks for it first, instead of one copy per executor. ONNX Runtime shares prepacked
// weights across sessions the same way, through a container the caller hands in.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

namespace ferry {

/// The forms, by key. A kernel builds the key from what the form depends on: the kind, the address
/// of the graph's initializer Tensor it was made from (the executors of one model read the same
/// graph), and the parameters (a layout, the bias's initializer, the geometry). Forms live as long
/// as this object (the Session and every kernel that took one hold it).
class SharedWeightForms {
 public:
  /// The form under `key`, made by `make` on first use (under this object's lock, so two executors
  /// asking at once get one form). `make` may return null (the form cannot be made): nothing is
  /// stored, and a later call tries again.
  template <class T>
  std::shared_ptr<T> get(const std::string& key, const std::function<std::shared_ptr<T>()>& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = forms_.find(key);
    if (it != forms_.end()) return std::static_pointer_cast<T>(it->second);
    std::shared_ptr<T> made = make();
    if (made) {
      forms_.emplace(key, std::const_pointer_cast<std::remove_const_t<T>>(made));
      ++made_;
    }
    return made;
  }
  /// Forms made so far (tests: a second executor makes none).
  int64_t made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return made_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<void>> forms_;
  int64_t made_ = 0;
};

/// The forms of the executor being created on this thread (ExecutorOptions::shared_forms), null when
/// it has none: a kernel made now keeps this and takes its forms from it, else makes its own.
std::shared_ptr<SharedWeightForms> current_shared_forms();

/// Sets current_shared_forms() on this thread while alive (Executor::create, around making kernels).
class ScopedSharedForms {
 public:
  explicit ScopedSharedForms(std::shared_ptr<SharedWeightForms> forms);
  ~ScopedSharedForms();
  ScopedSharedForms(const ScopedSharedForms&) = delete;
  ScopedSharedForms& operator=(const ScopedSharedForms&) = delete;

 private:
  std::shared_ptr<SharedWeightForms> saved_;
};

/// "kind|<address of the initializer>" (and `detail` after another '|'), the start of a form's key.
std::string weight_form_key(const char* kind, const void* initializer, const std::string& detail = std::string());

}  // namespace ferry
