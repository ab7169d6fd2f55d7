// Tensor: dtype + concrete dims + shared storage. Copies share data (like a shared_ptr).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/dtype.h"
#include "ir/shape.h"

namespace ferry {

/// Bytes made on first read, once: a weight a .ferry file stores only in a kernel's packed layout
/// (ir/packed_layout.h) is unpacked to its plain form when something reads it (the reference
/// kernels, another machine's kernels), never when nothing does (the kernel that uses the packed
/// bytes in place). make() must not fail (it allocates as Tensor::allocate does).
class LazyBytes {
 public:
  virtual ~LazyBytes() = default;
  const void* get() {
    if (made_.load(std::memory_order_acquire)) return bytes_.get();
    std::lock_guard<std::mutex> lock(mu_);
    if (!made_.load(std::memory_order_relaxed)) {
      bytes_ = make();
      made_.store(true, std::memory_order_release);
    }
    return bytes_.get();
  }
  bool made() const { return made_.load(std::memory_order_acquire); }

 protected:
  virtual std::shared_ptr<const void> make() = 0;

 private:
  std::mutex mu_;
  std::atomic<bool> made_{false};
  std::shared_ptr<const void> bytes_;
};

class Tensor {
 public:
  Tensor() = default;

  /// Allocates a zero-filled tensor; fails on negative dims, over-limit sizes, or (kResourceExhausted,
  /// naming the bytes asked for) when the memory is not there. Errors start with `what`.
  static StatusOr<Tensor> create(DType dtype, std::vector<int64_t> dims, const std::string& what = "tensor");
  /// As create without the limit checks (dims must already be valid: the run path); fails only when
  /// the memory is not there, naming the bytes asked for.
  static StatusOr<Tensor> try_allocate(DType dtype, std::vector<int64_t> dims);
  /// As try_allocate, the bytes copied from `bytes` (element_count(dims) * dtype_size(dtype) of them)
  /// instead of zero-filled: each byte written once (a request's input: serve/). Not for kString.
  static StatusOr<Tensor> try_copy_of(DType dtype, std::vector<int64_t> dims, const void* bytes);
  /// For tensors whose size the caller bounds (scalars, shape vectors, small scratch): memory comes
  /// from operator new, so running out is std::bad_alloc as in any std container. Tensors sized by
  /// the user's data take try_allocate or create.
  static Tensor allocate(DType dtype, std::vector<int64_t> dims);
  /// Views memory owned by `owner` (an mmap, an initializer blob) without copying.
  static Tensor wrap(DType dtype, std::vector<int64_t> dims, std::shared_ptr<const void> owner, const void* data);
  /// A tensor whose bytes `bytes` makes when first read (raw(), data(), any copy's); see LazyBytes.
  static Tensor deferred(DType dtype, std::vector<int64_t> dims, std::shared_ptr<LazyBytes> bytes);
  /// A rank-0 or rank-1 tensor holding `values`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, std::vector<int64_t> dims);
  template <typename T>
  static Tensor scalar(T value) { return from_vector<T>({value}, {}); }

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t dim(int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const { return numel_; }
  int64_t nbytes() const { return numel_ * dtype_size(dtype_); }
  TensorType type() const { return TensorType{dtype_, Shape::of(dims_)}; }

  const void* raw() const { return lazy_ ? lazy_->get() : data_; }
  /// Writable pointer. Tensors wrapping read-only memory (initializers) must not be written.
  void* mutable_raw() { return const_cast<void*>(raw()); }
  template <typename T> const T* data() const { return static_cast<const T*>(raw()); }
  template <typename T> T* mutable_data() { return static_cast<T*>(mutable_raw()); }

  /// Whether the bytes are not made yet (a deferred tensor nothing has read): they take no memory.
  bool pending() const { return lazy_ && !lazy_->made(); }

  /// String tensors keep their elements here (raw() is null for them).
  const std::vector<std::string>& strings() const { return *strings_; }
  std::vector<std::string>& mutable_strings() { return *strings_; }

  /// Same storage, new dims (element count must match).
  Tensor reshaped(std::vector<int64_t> dims) const;
  /// Rows [begin, begin + count) of the outermost axis, sharing this tensor's storage (not for
  /// string tensors).
  Tensor outer_slice(int64_t begin, int64_t count) const;
  /// A deep copy.
  Tensor clone() const;

  /// Element i converted to double / int64 (any numeric dtype or bool).
  double get_double(int64_t i) const;
  int64_t get_int64(int64_t i) const;
  /// All elements as int64 (for shape-like inputs).
  std::vector<int64_t> to_int64_vector() const;
  /// All elements as double.
  std::vector<double> to_double_vector() const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  std::shared_ptr<LazyBytes> lazy_;  // deferred tensors: the bytes (data_ unused)
  std::shared_ptr<std::vector<std::string>> strings_;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, std::vector<int64_t> dims) {
  Tensor t = allocate(DTypeOf<T>::value, std::move(dims));
  if constexpr (std::is_same_v<T, std::string>) {
    t.mutable_strings() = values;
  } else if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) t.mutable_data<bool>()[i] = values[i];
  } else {
    for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  }
  return t;
}

}  // namespace ferry
