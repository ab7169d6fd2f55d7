// Matches the rules against one analyzed Python file for one target.
#pragma once

#include <string>
#include <vector>

#include "scan/rules.h"
#include "scan/source_model.h"

namespace ferry::scan {

/// How `--fix` dealt with a finding.
enum class FixState {
  kNotTried,  // no fix was asked for
  kNothing,   // no change is needed (informational)
  kFixed,     // rewritten automatically (or through the import it came from)
  kAlready,   // the rewrite's effect is already there
  kTodo,      // an automatic fix exists but was not safe here: by hand
  kManual,    // no automatic fix: by hand
};
const char* fix_state_name(FixState s);

struct Finding {
  const Rule* rule = nullptr;
  const TargetAction* action = nullptr;
  int32_t site = -1;              // index into PyFile::sites; -1 for strings
  int32_t arg = -1;               // the argument a condition selected
  std::vector<int32_t> literals;  // the STRING tokens that matched
  int32_t anchor = 0;             // token reported
  FixState fix = FixState::kNotTried;
  std::string note;               // why a fix was not applied
};

/// Every finding for `target`, in source order. Lines with "# ferry: ignore" are skipped.
std::vector<Finding> match_rules(const PyFile& file, const RuleSet& rules, const std::string& target);

/// True if the finding needs work by hand (manual rule, or a fix that was not safe).
bool needs_hand_work(const Finding& f);

}  // namespace ferry::scan
