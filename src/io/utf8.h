// Strict UTF-8 helpers (internal to io/: numpy's '<U' strings are UTF-32 in the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

inline void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// Decodes strict UTF-8, calling fn(code_point) for each; returns the offset of the first bad
// byte, or -1 when the whole string is valid.
template <typename Fn>
int64_t for_each_code_point(const std::string& s, Fn&& fn) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      cp = c & 0x1f;
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      cp = c & 0x0f;
      len = 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
      cp = c & 0x07;
      len = 4;
    } else {
      return static_cast<int64_t>(i);
    }
    if (n - i < len) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k) {
      uint8_t cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return static_cast<int64_t>(i);
    fn(cp);
    i += len;
  }
  return -1;
}

}  // namespace ferry
