// Tests of `ferry scan`'s library (src/scan/): every rule's own positive and negative snippets on
// every target it applies to, the tokenizer, alias resolution, the fixer (round trip,
// idempotence, formatting kept), the diff, .gitignore globs and bad input.
#include <gtest/gtest.h>

#include <algorithm>

#include "scan/file_walk.h"
#include "scan/fixer.h"
#include "scan/matcher.h"
#include "scan/rules.h"
#include "scan/scanner.h"

namespace ferry::scan {
namespace {

const RuleSet& rules() {
  auto r = RuleSet::builtin();
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return *r.value();
}

struct Hit {
  std::string rule;
  int32_t line;
  int32_t col;
};

std::vector<Hit> scan(const std::string& text, const std::string& target = "ascend") {
  auto f = analyze_python(text);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string() << "\n" << text;
  std::vector<Hit> hits;
  if (!f.is_ok()) return hits;
  for (const Finding& fd : match_rules(f.value(), rules(), target))
    hits.push_back({fd.rule->id, f.value().toks[fd.anchor].line, f.value().toks[fd.anchor].col + 1});
  return hits;
}

bool has(const std::vector<Hit>& hits, const std::string& id) {
  return std::any_of(hits.begin(), hits.end(), [&](const Hit& h) { return h.rule == id; });
}

std::string fix(const std::string& text, const std::string& target, int* edits = nullptr) {
  auto f = analyze_python(text);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  std::vector<Finding> fds = match_rules(f.value(), rules(), target);
  auto out = fix_file(f.value(), &fds, target);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  if (edits) *edits = static_cast<int>(out.value().edits.size());
  return out.value().text;
}

TEST(ScanRules, LoadAndCoverEveryCategory) {
  const RuleSet& rs = rules();
  EXPECT_GE(rs.rules.size(), 50u);
  std::set<std::string> cats;
  for (const Rule& r : rs.rules) cats.insert(r.category);
  for (const char* c : {"device placement", "CUDA API", "AMP", "distributed", "data loading", "cuDNN flags",
                        "custom CUDA", "ops", "sparse tensors", "ONNX export"})
    EXPECT_TRUE(cats.count(c)) << c;
}

// The snippets in data/scan_rules.json: each "match" snippet yields the rule, each "no_match"
// snippet does not, on every target where the rule applies.
TEST(ScanRules, EveryRulesOwnTests) {
  for (const Rule& r : rules().rules) {
    ASSERT_FALSE(r.targets.empty()) << r.id << " applies to no target";
    for (const auto& [target, action] : r.targets) {
      for (const std::string& s : r.tests_match) EXPECT_TRUE(has(scan(s, target), r.id)) << r.id << " on " << target << " should match:\n" << s;
      for (const std::string& s : r.tests_no_match)
        EXPECT_FALSE(has(scan(s, target), r.id)) << r.id << " on " << target << " should not match:\n" << s;
    }
  }
}

// Every rule's positive snippets, turned into comments or into a string's text, match nothing.
TEST(ScanRules, CommentsAndStringsNeverMatch) {
  for (const Rule& r : rules().rules)
    for (const std::string& s : r.tests_match) {
      std::string commented = "# ", quoted = "text = '";
      for (char c : s) {
        commented += c == '\n' ? std::string("\n# ") : std::string(1, c);
        quoted += c == '\n' ? std::string("\\n") : c == '\'' || c == '\\' ? std::string("\\") + c : std::string(1, c);
      }
      quoted += "'\n";
      for (const auto& [target, action] : r.targets) {
        EXPECT_TRUE(scan(commented, target).empty()) << r.id << " on " << target << ":\n" << commented;
        EXPECT_TRUE(scan(quoted, target).empty()) << r.id << " on " << target << ":\n" << quoted;
      }
    }
}

// Rules naming an ONNX op take their verdict from the shipped profiles.
TEST(ScanRules, ProfilesDecideOpRules) {
  auto find = [](const std::string& id) {
    for (const Rule& r : rules().rules)
      if (r.id == id) return &r;
    return static_cast<const Rule*>(nullptr);
  };
  const Rule* fft = find("ops.fft");  // no DFT in the Ascend ATC profile
  ASSERT_NE(fft, nullptr);
  ASSERT_TRUE(fft->targets.count("ascend"));
  EXPECT_EQ(fft->targets.at("ascend").severity, Severity::kBreaks);
  const Rule* grid = find("ops.grid-sample");  // GridSample converts natively on Ascend 2025
  ASSERT_NE(grid, nullptr);
  EXPECT_FALSE(grid->targets.count("ascend"));
  const Rule* resize = find("ops.interpolate");  // Resize is a PartitionedCall on Ascend
  ASSERT_NE(resize, nullptr);
  EXPECT_EQ(resize->targets.at("ascend").severity, Severity::kSlows);
}

TEST(ScanTokenizer, PositionsStringsAndContinuations) {
  const std::string src = "x = f'a{b}'  # c\ny = '''multi\nline''' + \\\n  r\"\\\"\"\n";
  auto toks = tokenize(src);
  ASSERT_TRUE(toks.is_ok()) << toks.status().to_string();
  std::vector<std::string> seen;
  for (const Token& t : toks.value())
    if (t.kind == TokKind::kString || t.kind == TokKind::kComment)
      seen.push_back(src.substr(t.begin, t.end - t.begin) + "@" + std::to_string(t.line) + ":" + std::to_string(t.col));
  EXPECT_EQ(seen, (std::vector<std::string>{"f'a{b}'@1:4", "# c@1:13", "'''multi\nline'''@2:4", "r\"\\\"\"@4:2"}));
}

TEST(ScanTokenizer, IndentDedentAndUnicodeColumns) {
  const std::string src = "if a:\n    s = 'é'; t = x.cuda()\n";
  auto toks = tokenize(src);
  ASSERT_TRUE(toks.is_ok());
  int indents = 0, dedents = 0;
  for (const Token& t : toks.value()) {
    indents += t.kind == TokKind::kIndent;
    dedents += t.kind == TokKind::kDedent;
    if (src.substr(t.begin, t.end - t.begin) == "cuda") {
      EXPECT_EQ(t.col, 19);  // code points, not bytes (é is 2 bytes)
    }
  }
  EXPECT_EQ(indents, 1);
  EXPECT_EQ(dedents, 1);
}

TEST(ScanTokenizer, ErrorsNameTheLine) {
  for (const char* bad : {"x = 'abc\n", "x = (1,\n", "def f():\n        a\n    b\n", "x = ]\n", "s = '''open\n"}) {
    auto toks = tokenize(bad);
    ASSERT_FALSE(toks.is_ok()) << bad;
    EXPECT_NE(toks.status().message().find("line "), std::string::npos) << toks.status().message();
  }
}

TEST(ScanResolve, AliasesAndAttributeChains) {
  auto hits = scan("import torch.cuda as tc\nfrom torch.cuda import synchronize as sync\nimport torch as th\n"
                   "tc.synchronize()\nsync()\nth.cuda.synchronize()\nm = th.cuda\nm2 = m.synchronize()\n");
  int n = 0;
  for (const Hit& h : hits)
    if (h.rule == "cuda.synchronize") ++n;
  EXPECT_EQ(n, 4);  // tc.synchronize, sync, th.cuda.synchronize, m.synchronize (m = th.cuda)
  EXPECT_TRUE(has(hits, "cuda.import"));
}

TEST(ScanResolve, StringsCommentsAndShadowsDoNotMatch) {
  auto hits = scan("import torch\n# torch.cuda.synchronize()\ns = 'x.cuda()'\nt = \"\"\"torch.cuda.is_available()\"\"\"\n"
                   "def cuda():\n    pass\ncuda()\nobj.cudaa()\n");
  EXPECT_TRUE(hits.empty()) << hits[0].rule << " line " << hits[0].line;
}

TEST(ScanResolve, ReportsLineAndColumn) {
  auto hits = scan("import torch\nimport torch_npu\n\nx = torch.ones(2)\ny = x.cuda()\n");
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].rule, "device.cuda-method");
  EXPECT_EQ(hits[0].line, 5);
  EXPECT_EQ(hits[0].col, 7);
}

