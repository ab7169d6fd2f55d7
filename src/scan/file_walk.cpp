// File discovery for `ferry scan` (see file_walk.h).
#include "scan/file_walk.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace ferry::scan {
namespace fs = std::filesystem;
namespace {

struct Layer {
  std::string base;  // folder of the .gitignore, relative to the walk root ("" = root), or absolute for parents
  GitIgnore rules;
};

GitIgnore read_gitignore(const fs::path& file) {
  GitIgnore g;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) g.add_pattern(line);
  return g;
}

// .gitignore files of the root's parents, up to the folder holding .git.
std::vector<std::pair<fs::path, GitIgnore>> parent_layers(const fs::path& root) {
  std::vector<std::pair<fs::path, GitIgnore>> out;
  std::error_code ec;
  fs::path p = fs::absolute(root, ec).lexically_normal();
  if (p.has_filename() == false) p = p.parent_path();
  if (fs::exists(p / ".git", ec)) return out;
  for (fs::path cur = p.parent_path(); !cur.empty(); cur = cur.parent_path()) {
    if (fs::exists(cur / ".gitignore", ec)) out.insert(out.begin(), {cur, read_gitignore(cur / ".gitignore")});
    if (fs::exists(cur / ".git", ec) || cur == cur.parent_path()) break;
  }
  return out;
}

class Walker {
 public:
  Walker(const std::string& arg, std::vector<SourceFile>* out) : arg_(arg), out_(out) {
    std::error_code ec;
    abs_root_ = fs::absolute(arg, ec).lexically_normal();
    for (auto& [dir, g] : parent_layers(arg)) parents_.push_back({dir, std::move(g)});
  }

  void walk(const fs::path& dir, const std::string& rel, std::vector<Layer> layers) {
    std::error_code ec;
    if (fs::exists(dir / ".gitignore", ec)) layers.push_back({rel, read_gitignore(dir / ".gitignore")});
    std::vector<fs::directory_entry> entries;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
    std::sort(entries.begin(), entries.end(),
              [](const fs::directory_entry& a, const fs::directory_entry& b) { return a.path().filename() < b.path().filename(); });
    for (const fs::directory_entry& e : entries) {
      const std::string name = e.path().filename().string();
      const std::string child = rel.empty() ? name : rel + "/" + name;
      std::error_code ec2;
      const bool link = e.is_symlink(ec2);
      const bool is_dir = e.is_directory(ec2);
      if (is_dir && (name == ".git" || link)) continue;
      if (ignored(layers, child, is_dir)) continue;
      if (is_dir) walk(e.path(), child, layers);
      else if (name.size() > 3 && name.compare(name.size() - 3, 3, ".py") == 0 && e.is_regular_file(ec2))
        out_->push_back({(fs::path(arg_) / child).string(), child});
    }
  }

 private:
  bool ignored(const std::vector<Layer>& layers, const std::string& child, bool is_dir) const {
    int verdict = 0;
    const std::string abs_child = (abs_root_ / child).string();
    for (const auto& [dir, g] : parents_) {
      const std::string r = fs::path(abs_child).lexically_relative(dir).generic_string();
      if (const int m = g.match(r, is_dir)) verdict = m;
    }
    for (const Layer& l : layers) {
      const std::string r = l.base.empty() ? child : child.substr(l.base.size() + 1);
      if (const int m = l.rules.match(r, is_dir)) verdict = m;
    }
    return verdict > 0;
  }

  std::string arg_;
  fs::path abs_root_;
  std::vector<std::pair<fs::path, GitIgnore>> parents_;
  std::vector<SourceFile>* out_;
};

bool glob_at(std::string_view p, size_t pi, std::string_view s, size_t si) {
  while (pi < p.size()) {
    const char c = p[pi];
    if (c == '*') {
      const bool dbl = pi + 1 < p.size() && p[pi + 1] == '*';
      if (dbl) {
        size_t next = pi + 2;
        if (next < p.size() && p[next] == '/') {
          // "**/" matches zero or more whole folders
          for (size_t k = si; k <= s.size(); ++k)
            if ((k == si || s[k - 1] == '/') && glob_at(p, next + 1, s, k)) return true;
          return false;
        }
        for (size_t k = si; k <= s.size(); ++k)
          if (glob_at(p, next, s, k)) return true;
        return false;
      }
      for (size_t k = si; k <= s.size(); ++k) {
        if (glob_at(p, pi + 1, s, k)) return true;
        if (k < s.size() && s[k] == '/') break;
      }
      return false;
    }
    if (si >= s.size()) return false;
    if (c == '?') {
      if (s[si] == '/') return false;
    } else if (c == '[') {
      size_t e = p.find(']', pi + 1);
      if (e == std::string_view::npos) {
        if (s[si] != '[') return false;
      } else {
        bool neg = pi + 1 < e && (p[pi + 1] == '!' || p[pi + 1] == '^');
        bool hit = false;
        for (size_t k = pi + 1 + (neg ? 1 : 0); k < e; ++k) {
          if (k + 2 < e && p[k + 1] == '-') {
            hit = hit || (s[si] >= p[k] && s[si] <= p[k + 2]);
            k += 2;
          } else {
            hit = hit || s[si] == p[k];
          }
        }
        if (hit == neg) return false;
        pi = e;
      }
    } else {
      if (c == '\\' && pi + 1 < p.size()) ++pi;
      if (p[pi] != s[si]) return false;
    }
    ++pi;
    ++si;
  }
  return si == s.size();
}

}  // namespace

bool gitignore_glob(std::string_view pattern, std::string_view path) { return glob_at(pattern, 0, path, 0); }

void GitIgnore::add_pattern(std::string line) {
  while (!line.empty() && (line.back() == '\r' || (line.back() == ' ' && (line.size() < 2 || line[line.size() - 2] != '\\'))))
    line.pop_back();
  if (line.empty() || line[0] == '#') return;
  Pattern p;
  if (line[0] == '!') {
    p.negate = true;
    line.erase(0, 1);
  } else if (line[0] == '\\') {
    line.erase(0, 1);
  }
  if (!line.empty() && line.back() == '/') {
    p.dir_only = true;
    line.pop_back();
  }
  if (line.find('/') != std::string::npos) {
    p.anchored = true;
    if (line[0] == '/') line.erase(0, 1);
  }
  if (line.empty()) return;
  p.glob = line;
  patterns_.push_back(std::move(p));
}

int GitIgnore::match(const std::string& rel, bool is_dir) const {
  int verdict = 0;
  const size_t slash = rel.rfind('/');
  const std::string_view base = slash == std::string::npos ? std::string_view(rel) : std::string_view(rel).substr(slash + 1);
  for (const Pattern& p : patterns_) {
    if (p.dir_only && !is_dir) continue;
    const bool hit = p.anchored ? gitignore_glob(p.glob, rel) : gitignore_glob(p.glob, base);
    if (hit) verdict = p.negate ? -1 : 1;
  }
  return verdict;
}

StatusOr<std::vector<SourceFile>> find_python_files(const std::vector<std::string>& paths) {
  std::vector<SourceFile> out;
  for (const std::string& arg : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(arg, ec);
    if (ec || !fs::exists(st)) return not_found("scan: '" + arg + "' does not exist");
    if (fs::is_directory(st)) {
      Walker w(arg, &out);
      w.walk(arg, "", {});
    } else {
      out.push_back({arg, fs::path(arg).filename().string()});
    }
  }
  return out;
}

}  // namespace ferry::scan
