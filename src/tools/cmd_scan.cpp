// `ferry scan PATH... [--target ascend|generic|cpu] [--json] [--sarif FILE] [--fix --out DIR|--diff|--in-place]`:
// finds the CUDA-specific code in a PyTorch project, says what it does on the target, and fixes
// what can be fixed safely (src/scan/ holds the scanner; data/scan_rules.json the rules).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "scan/fixer.h"
#include "scan/profiles.h"
#include "scan/report.h"
#include "scan/scanner.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;
using namespace ferry::scan;

#define RETURN_IF_ERROR_CLI(expr)         \
  do {                                    \
    const Status _st = (expr);            \
    if (!_st.is_ok()) return report(_st); \
  } while (0)

struct ScanCliOptions {
  std::vector<std::string> paths;
  std::string target = "ascend";
  bool json = false;
  std::string sarif;
  bool fix = false;
  std::string out_dir;
  bool diff = false;
  bool in_place = false;
  int64_t max_file_bytes = 2 << 20;
  int threads = 0;
  std::string rules_file;
  std::string fail_on;
  std::string dump_tokens;
};

Status write_file(const fs::path& path, std::string_view text) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) return invalid_argument("cannot write '" + path.string() + "'");
  return Status::ok();
}

// Where --out puts a file: its path relative to the one argument, or its path as given.
fs::path out_path(const ScanCliOptions& opt, const SourceFile& f) {
  std::string rel = opt.paths.size() == 1 ? f.relative : fs::path(f.path).lexically_normal().generic_string();
  while (rel.rfind("../", 0) == 0) rel.erase(0, 3);
  while (!rel.empty() && rel[0] == '/') rel.erase(0, 1);
  return fs::path(opt.out_dir) / rel;
}

