// Python tokenizer (see tokenizer.h). One pass over the bytes; brackets and indentation tracked
// the way CPython's tokenizer does, so NEWLINE/NL/INDENT/DEDENT come out where Python puts them.
#include "scan/tokenizer.h"

#include <array>
#include <cctype>
#include <cstring>

namespace ferry::scan {
namespace {

bool is_id_start(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80; }
bool is_id_char(unsigned char c) { return is_id_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

bool is_string_prefix(std::string_view p) {
  if (p.empty() || p.size() > 2) return false;
  std::string lower;
  for (char c : p) lower += static_cast<char>(c | 0x20);
  return lower == "r" || lower == "u" || lower == "b" || lower == "f" || lower == "br" || lower == "rb" ||
         lower == "fr" || lower == "rf";
}

// Operators longest first, as tokenize's EXACT_TOKEN_TYPES.
constexpr std::array<const char*, 3> kOps3 = {"**=", "//=", "..."};
constexpr std::array<const char*, 19> kOps2 = {"==", "!=", "<=", ">=", "<<", ">>", "**", "//", "->", ":=",
                                               "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@="};

class Tokenizer {
 public:
  explicit Tokenizer(std::string_view src) : s_(src) {
    if (s_.size() >= 3 && std::memcmp(s_.data(), "\xEF\xBB\xBF", 3) == 0) pos_ = 3;
    line_start_ = pos_;
    ascii_ = true;
    for (char c : s_)
      if (static_cast<unsigned char>(c) >= 0x80) {
        ascii_ = false;
        break;
      }
  }

  StatusOr<std::vector<Token>> run() {
    indents_.push_back(0);
    bool at_line_start = true;
    while (true) {
      if (at_line_start && depth_ == 0) {
        Status st = handle_indent();
        if (!st.is_ok()) return st;
        at_line_start = false;
      }
      if (pos_ >= s_.size()) break;
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == ' ' || c == '\t' || c == '\f') {
        ++pos_;
        continue;
      }
      if (c == '\\') {
        size_t n = pos_ + 1;
        if (n < s_.size() && s_[n] == '\r') ++n;
        if (n < s_.size() && s_[n] == '\n') {
          pos_ = n + 1;
          new_line();
          continue;
        }
        if (n >= s_.size()) return error("unexpected end of file after line continuation character");
        return error("unexpected character after line continuation character");
      }
      if (c == '\r' || c == '\n') {
        const size_t b = pos_;
        if (c == '\r' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '\n') ++pos_;
        ++pos_;
        const bool logical = depth_ == 0 && line_has_code_;
        emit(logical ? TokKind::kNewline : TokKind::kNl, b, pos_);
        new_line();
        if (depth_ == 0) {
          at_line_start = true;
          line_has_code_ = false;
        }
        continue;
      }
      if (c == '#') {
        const size_t b = pos_;
        while (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
        emit(TokKind::kComment, b, pos_);
        continue;
      }
      line_has_code_ = true;
      if (is_id_start(c)) {
        const size_t b = pos_;
        while (pos_ < s_.size() && is_id_char(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        if (pos_ < s_.size() && (s_[pos_] == '\'' || s_[pos_] == '"') && is_string_prefix(s_.substr(b, pos_ - b))) {
          Status st = read_string(b);
          if (!st.is_ok()) return st;
          continue;
        }
        emit(TokKind::kName, b, pos_);
        continue;
      }
      if (is_digit(c) || (c == '.' && pos_ + 1 < s_.size() && is_digit(static_cast<unsigned char>(s_[pos_ + 1])))) {
        read_number();
        continue;
      }
      if (c == '\'' || c == '"') {
        Status st = read_string(pos_);
        if (!st.is_ok()) return st;
        continue;
      }
      Status st = read_op();
      if (!st.is_ok()) return st;
    }
    if (depth_ > 0) {
      const Token& open = toks_[open_stack_.back()];
      return Status(StatusCode::kInvalidArgument, "line " + std::to_string(open.line) + ":" + std::to_string(open.col + 1) +
                                                      ": '" + std::string(s_.substr(open.begin, 1)) + "' was never closed");
    }
    if (line_has_code_) emit(TokKind::kNewline, pos_, pos_);
    while (indents_.size() > 1) {
      indents_.pop_back();
      emit(TokKind::kDedent, pos_, pos_);
    }
    emit(TokKind::kEnd, pos_, pos_);
    return std::move(toks_);
  }

 private:
  Status error(const std::string& what) const {
    return Status(StatusCode::kInvalidArgument,
                  "line " + std::to_string(line_) + ":" + std::to_string(col_of(pos_) + 1) + ": " + what);
  }

  int32_t col_of(size_t off) const {
    if (ascii_ || off <= line_start_) return static_cast<int32_t>(off - line_start_);
    int32_t col = 0;
    for (size_t i = line_start_; i < off; ++i)
      if ((static_cast<unsigned char>(s_[i]) & 0xC0) != 0x80) ++col;
    return col;
  }

  void new_line() {
    ++line_;
    line_start_ = pos_;
  }

  void emit(TokKind kind, size_t b, size_t e) {
    Token t;
    t.kind = kind;
    t.begin = static_cast<int32_t>(b);
    t.end = static_cast<int32_t>(e);
    t.line = tok_line_ >= 0 ? tok_line_ : line_;
    t.col = tok_line_ >= 0 ? tok_col_ : col_of(b);
    t.end_line = line_;
    t.end_col = col_of(e);
    tok_line_ = -1;
    toks_.push_back(t);
  }

  // At the start of a logical line: measure indentation, emit INDENT/DEDENT. Blank and
  // comment-only lines do not count (CPython emits NL for them).
  Status handle_indent() {
    size_t p = pos_;
    int32_t width = 0;
    while (p < s_.size()) {
      if (s_[p] == ' ') ++width;
      else if (s_[p] == '\t') width = (width / 8 + 1) * 8;
      else if (s_[p] == '\f') width = 0;
      else break;
      ++p;
    }
    if (p >= s_.size() || s_[p] == '#' || s_[p] == '\n' || s_[p] == '\r') return Status::ok();
    if (s_[p] == '\\') return Status::ok();  // continuation right at the indent: CPython keeps the level
    if (width > indents_.back()) {
      indents_.push_back(width);
      emit(TokKind::kIndent, line_start_, p);
    } else {
      while (width < indents_.back()) {
        indents_.pop_back();
        emit(TokKind::kDedent, p, p);
      }
      if (width != indents_.back()) {
        pos_ = p;
        return error("unindent does not match any outer indentation level");
      }
    }
    pos_ = p;
    return Status::ok();
  }

  Status read_string(size_t b) {
    tok_line_ = line_;
    tok_col_ = col_of(b);
    size_t p = b;
    while (s_[p] != '\'' && s_[p] != '"') ++p;
    const char q = s_[p];
    const bool triple = p + 2 < s_.size() && s_[p + 1] == q && s_[p + 2] == q;
    p += triple ? 3 : 1;
    while (true) {
      if (p >= s_.size()) {
        pos_ = b;
        line_ = tok_line_;
        tok_line_ = -1;
        return error(triple ? "unterminated triple-quoted string literal" : "unterminated string literal");
      }
      const char c = s_[p];
      if (c == '\\') {
        // In raw strings too, a backslash keeps the next character from ending the string.
        if (p + 1 < s_.size()) {
          const char n = s_[p + 1];
          p += 2;
          if (n == '\r' && p < s_.size() && s_[p] == '\n') ++p;
          if (n == '\n' || n == '\r') {
            ++line_;
            line_start_ = p;
          }
          continue;
        }
        ++p;
        continue;
      }
      if (c == '\n' || c == '\r') {
        if (!triple) {
          pos_ = b;
          const int32_t l = tok_line_;
          tok_line_ = -1;
          line_ = l;
          return error("unterminated string literal");
        }
        if (c == '\r' && p + 1 < s_.size() && s_[p + 1] == '\n') ++p;
        ++p;
        ++line_;
        line_start_ = p;
        continue;
      }
      if (c == q) {
        if (!triple) {
          ++p;
          break;
        }
        if (p + 2 < s_.size() && s_[p + 1] == q && s_[p + 2] == q) {
          p += 3;
          break;
        }
      }
      ++p;
    }
    pos_ = p;
    emit(TokKind::kString, b, p);
    return Status::ok();
  }

  void read_number() {
    const size_t b = pos_;
    auto digits = [&](auto pred) {
      while (pos_ < s_.size() && (pred(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    };
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] != 0 && std::strchr("xXoObB", s_[pos_ + 1]) != nullptr) {
      pos_ += 2;
      digits([](unsigned char c) { return std::isxdigit(c) != 0; });
    } else {
      digits(is_digit);
      if (pos_ < s_.size() && s_[pos_] == '.') {
        ++pos_;
        digits(is_digit);
      }
      if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
        size_t p = pos_ + 1;
        if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
        if (p < s_.size() && is_digit(static_cast<unsigned char>(s_[p]))) {
          pos_ = p;
          digits(is_digit);
        }
      }
      if (pos_ < s_.size() && (s_[pos_] == 'j' || s_[pos_] == 'J')) ++pos_;
    }
    emit(TokKind::kNumber, b, pos_);
  }

  Status read_op() {
    const size_t b = pos_;
    const char c = s_[pos_];
    if (c == '(' || c == '[' || c == '{') {
      ++pos_;
      ++depth_;
      open_stack_.push_back(toks_.size());
      emit(TokKind::kOp, b, pos_);
      return Status::ok();
    }
    if (c == ')' || c == ']' || c == '}') {
      const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (open_stack_.empty()) return error(std::string("unmatched '") + c + "'");
      const Token& open = toks_[open_stack_.back()];
      if (s_[open.begin] != want)
        return error(std::string("closing parenthesis '") + c + "' does not match opening parenthesis '" +
                     s_[open.begin] + "' on line " + std::to_string(open.line));
      open_stack_.pop_back();
      --depth_;
      ++pos_;
      emit(TokKind::kOp, b, pos_);
      return Status::ok();
    }
    for (const char* op : kOps3)
      if (s_.substr(pos_, 3) == op) {
        pos_ += 3;
        emit(TokKind::kOp, b, pos_);
        return Status::ok();
      }
    if (s_.substr(pos_, 3) == ">>=" || s_.substr(pos_, 3) == "<<=") {
      pos_ += 3;
      emit(TokKind::kOp, b, pos_);
      return Status::ok();
    }
    for (const char* op : kOps2)
      if (s_.substr(pos_, 2) == op) {
        pos_ += 2;
        emit(TokKind::kOp, b, pos_);
        return Status::ok();
      }
    if (std::strchr("+-*/%@&|^~<>=.,:;!", c) != nullptr && c != 0) {
      ++pos_;
      emit(TokKind::kOp, b, pos_);
      return Status::ok();
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      const char hex[] = "0123456789abcdef";
      return error(std::string("invalid character \\x") + hex[u >> 4] + hex[u & 15] + " in source");
    }
    return error(std::string("invalid character '") + c + "' in source");
  }

  std::string_view s_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int32_t line_ = 1;
  int32_t tok_line_ = -1;  // start position of a multi-line token being read
  int32_t tok_col_ = 0;
  int depth_ = 0;
  bool line_has_code_ = false;
  bool ascii_ = true;
  std::vector<int32_t> indents_;
  std::vector<size_t> open_stack_;
  std::vector<Token> toks_;
};

}  // namespace

const char* tok_kind_name(TokKind kind) {
  switch (kind) {
    case TokKind::kName: return "NAME";
    case TokKind::kNumber: return "NUMBER";
    case TokKind::kString: return "STRING";
    case TokKind::kOp: return "OP";
    case TokKind::kComment: return "COMMENT";
    case TokKind::kNewline: return "NEWLINE";
    case TokKind::kNl: return "NL";
    case TokKind::kIndent: return "INDENT";
    case TokKind::kDedent: return "DEDENT";
    case TokKind::kEnd: return "ENDMARKER";
  }
  return "?";
}

bool is_keyword(std::string_view w) {
  static constexpr std::array<std::string_view, 35> kKeywords = {
      "False", "None",   "True",    "and",      "as",   "assert", "async", "await",  "break",
      "class", "continue", "def",   "del",      "elif", "else",   "except", "finally", "for",
      "from",  "global", "if",      "import",   "in",   "is",     "lambda", "nonlocal", "not",
      "or",    "pass",   "raise",   "return",   "try",  "while",  "with",  "yield"};
  for (std::string_view k : kKeywords)
    if (k == w) return true;
  return false;
}

StatusOr<std::vector<Token>> tokenize(std::string_view source) {
  if (source.size() > static_cast<size_t>(INT32_MAX))
    return resource_exhausted("source larger than 2 GiB");
  return Tokenizer(source).run();
}

}  // namespace ferry::scan
