// Decoding .npy data after the header (npy_header.cpp): byte swapping, Fortran order, bools,
// '<U' / '|S' strings; aligned native data is viewed in place.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/npy_header.h"
#include "io/utf8.h"

namespace ferry {

namespace {

inline uint16_t bswap(uint16_t v) { return __builtin_bswap16(v); }
inline uint32_t bswap(uint32_t v) { return __builtin_bswap32(v); }
inline uint64_t bswap(uint64_t v) { return __builtin_bswap64(v); }

// Calls fn(dst, src) for every element, dst walking the C-order output and src the same
// element's index in the Fortran-order input. All dims must be > 0.
template <typename Fn>
void for_each_fortran_element(const std::vector<int64_t>& dims, int64_t numel, Fn&& fn) {
  const size_t rank = dims.size();
  std::vector<int64_t> fstride(rank), idx(rank, 0);
  int64_t s = 1;
  for (size_t k = 0; k < rank; ++k) {
    fstride[k] = s;
    s *= dims[k];
  }
  int64_t src = 0;
  for (int64_t dst = 0; dst < numel; ++dst) {
    fn(dst, src);
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < dims[k]) {
        src += fstride[k];
        break;
      }
      src -= fstride[k] * (dims[k] - 1);
      idx[k] = 0;
    }
  }
}

template <typename Fn>
void for_each_element(const std::vector<int64_t>& dims, int64_t numel, bool fortran, Fn&& fn) {
  if (fortran) {
    for_each_fortran_element(dims, numel, fn);
  } else {
    for (int64_t i = 0; i < numel; ++i) fn(i, i);
  }
}

template <typename U>
void copy_elements(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& dims, int64_t numel, bool swap,
                   bool fortran) {
  for_each_element(dims, numel, fortran, [&](int64_t d, int64_t s) {
    U v;
    std::memcpy(&v, src + s * static_cast<int64_t>(sizeof(U)), sizeof(U));
    if constexpr (sizeof(U) > 1) {
      if (swap) v = bswap(v);
    }
    std::memcpy(dst + d * static_cast<int64_t>(sizeof(U)), &v, sizeof(U));
  });
}

Status decode_strings(const NpyHeader& h, const uint8_t* src, bool fortran, const std::string& what, Tensor* t) {
  std::vector<std::string>& out = t->mutable_strings();
  const size_t itemsize = h.descr.itemsize;
  Status status;
  for_each_element(h.dims, h.numel, fortran, [&](int64_t d, int64_t s) {
    if (!status.is_ok()) return;
    const uint8_t* p = src + static_cast<size_t>(s) * itemsize;
    std::string& str = out[static_cast<size_t>(d)];
    if (h.descr.kind == ElemKind::kBytes) {
      size_t len = itemsize;
      while (len > 0 && p[len - 1] == 0) --len;  // numpy strips trailing NULs
      str.assign(reinterpret_cast<const char*>(p), len);
      return;
    }
    size_t chars = itemsize / 4;
    auto unit = [&](size_t k) {
      uint32_t v;
      std::memcpy(&v, p + 4 * k, 4);
      return h.descr.swap ? bswap(v) : v;
    };
    while (chars > 0 && unit(chars - 1) == 0) --chars;
    str.reserve(chars);
    for (size_t k = 0; k < chars; ++k) {
      uint32_t cp = unit(k);
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "U+%08X", cp);
        status = invalid_argument(what + ": string element " + std::to_string(s) + " holds " + buf +
                                  ", which is not a Unicode scalar value; the file is damaged");
        return;
      }
      append_utf8(cp, &str);
    }
  });
  return status;
}

}  // namespace

// Decodes a whole .npy image. When `owner` is set and writable, and the data needs no
// conversion and is 64-byte aligned, the tensor views the bytes instead of copying them.
StatusOr<Tensor> decode_npy(const uint8_t* data, size_t size, const std::string& what,
                            const std::shared_ptr<const void>& owner, bool writable) {
  ASSIGN_OR_RETURN(NpyHeader h, parse_header(data, size, what));
  const uint8_t* src = data + h.data_offset;
  // Fortran order only changes the layout when two or more dimensions exceed 1.
  int non_trivial = 0;
  for (int64_t d : h.dims) non_trivial += d > 1 ? 1 : 0;
  const bool fortran = h.fortran && non_trivial > 1 && h.numel > 0;

  if (h.descr.dtype == DType::kString) {
    Tensor t = Tensor::allocate(DType::kString, h.dims);
    RETURN_IF_ERROR(decode_strings(h, src, fortran, what, &t));
    return t;
  }
  const bool swap = h.descr.swap;
  if (h.descr.kind == ElemKind::kNumeric && !swap && !fortran && owner && writable && h.numel > 0 &&
      reinterpret_cast<uintptr_t>(src) % kNpyAlign == 0) {
    return Tensor::wrap(h.descr.dtype, h.dims, owner, src);
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::create(h.descr.dtype, h.dims, what));
  if (h.numel == 0) return t;
  uint8_t* dst = static_cast<uint8_t*>(t.mutable_raw());
  if (h.descr.kind == ElemKind::kBool) {
    // numpy bools are bytes; anything non-zero is true (C++ bools must hold exactly 0 or 1).
    for_each_element(h.dims, h.numel, fortran, [&](int64_t d, int64_t s) { dst[d] = src[s] != 0 ? 1 : 0; });
    return t;
  }
  if (!swap && !fortran) {
    std::memcpy(dst, src, static_cast<size_t>(h.data_bytes));
    return t;
  }
  switch (h.descr.itemsize) {
    case 1: copy_elements<uint8_t>(src, dst, h.dims, h.numel, swap, fortran); break;
    case 2: copy_elements<uint16_t>(src, dst, h.dims, h.numel, swap, fortran); break;
    case 4: copy_elements<uint32_t>(src, dst, h.dims, h.numel, swap, fortran); break;
    case 8: copy_elements<uint64_t>(src, dst, h.dims, h.numel, swap, fortran); break;
    default: return internal_error(what + ": unexpected item size " + std::to_string(h.descr.itemsize));
  }
  return t;
}

}  // namespace ferry