TEST(ScanResolve, MultiLineCallReportsTheArgumentsLine) {
  const std::string src =
      "from torch.utils.data import DataLoader\nld = DataLoader(\n    ds,\n    batch_size=8,\n    pin_memory=True,\n)\n";
  auto hits = scan(src, "cpu");
  ASSERT_TRUE(has(hits, "data.pin-memory"));
  for (const Hit& h : hits) {
    if (h.rule == "data.pin-memory") {
      EXPECT_EQ(h.line, 5) << "col " << h.col;
    }
  }
  // The same call on one line is still reported at the call.
  for (const Hit& h : scan("from torch.utils.data import DataLoader\nld = DataLoader(ds, pin_memory=True)\n", "cpu")) {
    if (h.rule == "data.pin-memory") {
      EXPECT_EQ(h.col, 6);
    }
  }
  EXPECT_NE(fix(src, "cpu").find("    pin_memory=False,\n"), std::string::npos) << fix(src, "cpu");
  // "# ferry: ignore" on the argument's line silences it.
  EXPECT_FALSE(has(scan("from torch.utils.data import DataLoader\nld = DataLoader(\n    ds,\n"
                        "    pin_memory=True,  # ferry: ignore\n)\n", "cpu"), "data.pin-memory"));
}

TEST(ScanResolve, IgnoreComment) {
  EXPECT_TRUE(scan("import torch\nimport torch_npu\nx = y.cuda()  # ferry: ignore\n").empty());
}

