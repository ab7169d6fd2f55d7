// A Python 3 tokenizer with exact positions, the first stage of `ferry scan`.
//
// It follows CPython's tokenize module (3.11): NAME, NUMBER, STRING (prefixes, triple quotes and
// f-strings as one token), OP, COMMENT, NEWLINE / NL, INDENT / DEDENT, line continuations.
// Positions are 1-based lines and 0-based columns counted in code points (as CPython reports
// them), plus byte offsets into the source for token-level rewriting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ferry::scan {

enum class TokKind { kName, kNumber, kString, kOp, kComment, kNewline, kNl, kIndent, kDedent, kEnd };

/// "NAME", "NUMBER", ... as Python's token.tok_name spells them.
const char* tok_kind_name(TokKind kind);

struct Token {
  TokKind kind = TokKind::kEnd;
  int32_t begin = 0;  // byte offsets into the source, [begin, end)
  int32_t end = 0;
  int32_t line = 0;   // 1-based
  int32_t col = 0;    // 0-based, code points
  int32_t end_line = 0;
  int32_t end_col = 0;
};

/// Splits `source` (UTF-8, BOM allowed) into tokens. Errors (unterminated string, unbalanced
/// bracket, inconsistent dedent) name the line and column.
StatusOr<std::vector<Token>> tokenize(std::string_view source);

/// True for Python's hard keywords (which never start an attribute chain).
bool is_keyword(std::string_view word);

}  // namespace ferry::scan
