// The .npy header: magic, version, and the Python dict literal numpy writes (descr, fortran_order,
// shape), checked against the file's size before anything is allocated.
#include "io/npy_header.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string_view>

#include "io/py_literal.h"
#include "ir/shape.h"

namespace ferry {

namespace {

// numpy refuses headers over 10000 bytes by default; allow more, but not absurd amounts.
constexpr size_t kMaxHeaderLen = size_t(1) << 20;
// Zero-width strings take no file bytes, so the file size does not bound their count; each costs
// an empty std::string when decoded (32 bytes): at most 32 MiB of them.
constexpr int64_t kMaxZeroWidthStrings = int64_t(1) << 20;

// ---------------------------------------------------------------------------------------------
// Header

Status malformed(const std::string& what, const std::string& problem) {
  return invalid_argument(what + ": " + problem + "; the file is damaged or not a .npy file (" + kNpyResaveHint + ")");
}

}  // namespace

StatusOr<NpyHeader> parse_header(const uint8_t* data, size_t size, const std::string& what) {
  if (size < kNpyMagicLen || std::memcmp(data, kNpyMagic, kNpyMagicLen) != 0) {
    std::string found = excerpt(std::string_view(reinterpret_cast<const char*>(data), std::min<size_t>(size, 6)));
    std::string hint = size >= 4 && std::memcmp(data, "PK\x03\x04", 4) == 0
                           ? " (it looks like a ZIP/.npz archive: load it with read_npz)"
                           : "";
    return invalid_argument(what + ": not a .npy file: it starts with '" + found +
                            "' instead of the magic '\\x93NUMPY'" + hint);
  }
  if (size < kNpyMagicLen + 2) return malformed(what, "the file ends inside the .npy preamble");
  int major = data[6], minor = data[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return unsupported(what + ": .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                       " is not supported (ferry reads 1.0, 2.0 and 3.0)");
  }
  size_t len_bytes = major == 1 ? 2 : 4;
  size_t prefix = kNpyMagicLen + 2 + len_bytes;
  if (size < prefix) return malformed(what, "the file ends inside the .npy preamble");
  uint64_t header_len = major == 1 ? (uint64_t(data[8]) | (uint64_t(data[9]) << 8))
                                   : (uint64_t(data[8]) | (uint64_t(data[9]) << 8) | (uint64_t(data[10]) << 16) |
                                      (uint64_t(data[11]) << 24));
  if (header_len > kMaxHeaderLen) {
    return malformed(what, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                               std::to_string(kMaxHeaderLen) + " bytes");
  }
  if (header_len > size - prefix) {
    return malformed(what, "the header (" + std::to_string(header_len) + " bytes) runs past the end of the file (" +
                               std::to_string(size) + " bytes)");
  }
  std::string_view text(reinterpret_cast<const char*>(data + prefix), static_cast<size_t>(header_len));

  PyValue dict;
  std::string err = parse_py_literal(text, &dict);
  if (!err.empty()) return malformed(what, "malformed header: " + err + " in \"" + excerpt(text) + "\"");
  if (dict.kind != PyValue::Kind::kDict)
    return malformed(what, "the header is not a dictionary: \"" + excerpt(text) + "\"");

  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (size_t i = 0; i < dict.keys.size(); ++i) {
    const std::string& k = dict.keys[i];
    if (k == "descr") {
      descr = &dict.items[i];
    } else if (k == "fortran_order") {
      fortran = &dict.items[i];
    } else if (k == "shape") {
      shape = &dict.items[i];
    } else {
      return malformed(what, "the header has an unexpected key '" + excerpt(k, 40) +
                                 "' (a .npy header holds exactly 'descr', 'fortran_order' and 'shape')");
    }
  }
  const std::pair<const PyValue*, const char*> required[] = {{descr, "descr"}, {fortran, "fortran_order"}, {shape, "shape"}};
  for (const auto& [v, name] : required)
    if (!v) return malformed(what, std::string("the header lacks the '") + name + "' key: \"" + excerpt(text) + "\"");

  NpyHeader h;
  if (descr->kind == PyValue::Kind::kList) {
    return unsupported(what + ": structured (record) arrays are not supported; save each field as its own array");
  }
  if (descr->kind != PyValue::Kind::kStr) return malformed(what, "'descr' is not a string");
  ASSIGN_OR_RETURN(h.descr, parse_descr(descr->str, what));
  if (fortran->kind != PyValue::Kind::kBool) return malformed(what, "'fortran_order' is not True or False");
  h.fortran = fortran->flag;
  if (shape->kind != PyValue::Kind::kTuple) return malformed(what, "'shape' is not a tuple");
  if (shape->items.size() > static_cast<size_t>(kMaxRank)) {
    return invalid_argument(what + ": the array has " + std::to_string(shape->items.size()) +
                            " dimensions, more than the limit of " + std::to_string(kMaxRank));
  }
  for (const PyValue& v : shape->items) {
    if (v.kind != PyValue::Kind::kInt) return malformed(what, "'shape' holds something other than integers");
    h.dims.push_back(v.num);
  }
  for (int64_t d : h.dims) {
    if (d < 0) {
      return invalid_argument(what + ": shape " + shape_string(h.dims) + " has a negative dimension " +
                              std::to_string(d) + "; the file is damaged (" + kNpyResaveHint + ")");
    }
  }
  ASSIGN_OR_RETURN(h.numel, checked_element_count(h.dims, what));
  if (__builtin_mul_overflow(static_cast<uint64_t>(h.numel), static_cast<uint64_t>(h.descr.itemsize), &h.data_bytes)) {
    return resource_exhausted(what + ": shape " + shape_string(h.dims) + " of dtype '" + descr->str +
                              "' needs more bytes than can be addressed");
  }
  if (h.descr.dtype == DType::kString && h.descr.itemsize == 0 && h.numel > kMaxZeroWidthStrings) {
    return resource_exhausted(what + ": shape " + shape_string(h.dims) + " of zero-width strings ('" + descr->str +
                              "') declares " + std::to_string(h.numel) + " strings, more than the limit of " +
                              std::to_string(kMaxZeroWidthStrings) +
                              " (they take memory but no file bytes; the file is damaged or hostile)");
  }
  h.data_offset = prefix + static_cast<size_t>(header_len);
  if (h.data_bytes > size - h.data_offset) {
    return invalid_argument(what + ": truncated: shape " + shape_string(h.dims) + " of dtype '" + descr->str +
                            "' needs " + std::to_string(h.data_bytes) + " data bytes after the " +
                            std::to_string(h.data_offset) + "-byte header, but only " +
                            std::to_string(size - h.data_offset) +
                            " are present; the file is incomplete (copy or save it again)");
  }
  return h;
}

// Shows (part of) untrusted text in an error message.
std::string excerpt(std::string_view s, size_t max_len) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

std::string shape_string(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  if (dims.size() == 1) s += ",";
  return s + ")";
}


}  // namespace ferry
