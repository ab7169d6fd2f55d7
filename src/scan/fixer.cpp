// The rewrites of `ferry scan --fix` (see fixer.h). Each rewrite op is a small function from a
// finding to edits, or to the reason it is not safe.
#include "scan/fixer.h"

#include <algorithm>
#include <regex>

namespace ferry::scan {
namespace {

using nlohmann::json;

// The device variable the generic and cpu fixes use, defined once after the imports.
constexpr const char* kDeviceName = "DEVICE";
constexpr const char* kDeviceMarker = "# ferry: ignore (device chosen at start-up)";

struct Planned {
  std::vector<Edit> edits;
  std::string todo;  // non-empty: not safe, by hand
  bool already = false;
};

Planned todo(std::string why) {
  Planned p;
  p.todo = std::move(why);
  return p;
}

class Fixer {
 public:
  Fixer(const PyFile& f, const std::string& target) : f_(f), target_(target) {}

  Planned plan(const Finding& fd) {
    const Rewrite& rw = *fd.action->rewrite;
    const std::string& op = rw.op;
    const Site* site = fd.site >= 0 ? &f_.sites[fd.site] : nullptr;
    if (op == "rename") return rename(fd, site, rw.params);
    if (op == "replace_literal") return replace_literal(fd, rw.params);
    if (op == "replace_arg") return replace_arg(fd, site, rw.params);
    if (op == "replace_call") return replace_call(site, rw.params);
    if (op == "to_device") return to_device(site, rw.params);
    if (op == "add_kw") return add_kw(site, rw.params);
    if (op == "replace_callee") return replace_callee(site, rw.params);
    if (op == "insert_import") return insert_import(rw.params);
    return todo("unknown rewrite '" + op + "' in the rules file");
  }

 private:
  Edit edit_tok(int32_t tok, std::string text) const { return Edit{f_.toks[tok].begin, f_.toks[tok].end, std::move(text)}; }

  Planned rename(const Finding& fd, const Site* s, const json& p) {
    const std::string from = p.value("from", ""), to = p.value("to", "");
    Planned out;
    if (s == nullptr) return todo("nothing to rename");
    if (s->kind == SiteKind::kMember) {
      if (s->member != from) return todo("member is not '" + from + "'");
      out.edits.push_back(edit_tok(s->anchor, to));
      return out;
    }
    for (const Segment& g : s->segments) {
      if (g.text != from) continue;
      if (g.tok < 0) {
        out.already = true;  // spelled through an alias: its import carries the fix
        return out;
      }
      // `from torch import cuda` binds the name itself: keep the name, import the new module.
      out.edits.push_back(edit_tok(g.tok, g.tok == s->bound_tok ? to + " as " + from : to));
      return out;
    }
    return todo("'" + from + "' is not spelled in this expression");
  }

  Planned replace_literal(const Finding& fd, const json& p) {
    std::regex re;
    try {
      re = std::regex(p.value("from", ""));
    } catch (const std::regex_error&) {
      return todo("bad 'from' pattern in the rules file");
    }
    const std::string to = p.value("to", "");
    Planned out;
    for (int32_t t : fd.literals) {
      const std::string_view tok = f_.text_of(t);
      size_t q = 0;
      while (q < tok.size() && tok[q] != '\'' && tok[q] != '"') ++q;
      const size_t quote = (tok.size() - q >= 6 && tok[q + 1] == tok[q] && tok[q + 2] == tok[q]) ? 3 : 1;
      const std::string body(tok.substr(q + quote, tok.size() - q - 2 * quote));
      const std::string fixed = std::regex_replace(body, re, to, std::regex_constants::format_first_only);
      if (fixed == body) continue;
      out.edits.push_back(edit_tok(t, std::string(tok.substr(0, q + quote)) + fixed + std::string(tok.substr(tok.size() - quote))));
    }
    if (out.edits.empty()) return todo("the literal does not contain what the rule replaces");
    return out;
  }

