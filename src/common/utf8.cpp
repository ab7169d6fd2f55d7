#include "common/utf8.h"

namespace ferry {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 when the byte there does not start one.
size_t sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode table 3-7)
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

void append_hex(std::string* out, unsigned char c) {
  static const char* kHex = "0123456789ABCDEF";
  *out += "\\x";
  *out += kHex[c >> 4];
  *out += kHex[c & 15];
}

std::string escape(std::string_view s, bool controls) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequence_length(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 0 || (controls && n == 1 && (c < 0x20 || c == 0x7F))) {
      append_hex(&out, c);
      ++i;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string escape_non_utf8(std::string_view s) { return is_valid_utf8(s) ? std::string(s) : escape(s, false); }

std::string escape_name(std::string_view s) {
  bool plain = true;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7F) plain = false;
  }
  return plain ? std::string(s) : escape(s, true);
}

}  // namespace ferry
