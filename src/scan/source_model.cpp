// Builds a PyFile from tokens (see source_model.h): statements, imports and aliases, then sites.
#include "scan/source_model.h"

namespace ferry::scan {
namespace {

// Works on "code" tokens only (no comments, NL, INDENT/DEDENT); positions index into `code`.
class Analyzer {
 public:
  explicit Analyzer(PyFile* f) : f_(*f) {}

  void run() {
    int depth = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(f_.toks.size()); ++i) {
      const Token& t = f_.toks[i];
      switch (t.kind) {
        case TokKind::kIndent: ++depth; break;
        case TokKind::kDedent: --depth; break;
        case TokKind::kComment:
          if (f_.text_of(i).find("ferry: ignore") != std::string_view::npos) f_.ignored_lines.insert(t.line);
          break;
        case TokKind::kNl:
        case TokKind::kEnd: break;
        default:
          code_.push_back(i);
          depth_.push_back(depth);
          if (t.kind == TokKind::kName) f_.names.insert(f_.text_of(i));
      }
    }
    match_.assign(code_.size(), -1);
    std::vector<int32_t> stack;
    for (int32_t k = 0; k < static_cast<int32_t>(code_.size()); ++k) {
      const std::string_view s = text(k);
      if (kind(k) != TokKind::kOp) continue;
      if (s == "(" || s == "[" || s == "{") stack.push_back(k);
      else if ((s == ")" || s == "]" || s == "}") && !stack.empty()) {
        match_[stack.back()] = k;
        match_[k] = stack.back();
        stack.pop_back();
      }
    }
    split_statements();
    for (const auto& [s, e] : stmts_) read_imports(s, e);
    consumed_.assign(code_.size(), false);
    for (const auto& [s, e] : stmts_) {
      if (is(s, "import") || is(s, "from")) continue;
      read_names(s, e);
    }
    for (const auto& [s, e] : stmts_) {
      if (is(s, "import") || is(s, "from")) continue;
      read_members(s, e);
    }
    find_top_level_layout();
  }

 private:
  TokKind kind(int32_t k) const { return f_.toks[code_[k]].kind; }
  std::string_view text(int32_t k) const { return f_.text_of(code_[k]); }
  bool is(int32_t k, std::string_view s) const {
    return k < static_cast<int32_t>(code_.size()) && (kind(k) == TokKind::kOp || kind(k) == TokKind::kName) &&
           text(k) == s;
  }
  bool is_name(int32_t k) const { return k < static_cast<int32_t>(code_.size()) && kind(k) == TokKind::kName; }

  // Statements: logical lines split at top-level ';'. [s, e) excludes the NEWLINE.
  void split_statements() {
    int32_t s = 0;
    int depth = 0;
    for (int32_t k = 0; k < static_cast<int32_t>(code_.size()); ++k) {
      if (kind(k) == TokKind::kOp) {
        const std::string_view t = text(k);
        if (t == "(" || t == "[" || t == "{") ++depth;
        else if (t == ")" || t == "]" || t == "}") --depth;
      }
      const bool semi = depth == 0 && kind(k) == TokKind::kOp && text(k) == ";";
      if (kind(k) == TokKind::kNewline || semi) {
        if (k > s) stmts_.push_back({s, k});
        if (kind(k) == TokKind::kNewline) newline_of_.push_back(k);
        s = k + 1;
      }
    }
  }

  // Reads a dotted name at k; returns the position after it.
  int32_t dotted(int32_t k, int32_t e, std::vector<Segment>* segs) const {
    while (k < e && is_name(k)) {
      segs->push_back({std::string(text(k)), code_[k]});
      if (k + 2 < e && is(k + 1, ".") && is_name(k + 2)) k += 2;
      else return k + 1;
    }
    return k;
  }

  static std::string join(const std::vector<Segment>& segs) {
    std::string s;
    for (const Segment& g : segs) s += (s.empty() ? "" : ".") + g.text;
    return s;
  }

  void add_import_site(const std::vector<Segment>& segs, int32_t anchor_k, int32_t last_k, int32_t bound_tok) {
    Site site;
    site.kind = SiteKind::kImport;
    site.segments = segs;
    site.qual = join(segs);
    site.anchor = code_[anchor_k];
    site.first_tok = code_[anchor_k];
    site.last_tok = code_[last_k];
    site.bound_tok = bound_tok;
    f_.sites.push_back(std::move(site));
  }