TEST(ScanFix, AscendIdiomsKeepFormattingAndComments) {
  const std::string src =
      "import torch\nfrom torch.cuda.amp import autocast\nimport torch.distributed as dist\n\n"
      "dist.init_process_group(backend=\"nccl\")  # keep me\n"
      "x = torch.zeros(3,   device='cuda:0')\n"
      "with autocast():\n    y = x.cuda( non_blocking=True )\n"
      "torch.cuda.synchronize()\n";
  const std::string want =
      "import torch\nimport torch_npu\nfrom torch.npu.amp import autocast\nimport torch.distributed as dist\n\n"
      "dist.init_process_group(backend=\"hccl\")  # keep me\n"
      "x = torch.zeros(3,   device='npu:0')\n"
      "with autocast():\n    y = x.npu( non_blocking=True )\n"
      "torch.npu.synchronize()\n";
  const std::string once = fix(src, "ascend");
  EXPECT_EQ(once, want);
  int edits = -1;
  EXPECT_EQ(fix(once, "ascend", &edits), once);
  EXPECT_EQ(edits, 0);
}

TEST(ScanFix, GenericUsesOneDeviceVariable) {
  const std::string src =
      "\"\"\"doc\"\"\"\nimport torch\n\nmodel = Net().cuda()\n"
      "dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
      "scaler = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\n"
      "x = x.cuda(args.gpu)\n";
  const std::string once = fix(src, "generic");
  EXPECT_NE(once.find("import os\nDEVICE = torch.device("), std::string::npos) << once;
  EXPECT_NE(once.find("model = Net().to(DEVICE)\n"), std::string::npos) << once;
  EXPECT_NE(once.find("dev = DEVICE\n"), std::string::npos) << once;
  EXPECT_NE(once.find("GradScaler(enabled=(DEVICE.type == \"cuda\"))"), std::string::npos) << once;
  EXPECT_NE(once.find("with torch.autocast(DEVICE.type):"), std::string::npos) << once;
  EXPECT_NE(once.find("x = x.cuda(args.gpu)\n"), std::string::npos) << "a device index is left as a TODO";
  int edits = -1;
  EXPECT_EQ(fix(once, "generic", &edits), once);
  EXPECT_EQ(edits, 0);
  EXPECT_TRUE(tokenize(once).is_ok());
}

