// numpy dtype descriptors ('<f4', '|b1', '<U5', '>i8', ...) as ferry reads them: kind, width, byte
// order; what ferry cannot hold is refused with the reason.
#include <string>
#include <string_view>

#include "io/npy_header.h"

namespace ferry {

StatusOr<NpyDescr> parse_descr(const std::string& descr, const std::string& what) {
  std::string_view s = descr;
  char order = '=';
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '=' || s[0] == '|')) {
    order = s[0];
    s.remove_prefix(1);
  }
  auto bad = [&](const std::string& problem) {
    return unsupported(what + ": dtype '" + excerpt(descr, 40) + "' " + problem);
  };
  if (s.empty()) return invalid_argument(what + ": empty dtype descr '" + excerpt(descr, 40) + "'; " + kNpyResaveHint);
  char kind = s[0];
  std::string_view digits = s.substr(1);
  if (kind == 'O') {
    return bad(
        "is an object array: numpy stores those as Python pickles, which ferry does not load. Convert it to a "
        "numeric or string array (e.g. arr.astype(np.float32) or arr.astype(str)) before saving");
  }
  switch (kind) {
    case 'c':
      return bad("holds complex numbers, which ferry does not support; save arr.real and arr.imag separately");
    case 'M':
    case 'm':
      return bad("holds dates or time deltas, which ferry does not support; convert with arr.astype(np.int64)");
    case 'V':
      return bad("is a raw or structured (record) dtype, which ferry does not support; save each field separately");
    default:
      break;
  }
  int64_t n = -1;
  if (!digits.empty()) {
    n = 0;
    for (char c : digits) {
      if (c < '0' || c > '9' || n > (int64_t(1) << 31))
        return bad("is not a dtype ferry understands (expected e.g. '<f4', '|u1', '<U8')");
      n = n * 10 + (c - '0');
    }
  }
  const bool file_little = order == '<' || ((order == '=' || order == '|') && kHostLittle);
  NpyDescr d;
  d.swap = file_little != kHostLittle;
  switch (kind) {
    case '?':
    case 'b':
      if ((kind == '?' && n == -1) || (kind == 'b' && n == 1)) {
        d.kind = ElemKind::kBool;
        d.dtype = DType::kBool;
        d.itemsize = 1;
        d.swap = false;
        return d;
      }
      break;
    case 'f':
      if (n == 2) d.dtype = DType::kF16;
      if (n == 4) d.dtype = DType::kF32;
      if (n == 8) d.dtype = DType::kF64;
      if (n == 12 || n == 16)
        return bad("is an extended-precision float (np.longdouble), which ferry does not support; convert it with "
                   "arr.astype(np.float64)");
      break;
    case 'i':
      if (n == 1) d.dtype = DType::kI8;
      if (n == 2) d.dtype = DType::kI16;
      if (n == 4) d.dtype = DType::kI32;
      if (n == 8) d.dtype = DType::kI64;
      break;
    case 'u':
      if (n == 1) d.dtype = DType::kU8;
      if (n == 2) d.dtype = DType::kU16;
      if (n == 4) d.dtype = DType::kU32;
      if (n == 8) d.dtype = DType::kU64;
      break;
    case 'U':
    case 'S':
    case 'a':
      if (n < 0) break;
      // A zero width ('<U0', which np.save never writes but np.load reads) is allowed; the
      // header check bounds how many such strings a file may declare (they take memory here but
      // no file bytes).
      if (kind != 'U') {
        d.kind = ElemKind::kBytes;
        d.dtype = DType::kString;
        d.itemsize = static_cast<size_t>(n);
        d.swap = false;
        return d;
      }
      d.kind = ElemKind::kUnicode;
      d.dtype = DType::kString;
      d.itemsize = static_cast<size_t>(n) * 4;
      return d;
    default:
      break;
  }
  if (d.dtype == DType::kUndefined)
    return bad("is not a dtype ferry understands (expected e.g. '<f4', '<i8', '|b1', '<U8')");
  d.kind = ElemKind::kNumeric;
  d.itemsize = static_cast<size_t>(n);
  if (d.itemsize == 1) d.swap = false;
  return d;
}

}  // namespace ferry
