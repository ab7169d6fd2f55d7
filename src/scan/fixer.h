// `ferry scan --fix`: token-level rewrites of the original text, so formatting and comments stay.
// Each finding's rewrite becomes byte-range edits; edits that overlap, or whose preconditions do
// not hold, leave the finding as a TODO. The result is re-tokenized before it is accepted, and
// fixing the output again changes nothing (every rewrite removes what its rule matches).
#pragma once

#include <string>
#include <vector>

#include "scan/matcher.h"

namespace ferry::scan {

struct Edit {
  int32_t begin = 0;  // byte range of the original text
  int32_t end = 0;
  std::string text;
};

struct FixOutcome {
  std::string text;         // the migrated source
  std::vector<Edit> edits;  // sorted, non-overlapping
  bool changed() const { return !edits.empty(); }
};

/// Plans and applies the rewrites for `findings` (updating each one's FixState and note).
StatusOr<FixOutcome> fix_file(const PyFile& file, std::vector<Finding>* findings, const std::string& target);

/// A unified diff (3 lines of context) of applying `edits` to `original`, with a/ and b/ headers.
std::string unified_diff(const std::string& path, std::string_view original, const std::vector<Edit>& edits);

}  // namespace ferry::scan