TEST(ScanFix, UnsafeFixesBecomeTodos) {
  auto f = analyze_python("import torch\nd = torch.device('cuda', rank)\n");
  ASSERT_TRUE(f.is_ok());
  std::vector<Finding> fds = match_rules(f.value(), rules(), "generic");
  auto out = fix_file(f.value(), &fds, "generic");
  ASSERT_TRUE(out.is_ok());
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(fds[0].fix, FixState::kTodo);
  EXPECT_TRUE(needs_hand_work(fds[0]));
  EXPECT_FALSE(out.value().changed());
}

TEST(ScanFix, UnifiedDiff) {
  const std::string a = "1\n2\n3\n4\n5\n6\n7\n8\n9\nx.cuda()\n";
  std::vector<Edit> edits{{static_cast<int32_t>(a.find("cuda")), static_cast<int32_t>(a.find("cuda") + 4), "npu"}};
  EXPECT_EQ(unified_diff("t.py", a, edits), "--- a/t.py\n+++ b/t.py\n@@ -7,4 +7,4 @@\n 7\n 8\n 9\n-x.cuda()\n+x.npu()\n");
  std::vector<Edit> ins{{2, 2, "import torch_npu\n"}};
  EXPECT_EQ(unified_diff("t.py", "1\n2\n", ins), "--- a/t.py\n+++ b/t.py\n@@ -1,2 +1,3 @@\n 1\n+import torch_npu\n 2\n");
}

TEST(ScanWalk, GitignoreGlobs) {
  EXPECT_TRUE(gitignore_glob("*.py", "a.py"));
  EXPECT_FALSE(gitignore_glob("*.py", "d/a.py"));
  EXPECT_TRUE(gitignore_glob("**/build", "x/y/build"));
  EXPECT_TRUE(gitignore_glob("a/**/b.py", "a/b.py"));
  EXPECT_TRUE(gitignore_glob("a/**/b.py", "a/x/y/b.py"));
  EXPECT_TRUE(gitignore_glob("f[0-9].py", "f3.py"));
  GitIgnore g;
  g.add_pattern("build/");
  g.add_pattern("*.py");
  g.add_pattern("!keep.py");
  g.add_pattern("/top.txt");
  EXPECT_EQ(g.match("build", true), 1);
  EXPECT_EQ(g.match("build", false), 0);
  EXPECT_EQ(g.match("src/a.py", false), 1);
  EXPECT_EQ(g.match("keep.py", false), -1);
  EXPECT_EQ(g.match("top.txt", false), 1);
  EXPECT_EQ(g.match("d/top.txt", false), 0);
}

TEST(ScanFiles, BadInputIsSkippedWithAReason) {
  ScanOptions opt;
  auto r1 = scan_text({"bad.py", "bad.py"}, "x = '\xff'\n", rules(), opt);
  EXPECT_NE(r1.skipped.find("not UTF-8"), std::string::npos) << r1.skipped;
  auto r2 = scan_text({"bad.py", "bad.py"}, "def f(:\n  x = (1,\n", rules(), opt);
  EXPECT_NE(r2.skipped.find("does not parse"), std::string::npos) << r2.skipped;
  auto r3 = scan_text({"ok.py", "ok.py"}, "\xEF\xBB\xBFimport torch\nx.cuda()\n", rules(), opt);
  EXPECT_TRUE(r3.skipped.empty()) << r3.skipped;
  EXPECT_EQ(r3.findings.size(), 2u);
  // A 200 kB literal is not fed to the regular expressions (their backtracking would overflow).
  auto r4 = scan_text({"big.py", "big.py"}, "s = '" + std::string(200000, 'a') + ".cu'\n", rules(), opt);
  EXPECT_TRUE(r4.skipped.empty()) << r4.skipped;
  EXPECT_TRUE(r4.findings.empty());
  auto r5 = scan_text({"nul.py", "nul.py"}, std::string("x = 1\0\n", 7), rules(), opt);
  EXPECT_NE(r5.skipped.find("invalid character \\x00"), std::string::npos) << r5.skipped;
}

}  // namespace
}  // namespace ferry::scan
