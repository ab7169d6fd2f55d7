// Rule matching (see matcher.h). Sites first (first matching rule wins per site), then keyword
// arguments, then leftover string literals; a literal claimed by one finding is not reported again.
#include "scan/matcher.h"

#include <algorithm>
#include <set>

namespace ferry::scan {
namespace {

constexpr const char* kEnvFunctions[] = {"os.environ.get", "os.environ.setdefault", "os.environ.pop", "os.getenv",
                                         "os.putenv", "os.unsetenv"};

class Matcher {
 public:
  Matcher(const PyFile& f, const RuleSet& rules, const std::string& target) : f_(f), rules_(rules) {
    for (const Rule& r : rules.rules) {
      auto it = r.targets.find(target);
      actions_.push_back(it == r.targets.end() ? nullptr : &it->second);
    }
  }

  std::vector<Finding> run() {
    for (int32_t s = 0; s < static_cast<int32_t>(f_.sites.size()); ++s) match_site(s);
    match_keywords();
    match_strings();
    match_needs_import();
    std::stable_sort(out_.begin(), out_.end(), [&](const Finding& a, const Finding& b) {
      return f_.toks[a.anchor].begin < f_.toks[b.anchor].begin;
    });
    return std::move(out_);
  }

 private:
  // The rule's action on the target, or nullptr when the rule does not apply there.
  const TargetAction* active(const Rule& r) const { return actions_[&r - rules_.rules.data()]; }
  bool ignored(int32_t tok) const { return f_.ignored_lines.count(f_.toks[tok].line) > 0; }

  bool file_has(const RuleMatch& m) const {
    if (m.file_has_names.empty()) return true;
    for (const std::string& n : m.file_has_names)
      if (f_.names.count(n) > 0) return true;
    return false;
  }

  int32_t select_arg(const Site& s, const ArgCond& c) const {
    if (!c.kw.empty())
      for (size_t i = 0; i < s.args.size(); ++i)
        if (s.args[i].keyword == c.kw) return static_cast<int32_t>(i);
    if (c.pos >= 0) {
      int pos = 0;
      for (size_t i = 0; i < s.args.size(); ++i) {
        if (s.args[i].star) return -1;  // positions after *args are unknown
        if (!s.args[i].keyword.empty()) continue;
        if (pos++ == c.pos) return static_cast<int32_t>(i);
      }
    }
    return -1;
  }

  // std::regex backtracks recursively: long literals (embedded data) could exhaust the stack,
  // and no device, backend or variable name is that long.
  static constexpr size_t kMaxLiteral = 256;

  bool literal_matches(int32_t tok, const std::regex& re) const {
    const std::string_view t = f_.text_of(tok);
    return t.size() <= kMaxLiteral && std::regex_match(string_value(t), re);
  }

  std::vector<int32_t> literals_matching(const std::vector<int32_t>& toks, const std::regex& re) const {
    std::vector<int32_t> out;
    for (int32_t t : toks)
      if (claimed_.count(t) == 0 && literal_matches(t, re)) out.push_back(t);
    return out;
  }

  bool args_hold(const Site& s, const RuleMatch& m, Finding* fd) const {
    for (const ArgCond& c : m.args) {
      const int32_t i = select_arg(s, c);
      if (c.absent) {
        if (i >= 0) return false;
        continue;
      }
      if (i < 0) return false;
      const Arg& a = s.args[i];
      if (c.literal) {
        std::vector<int32_t> lits = literals_matching(a.strings, *c.literal);
        if (lits.empty()) return false;
        fd->literals.insert(fd->literals.end(), lits.begin(), lits.end());
      }
      const std::string text(f_.text.substr(f_.toks[a.first].begin, f_.toks[a.last - 1].end - f_.toks[a.first].begin));
      if (c.text && !std::regex_search(text, *c.text)) return false;
      if (c.text_not && std::regex_search(text, *c.text_not)) return false;
      if (fd->arg < 0) fd->arg = i;
    }
    return true;
  }

  bool names_glob(const RuleMatch& m, const std::string& q) const {
    for (const std::string& n : m.names)
      if (glob_match(n, q)) return true;
    return false;
  }

  // The env var literal a site reads or writes, or -1.
  int32_t env_key(const Site& s) const {
    if (s.kind == SiteKind::kSubscript && s.qual == "os.environ") return s.subscript_key;
    if (s.kind != SiteKind::kName || !s.is_call || s.args.empty() || !s.args[0].keyword.empty()) return -1;
    bool env = false;
    for (const char* fn : kEnvFunctions) env = env || s.qual == fn;
    const Arg& a = s.args[0];
    if (!env || a.strings.size() != 1 || a.last - a.first != 1) return -1;
    return a.strings[0];
  }

  bool site_matches(const Site& s, const Rule& r, Finding* fd) const {
    const RuleMatch& m = r.match;
    switch (m.kind) {
      case MatchKind::kName:
        if (s.kind != SiteKind::kName && s.kind != SiteKind::kSubscript) return false;
        if (!names_glob(m, s.qual)) return false;
        break;
      case MatchKind::kImport:
        if (s.kind != SiteKind::kImport || !names_glob(m, s.qual)) return false;
        break;
      case MatchKind::kMember:
        if (s.kind != SiteKind::kMember || std::find(m.names.begin(), m.names.end(), s.member) == m.names.end())
          return false;
        break;
      case MatchKind::kEnv: {
        const int32_t key = env_key(s);
        if (key < 0 || claimed_.count(key) > 0 || !literal_matches(key, *m.literal))
          return false;
        fd->literals.push_back(key);
        break;
      }
      default: return false;
    }
    if (m.call && *m.call != s.is_call) return false;
    if (m.decorator && !s.is_decorator) return false;
    if (!m.args.empty() && (!s.is_call || !args_hold(s, m, fd))) return false;
    return file_has(m);
  }

