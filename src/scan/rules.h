// The rules of `ferry scan`, loaded from data (data/scan_rules.json, embedded in the binary).
//
// A rule says what to match (a kind of site and names, with conditions on call arguments), and
// for each target (ascend, generic, cpu) how bad it is, what happens there, and how to fix it:
// a rewrite the fixer applies, or a description of the manual work. Rules naming an ONNX op
// ("profile_op") take their severity from the shipped target profiles (data/profiles/*.tsv).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ferry::scan {

enum class Severity { kBreaks, kSlows, kInfo };
const char* severity_name(Severity s);

enum class MatchKind {
  kName,         // resolved dotted names: torch.cuda.synchronize, torch.backends.cudnn.benchmark
  kMember,       // `.name` on any other receiver: x.cuda(), t.is_cuda
  kImport,       // import statements: import triton, from torch.cuda.amp import autocast
  kKeyword,      // a keyword argument of any call whose value holds a matching literal: device='cuda'
  kEnv,          // environment variable names read or set through os.environ / os.getenv
  kString,       // any other string literal (not a docstring) whose value matches
  kNeedsImport,  // file-level: the file uses `names` but does not import `module`
};

/// A condition on one call argument, chosen by keyword or else by position.
struct ArgCond {
  int pos = -1;
  std::string kw;
  bool absent = false;                 // holds when no such argument is given
  std::optional<std::regex> literal;   // some string literal in the value matches (full match)
  std::optional<std::regex> text;      // the value's source text matches
  std::optional<std::regex> text_not;  // ... does not match
};

struct RuleMatch {
  MatchKind kind = MatchKind::kName;
  std::vector<std::string> names;  // globs ('*' any run) for name/import; plain for member/keyword
  std::optional<bool> call;        // require a call (true) or a non-call reference (false)
  bool decorator = false;          // only as a decorator
  std::vector<ArgCond> args;
  std::optional<std::regex> literal;        // keyword / env / string kinds
  std::vector<std::string> file_has_names;  // the file must spell one of these names
  std::string module;                       // needs_import: the module that must be imported
};

/// A rewrite the fixer knows how to apply; `op` names it, `params` holds its settings.
struct Rewrite {
  std::string op;
  nlohmann::json params;
};

/// What a rule means on one target.
struct TargetAction {
  Severity severity = Severity::kInfo;
  std::string effect;  // what happens on the target
  std::string fix;     // the replacement, in words or code
  std::optional<Rewrite> rewrite;
  bool manual = false;  // no safe automatic fix: goes to the "by hand" list
};

struct Rule {
  std::string id;
  std::string category;
  std::string title;
  RuleMatch match;
  std::string profile_op;
  std::map<std::string, TargetAction> targets;  // absent target: the rule does not apply there
  std::vector<std::string> tests_match;
  std::vector<std::string> tests_no_match;
};

struct Profile;

/// All rules, in file order (the first rule that matches a site wins).
struct RuleSet {
  std::vector<Rule> rules;
  int version = 0;

  /// Parses the rules file. `profiles` (by target name) resolve profile_op rules.
  static StatusOr<std::shared_ptr<RuleSet>> parse(const std::string& json_text,
                                                  const std::map<std::string, const Profile*>& profiles);
  /// The rules compiled into ferry (data/scan_rules.json and data/profiles/).
  static StatusOr<std::shared_ptr<const RuleSet>> builtin();
};

/// Target names ferry scan knows.
const std::vector<std::string>& scan_targets();

/// Glob match where '*' matches any run of characters (dots included).
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace ferry::scan