  void read_imports(int32_t s, int32_t e) {
    if (is(s, "import")) {
      int32_t k = s + 1;
      while (k < e) {
        std::vector<Segment> segs;
        const int32_t start = k;
        k = dotted(k, e, &segs);
        if (segs.empty()) return;
        std::string bound = segs[0].text, target = segs[0].text;
        if (is(k, "as") && is_name(k + 1)) {
          bound = std::string(text(k + 1));
          target = join(segs);
          k += 2;
        }
        f_.aliases[bound] = target;
        add_import_site(segs, start, k - 1, -1);
        if (!is(k, ",")) break;
        ++k;
      }
      return;
    }
    if (is(s, "from")) {
      int32_t k = s + 1;
      bool relative = false;
      while (k < e && (is(k, ".") || is(k, "..."))) {
        relative = true;
        ++k;
      }
      std::vector<Segment> mod;
      const int32_t mod_start = k;
      k = dotted(k, e, &mod);
      if (!is(k, "import")) return;
      ++k;
      if (is(k, "(")) ++k;
      while (k < e && is_name(k)) {
        const int32_t name_k = k;
        std::string bound(text(k));
        const std::string name = bound;
        int32_t bound_tok = code_[k];
        ++k;
        if (is(k, "as") && is_name(k + 1)) {
          bound = std::string(text(k + 1));
          bound_tok = -1;
          k += 2;
        }
        if (!relative) {
          std::vector<Segment> segs = mod;
          segs.push_back({name, code_[name_k]});
          f_.aliases[bound] = join(segs);
          add_import_site(segs, mod.empty() ? name_k : mod_start, k - 1, bound_tok);
        }
        if (!is(k, ",")) break;
        ++k;
      }
      return;
    }
    // `name = dotted.name` re-binds a module or function under a new name: follow it.
    if (e - s >= 3 && is_name(s) && is(s + 1, "=") && is_name(s + 2)) {
      std::vector<Segment> segs;
      const int32_t k = dotted(s + 2, e, &segs);
      auto it = f_.aliases.find(segs[0].text);
      if (k == e && it != f_.aliases.end()) {
        std::string q = it->second;
        for (size_t i = 1; i < segs.size(); ++i) q += "." + segs[i].text;
        f_.aliases[std::string(text(s))] = q;
      }
    }
  }

  // Splits the arguments between parentheses at code positions lp..rp.
  std::vector<Arg> read_args(int32_t lp, int32_t rp) const {
    std::vector<Arg> args;
    int32_t k = lp + 1;
    while (k < rp) {
      int32_t e = k;
      while (e < rp && !is(e, ",")) e = (match_[e] > e ? match_[e] : e) + 1;
      if (e > k) {
        Arg a;
        int32_t v = k;
        if (is(k, "*") || is(k, "**")) {
          a.star = true;
          v = k + 1;
        } else if (is_name(k) && k + 1 < e && is(k + 1, "=")) {
          a.keyword = std::string(text(k));
          a.keyword_tok = code_[k];
          v = k + 2;
        }
        if (v < e) {
          a.first = code_[v];
          a.last = code_[e - 1] + 1;
          for (int32_t j = v; j < e; ++j)
            if (kind(j) == TokKind::kString) a.strings.push_back(code_[j]);
          args.push_back(std::move(a));
        }
      }
      k = e + 1;
    }
    return args;
  }

  // Fills call/subscript details for a site whose expression ends at code position `end`
  // (the token after it decides: '(' call, '[' subscript).
  void finish_site(Site* site, int32_t after) {
    if (is(after, "(") && match_[after] > after) {
      site->is_call = true;
      site->lparen = code_[after];
      site->rparen = code_[match_[after]];
      site->last_tok = site->rparen;
      site->args = read_args(after, match_[after]);
    } else if (site->kind == SiteKind::kName && is(after, "[") && match_[after] > after) {
      site->kind = SiteKind::kSubscript;
      if (after + 1 < match_[after] && kind(after + 1) == TokKind::kString) site->subscript_key = code_[after + 1];
    }
  }

  void read_names(int32_t s, int32_t e) {
    const bool decorator = is(s, "@");
    for (int32_t k = s; k < e; ++k) {
      if (!is_name(k) || is_keyword(text(k))) continue;
      if (k > s && (is(k - 1, ".") || is(k - 1, "def") || is(k - 1, "class"))) continue;
      auto it = f_.aliases.find(std::string(text(k)));
      if (it == f_.aliases.end()) continue;
      if (k > s && is(k + 1, "=") && (is(k - 1, "(") || is(k - 1, ","))) continue;  // keyword argument name
      Site site;
      site.kind = SiteKind::kName;
      size_t dot = 0;
      const std::string& target = it->second;
      std::vector<Segment> head;
      for (size_t p = 0; p <= target.size(); ++p)
        if (p == target.size() || target[p] == '.') {
          head.push_back({target.substr(dot, p - dot), -1});
          dot = p + 1;
        }
      if (head.size() == 1 && head[0].text == text(k)) head[0].tok = code_[k];
      site.segments = head;
      int32_t j = k;
      while (is(j + 1, ".") && is_name(j + 2)) {
        consumed_[j + 1] = true;
        site.segments.push_back({std::string(text(j + 2)), code_[j + 2]});
        j += 2;
      }
      site.qual = join(site.segments);
      site.anchor = site.first_tok = code_[k];
      site.last_tok = code_[j];
      site.is_decorator = decorator && k == s + 1;
      finish_site(&site, j + 1);
      f_.sites.push_back(std::move(site));
      k = j;
    }
  }