  Planned replace_arg(const Finding& fd, const Site* s, const json& p) {
    if (s == nullptr || fd.arg < 0) return todo("no argument to replace");
    const Arg& a = s->args[fd.arg];
    const int32_t b = f_.toks[a.first].begin, e = f_.toks[a.last - 1].end;
    if (p.contains("if_text")) {
      const std::string text(f_.text.substr(b, e - b));
      if (!std::regex_match(text, std::regex(p["if_text"].get<std::string>())))
        return todo("the value `" + text + "` is an expression: choose the replacement by hand");
    }
    Planned out;
    out.edits.push_back(Edit{b, e, p.value("with", "")});
    return out;
  }

  Planned replace_call(const Site* s, const json& p) {
    if (s == nullptr || !s->is_call || s->kind != SiteKind::kName) return todo("not a call");
    if (s->args.size() > static_cast<size_t>(p.value("max_args", 1)))
      return todo("the call has more arguments than the replacement keeps (a device index?)");
    if (p.contains("if_text") && !s->args.empty()) {
      const Arg& a = s->args[0];
      const std::string text(f_.text.substr(f_.toks[a.first].begin, f_.toks[a.last - 1].end - f_.toks[a.first].begin));
      if (!std::regex_match(text, std::regex(p["if_text"].get<std::string>())))
        return todo("`" + text + "` names a specific device: map it to the device variable by hand");
    }
    Planned out;
    out.edits.push_back(Edit{f_.toks[s->first_tok].begin, f_.toks[s->rparen].end, p.value("with", "")});
    return out;
  }

  Planned to_device(const Site* s, const json& p) {
    if (s == nullptr || s->kind != SiteKind::kMember || !s->is_call) return todo("not a method call");
    for (const Arg& a : s->args)
      if (a.keyword.empty())
        return todo("`." + s->member + "(" + std::string(f_.text.substr(f_.toks[a.first].begin, f_.toks[a.last - 1].end - f_.toks[a.first].begin)) +
                    ")` names a device: map it to the device variable by hand (per-process device?)");
    const std::string dev = p.value("device", kDeviceName);
    Planned out;
    out.edits.push_back(edit_tok(s->anchor, "to"));
    const int32_t at = f_.toks[s->lparen].end;
    out.edits.push_back(Edit{at, at, s->args.empty() ? dev : dev + ", "});
    return out;
  }

  Planned add_kw(const Site* s, const json& p) {
    if (s == nullptr || !s->is_call) return todo("not a call");
    const std::string unless = p.value("unless", "");
    for (const Arg& a : s->args) {
      if (!unless.empty() && a.keyword == unless) {
        Planned out;
        out.already = true;
        return out;
      }
      if (a.star) return todo("the call passes *args/**kwargs: add `" + p.value("text", "") + "` by hand");
    }
    Planned out;
    const std::string text = p.value("text", "");
    if (s->args.empty()) {
      const int32_t at = f_.toks[s->lparen].end;
      out.edits.push_back(Edit{at, at, text});
    } else {
      const int32_t at = f_.toks[s->args.back().last - 1].end;
      out.edits.push_back(Edit{at, at, ", " + text});
    }
    return out;
  }

  Planned replace_callee(const Site* s, const json& p) {
    if (s == nullptr || s->kind != SiteKind::kName || !s->is_call) return todo("not a call");
    const std::string with = p.value("with", "");
    const std::string root = with.substr(0, with.find('.'));
    if (!f_.binds(root, root)) return todo("`" + root + "` is not imported under its own name here");
    for (const Arg& a : s->args)
      if (a.star) return todo("the call passes *args/**kwargs");
    Planned out;
    const int32_t callee_end = f_.toks[s->lparen].begin;
    std::string_view callee = f_.text.substr(f_.toks[s->first_tok].begin, callee_end - f_.toks[s->first_tok].begin);
    while (!callee.empty() && (callee.back() == ' ' || callee.back() == '\t')) callee.remove_suffix(1);
    out.edits.push_back(Edit{f_.toks[s->first_tok].begin, f_.toks[s->first_tok].begin + static_cast<int32_t>(callee.size()), with});
    const std::string ins = p.value("insert_arg", "");
    if (!ins.empty()) {
      const int32_t at = f_.toks[s->lparen].end;
      out.edits.push_back(Edit{at, at, s->args.empty() ? ins : ins + ", "});
    }
    return out;
  }

