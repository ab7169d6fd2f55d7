// The .npy header: magic, version, and the Python dict literal numpy writes (descr, fortran_order,
// shape), checked against the file's size before anything is allocated.
#include "io/npy_header.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string_view>

#include "ir/shape.h"

namespace ferry {

namespace {

// numpy refuses headers over 10000 bytes by default; allow more, but not absurd amounts.
constexpr size_t kMaxHeaderLen = size_t(1) << 20;
constexpr const char* kResaveHint = "re-save it with numpy.save";
// Zero-width strings take no file bytes, so the file size does not bound their count; each costs
// an empty std::string when decoded (32 bytes): at most 32 MiB of them.
constexpr int64_t kMaxZeroWidthStrings = int64_t(1) << 20;

// ---------------------------------------------------------------------------------------------
// A parser for the Python literals that appear in .npy headers: dicts, tuples, lists, strings,
// integers, True/False/None. numpy writes e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }

struct PyValue {
  enum class Kind { kNone, kStr, kInt, kBool, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  std::string str;
  int64_t num = 0;
  bool flag = false;
  std::vector<std::string> keys;  // kDict
  std::vector<PyValue> items;     // kTuple / kList elements, kDict values
};

class LiteralParser {
 public:
  explicit LiteralParser(std::string_view s) : s_(s) {}

  /// Returns "" on success, else what went wrong.
  std::string parse(PyValue* out) {
    skip_ws();
    if (!value(out, 0)) return err_;
    skip_ws();
    if (pos_ != s_.size()) {
      fail("unexpected '" + excerpt(s_.substr(pos_), 20) + "' after the dictionary");
      return err_;
    }
    return "";
  }

 private:
  static constexpr int kMaxDepth = 32;

  bool fail(const std::string& msg) {
    err_ = msg + " (at header byte " + std::to_string(pos_) + ")";
    return false;
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }
  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r' || peek() == '\f' ||
                         peek() == '\v'))
      ++pos_;
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

  bool value(PyValue* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting too deep");
    if (at_end()) return fail("unexpected end of header");
    char c = peek();
    if (c == '{') return dict(out, depth);
    if (c == '(') return sequence(out, depth, ')', PyValue::Kind::kTuple);
    if (c == '[') return sequence(out, depth, ']', PyValue::Kind::kList);
    if (c == '\'' || c == '"') return string(out);
    if (c == '-' || c == '+' || is_digit(c)) return integer(out);
    if (is_ident_start(c)) {
      size_t start = pos_;
      while (!at_end() && (is_ident_start(peek()) || is_digit(peek()))) ++pos_;
      std::string_view id = s_.substr(start, pos_ - start);
      if ((id == "u" || id == "U" || id == "b" || id == "B") && !at_end() && (peek() == '\'' || peek() == '"'))
        return string(out);  // u'...' (Python 2) or b'...'
      if (id == "True" || id == "False") {
        out->kind = PyValue::Kind::kBool;
        out->flag = id == "True";
        return true;
      }
      if (id == "None") {
        out->kind = PyValue::Kind::kNone;
        return true;
      }
      pos_ = start;
      return fail("unexpected name '" + excerpt(id, 40) + "'");
    }
    return fail("unexpected character '" + excerpt(s_.substr(pos_, 1)) + "'");
  }

  bool sequence(PyValue* out, int depth, char close, PyValue::Kind kind) {
    ++pos_;  // '(' or '['
    std::vector<PyValue> items;
    bool saw_comma = false;
    for (;;) {
      skip_ws();
      if (at_end()) return fail(std::string("missing '") + close + "'");
      if (peek() == close) break;
      PyValue v;
      if (!value(&v, depth + 1)) return false;
      items.push_back(std::move(v));
      skip_ws();
      if (at_end()) return fail(std::string("missing '") + close + "'");
      if (peek() == ',') {
        ++pos_;
        saw_comma = true;
        continue;
      }
      if (peek() != close) return fail(std::string("expected ',' or '") + close + "'");
      break;
    }
    ++pos_;  // close
    if (kind == PyValue::Kind::kTuple && items.size() == 1 && !saw_comma) {
      *out = std::move(items[0]);  // "(x)" is just x in Python
      return true;
    }
    out->kind = kind;
    out->items = std::move(items);
    return true;
  }

