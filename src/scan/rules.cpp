// Loads and checks the rules file (see rules.h). Every error names the rule and the field.
#include "scan/rules.h"

#include "scan/profiles.h"

namespace ferry::scan {
namespace {

using nlohmann::json;

StatusOr<std::regex> compile(const std::string& where, const std::string& re) {
  try {
    return std::regex(re, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return invalid_argument(where + ": bad regular expression '" + re + "': " + e.what());
  }
}

StatusOr<MatchKind> parse_kind(const std::string& where, const std::string& k) {
  if (k == "name") return MatchKind::kName;
  if (k == "member") return MatchKind::kMember;
  if (k == "import") return MatchKind::kImport;
  if (k == "keyword") return MatchKind::kKeyword;
  if (k == "env") return MatchKind::kEnv;
  if (k == "string") return MatchKind::kString;
  if (k == "needs_import") return MatchKind::kNeedsImport;
  return invalid_argument(where + ": unknown match kind '" + k +
                          "' (expected name, member, import, keyword, env, string, needs_import)");
}

StatusOr<Severity> parse_severity(const std::string& where, const std::string& s) {
  if (s == "breaks") return Severity::kBreaks;
  if (s == "slows") return Severity::kSlows;
  if (s == "info") return Severity::kInfo;
  return invalid_argument(where + ": severity must be breaks, slows or info, not '" + s + "'");
}

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  if (j[key].is_string()) out.push_back(j[key].get<std::string>());
  else
    for (const json& s : j[key]) out.push_back(s.get<std::string>());
  return out;
}

Status parse_match(const std::string& where, const json& m, RuleMatch* out) {
  ASSIGN_OR_RETURN(out->kind, parse_kind(where, m.value("kind", std::string())));
  out->names = strings(m, "names");
  if (m.contains("call")) out->call = m["call"].get<bool>();
  out->decorator = m.value("decorator", false);
  out->file_has_names = strings(m, "file_has_names");
  out->module = m.value("module", std::string());
  if (m.contains("literal")) {
    ASSIGN_OR_RETURN(out->literal, compile(where + ".literal", m["literal"].get<std::string>()));
  }
  if (m.contains("args"))
    for (const json& a : m["args"]) {
      ArgCond c;
      c.pos = a.value("pos", -1);
      c.kw = a.value("kw", std::string());
      c.absent = a.value("absent", false);
      if (a.contains("literal")) {
        ASSIGN_OR_RETURN(c.literal, compile(where + ".args.literal", a["literal"].get<std::string>()));
      }
      if (a.contains("text")) {
        ASSIGN_OR_RETURN(c.text, compile(where + ".args.text", a["text"].get<std::string>()));
      }
      if (a.contains("text_not")) {
        ASSIGN_OR_RETURN(c.text_not, compile(where + ".args.text_not", a["text_not"].get<std::string>()));
      }
      if (c.pos < 0 && c.kw.empty()) return invalid_argument(where + ".args: each condition needs 'pos' or 'kw'");
      out->args.push_back(std::move(c));
    }
  if (out->names.empty() && out->kind != MatchKind::kString && out->kind != MatchKind::kEnv)
    return invalid_argument(where + ": 'names' is required for this kind");
  if ((out->kind == MatchKind::kString || out->kind == MatchKind::kEnv) && !out->literal)
    return invalid_argument(where + ": 'literal' is required for kind string/env");
  if (out->kind == MatchKind::kNeedsImport && out->module.empty())
    return invalid_argument(where + ": 'module' is required for needs_import");
  return Status::ok();
}

Status parse_action(const std::string& where, const json& t, TargetAction* a) {
  ASSIGN_OR_RETURN(a->severity, parse_severity(where, t.value("severity", std::string())));
  a->effect = t.value("effect", std::string());
  a->fix = t.value("fix", std::string());
  a->manual = t.value("manual", false);
  if (t.contains("rewrite")) {
    const json& r = t["rewrite"];
    a->rewrite = Rewrite{r.value("op", std::string()), r};
    if (a->rewrite->op.empty()) return invalid_argument(where + ".rewrite: 'op' is required");
  }
  if (a->effect.empty() || a->fix.empty()) return invalid_argument(where + ": 'effect' and 'fix' are required");
  return Status::ok();
}

// Severity from the profiles for an ONNX op: missing -> breaks; converted as a composed subgraph
// (Ascend's PartitionedCall) -> slows; converted natively -> the rule does not apply.
void apply_profile(Rule* rule, const std::map<std::string, const Profile*>& profiles) {
  const std::string op = rule->profile_op;
  auto describe = [&](const std::string& target, const std::vector<std::string>& names) {
    auto it = rule->targets.find(target);
    if (it == rule->targets.end()) return;
    std::vector<std::string> missing, composed, restricted;
    for (const std::string& n : names) {
      auto p = profiles.find(n);
      if (p == profiles.end()) continue;
      const ProfileEntry* e = p->second->find(op);
      if (e == nullptr || !e->supported) missing.push_back(n);
      else if (e->converted_to == "PartitionedCall") composed.push_back(n);
      else if (!e->restrictions.empty()) restricted.push_back(n + ": " + e->restrictions);
    }
    TargetAction& a = it->second;
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& x : v) s += (s.empty() ? "" : "; ") + x;
      return s;
    };
    if (!missing.empty()) {
      a.severity = Severity::kBreaks;
      a.effect = "exported to ONNX it becomes " + op + ", which " + list(missing) +
                 " does not convert (shipped profile). " + a.effect;
    } else if (!composed.empty()) {
      a.severity = Severity::kSlows;
      a.effect = "exported to ONNX it becomes " + op + ", which " + list(composed) +
                 " converts as a composed subgraph (PartitionedCall), not one kernel. " + a.effect;
    } else if (!restricted.empty()) {
      a.severity = Severity::kInfo;
      a.effect = "exported to ONNX it becomes " + op + "; restrictions: " + list(restricted) + ". " + a.effect;
    } else {
      rule->targets.erase(it);
    }
  };
  describe("ascend", {"ascend-atc-2025"});
  describe("generic", {"tensorrt-10.1", "openvino", "ascend-atc-2025"});
}

}  // namespace

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kBreaks: return "breaks";
    case Severity::kSlows: return "slows";
    case Severity::kInfo: return "info";
  }
  return "?";
}