  void read_members(int32_t s, int32_t e) {
    for (int32_t k = s; k + 1 < e; ++k) {
      if (!is(k, ".") || consumed_[k] || !is_name(k + 1)) continue;
      Site site;
      site.kind = SiteKind::kMember;
      site.member = std::string(text(k + 1));
      site.anchor = code_[k + 1];
      // The receiver starts at the chain's head: walk back over names, dots and brackets.
      int32_t b = k - 1;
      while (b > s) {
        if (kind(b) == TokKind::kOp && (text(b) == ")" || text(b) == "]") && match_[b] >= 0) {
          b = match_[b];
          if (b > s && (is_name(b - 1) || is(b - 1, ")") || is(b - 1, "]")) && !is_keyword(text(b - 1))) --b;
          else break;
        } else if (is(b - 1, ".") && (is_name(b) || kind(b) == TokKind::kName)) {
          b -= 2;
        } else {
          break;
        }
      }
      site.first_tok = code_[b < s ? s : b];
      site.last_tok = code_[k + 1];
      site.is_decorator = is(s, "@") && b <= s + 1;
      finish_site(&site, k + 2);
      f_.sites.push_back(std::move(site));
    }
  }

  // Module-level imports before the first other statement, and where that statement starts.
  void find_top_level_layout() {
    bool seen_doc = false;
    size_t line_idx = 0;
    for (const auto& [s, e] : stmts_) {
      while (line_idx < newline_of_.size() && newline_of_[line_idx] < e) ++line_idx;
      const bool top = depth_[s] == 0;
      if (e - s == 1 && kind(s) == TokKind::kString) {
        f_.docstrings.insert(code_[s]);
        if (top && !seen_doc && f_.first_code_tok < 0) {
          seen_doc = true;
          continue;
        }
      } else if (e - s > 1 && kind(s) == TokKind::kString) {
        bool all = true;
        for (int32_t k = s; k < e && all; ++k) all = kind(k) == TokKind::kString;
        if (all)
          for (int32_t k = s; k < e; ++k) f_.docstrings.insert(code_[k]);
      }
      if (!top) continue;
      if (f_.first_code_tok < 0) f_.first_code_tok = code_[s];
      if (f_.first_top_stmt_after_imports >= 0) continue;
      if (is(s, "import") || is(s, "from")) {
        ImportStmt st;
        st.first_tok = code_[s];
        st.newline_tok = line_idx < newline_of_.size() ? code_[newline_of_[line_idx]] : code_[e - 1];
        std::vector<Segment> segs;
        dotted(s + 1, e, &segs);
        st.modules.push_back(join(segs));
        f_.top_imports.push_back(std::move(st));
      } else {
        f_.first_top_stmt_after_imports = code_[s];
      }
    }
  }

  PyFile& f_;
  std::vector<int32_t> code_;
  std::vector<int> depth_;
  std::vector<int32_t> match_;
  std::vector<std::pair<int32_t, int32_t>> stmts_;
  std::vector<int32_t> newline_of_;
  std::vector<bool> consumed_;
};

}  // namespace

bool PyFile::binds(std::string_view name, std::string_view dotted) const {
  auto it = aliases.find(std::string(name));
  return it != aliases.end() && it->second == dotted;
}

StatusOr<PyFile> analyze_python(std::string_view text) {
  PyFile f;
  f.text = text;
  ASSIGN_OR_RETURN(f.toks, tokenize(text));
  Analyzer(&f).run();
  return f;
}

std::string string_value(std::string_view t) {
  size_t p = 0;
  bool raw = false;
  while (p < t.size() && t[p] != '\'' && t[p] != '"') {
    if ((t[p] | 0x20) == 'r') raw = true;
    ++p;
  }
  if (p >= t.size()) return {};
  const char q = t[p];
  const size_t quote = (p + 2 < t.size() && t[p + 1] == q && t[p + 2] == q && t.size() - p >= 6) ? 3 : 1;
  if (t.size() < p + 2 * quote) return {};
  std::string_view body = t.substr(p + quote, t.size() - p - 2 * quote);
  if (raw) return std::string(body);
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

}  // namespace ferry::scan
