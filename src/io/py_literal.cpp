// The Python-literal parser of .npy headers: recursive descent with a depth limit; every error
// names the byte offset.
#include "io/py_literal.h"

#include <cstdint>
#include <string>

#include "io/npy_header.h"

namespace ferry {

namespace {

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

}  // namespace

std::string parse_py_literal(std::string_view text, PyValue* out) { return LiteralParser(text).parse(out); }

}  // namespace ferry
