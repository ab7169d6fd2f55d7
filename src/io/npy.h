// NumPy .npy / .npz files: reading (formats 1.0, 2.0, 3.0; any byte order; C or Fortran
// order) and writing (little-endian, C order).
//
// dtype mapping: <f2 f16, <f4 f32, <f8 f64, i1/u1/i2/u2/i4/u4/i8/u8 the matching ints,
// |b1 bool, <U<n> (UTF-32) and |S<n> (bytes) strings (kString, trailing NULs stripped as numpy
// does). Object arrays ('|O', pickles), structured, complex and datetime dtypes are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

/// Reads a .npy file into a C-order, native-endian tensor. The file is memory-mapped; when its
/// data is already in the final layout and 64-byte aligned (numpy aligns it), the tensor views
/// the private copy-on-write mapping instead of copying it.
StatusOr<Tensor> read_npy(const std::string& path);

/// Parses .npy bytes held in memory (copied into a new tensor). `what` names the bytes in
/// error messages, e.g. "'x.npy'" or "'inputs.npz' member 'x.npy'".
StatusOr<Tensor> parse_npy(const uint8_t* data, size_t size, const std::string& what);

/// Encodes `t` exactly as write_npy() would write it.
StatusOr<std::vector<uint8_t>> encode_npy(const Tensor& t, const std::string& what = "tensor");

/// Writes `t` as a .npy file: version 1.0 (2.0 if the header needs it), little-endian,
/// C order. bf16 has no numpy dtype and is written converted to float32 ('<f4'). String
/// tensors are written as '<U<max chars>' (UTF-8 decoded to UTF-32; trailing NUL characters
/// are lost, as in numpy). The file appears at `path` only once complete.
Status write_npy(const std::string& path, const Tensor& t);

/// Reads every array of a .npz archive (numpy.savez: STORED, numpy.savez_compressed: DEFLATE),
/// in archive order, with the ".npy" suffix stripped from the names. CRC-32 is verified.
StatusOr<std::vector<std::pair<std::string, Tensor>>> read_npz(const std::string& path);

/// Parses .npz bytes held in memory; `what` names them in error messages.
StatusOr<std::vector<std::pair<std::string, Tensor>>> parse_npz(const uint8_t* data, size_t size,
                                                                const std::string& what);

/// Options for write_npz.
struct NpzWriteOptions {
  /// Writes ZIP64 records even for small archives (numpy reads both; used by tests).
  bool force_zip64 = false;
};

/// Writes `arrays` as an uncompressed .npz archive (members NAME.npy, in the given order,
/// same encoding as write_npy). Names must be non-empty and unique.
Status write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays,
                 const NpzWriteOptions& options = {});

/// A file name for a tensor name: every byte outside [A-Za-z0-9._-] becomes '_'; an empty
/// result becomes "_", and "." / ".." become "_" / "__"; the result is at most 200 bytes.
/// Different tensor names may map to the same file name.
std::string safe_file_name(const std::string& tensor_name);

}  // namespace ferry