const std::vector<std::string>& scan_targets() {
  static const std::vector<std::string> targets = {"ascend", "generic", "cpu"};
  return targets;
}

bool glob_match(std::string_view p, std::string_view t) {
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (pi < p.size() && p[pi] == t[ti]) {
      ++pi;
      ++ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

StatusOr<std::shared_ptr<RuleSet>> RuleSet::parse(const std::string& text,
                                                  const std::map<std::string, const Profile*>& profiles) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("scan rules: not valid JSON: ") + e.what());
  }
  auto set = std::make_shared<RuleSet>();
  try {
    set->version = j.value("version", 0);
    if (!j.contains("rules") || !j["rules"].is_array()) return invalid_argument("scan rules: no 'rules' array");
    std::map<std::string, bool> seen;
    for (const json& r : j["rules"]) {
      Rule rule;
      rule.id = r.value("id", std::string());
      const std::string where = "scan rule '" + rule.id + "'";
      if (rule.id.empty()) return invalid_argument("scan rules: a rule has no 'id'");
      if (seen[rule.id]) return invalid_argument(where + ": duplicate id");
      seen[rule.id] = true;
      rule.category = r.value("category", std::string());
      rule.title = r.value("title", std::string());
      rule.profile_op = r.value("profile_op", std::string());
      if (rule.title.empty() || rule.category.empty())
        return invalid_argument(where + ": 'title' and 'category' are required");
      if (!r.contains("match")) return invalid_argument(where + ": no 'match'");
      RETURN_IF_ERROR(parse_match(where + ".match", r["match"], &rule.match));
      if (!r.contains("targets") || !r["targets"].is_object()) return invalid_argument(where + ": no 'targets'");
      for (const auto& [name, t] : r["targets"].items()) {
        bool known = false;
        for (const std::string& k : scan_targets()) known = known || k == name;
        if (!known) return invalid_argument(where + ": unknown target '" + name + "'");
        RETURN_IF_ERROR(parse_action(where + ".targets." + name, t, &rule.targets[name]));
      }
      if (r.contains("tests")) {
        rule.tests_match = strings(r["tests"], "match");
        rule.tests_no_match = strings(r["tests"], "no_match");
      }
      if (rule.tests_match.empty() || rule.tests_no_match.empty())
        return invalid_argument(where + ": 'tests' needs at least one 'match' and one 'no_match' snippet");
      if (!rule.profile_op.empty()) apply_profile(&rule, profiles);
      set->rules.push_back(std::move(rule));
    }
  } catch (const json::exception& e) {
    return invalid_argument(std::string("scan rules: wrong type: ") + e.what());
  }
  return set;
}

StatusOr<std::shared_ptr<const RuleSet>> RuleSet::builtin() {
  static const StatusOr<std::shared_ptr<const RuleSet>> rules = []() -> StatusOr<std::shared_ptr<const RuleSet>> {
    std::map<std::string, const Profile*> profiles;
    for (const auto& [n, p] : builtin_profiles()) profiles[n] = &p;
    for (const EmbeddedFile& f : scan_embedded_files())
      if (std::string(f.name) == "scan_rules.json") {
        auto set = parse(std::string(reinterpret_cast<const char*>(f.data), f.size), profiles);
        if (!set.is_ok()) return set.status();
        return std::shared_ptr<const RuleSet>(set.value());
      }
    return internal_error("scan rules are not embedded in this build (data/scan_rules.json)");
  }();
  return rules;
}

}  // namespace ferry::scan