// Hidden: prints the tokens of one file as tokenize does (for the cross-check against CPython).
int dump_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return report(not_found("scan: cannot read '" + path + "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto toks = tokenize(text);
  if (!toks.is_ok()) return report(toks.status().with_context(path));
  for (const Token& t : toks.value())
    std::printf("%s %d %d %d %d %s\n", tok_kind_name(t.kind), t.line, t.col, t.end_line, t.end_col,
                nlohmann::json(text.substr(t.begin, t.end - t.begin)).dump().c_str());
  return kExitOk;
}

int cmd_scan(const ScanCliOptions& opt) {
  if (!opt.dump_tokens.empty()) return dump_tokens(opt.dump_tokens);
  if (opt.paths.empty()) return report(invalid_argument("scan: give at least one file or folder"));
  const int modes = (!opt.out_dir.empty()) + opt.diff + opt.in_place;
  if (opt.fix && modes != 1)
    return report(invalid_argument("scan --fix: choose where the result goes: --out DIR, --diff or --in-place"));
  if (!opt.fix && modes > 0) return report(invalid_argument("scan: --out, --diff and --in-place go with --fix"));

  std::shared_ptr<const RuleSet> rules;
  if (opt.rules_file.empty()) {
    auto b = RuleSet::builtin();
    if (!b.is_ok()) return report(b.status());
    rules = b.value();
  } else {
    std::ifstream in(opt.rules_file);
    if (!in) return report(not_found("scan: cannot read rules file '" + opt.rules_file + "'"));
    std::stringstream ss;
    ss << in.rdbuf();
    std::map<std::string, const Profile*> profiles;
    for (const auto& [n, p] : builtin_profiles()) profiles[n] = &p;
    auto parsed = RuleSet::parse(ss.str(), profiles);
    if (!parsed.is_ok()) return report(parsed.status().with_context(opt.rules_file));
    rules = parsed.value();
  }

  auto files = find_python_files(opt.paths);
  if (!files.is_ok()) return report(files.status());
  ScanOptions so;
  so.target = opt.target;
  so.fix = opt.fix;
  so.max_file_bytes = opt.max_file_bytes;
  so.threads = opt.threads;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<FileResult> results = scan_files(files.value(), *rules, so);
  ReportInfo info;
  info.target = opt.target;
  info.fix = opt.fix;
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::string diff;
  if (opt.fix) {
    for (const FileResult& r : results) {
      if (!r.skipped.empty() || !r.fixed) continue;
      if (opt.diff) {
        std::string shown = fs::path(r.file.path).lexically_normal().generic_string();
        while (!shown.empty() && shown[0] == '/') shown.erase(0, 1);  // a/<path> even for absolute paths
        diff += unified_diff(shown, r.original, r.fixed->edits);
      } else if (opt.in_place) {
        if (!r.fixed->changed()) continue;
        const fs::path backup = r.file.path + ".orig";
        std::error_code ec;
        if (!fs::exists(backup, ec)) RETURN_IF_ERROR_CLI(write_file(backup, r.original));
        RETURN_IF_ERROR_CLI(write_file(r.file.path, r.fixed->text));
        info.files_written.push_back(r.file.path + " (backup " + backup.string() + ")");
      } else {
        const fs::path dest = out_path(opt, r.file);
        RETURN_IF_ERROR_CLI(write_file(dest, r.fixed->text));
        if (r.fixed->changed()) info.files_written.push_back(dest.string());
      }
    }
  }

  if (!opt.sarif.empty()) RETURN_IF_ERROR_CLI(write_file(opt.sarif, sarif_report(results, *rules, info).dump(2) + "\n"));
  std::FILE* report_to = opt.diff ? stderr : stdout;
  if (opt.diff) std::fwrite(diff.data(), 1, diff.size(), stdout);
  if (opt.json) {
    const std::string j = json_report(results, info).dump(2) + "\n";
    std::fwrite(j.data(), 1, j.size(), report_to);
  } else {
    const std::string t = opt.diff ? text_summary(results, info) : text_report(results, info);
    std::fwrite(t.data(), 1, t.size(), report_to);
  }
  if (!opt.fail_on.empty()) {
    const int worst = opt.fail_on == "breaks" ? 0 : opt.fail_on == "slows" ? 1 : 2;
    for (const FileResult& r : results)
      for (const Reported& f : r.findings)
        if (static_cast<int>(f.action->severity) <= worst) return kExitBadInput;
  }
  return kExitOk;
}

const bool registered = register_command({"scan", 80, [](CLI::App& app) {
  auto opt = std::make_shared<ScanCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "scan", "Find the CUDA-specific code in PyTorch scripts (.py files, folders recursively), explain it for a target, fix it");
  cmd->add_option("paths", opt->paths, "Python files or folders (folders honour .gitignore)");
  cmd->add_option("--target", opt->target, "Where the code should run")
      ->check(CLI::IsMember({"ascend", "generic", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print the report as JSON");
  cmd->add_option("--sarif", opt->sarif, "Also write a SARIF 2.1.0 report to FILE");
  cmd->add_flag("--fix", opt->fix, "Rewrite what can be fixed safely (with --out, --diff or --in-place)");
  cmd->add_option("--out", opt->out_dir, "--fix: write the migrated copy of every scanned file under DIR");
  cmd->add_flag("--diff", opt->diff, "--fix: print a unified diff instead of writing files (report goes to stderr)");
  cmd->add_flag("--in-place", opt->in_place, "--fix: rewrite the files, keeping FILE.orig backups");
  cmd->add_option("--max-file-size", opt->max_file_bytes, "Skip files larger than this many bytes")->capture_default_str();
  cmd->add_option("--threads", opt->threads, "Files scanned in parallel (0: one per core)");
  cmd->add_option("--rules", opt->rules_file, "Use this rules file instead of the built-in one");
  cmd->add_option("--fail-on", opt->fail_on, "Exit 2 if a finding of this severity or worse is found")
      ->check(CLI::IsMember({"breaks", "slows", "info"}));
  cmd->add_option("--dump-tokens", opt->dump_tokens, "")->group("");
  return CommandRun{cmd, [opt] { return cmd_scan(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
