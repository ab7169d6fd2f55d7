// Per-file scanning and the parallel driver (see scanner.h).
#include "scan/scanner.h"

#include <atomic>
#include <fstream>
#include <algorithm>
#include <thread>

#include "scan/matcher.h"

namespace ferry::scan {

Status check_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    if (c < 0x80) n = 0;
    else if ((c & 0xE0) == 0xC0 && c >= 0xC2) n = 1;
    else if ((c & 0xF0) == 0xE0) n = 2;
    else if ((c & 0xF8) == 0xF0 && c <= 0xF4) n = 3;
    else return invalid_argument("not UTF-8 (byte 0x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15] +
                                 " at offset " + std::to_string(i) + ")");
    if (n > 0 && i + n >= s.size()) return invalid_argument("not UTF-8 (truncated sequence at offset " + std::to_string(i) + ")");
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return invalid_argument("not UTF-8 (bad continuation byte at offset " + std::to_string(i + k) + ")");
    i += n + 1;
  }
  return Status::ok();
}

FileResult scan_text(const SourceFile& file, std::string text, const RuleSet& rules, const ScanOptions& opt) {
  FileResult r;
  r.file = file;
  r.bytes = static_cast<int64_t>(text.size());
  if (Status st = check_utf8(text); !st.is_ok()) {
    r.skipped = st.message();
    return r;
  }
  auto parsed = analyze_python(text);
  if (!parsed.is_ok()) {
    r.skipped = "does not parse: " + parsed.status().message();
    return r;
  }
  const PyFile& py = parsed.value();
  std::vector<Finding> findings = match_rules(py, rules, opt.target);
  if (opt.fix) {
    auto fixed = fix_file(py, &findings, opt.target);
    if (!fixed.is_ok()) {
      r.skipped = fixed.status().message();
      return r;
    }
    r.fixed = std::move(fixed).value();
  }
  for (const Finding& fd : findings) {
    Reported rep;
    rep.rule = fd.rule;
    rep.action = fd.action;
    const Token& t = py.toks[fd.anchor];
    rep.line = t.line;
    rep.column = t.col + 1;
    rep.end_line = t.end_line;
    rep.end_column = t.end_col + 1;
    size_t b = text.rfind('\n', t.begin == 0 ? 0 : t.begin - 1);
    b = (b == std::string::npos || t.begin == 0) ? 0 : b + 1;
    size_t e = text.find('\n', t.begin);
    if (e == std::string::npos) e = text.size();
    std::string line = text.substr(b, e - b);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    size_t lead = line.find_first_not_of(" \t");
    rep.snippet = lead == std::string::npos ? "" : line.substr(lead);
    rep.fix = fd.fix;
    rep.note = fd.note;
    r.findings.push_back(std::move(rep));
  }
  if (opt.fix) r.original = std::move(text);
  return r;
}

std::vector<FileResult> scan_files(const std::vector<SourceFile>& files, const RuleSet& rules, const ScanOptions& opt) {
  std::vector<FileResult> results(files.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      const SourceFile& f = files[i];
      std::ifstream in(f.path, std::ios::binary | std::ios::ate);
      if (!in) {
        results[i].file = f;
        results[i].skipped = "cannot be read";
        continue;
      }
      const int64_t size = static_cast<int64_t>(in.tellg());
      if (size > opt.max_file_bytes) {
        results[i].file = f;
        results[i].bytes = size;
        results[i].skipped = "too large (" + std::to_string(size) + " bytes; limit " + std::to_string(opt.max_file_bytes) +
                             ", --max-file-size)";
        continue;
      }
      std::string text(static_cast<size_t>(size), '\0');
      in.seekg(0);
      in.read(text.data(), size);
      results[i] = scan_text(f, std::move(text), rules, opt);
    }
  };
  int n = opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(1, std::min(n, static_cast<int>(files.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return results;
}

}  // namespace ferry::scan
