// External targets of `ferry check --target` (TensorRT, Ascend ATC, OpenVINO): which ONNX ops
// their converters accept, at which opsets and element types, with which restrictions. Read from
// the embedded profiles (data/profiles/*.tsv, four source layouts), the target list
// (data/check/targets.tsv) and the mechanical restrictions (data/check/rules.tsv).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/dtype.h"
#include "ir/graph.h"

namespace ferry {

/// One op as a profile lists it.
struct ProfileOp {
  bool supported = false;
  /// Opsets it is accepted at; empty with `since` empty: any opset the target accepts.
  std::vector<int64_t> opsets;       // explicit list (Ascend)
  std::vector<int64_t> since;        // converter versions, each used from its opset on (OpenVINO)
  std::vector<DType> dtypes;         // empty: not stated
  std::string restrictions;          // free text from the source, shown verbatim
};

/// A restriction checked on a node (a row of data/check/rules.tsv).
struct TargetRule {
  std::string op;
  int64_t min_opset = 0;
  int64_t max_opset = INT64_MAX;
  std::string when_attr, when_default, when_value;  // condition on an attribute ("" = always)
  std::string check;     // attr_in, attr_absent, ints_all, const_input, zero_input, const_false, const_below, no_output, input_rank, static_input
  std::string subject;   // attribute name, or input/output index
  std::string subject_default;
  int64_t index = -1;    // input/output index for index checks
  std::vector<std::string> allowed;
  std::string fix;
};

struct TargetProfile {
  std::string name;      // "tensorrt-10.1"
  std::string title;     // "TensorRT 10.x ONNX parser"
  std::string source;    // the profile's comment lines naming its source
  std::string fallback;  // where the nodes it lacks can run instead
  int64_t min_opset = 1;
  int64_t max_opset = INT64_MAX;
  std::vector<std::string> core_ops;  // handled by the parser core: supported though not listed
  std::map<std::string, ProfileOp> ops;
  std::vector<TargetRule> rules;

  /// Whether `op` (ai.onnx) is accepted at `opset`; when not, `why` says why and `fix_opset`
  /// (when > 0) is an opset at which it would be.
  bool accepts(const std::string& op, int64_t opset, std::string* why, int64_t* fix_opset) const;
  /// The restrictions `node` breaks (empty: none), each "reason\tfix".
  std::vector<std::pair<std::string, std::string>> broken_rules(const Graph& g, const Node& node, int64_t opset) const;
};

/// Every external target shipped with ferry, by name.
const std::map<std::string, TargetProfile>& target_profiles();

/// Parses one profile (layout chosen by the file name: tensorrt-*, ascend-atc-*, openvino*).
StatusOr<TargetProfile> parse_target_profile(const std::string& name, const std::string& file, const std::string& text);

/// Parses data/check/rules.tsv rows for `target`.
StatusOr<std::vector<TargetRule>> parse_target_rules(const std::string& target, const std::string& text);

}  // namespace ferry
