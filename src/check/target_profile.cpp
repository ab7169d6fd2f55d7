// Parsing the embedded target profiles and answering per op; see target_profile.h.
#include "check/target_profile.h"

#include <algorithm>
#include <sstream>

#include "check/embedded_data.h"

namespace ferry {
namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(trim(cur));
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  for (const std::string& p : split(s, ','))
    if (!p.empty() && std::all_of(p.begin(), p.end(), ::isdigit)) v.push_back(std::stoll(p));
  std::sort(v.begin(), v.end());
  return v;
}

/// "9-20" / "11-" / "11" / "*" -> [lo, hi].
bool opset_range(const std::string& s, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = INT64_MAX;
  if (s == "*" || s.empty()) return true;
  const size_t dash = s.find('-');
  try {
    if (dash == std::string::npos) {
      *lo = *hi = std::stoll(s);
    } else {
      *lo = std::stoll(s.substr(0, dash));
      if (dash + 1 < s.size()) *hi = std::stoll(s.substr(dash + 1));
    }
  } catch (...) {
    return false;
  }
  return true;
}

std::vector<DType> trt_dtypes(const std::string& s) {
  static const std::map<std::string, DType> names = {
      {"FP32", DType::kF32}, {"FP16", DType::kF16}, {"BF16", DType::kBF16}, {"INT32", DType::kI32},
      {"INT64", DType::kI64}, {"UINT8", DType::kU8}, {"BOOL", DType::kBool}, {"INT8", DType::kI8},
      {"INF64", DType::kI64}};  // ConstantOfShape's row in the source spells INT64 so
  std::vector<DType> out;
  for (const std::string& p : split(s, ',')) {
    auto it = names.find(p);
    if (it != names.end()) out.push_back(it->second);
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string opset_list(const std::vector<int64_t>& v) {
  if (v.empty()) return "none";
  bool contiguous = true;
  for (size_t i = 1; i < v.size(); ++i) contiguous &= v[i] == v[i - 1] + 1;
  if (contiguous && v.size() > 2) return std::to_string(v.front()) + "-" + std::to_string(v.back());
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

/// The attribute as a string (int / float / string attributes), or `dflt` when not set.
std::string attr_text(const Node& node, const std::string& name, const std::string& dflt) {
  const Attribute* a = node.attr(name);
  if (!a) return dflt;
  switch (a->type) {
    case AttrType::kInt: return std::to_string(a->i);
    case AttrType::kString: return a->s;
    case AttrType::kFloat: {
      std::ostringstream o;
      o << a->f;
      return o.str();
    }
    default: return "(set)";
  }
}

/// A constant input's value: an initializer, or the output of a Constant node in g.
const Tensor* constant_input(const Graph& g, const std::string& value) {
  if (const Tensor* t = g.find_initializer(value)) return t;
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant" && !n.outputs.empty() && n.outputs[0] == value) {
      const Attribute* a = n.attr("value");
      return a && a->type == AttrType::kTensor ? &a->t : nullptr;
    }
  return nullptr;
}

bool has_input(const Node& n, int64_t i) { return i >= 0 && i < static_cast<int64_t>(n.inputs.size()) && !n.inputs[i].empty(); }

/// Checks one rule; returns the reason it is broken, or "".
std::string rule_broken(const TargetRule& r, const Graph& g, const Node& node) {
  const std::string& what = r.subject;
  if (r.check == "attr_in") {
    const std::string v = attr_text(node, what, r.subject_default);
    if (std::find(r.allowed.begin(), r.allowed.end(), v) != r.allowed.end()) return "";
    return what + "='" + v + "'" + (node.attr(what) ? "" : " (the default)") + " is not supported (supported: " +
           join(r.allowed) + ")";
  }
  if (r.check == "attr_absent") return node.attr(what) ? "attribute " + what + " is set, and the target ignores it" : "";
  if (r.check == "ints_all") {
    const Attribute* a = node.attr(what);
    if (!a) return "";
    for (int64_t v : a->ints)
      if (std::to_string(v) != r.allowed[0]) return what + " must be empty or all " + r.allowed[0];
    return "";
  }
  const std::string name = what.substr(what.find(':') + 1);
  if (r.check == "const_input") {
    if (!has_input(node, r.index) || constant_input(g, node.inputs[r.index])) return "";
    return "input '" + name + "' ('" + node.inputs[r.index] + "') must be an initializer; here it is computed";
  }
  if (r.check == "zero_input" || r.check == "const_false") {
    if (!has_input(node, r.index)) return "";
    const Tensor* t = constant_input(g, node.inputs[r.index]);
    const std::string must = r.check == "zero_input" ? "a constant of zeros" : "a constant false";
    if (!t) return "input '" + name + "' must be " + must + "; here it is computed";
    for (int64_t i = 0; i < t->numel(); ++i)
      if (t->get_double(i) != 0) return "input '" + name + "' must be " + must;
    return "";
  }
  if (r.check == "const_below") {
    if (!has_input(node, r.index)) return "";
    const Tensor* t = constant_input(g, node.inputs[r.index]);
    if (!t) return "input '" + name + "' must be a constant below " + r.allowed[0] + "; here it is computed";
    for (int64_t i = 0; i < t->numel(); ++i)
      if (t->get_double(i) >= std::stod(r.allowed[0]))
        return "input '" + name + "' is " + std::to_string(t->get_int64(i)) + "; it must be below " + r.allowed[0];
    return "";
  }
  if (r.check == "no_output") {
    if (r.index < static_cast<int64_t>(node.outputs.size()) && !node.outputs[r.index].empty())
      return "output '" + name + "' is used, and the target does not support it";
    return "";
  }
  if (r.check == "input_rank" || r.check == "static_input") {
    if (!has_input(node, r.index)) return "";
    const TensorType* t = g.find_type(node.inputs[r.index]);
    if (!t || !t->shape) return "";
    if (r.check == "static_input") {
      for (const Dim& d : t->shape->dims)
        if (!d.is_known()) return "input " + std::to_string(r.index) + " has dynamic dimensions (" + t->to_string() + ")";
      return "";
    }
    const std::string rank = std::to_string(t->shape->rank());
    if (std::find(r.allowed.begin(), r.allowed.end(), rank) != r.allowed.end()) return "";
    return "input " + std::to_string(r.index) + " has rank " + rank + " (supported: " + join(r.allowed) + ")";
  }
  return "";
}

}  // namespace

bool TargetProfile::accepts(const std::string& op, int64_t opset, std::string* why, int64_t* fix_opset) const {
  *fix_opset = 0;
  if (std::find(core_ops.begin(), core_ops.end(), op) != core_ops.end()) return true;
  if (opset < min_opset || opset > max_opset) {
    *why = "the model's opset " + std::to_string(opset) + " is outside the target's " + std::to_string(min_opset) + "-" +
           std::to_string(max_opset);
    *fix_opset = opset < min_opset ? min_opset : max_opset;
    return false;
  }
  auto it = ops.find(op);
  if (it == ops.end()) {
    *why = op + " is not in the target's operator list";
    return false;
  }
  const ProfileOp& p = it->second;
  if (!p.supported) {
    *why = op + " is listed as not supported";
    return false;
  }
  if (!p.opsets.empty() && !std::binary_search(p.opsets.begin(), p.opsets.end(), opset)) {
    *why = op + " is accepted at opsets " + opset_list(p.opsets) + " only, the model uses " + std::to_string(opset);
    int64_t best = 0;
    for (int64_t o : p.opsets)
      if (o <= opset) best = o;
    *fix_opset = best ? best : p.opsets.front();
    return false;
  }
  if (!p.since.empty() && p.since.front() > opset) {
    *why = op + " is converted from opset " + std::to_string(p.since.front()) + " on, the model uses " + std::to_string(opset);
    *fix_opset = p.since.front();
    return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> TargetProfile::broken_rules(const Graph& g, const Node& node,
                                                                             int64_t opset) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const TargetRule& r : rules) {
    if (r.op != node.op_type || opset < r.min_opset || opset > r.max_opset) continue;
    if (!r.when_attr.empty() && attr_text(node, r.when_attr, r.when_default) != r.when_value) continue;
    const std::string reason = rule_broken(r, g, node);
    if (!reason.empty()) out.emplace_back(reason, r.fix);
  }
  return out;
}

StatusOr<TargetProfile> parse_target_profile(const std::string& name, const std::string& file, const std::string& text) {
  TargetProfile p;
  p.name = name;
  enum { kTrt, kAscend2022, kAscend2025, kOpenVino } layout;
  if (file.rfind("tensorrt", 0) == 0) layout = kTrt;
  else if (file.rfind("ascend-atc-2022", 0) == 0) layout = kAscend2022;
  else if (file.rfind("ascend-atc", 0) == 0) layout = kAscend2025;
  else if (file.rfind("openvino", 0) == 0) layout = kOpenVino;
  else return invalid_argument("profile '" + file + "': unknown layout (expected tensorrt-*, ascend-atc-*, openvino*)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# columns", 0) != 0 && line.rfind("# onnx_op", 0) != 0 && line.rfind("# op\t", 0) != 0)
        p.source += trim(line.substr(1)) + "\n";
      continue;
    }
    const std::vector<std::string> c = split(line, '\t');
    if (c.empty() || c[0].empty()) continue;
    ProfileOp op;
    switch (layout) {
      case kTrt:
        op.supported = c.size() > 1 && c[1] == "Y";
        if (c.size() > 2) op.dtypes = trt_dtypes(c[2]);
        if (c.size() > 3) op.restrictions = c[3];
        break;
      case kAscend2022:
      case kAscend2025:
        op.supported = true;
        if (c.size() > 3) op.opsets = int_list(c[3]);
        op.supported = !op.opsets.empty();
        break;
      case kOpenVino:
        if (c.size() > 1) op.since = int_list(c[1]);
        op.supported = !op.since.empty();
        if (c.size() > 3) op.restrictions = c[3];
        break;
    }
    p.ops[c[0]] = std::move(op);
  }
  if (p.ops.empty()) return invalid_argument("profile '" + file + "' lists no operators");
  return p;
}