  Planned insert_import(const json& p) {
    const std::string after = p.value("after", "torch"), text = p.value("text", "");
    for (const ImportStmt& st : f_.top_imports)
      for (const std::string& m : st.modules)
        if (m == after && f_.toks[st.first_tok].kind == TokKind::kName && f_.text_of(st.first_tok) == "import") {
          const int32_t at = f_.toks[st.newline_tok].end;
          const bool eol = f_.toks[st.newline_tok].end > f_.toks[st.newline_tok].begin;
          Planned out;
          out.edits.push_back(Edit{at, at, eol ? text + "\n" : "\n" + text});
          return out;
        }
    return todo("no module-level `import " + after + "` to put `" + text + "` after");
  }

  const PyFile& f_;
  const std::string& target_;
};

bool mentions_device(const std::string& s) {
  const size_t p = s.find(kDeviceName);
  return p != std::string::npos;
}

// The start-up definition of DEVICE, or an error saying why it cannot be added.
StatusOr<Edit> device_prelude(const PyFile& f, const std::string& target) {
  if (!f.binds("torch", "torch")) return invalid_argument("`torch` is not imported under its own name");
  if (f.top_imports.empty()) return invalid_argument("no module-level imports to put the device variable after");
  if (f.names.count(kDeviceName) > 0) return invalid_argument("the file already uses the name DEVICE");
  const ImportStmt& last = f.top_imports.back();
  const Token& nl = f.toks[last.newline_tok];
  std::string text = nl.end > nl.begin ? "" : "\n";
  std::string os = "os";
  if (!f.binds("os", "os")) text += "import os\n";
  if (target == "cpu")
    text += std::string(kDeviceName) + " = torch.device(" + os + ".environ.get(\"FERRY_DEVICE\", \"cpu\"))  " + kDeviceMarker + "\n";
  else
    text += std::string(kDeviceName) + " = torch.device(" + os +
            ".environ.get(\"FERRY_DEVICE\") or (\"cuda\" if torch.cuda.is_available() else \"cpu\"))  " + kDeviceMarker + "\n";
  if (nl.end == nl.begin) text.pop_back();
  return Edit{nl.end, nl.end, text};
}

}  // namespace

StatusOr<FixOutcome> fix_file(const PyFile& f, std::vector<Finding>* findings, const std::string& target) {
  Fixer fixer(f, target);
  struct Owned {
    Edit edit;
    size_t finding;
  };
  std::vector<Owned> all;
  for (size_t i = 0; i < findings->size(); ++i) {
    Finding& fd = (*findings)[i];
    if (!fd.action->rewrite) {
      fd.fix = fd.action->manual ? FixState::kManual : FixState::kNothing;
      continue;
    }
    Planned p = fixer.plan(fd);
    if (!p.todo.empty()) {
      fd.fix = FixState::kTodo;
      fd.note = p.todo;
      continue;
    }
    fd.fix = p.already ? FixState::kAlready : FixState::kFixed;
    if (p.already && fd.action->rewrite->op == "rename") fd.fix = FixState::kFixed;  // fixed at its import
    for (Edit& e : p.edits) all.push_back({std::move(e), i});
  }
  // The device variable, when a generic/cpu fix refers to it and the file does not define it yet.
  bool wants_device = false;
  for (const Owned& o : all) wants_device = wants_device || mentions_device(o.edit.text);
  if (wants_device && f.text.find(kDeviceMarker) == std::string_view::npos) {
    auto pre = device_prelude(f, target);
    if (!pre.is_ok()) {
      std::vector<Owned> kept;
      std::vector<bool> demoted(findings->size(), false);
      for (const Owned& o : all)
        if (mentions_device(o.edit.text)) demoted[o.finding] = true;
      for (Owned& o : all)
        if (!demoted[o.finding]) kept.push_back(std::move(o));
      for (size_t i = 0; i < findings->size(); ++i)
        if (demoted[i]) {
          (*findings)[i].fix = FixState::kTodo;
          (*findings)[i].note = "needs the device variable, but " + pre.status().message();
        }
      all = std::move(kept);
    } else {
      all.push_back({pre.value(), findings->size()});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Owned& a, const Owned& b) {
    return a.edit.begin != b.edit.begin ? a.edit.begin < b.edit.begin : a.edit.end > b.edit.end;
  });
  // Edits that overlap an earlier one (other than the identical edit) drop their whole finding.
  // An edit inside a larger replacement (torch.cuda.is_available() inside a replaced
  // torch.device(...) call) is subsumed: that finding is fixed by the outer edit.
  std::vector<bool> dropped(findings->size() + 1, false), subsumed(findings->size() + 1, false);
  int32_t covered = -1;
  const Edit* outer = nullptr;  // the replacement that reaches furthest so far
  for (const Owned& o : all) {
    const bool same = outer != nullptr && outer->begin == o.edit.begin && outer->end == o.edit.end && outer->text == o.edit.text;
    if (!same && o.edit.begin < covered) {
      const bool inside = outer != nullptr && outer->begin < outer->end && o.edit.begin >= outer->begin &&
                          o.edit.end <= outer->end && !(o.edit.begin == outer->begin && o.edit.begin == o.edit.end);
      (inside ? subsumed : dropped)[o.finding] = true;
      continue;
    }
    if (o.edit.end >= covered) outer = &o.edit;
    covered = std::max(covered, o.edit.end);
  }
  for (const Owned& o : all)
    if (subsumed[o.finding] && dropped[o.finding]) subsumed[o.finding] = false;
  for (size_t i = 0; i < findings->size(); ++i)
    if (dropped[i]) {
      (*findings)[i].fix = FixState::kTodo;
      (*findings)[i].note = "overlaps another fix on the same expression: fix by hand";
    }
  FixOutcome out;
  for (const Owned& o : all) {
    if (dropped[o.finding] || subsumed[o.finding]) continue;
    if (!out.edits.empty() && out.edits.back().begin == o.edit.begin && out.edits.back().end == o.edit.end &&
        out.edits.back().text == o.edit.text)
      continue;
    out.edits.push_back(o.edit);
  }
  out.text.reserve(f.text.size() + 256);
  int32_t at = 0;
  for (const Edit& e : out.edits) {
    out.text.append(f.text.substr(at, e.begin - at));
    out.text += e.text;
    at = e.end;
  }
  out.text.append(f.text.substr(at));
  if (out.changed()) {
    auto check = tokenize(out.text);
    if (!check.is_ok())
      return internal_error("the fixed source does not tokenize (" + check.status().message() +
                            "); no fix written. Please report this file.");
  }
  return out;
}

std::string unified_diff(const std::string& path, std::string_view a, const std::vector<Edit>& edits) {
  if (edits.empty()) return {};
  std::vector<int32_t> starts{0};
  for (int32_t i = 0; i < static_cast<int32_t>(a.size()); ++i)
    if (a[i] == '\n' && i + 1 < static_cast<int32_t>(a.size())) starts.push_back(i + 1);
  const int32_t nlines = a.empty() ? 0 : static_cast<int32_t>(starts.size());
  auto line_of = [&](int32_t off) {
    return static_cast<int32_t>(std::upper_bound(starts.begin(), starts.end(), off) - starts.begin()) - 1;
  };
  auto line_end = [&](int32_t l) { return l + 1 < nlines ? starts[l + 1] : static_cast<int32_t>(a.size()); };
  // Changed line ranges [lo, hi) of the original, with their edits.
  struct Group {
    int32_t lo, hi;
    std::vector<const Edit*> edits;
  };
  std::vector<Group> groups;
  for (const Edit& e : edits) {
    int32_t lo = line_of(e.begin), hi;
    if (e.end > e.begin) hi = line_of(e.end - 1) + 1;
    else if (e.begin == static_cast<int32_t>(a.size()) || (e.begin == starts[lo] && lo > 0)) hi = lo;  // pure insertion
    else hi = lo + 1;
    if (e.begin == static_cast<int32_t>(a.size())) lo = hi = nlines;
    if (!groups.empty() && lo <= groups.back().hi) {
      groups.back().hi = std::max(groups.back().hi, hi);
      groups.back().edits.push_back(&e);
    } else {
      groups.push_back({lo, hi, {&e}});
    }
  }
  auto split = [](std::string_view s) {
    std::vector<std::string> lines;
    size_t b = 0;
    while (b < s.size()) {
      size_t e = s.find('\n', b);
      if (e == std::string_view::npos) e = s.size() - 1;
      lines.emplace_back(s.substr(b, e - b + 1));
      b = e + 1;
    }
    return lines;
  };
  auto emit_line = [](std::string* out, char tag, const std::string& l) {
    *out += tag;
    *out += l;
    if (l.empty() || l.back() != '\n') *out += "\n\\ No newline at end of file\n";
  };
  std::string out = "--- a/" + path + "\n+++ b/" + path + "\n";
  constexpr int32_t kContext = 3;
  int32_t delta = 0;  // new line number minus old line number before the current hunk
  size_t g = 0;
  while (g < groups.size()) {
    size_t last = g;
    while (last + 1 < groups.size() && groups[last + 1].lo - groups[last].hi <= 2 * kContext) ++last;
    const int32_t from = std::max(0, groups[g].lo - kContext);
    const int32_t to = std::min(nlines, groups[last].hi + kContext);
    std::string body;
    int32_t old_n = 0, new_n = 0, cursor = from;
    int32_t hunk_delta = 0;
    for (size_t k = g; k <= last; ++k) {
      for (; cursor < groups[k].lo; ++cursor, ++old_n, ++new_n)
        emit_line(&body, ' ', std::string(a.substr(starts[cursor], line_end(cursor) - starts[cursor])));
      const int32_t b = groups[k].lo < nlines ? starts[groups[k].lo] : static_cast<int32_t>(a.size());
      const int32_t e = groups[k].hi > groups[k].lo ? line_end(groups[k].hi - 1) : b;
      std::string repl;
      int32_t p = b;
      for (const Edit* ed : groups[k].edits) {
        repl.append(a.substr(p, ed->begin - p));
        repl += ed->text;
        p = ed->end;
      }
      repl.append(a.substr(p, e - p));
      const auto olds = split(a.substr(b, e - b));
      const auto news = split(repl);
      for (const std::string& l : olds) emit_line(&body, '-', l);
      for (const std::string& l : news) emit_line(&body, '+', l);
      old_n += static_cast<int32_t>(olds.size());
      new_n += static_cast<int32_t>(news.size());
      hunk_delta += static_cast<int32_t>(news.size()) - static_cast<int32_t>(olds.size());
      cursor = groups[k].hi;
    }
    for (; cursor < to; ++cursor, ++old_n, ++new_n)
      emit_line(&body, ' ', std::string(a.substr(starts[cursor], line_end(cursor) - starts[cursor])));
    const int32_t old_start = old_n == 0 ? from : from + 1;
    const int32_t new_start = new_n == 0 ? from + delta : from + delta + 1;
    out += "@@ -" + std::to_string(old_start) + "," + std::to_string(old_n) + " +" + std::to_string(new_start) + "," +
           std::to_string(new_n) + " @@\n" + body;
    delta += hunk_delta;
    g = last + 1;
  }
  return out;
}

}  // namespace ferry::scan