  void add(Finding fd) {
    for (int32_t t : fd.literals) claimed_.insert(t);
    for (const Finding& o : out_)
      if (o.rule == fd.rule && o.anchor == fd.anchor) return;  // `from m import a, b`: one finding
    out_.push_back(std::move(fd));
  }

  void match_site(int32_t si) {
    const Site& s = f_.sites[si];
    if (ignored(s.anchor)) return;
    for (const Rule& r : rules_.rules) {
      const TargetAction* act = active(r);
      if (act == nullptr) continue;
      Finding fd;
      if (!site_matches(s, r, &fd)) continue;
      fd.rule = &r;
      fd.action = act;
      fd.site = si;
      fd.anchor = s.anchor;
      // A call spread over several lines is reported at the argument the rule picked (the
      // line --fix edits), e.g. `pin_memory=True` on its own line of a DataLoader(...) call.
      if (fd.arg >= 0) {
        const Arg& a = s.args[fd.arg];
        const int32_t at = a.keyword_tok >= 0 ? a.keyword_tok : a.first;
        if (f_.toks[at].line != f_.toks[s.anchor].line) {
          if (ignored(at)) return;
          fd.anchor = at;
        }
      }
      add(std::move(fd));
      return;
    }
  }

  void match_keywords() {
    for (int32_t si = 0; si < static_cast<int32_t>(f_.sites.size()); ++si) {
      const Site& s = f_.sites[si];
      if (!s.is_call) continue;
      for (int32_t ai = 0; ai < static_cast<int32_t>(s.args.size()); ++ai) {
        const Arg& a = s.args[ai];
        if (a.keyword.empty() || ignored(a.keyword_tok)) continue;
        for (const Rule& r : rules_.rules) {
          const TargetAction* act = active(r);
          if (act == nullptr || r.match.kind != MatchKind::kKeyword) continue;
          if (std::find(r.match.names.begin(), r.match.names.end(), a.keyword) == r.match.names.end()) continue;
          Finding fd;
          fd.literals = literals_matching(a.strings, *r.match.literal);
          if (fd.literals.empty() || !file_has(r.match)) continue;
          fd.rule = &r;
          fd.action = act;
          fd.site = si;
          fd.arg = ai;
          fd.anchor = a.keyword_tok;
          add(std::move(fd));
          break;
        }
      }
    }
  }

  void match_strings() {
    for (int32_t t = 0; t < static_cast<int32_t>(f_.toks.size()); ++t) {
      if (f_.toks[t].kind != TokKind::kString || claimed_.count(t) > 0 || f_.docstrings.count(t) > 0 || ignored(t))
        continue;
      if (f_.toks[t].end - f_.toks[t].begin > static_cast<int32_t>(kMaxLiteral)) continue;
      std::string value;
      bool decoded = false;
      for (const Rule& r : rules_.rules) {
        const TargetAction* act = active(r);
        if (act == nullptr || r.match.kind != MatchKind::kString) continue;
        if (!decoded) {
          value = string_value(f_.text_of(t));
          decoded = true;
        }
        if (!std::regex_match(value, *r.match.literal) || !file_has(r.match)) continue;
        Finding fd;
        fd.rule = &r;
        fd.action = act;
        fd.literals = {t};
        fd.anchor = t;
        add(std::move(fd));
        break;
      }
    }
  }

  // File-level rules: the file has other findings worth fixing and lacks an import they need.
  void match_needs_import() {
    bool worth = false;
    for (const Finding& fd : out_) worth = worth || fd.action->severity == Severity::kBreaks || fd.action->rewrite;
    if (!worth) return;
    for (const Rule& r : rules_.rules) {
      const TargetAction* act = active(r);
      if (act == nullptr || r.match.kind != MatchKind::kNeedsImport) continue;
      bool has_module = false;
      for (const Site& s : f_.sites)
        has_module = has_module || (s.kind == SiteKind::kImport && (s.qual == r.match.module ||
                                                                    s.qual.rfind(r.match.module + ".", 0) == 0));
      if (has_module) continue;
      for (int32_t si = 0; si < static_cast<int32_t>(f_.sites.size()); ++si) {
        const Site& s = f_.sites[si];
        if (s.kind != SiteKind::kImport || std::find(r.match.names.begin(), r.match.names.end(), s.qual) == r.match.names.end())
          continue;
        if (ignored(s.anchor)) break;
        Finding fd;
        fd.rule = &r;
        fd.action = act;
        fd.site = si;
        fd.anchor = s.anchor;
        add(std::move(fd));
        break;
      }
    }
  }

  const PyFile& f_;
  const RuleSet& rules_;
  std::vector<const TargetAction*> actions_;  // by rule index
  std::set<int32_t> claimed_;
  std::vector<Finding> out_;
};

}  // namespace

const char* fix_state_name(FixState s) {
  switch (s) {
    case FixState::kNotTried: return "not-tried";
    case FixState::kNothing: return "nothing-to-do";
    case FixState::kFixed: return "fixed";
    case FixState::kAlready: return "already-fixed";
    case FixState::kTodo: return "todo";
    case FixState::kManual: return "manual";
  }
  return "?";
}

std::vector<Finding> match_rules(const PyFile& file, const RuleSet& rules, const std::string& target) {
  return Matcher(file, rules, target).run();
}

bool needs_hand_work(const Finding& f) {
  if (f.fix == FixState::kTodo || f.fix == FixState::kManual) return true;
  return f.fix == FixState::kNotTried && f.action->manual;
}

}  // namespace ferry::scan
