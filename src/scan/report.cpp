// Report rendering for `ferry scan` (see report.h).
#include "scan/report.h"

#include <cstdarg>
#include <cstdio>
#include <map>

namespace ferry::scan {
namespace {

using nlohmann::json;

constexpr size_t kHandListMax = 20;  // the "by hand" list fits one screen

std::string fix_word(const Reported& r) {
  switch (r.fix) {
    case FixState::kNotTried: return r.action->rewrite ? "automatic with --fix" : (r.action->manual ? "by hand" : "no change needed");
    case FixState::kFixed: return "fixed";
    case FixState::kAlready: return "already fixed";
    case FixState::kNothing: return "no change needed";
    case FixState::kTodo: return "TODO by hand: " + r.note;
    case FixState::kManual: return "by hand";
  }
  return "";
}

bool hand_work(const Reported& r) {
  return r.fix == FixState::kTodo || r.fix == FixState::kManual || (r.fix == FixState::kNotTried && r.action->manual);
}

struct Counts {
  int64_t files = 0, scanned = 0, skipped = 0, findings = 0, touched = 0, lines_with = 0;
  int64_t by_sev[3] = {0, 0, 0};
  int64_t fixable = 0, fixed = 0, hand = 0;
  std::map<std::string, std::pair<const Reported*, int64_t>> by_rule;
};

Counts count(const std::vector<FileResult>& results) {
  Counts c;
  for (const FileResult& f : results) {
    ++c.files;
    if (!f.skipped.empty()) {
      ++c.skipped;
      continue;
    }
    ++c.scanned;
    if (f.fixed && f.fixed->changed()) ++c.touched;
    for (const Reported& r : f.findings) {
      ++c.findings;
      ++c.by_sev[static_cast<int>(r.action->severity)];
      auto& e = c.by_rule[r.rule->id];
      e.first = &r;
      ++e.second;
      if (r.action->rewrite && r.fix == FixState::kNotTried) ++c.fixable;
      if (r.fix == FixState::kFixed || r.fix == FixState::kAlready) ++c.fixed;
      if (hand_work(r)) ++c.hand;
    }
  }
  return c;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

}  // namespace

std::string text_summary(const std::vector<FileResult>& results, const ReportInfo& info) {
  const Counts c = count(results);
  std::string out;
  out += fmt("\nferry scan (target %s): %lld files, %lld scanned, %lld skipped; %lld findings: %lld breaks, %lld slows, %lld info",
             info.target.c_str(), (long long)c.files, (long long)c.scanned, (long long)c.skipped, (long long)c.findings,
             (long long)c.by_sev[0], (long long)c.by_sev[1], (long long)c.by_sev[2]);
  if (info.seconds > 0) out += fmt(" (%.2f s, %.0f files/s)", info.seconds, c.files / info.seconds);
  out += "\n";
  if (info.fix)
    out += fmt("--fix: %lld findings fixed, %lld files touched, %lld left to do by hand\n", (long long)c.fixed,
               (long long)c.touched, (long long)c.hand);
  else if (c.findings > 0)
    out += fmt("%lld can be fixed automatically (--fix --out DIR, or --diff); %lld need work by hand\n",
               (long long)c.fixable, (long long)c.hand);
  if (!c.by_rule.empty()) {
    out += "by rule:\n";
    for (const auto& [id, e] : c.by_rule)
      out += fmt("  %-32s %-6s %5lld  %s\n", id.c_str(), severity_name(e.first->action->severity), (long long)e.second,
                 e.first->rule->category.c_str());
  }
  if (c.skipped > 0) {
    out += "skipped:\n";
    for (const FileResult& f : results)
      if (!f.skipped.empty()) out += "  " + f.file.path + ": " + f.skipped + "\n";
  }
  if (!info.files_written.empty()) {
    out += "files written:\n";
    for (const std::string& w : info.files_written) out += "  " + w + "\n";
  }
  if (c.hand > 0) {
    out += "what you still have to do by hand:\n";
    size_t shown = 0;
    for (const FileResult& f : results)
      for (const Reported& r : f.findings) {
        if (!hand_work(r)) continue;
        if (shown++ >= kHandListMax) continue;
        out += fmt("  %s:%d [%s] %s -> %s\n", f.file.path.c_str(), r.line, r.rule->id.c_str(), r.rule->title.c_str(),
                   r.fix == FixState::kTodo ? r.note.c_str() : r.action->fix.c_str());
      }
    if (shown > kHandListMax) out += fmt("  ... and %zu more (see --json)\n", shown - kHandListMax);
  }
  return out;
}

std::string text_report(const std::vector<FileResult>& results, const ReportInfo& info) {
  std::string out;
  for (const FileResult& f : results)
    for (const Reported& r : f.findings) {
      out += fmt("%s:%d:%d: %s [%s] %s\n", f.file.path.c_str(), r.line, r.column, severity_name(r.action->severity),
                 r.rule->id.c_str(), r.rule->title.c_str());
      out += "    | " + r.snippet + "\n";
      out += "    on " + info.target + ": " + r.action->effect + "\n";
      out += "    fix: " + r.action->fix + " (" + fix_word(r) + ")\n";
    }
  return out + text_summary(results, info);
}

json json_report(const std::vector<FileResult>& results, const ReportInfo& info) {
  const Counts c = count(results);
  json j;
  j["target"] = info.target;
  j["files"] = c.files;
  j["files_scanned"] = c.scanned;
  j["seconds"] = info.seconds;
  j["skipped"] = json::array();
  j["findings"] = json::array();
  j["hand_work"] = json::array();
  for (const FileResult& f : results) {
    if (!f.skipped.empty()) j["skipped"].push_back({{"file", f.file.path}, {"reason", f.skipped}});
    for (const Reported& r : f.findings) {
      json e = {{"file", f.file.path},
                {"line", r.line},
                {"column", r.column},
                {"end_line", r.end_line},
                {"end_column", r.end_column},
                {"rule", r.rule->id},
                {"category", r.rule->category},
                {"severity", severity_name(r.action->severity)},
                {"title", r.rule->title},
                {"effect", r.action->effect},
                {"fix", r.action->fix},
                {"auto_fix", r.action->rewrite.has_value()},
                {"fix_state", fix_state_name(r.fix)},
                {"snippet", r.snippet}};
      if (!r.note.empty()) e["note"] = r.note;
      if (hand_work(r)) j["hand_work"].push_back(e);
      j["findings"].push_back(std::move(e));
    }
  }
  json by_rule = json::object();
  for (const auto& [id, e] : c.by_rule) by_rule[id] = {{"severity", severity_name(e.first->action->severity)}, {"count", e.second}};
  j["summary"] = {{"findings", c.findings},
                  {"breaks", c.by_sev[0]},
                  {"slows", c.by_sev[1]},
                  {"info", c.by_sev[2]},
                  {"by_rule", by_rule},
                  {"auto_fixable", c.fixable},
                  {"fixed", c.fixed},
                  {"hand_work", c.hand},
                  {"files_touched", c.touched}};
  if (!info.files_written.empty()) j["files_written"] = info.files_written;
  return j;
}

json sarif_report(const std::vector<FileResult>& results, const RuleSet& rules, const ReportInfo& info) {
  json driver_rules = json::array();
  std::map<std::string, int> index;
  for (const Rule& r : rules.rules) {
    auto it = r.targets.find(info.target);
    if (it == r.targets.end()) continue;
    index[r.id] = static_cast<int>(driver_rules.size());
    const char* level = it->second.severity == Severity::kBreaks ? "error" : it->second.severity == Severity::kSlows ? "warning" : "note";
    driver_rules.push_back({{"id", r.id},
                            {"name", r.category},
                            {"shortDescription", {{"text", r.title}}},
                            {"fullDescription", {{"text", it->second.effect}}},
                            {"help", {{"text", "fix: " + it->second.fix}}},
                            {"defaultConfiguration", {{"level", level}}}});
  }
  json res = json::array();
  for (const FileResult& f : results)
    for (const Reported& r : f.findings) {
      const char* level = r.action->severity == Severity::kBreaks ? "error" : r.action->severity == Severity::kSlows ? "warning" : "note";
      res.push_back({{"ruleId", r.rule->id},
                     {"ruleIndex", index[r.rule->id]},
                     {"level", level},
                     {"message", {{"text", r.rule->title + ". On " + info.target + ": " + r.action->effect + " Fix: " + r.action->fix}}},
                     {"locations",
                      json::array({{{"physicalLocation",
                                     {{"artifactLocation", {{"uri", f.file.path}}},
                                      {"region", {{"startLine", r.line}, {"startColumn", r.column}, {"endLine", r.end_line},
                                                  {"endColumn", r.end_column}}}}}}})}});
    }
  return {{"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
          {"version", "2.1.0"},
          {"runs", json::array({{{"tool", {{"driver", {{"name", "ferry scan"}, {"rules", driver_rules}}}}},
                                 {"results", res}}})}};
}

}  // namespace ferry::scan
