// Finds the Python files `ferry scan` reads: files named on the command line as they are, folders
// walked recursively in sorted order, honouring .gitignore files (those of the folder and of its
// parents up to the repository root) and skipping .git and symlinked folders.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ferry::scan {

struct SourceFile {
  std::string path;      // as it should be reported (the argument joined with the relative path)
  std::string relative;  // relative to the argument it came from (the file name for a file argument)
};

/// Expands `paths` into the .py files to scan. A path that does not exist is an error.
StatusOr<std::vector<SourceFile>> find_python_files(const std::vector<std::string>& paths);

/// One .gitignore's rules, matched against paths relative to its folder.
class GitIgnore {
 public:
  void add_pattern(std::string line);
  /// 1 ignored, -1 explicitly re-included (!pattern), 0 no rule matched.
  int match(const std::string& relative, bool is_dir) const;

 private:
  struct Pattern {
    std::string glob;
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;  // contains a '/' other than a trailing one: matched from the folder
  };
  std::vector<Pattern> patterns_;
};

/// gitignore-style glob: '*' and '?' stop at '/', '**' crosses folders, [...] classes.
bool gitignore_glob(std::string_view pattern, std::string_view path);

}  // namespace ferry::scan