StatusOr<std::vector<TargetRule>> parse_target_rules(const std::string& target, const std::string& text) {
  std::vector<TargetRule> rules;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> c = split(line, '\t');
    const std::string where = "data/check/rules.tsv line " + std::to_string(line_no);
    if (c.size() < 8) return internal_error(where + ": expected 8 tab-separated columns");
    if (c[0] != target) continue;
    TargetRule r;
    r.op = c[1];
    if (!opset_range(c[2], &r.min_opset, &r.max_opset)) return internal_error(where + ": bad opsets '" + c[2] + "'");
    if (c[3] != "-") {
      const size_t eq = c[3].find('=');
      r.when_attr = c[3].substr(0, eq);
      r.when_value = eq == std::string::npos ? "" : c[3].substr(eq + 1);
      r.when_default = r.op == "Resize" && r.when_attr == "mode" ? "nearest" : "";
    }
    r.check = c[4];
    const size_t eq = c[5].find('=');
    r.subject = c[5].substr(0, eq);
    if (eq != std::string::npos) r.subject_default = c[5].substr(eq + 1);
    const size_t colon = c[5].find(':');
    if (colon != std::string::npos || std::isdigit(static_cast<unsigned char>(c[5][0]))) {
      r.subject = c[5];
      r.index = std::stoll(c[5].substr(0, colon));
    }
    if (c[6] != "-") r.allowed = split(c[6], ',');
    r.fix = c[7];
    static const char* kChecks[] = {"attr_in", "attr_absent", "ints_all", "const_input", "zero_input", "const_false",
                                    "const_below", "no_output", "input_rank", "static_input"};
    if (std::find(std::begin(kChecks), std::end(kChecks), r.check) == std::end(kChecks))
      return internal_error(where + ": unknown check '" + r.check + "'");
    if ((r.check == "attr_in" || r.check == "ints_all" || r.check == "const_below" || r.check == "input_rank") &&
        r.allowed.empty())
      return internal_error(where + ": check " + r.check + " needs allowed values");
    rules.push_back(std::move(r));
  }
  return rules;
}

const std::map<std::string, TargetProfile>& target_profiles() {
  static const std::map<std::string, TargetProfile> profiles = [] {
    std::map<std::string, TargetProfile> out;
    const std::string rules_text(embedded_file("check/rules.tsv"));
    std::istringstream in{std::string(embedded_file("check/targets.tsv"))};
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const std::vector<std::string> c = split(line, '\t');
      if (c.size() < 6) continue;
      const std::string text(embedded_file("profiles/" + c[1]));
      auto p = parse_target_profile(c[0], c[1], text);
      if (!p.is_ok()) continue;  // a test checks that every listed target loads
      TargetProfile profile = std::move(p).value();
      opset_range(c[2], &profile.min_opset, &profile.max_opset);
      if (profile.min_opset == 0) profile.min_opset = 1;
      if (c[3] != "-") profile.core_ops = split(c[3], ',');
      profile.title = c[4];
      profile.fallback = c[5];
      auto rules = parse_target_rules(c[0], rules_text);
      if (rules.is_ok()) profile.rules = std::move(rules).value();
      out[c[0]] = std::move(profile);
    }
    return out;
  }();
  return profiles;
}

}  // namespace ferry
