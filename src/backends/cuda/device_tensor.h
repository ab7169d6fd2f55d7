// A tensor in GPU memory: element type, dims, and a reference-counted block from the backend's
// caching allocator (the block goes back to the cache when the last reference drops).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/dtype.h"

namespace ferry {

struct DeviceTensor {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  std::shared_ptr<void> buffer;  // owns the device block
  void* data = nullptr;          // device pointer (may point inside `buffer`: views)

  bool defined() const { return dtype != DType::kUndefined; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  /// Same storage, other dims (Reshape, Flatten, Squeeze, Unsqueeze).
  DeviceTensor reshaped(std::vector<int64_t> new_dims) const {
    DeviceTensor t = *this;
    t.dims = std::move(new_dims);
    return t;
  }
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

}  // namespace ferry
