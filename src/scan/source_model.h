// What `ferry scan` knows about one Python file after tokenizing it: the names its imports bind,
// and every "site" a rule can match — a resolved dotted name (`torch.cuda.synchronize`, through
// aliases such as `import torch.cuda as tc`), an attribute on any other receiver (`x.cuda()`),
// an import, a subscript (`os.environ["NCCL_DEBUG"]`) — with call arguments split into
// positional and keyword arguments. Strings and comments are tokens, so they never look like code.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <unordered_set>
#include <string>
#include <string_view>
#include <vector>

#include "scan/tokenizer.h"

namespace ferry::scan {

/// One argument of a call: `value` tokens are [first, last) in the token vector.
struct Arg {
  std::string keyword;           // empty for a positional argument
  int32_t keyword_tok = -1;      // the keyword's NAME token
  bool star = false;             // *args / **kwargs
  int32_t first = 0;
  int32_t last = 0;
  std::vector<int32_t> strings;  // STRING tokens anywhere inside the value
};

/// One part of a dotted name and the NAME token that spells it (-1 when it comes from an alias).
struct Segment {
  std::string text;
  int32_t tok = -1;
};

enum class SiteKind {
  kName,       // a dotted name whose head an import binds: torch.cuda.synchronize
  kMember,     // `.name` on anything else: model.cuda(), x.is_cuda
  kImport,     // an imported module or name: from torch.cuda.amp import autocast
  kSubscript,  // a resolved name subscripted: os.environ["CUDA_VISIBLE_DEVICES"]
};

struct Site {
  SiteKind kind = SiteKind::kName;
  std::string qual;               // resolved dotted name (kName, kImport, kSubscript)
  std::vector<Segment> segments;  // `qual` split at dots
  std::string member;             // kMember: the attribute name
  int32_t anchor = 0;             // token whose position is reported
  int32_t first_tok = 0;          // the whole expression, tokens [first_tok, last_tok]
  int32_t last_tok = 0;
  bool is_call = false;
  bool is_decorator = false;
  int32_t lparen = -1;  // call parentheses (tokens)
  int32_t rparen = -1;
  std::vector<Arg> args;
  int32_t subscript_key = -1;  // kSubscript: the key's STRING token, if a literal
  int32_t bound_tok = -1;      // kImport from `from M import N` without `as`: N (the bound name)
};

/// A top-level `import` / `from ... import` statement (where start-up code may be inserted).
struct ImportStmt {
  int32_t first_tok = 0;
  int32_t newline_tok = 0;  // the NEWLINE token ending the statement
  std::vector<std::string> modules;
};

struct PyFile {
  std::string_view text;
  std::vector<Token> toks;
  std::map<std::string, std::string> aliases;  // local name -> dotted name it is bound to
  std::vector<Site> sites;
  std::vector<ImportStmt> top_imports;       // module-level imports before the first other statement
  std::set<int32_t> docstrings;              // STRING tokens that are whole expression statements
  std::set<int32_t> ignored_lines;           // lines carrying "# ferry: ignore"
  std::unordered_set<std::string_view> names;  // every NAME spelled in the file (views into text)
  int32_t first_code_tok = -1;               // first token of the first statement after the docstring
  int32_t first_top_stmt_after_imports = -1; // first module-level statement that is not an import

  std::string_view text_of(int32_t tok) const { return text.substr(toks[tok].begin, toks[tok].end - toks[tok].begin); }
  std::string_view text_of(int32_t first, int32_t last_inclusive) const {
    return text.substr(toks[first].begin, toks[last_inclusive].end - toks[first].begin);
  }
  /// True if some import binds `name` to exactly `dotted` (e.g. "torch" -> "torch").
  bool binds(std::string_view name, std::string_view dotted) const;
};

/// Tokenizes and analyzes `text` (which must outlive the result).
StatusOr<PyFile> analyze_python(std::string_view text);

/// The value of a STRING token without prefix and quotes; escapes decoded unless raw.
std::string string_value(std::string_view token_text);

}  // namespace ferry::scan