  bool dict(PyValue* out, int depth) {
    ++pos_;  // '{'
    out->kind = PyValue::Kind::kDict;
    for (;;) {
      skip_ws();
      if (at_end()) return fail("missing '}'");
      if (peek() == '}') break;
      PyValue key;
      if (!value(&key, depth + 1)) return false;
      if (key.kind != PyValue::Kind::kStr) return fail("dictionary keys must be strings");
      skip_ws();
      if (at_end() || peek() != ':') return fail("expected ':' after key '" + excerpt(key.str, 40) + "'");
      ++pos_;
      skip_ws();
      PyValue v;
      if (!value(&v, depth + 1)) return false;
      for (const std::string& k : out->keys)
        if (k == key.str) return fail("duplicate key '" + excerpt(key.str, 40) + "'");
      out->keys.push_back(std::move(key.str));
      out->items.push_back(std::move(v));
      skip_ws();
      if (at_end()) return fail("missing '}'");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') return fail("expected ',' or '}'");
      break;
    }
    ++pos_;  // '}'
    return true;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool string(PyValue* out) {
    char quote = peek();
    size_t start = pos_;
    ++pos_;
    std::string s;
    for (;;) {
      if (at_end() || peek() == '\n') {
        pos_ = start;
        return fail("unterminated string");
      }
      char c = s_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        s.push_back(c);
        continue;
      }
      if (at_end()) {
        pos_ = start;
        return fail("unterminated string");
      }
      char e = s_[pos_++];
      switch (e) {
        case 'n': s.push_back('\n'); break;
        case 't': s.push_back('\t'); break;
        case 'r': s.push_back('\r'); break;
        case '0': s.push_back('\0'); break;
        case '\\': case '\'': case '"': s.push_back(e); break;
        case '\n': break;  // line continuation
        case 'x': {
          if (s_.size() - pos_ < 2 || hex_value(s_[pos_]) < 0 || hex_value(s_[pos_ + 1]) < 0)
            return fail("bad \\x escape in string");
          s.push_back(static_cast<char>(hex_value(s_[pos_]) * 16 + hex_value(s_[pos_ + 1])));
          pos_ += 2;
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          s.push_back('\\');
          s.push_back(e);
      }
    }
    out->kind = PyValue::Kind::kStr;
    out->str = std::move(s);
    return true;
  }

  bool integer(PyValue* out) {
    size_t start = pos_;
    bool negative = false;
    if (peek() == '-' || peek() == '+') {
      negative = peek() == '-';
      ++pos_;
      skip_ws();
    }
    if (at_end() || !is_digit(peek())) return fail("expected a number");
    uint64_t v = 0;
    bool overflow = false;
    while (!at_end() && (is_digit(peek()) || peek() == '_')) {
      char c = s_[pos_++];
      if (c == '_') continue;
      unsigned d = static_cast<unsigned>(c - '0');
      if (v > (uint64_t(INT64_MAX) - d) / 10) overflow = true;
      if (!overflow) v = v * 10 + d;
    }
    if (!at_end() && (peek() == 'L' || peek() == 'l')) ++pos_;  // Python 2 long
    if (!at_end() && (peek() == '.' || peek() == 'e' || peek() == 'E' || peek() == 'j' || peek() == 'J')) {
      pos_ = start;
      return fail("expected an integer, found a float or complex number");
    }
    if (overflow) {
      pos_ = start;
      return fail("integer too large");
    }
    out->kind = PyValue::Kind::kInt;
    out->num = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string err_;
};

// ---------------------------------------------------------------------------------------------
// dtype descriptors

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
  if (s.empty()) return invalid_argument(what + ": empty dtype descr '" + excerpt(descr, 40) + "'; " + kResaveHint);
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

// ---------------------------------------------------------------------------------------------
// Header

Status malformed(const std::string& what, const std::string& problem) {
  return invalid_argument(what + ": " + problem + "; the file is damaged or not a .npy file (" + kResaveHint + ")");
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
  std::string err = LiteralParser(text).parse(&dict);
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
                              std::to_string(d) + "; the file is damaged (" + kResaveHint + ")");
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
