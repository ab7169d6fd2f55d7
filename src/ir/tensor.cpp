#include "ir/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace ferry {

namespace {
constexpr size_t kAlignment = 64;

size_t aligned_bytes(int64_t nbytes) {
  const size_t n = static_cast<size_t>(nbytes);
  const size_t rounded = (n + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

// 64-byte-aligned memory, its first `nbytes` copied from `bytes` (zero-filled where `bytes` is null) and
// the padding up to the alignment zeroed; null when the memory is not there.
std::shared_ptr<void> aligned_filled(int64_t nbytes, const void* bytes) {
  const size_t n = static_cast<size_t>(nbytes), rounded = aligned_bytes(nbytes);
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) return nullptr;
  if (bytes && n > 0) std::memcpy(p, bytes, n);
  const size_t filled = bytes ? n : 0;
  std::memset(static_cast<char*>(p) + filled, 0, rounded - filled);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

StatusOr<std::shared_ptr<void>> aligned_or_error(DType dtype, const std::vector<int64_t>& dims, const void* bytes) {
  const int64_t nbytes = element_count(dims) * dtype_size(dtype);
  auto buf = aligned_filled(nbytes, bytes);
  if (!buf)
    return resource_exhausted("out of memory: cannot allocate " + std::to_string(nbytes) + " bytes for a " +
                              dtype_name(dtype) + " tensor of shape " + dims_to_string(dims));
  return buf;
}
}  // namespace

StatusOr<Tensor> Tensor::create(DType dtype, std::vector<int64_t> dims, const std::string& what) {
  if (dtype == DType::kUndefined) return invalid_argument(what + ": undefined element type");
  ASSIGN_OR_RETURN(int64_t n, checked_element_count(dims, what));
  (void)n;
  StatusOr<Tensor> t = try_allocate(dtype, std::move(dims));
  if (!t.is_ok()) return t.status().with_context(what);
  return t;
}

StatusOr<Tensor> Tensor::try_allocate(DType dtype, std::vector<int64_t> dims) {
  if (dtype == DType::kString) return allocate(dtype, std::move(dims));  // no raw buffer
  ASSIGN_OR_RETURN(std::shared_ptr<void> buf, aligned_or_error(dtype, dims, nullptr));
  void* p = buf.get();
  return wrap(dtype, std::move(dims), std::move(buf), p);
}

StatusOr<Tensor> Tensor::try_copy_of(DType dtype, std::vector<int64_t> dims, const void* bytes) {
  if (dtype == DType::kString) return invalid_argument("try_copy_of: a string tensor has no raw bytes to copy");
  ASSIGN_OR_RETURN(std::shared_ptr<void> buf, aligned_or_error(dtype, dims, bytes));
  void* p = buf.get();
  return wrap(dtype, std::move(dims), std::move(buf), p);
}

Tensor Tensor::allocate(DType dtype, std::vector<int64_t> dims) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = element_count(t.dims_);
  if (dtype == DType::kString) {
    t.strings_ = std::make_shared<std::vector<std::string>>(static_cast<size_t>(t.numel_));
  } else {
    // Aligned operator new: out of memory here is what it is in any std container.
    const std::align_val_t align{kAlignment};
    const size_t rounded = aligned_bytes(t.numel_ * dtype_size(dtype));
    void* p = ::operator new(rounded, align);
    std::memset(p, 0, rounded);
    t.owner_ = std::shared_ptr<void>(p, [align](void* q) { ::operator delete(q, align); });
    t.data_ = p;
  }
  return t;
}

Tensor Tensor::wrap(DType dtype, std::vector<int64_t> dims, std::shared_ptr<const void> owner, const void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = element_count(t.dims_);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

Tensor Tensor::deferred(DType dtype, std::vector<int64_t> dims, std::shared_ptr<LazyBytes> bytes) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = element_count(t.dims_);
  t.lazy_ = std::move(bytes);
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::outer_slice(int64_t begin, int64_t count) const {
  Tensor t = *this;
  if (t.lazy_) {  // a view of the made bytes, keeping them alive
    t.data_ = raw();
    t.owner_ = std::shared_ptr<const void>(lazy_, t.data_);
    t.lazy_.reset();
  }
  const int64_t rows = dims_.empty() ? 1 : dims_[0];
  const int64_t row_bytes = rows > 0 ? nbytes() / rows : 0;
  t.dims_[0] = count;
  t.numel_ = rows > 0 ? numel_ / rows * count : 0;
  t.data_ = static_cast<const uint8_t*>(t.data_) + begin * row_bytes;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = allocate(dtype_, dims_);
  if (dtype_ == DType::kString) {
    *t.strings_ = *strings_;
  } else if (nbytes() > 0) {
    std::memcpy(t.mutable_raw(), raw(), static_cast<size_t>(nbytes()));
  }
  return t;
}

double Tensor::get_double(int64_t i) const {
  switch (dtype_) {
    case DType::kF16: return f16_to_f32(data<uint16_t>()[i]);
    case DType::kBF16: return bf16_to_f32(data<uint16_t>()[i]);
    case DType::kBool: return data<bool>()[i] ? 1.0 : 0.0;
    FERRY_DISPATCH_FLOAT_CASES(return static_cast<double>(data<scalar_t>()[i]))
    FERRY_DISPATCH_INT_CASES(return static_cast<double>(data<scalar_t>()[i]))
    default: return 0.0;
  }
  return 0.0;
}

int64_t Tensor::get_int64(int64_t i) const {
  switch (dtype_) {
    case DType::kF16: case DType::kBF16: return static_cast<int64_t>(get_double(i));
    case DType::kBool: return data<bool>()[i] ? 1 : 0;
    FERRY_DISPATCH_FLOAT_CASES(return static_cast<int64_t>(data<scalar_t>()[i]))
    FERRY_DISPATCH_INT_CASES(return static_cast<int64_t>(data<scalar_t>()[i]))
    default: return 0;
  }
  return 0;
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = get_int64(i);
  return v;
}

std::vector<double> Tensor::to_double_vector() const {
  std::vector<double> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = get_double(i);
  return v;
}

}  // namespace ferry
