// The .npy format's header (internal to io/: npy.cpp decodes and encodes the data after it).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ir/dtype.h"
#include "ir/tensor.h"

namespace ferry {

inline constexpr char kNpyMagic[] = "\x93NUMPY";
inline constexpr size_t kNpyMagicLen = 6;
/// Data offsets numpy pads the header to (and in-place views need).
inline constexpr size_t kNpyAlign = 64;
inline constexpr bool kHostLittle = std::endian::native == std::endian::little;
/// What error messages suggest for a file ferry cannot read.
inline constexpr char kNpyResaveHint[] = "re-save it with numpy.save";

enum class ElemKind { kNumeric, kBool, kUnicode, kBytes };

/// A numpy dtype descriptor ('<f4', '|b1', '<U5', ...) as ferry reads it.
struct NpyDescr {
  ElemKind kind = ElemKind::kNumeric;
  DType dtype = DType::kUndefined;
  size_t itemsize = 0;  // bytes per element in the file
  bool swap = false;    // the file's byte order differs from the host's
};

/// A parsed .npy header; the data starts at data_offset and holds data_bytes bytes.
struct NpyHeader {
  NpyDescr descr;
  bool fortran = false;
  std::vector<int64_t> dims;
  int64_t numel = 0;
  size_t data_offset = 0;
  uint64_t data_bytes = 0;
};

/// Parses a dtype descriptor ('<f4', '|b1', '<U5', ...); errors name `what`.
StatusOr<NpyDescr> parse_descr(const std::string& descr, const std::string& what);

/// Parses and checks the header of the .npy bytes [data, data + size): errors name `what`, the
/// problem and how to re-save the file.
StatusOr<NpyHeader> parse_header(const uint8_t* data, size_t size, const std::string& what);

/// Decodes a whole .npy image (npy_decode.cpp). When `owner` is set and writable, and the data
/// needs no conversion and is 64-byte aligned, the tensor views the bytes instead of copying them.
StatusOr<Tensor> decode_npy(const uint8_t* data, size_t size, const std::string& what,
                            const std::shared_ptr<const void>& owner, bool writable);

/// Shows (part of) untrusted text in an error message (escaped, cut at max_len).
std::string excerpt(std::string_view s, size_t max_len = 160);

/// A shape as Python writes it: "(2, 3)", "(5,)", "()".
std::string shape_string(const std::vector<int64_t>& dims);

}  // namespace ferry
