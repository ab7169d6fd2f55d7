// Precision modes by graph rewriting; see precision.h for the modes and the value naming.
#include "passes/precision.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "ops/op_util.h"
#include "ops/registry.h"
#include "ops/shape_inference.h"
#include "passes/graph_edit.h"

namespace ferry {

namespace {

using nlohmann::json;

const char kCastPrefix[] = "ferry_precision_cast/";

// data/precision/mix_precision.json, embedded by CMake as a raw string literal.
const char kDefaultListsJson[] =
#include "mix_precision_json.inc"
    ;

struct DefaultLists {
  std::vector<std::string> keep_fp32_ops;
  std::vector<std::string> cube_ops;
};

const DefaultLists& default_lists() {
  static const DefaultLists lists = [] {
    DefaultLists d;
    json j = json::parse(kDefaultListsJson);
    d.keep_fp32_ops = j.at("keep_fp32_ops").get<std::vector<std::string>>();
    d.cube_ops = j.at("cube_ops").get<std::vector<std::string>>();
    return d;
  }();
  return lists;
}

// Ops never lowered: their output type does not follow their float inputs (Cast, quantization),
// they carry subgraphs or sequences, or they produce rather than transform values.
const std::set<std::string>& never_lowered_ops() {
  static const std::set<std::string> ops = {
      "Cast", "CastLike", "Constant", "ConstantOfShape", "EyeLike", "Shape", "Size",
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
      "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "If", "Loop", "Scan",
      "NonMaxSuppression", "RoiAlign", "Range"};
  return ops;
}

// Float inputs that are parameters, not data: they stay fp32 (Resize's roi and scales).
bool is_neutral_input(const Node& node, size_t i) {
  if (node.op_type == "Resize") return i == 1 || i == 2;
  if (node.op_type == "Upsample") return i == 1;
  return false;
}

bool contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

const char* variant_suffix(DType t) { return t == DType::kBF16 ? "::bf16" : "::f16"; }
const char kAccSuffix[] = "::f32acc";

std::string variant_name(const std::string& base, DType t) {
  return t == DType::kF32 ? base : base + variant_suffix(t);
}

DType parse_dtype_word(const std::string& s, bool* ok) {
  *ok = true;
  if (s == "fp32" || s == "f32" || s == "float32") return DType::kF32;
  if (s == "fp16" || s == "f16" || s == "float16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  *ok = false;
  return DType::kUndefined;
}

// Whether node `n` matches a user-given name (its own, or an ONNX node it was fused from).
bool node_matches(const Node& n, const std::string& name) { return n.name == name || contains(n.origin, name); }

// The rewriter: walks the nodes once, emitting them with converted inputs and renamed outputs.
class PrecisionRewriter {
 public:
  PrecisionRewriter(Model* model, const PrecisionOptions& options, PrecisionReport* report)
      : model_(model), g_(model->graph), options_(options), report_(report) {}

  Status run() {
    RETURN_IF_ERROR(check_names());
    for (const ValueInfo& v : g_.inputs) {
      stored_[v.name] = DType::kF32;
      forms_[v.name][DType::kF32] = v.name;
    }
    for (const Node& node : g_.nodes) RETURN_IF_ERROR(rewrite(node));
    for (const ValueInfo& out : g_.outputs)
      if (is_f32(out.name)) require(out.name, DType::kF32);
    g_.nodes = std::move(out_);
    for (const std::string& name : dropped_types_)
      if (!forms_[name].count(DType::kF32)) g_.value_types.erase(name);
    return Status::ok();
  }

 private:
  Status check_names() {
    std::vector<std::string> names = options_.keep_fp32;
    for (const auto& [name, t] : options_.node_dtype) names.push_back(name);
    for (const std::string& name : names) {
      bool found = false;
      for (const Node& n : g_.nodes) found |= node_matches(n, name);
      if (!found)
        return invalid_argument("precision: no node named '" + name + "' in the graph (node names: `ferry info --json`; "
                                "after fusion a node matches the ONNX node names it covers)");
    }
    return Status::ok();
  }

  bool is_f32(const std::string& value) const {
    const TensorType* t = g_.find_type(value);
    return t && t->kind == ValueKind::kTensor && t->dtype == DType::kF32;
  }

  // The element type the options choose for a node (kF32: keep).
  DType choose(const Node& node) const {
    for (const auto& [name, t] : options_.node_dtype)
      if (node_matches(node, name)) return t;
    for (const std::string& name : options_.keep_fp32)
      if (node_matches(node, name)) return DType::kF32;
    const DType low = precision_mode_dtype(options_.mode);
    switch (options_.mode) {
      case PrecisionMode::kForceFp32: return DType::kF32;
      case PrecisionMode::kForceFp16:
      case PrecisionMode::kForceBf16: return low;
      case PrecisionMode::kAllowMixPrecision:
      case PrecisionMode::kAllowMixPrecisionBf16: {
        const auto& keep = options_.keep_fp32_ops ? *options_.keep_fp32_ops : default_keep_fp32_ops();
        return contains(keep, node.op_type) ? DType::kF32 : low;
      }
      case PrecisionMode::kAllowFp32ToFp16:
      case PrecisionMode::kAllowFp32ToBf16: {
        const auto& cube = options_.cube_ops ? *options_.cube_ops : default_cube_ops();
        return contains(cube, node.op_type) ? low : DType::kF32;
      }
    }
    return DType::kF32;
  }

  // Whether the node can hold `low` values at all: a float op over f32 data whose output types
  // follow its inputs. `computes` says whether its kernel takes `low` (else fp32 between Casts).
  bool lowerable(const Node& node, const OpSchema& schema, DType low, bool* computes) const {
    if (never_lowered_ops().count(node.op_type) || schema.accepts_sequences || !node.implicit_inputs.empty()) return false;
    for (const auto& [k, a] : node.attrs)
      if (a.g || !a.graphs.empty()) return false;
    bool f32_in = false, f32_out = false;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (!node.inputs[i].empty() && !is_neutral_input(node, i) && is_f32(node.inputs[i])) f32_in = true;
    for (const std::string& o : node.outputs) f32_out |= !o.empty() && is_f32(o);
    if (!f32_in || !f32_out) return false;
    *computes = (schema.types.empty() || contains_type(schema.types, low)) && output_types_follow(node, schema, low);
    return true;
  }

  static bool contains_type(const std::vector<DType>& types, DType t) {
    return std::find(types.begin(), types.end(), t) != types.end();
  }

  // Runs the op's shape rule with the float inputs retyped: every f32 output must become `low`.
  bool output_types_follow(const Node& node, const OpSchema& schema, DType low) const {
    if (!schema.infer) return false;
    std::vector<TensorType> retyped(node.inputs.size());
    std::vector<const TensorType*> types;
    std::vector<const Tensor*> values;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& in = node.inputs[i];
      const TensorType* t = in.empty() ? nullptr : g_.find_type(in);
      if (!in.empty() && !t) return false;
      if (t) {
        retyped[i] = *t;
        if (t->dtype == DType::kF32 && !is_neutral_input(node, i)) retyped[i].dtype = low;
        t = &retyped[i];
      }
      types.push_back(t);
      const Tensor* v = in.empty() ? nullptr : g_.find_initializer(in);
      values.push_back(v && v->dtype() != DType::kF32 ? v : nullptr);
    }
    InferContext ctx(node, model_->opset(node.domain), types, values);
    if (!schema.infer(ctx).is_ok()) return false;
    for (size_t k = 0; k < node.outputs.size(); ++k)
      if (!node.outputs[k].empty() && is_f32(node.outputs[k]) && ctx.outputs()[k].dtype != low) return false;
    return true;
  }

  // The name under which `base` is available as `want`, creating it (a converted initializer,
  // or a Cast of the stored form) when needed.
  std::string require(const std::string& base, DType want) {
    auto& forms = forms_[base];
    auto it = forms.find(want);
    if (it != forms.end()) return it->second;
    const std::string name = variant_name(base, want);
    if (want == DType::kF32 && !stored_.count(base)) {  // an initializer or an outer-scope value
      forms[want] = base;
      return base;
    }
    const Tensor* init = g_.find_initializer(base);
    if (init && !stored_.count(base) && g_.initializers.count(base)) {
      g_.initializers[name] = cast_tensor(*init, want).value();
      set_type(name, base, want);
      if (report_) ++report_->initializers_converted;
    } else {
      auto st = stored_.find(base);
      const DType from = st == stored_.end() ? DType::kF32 : st->second;
      add_cast(require(base, from), name, want);
      set_type(name, base, want);
    }
    forms[want] = name;
    return name;
  }

  void add_cast(const std::string& from, const std::string& to, DType dtype) {
    out_.push_back(make_cast_node(kCastPrefix + to, from, to, dtype));
    if (report_) ++report_->casts_inserted;
  }

  void set_type(const std::string& name, const std::string& base, DType dtype) {
    TensorType t;
    auto it = original_types_.find(base);
    if (it != original_types_.end()) t = it->second;
    else if (const TensorType* f = g_.find_type(base)) t = *f;
    t.dtype = dtype;
    g_.value_types[name] = t;
  }

  Status rewrite(const Node& node) {
    for (const std::string& o : node.outputs)
      if (const TensorType* t = g_.find_type(o)) original_types_[o] = *t;
    ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(node, model_->opset(node.domain)));
    const DType chosen = choose(node);
    bool computes = false;
    const bool lowered = chosen != DType::kF32 && lowerable(node, *schema, chosen, &computes);
    const DType compute = lowered && computes ? chosen : DType::kF32;
    if (report_) {
      if (lowered) {
        ++report_->nodes_lowered;
        report_->lowered.push_back(node.name);
        if (!computes) ++report_->nodes_computed_in_fp32;
      } else {
        bool is_float = false;
        for (const std::string& o : node.outputs) is_float |= !o.empty() && is_f32(o);
        if (is_float) ++report_->nodes_kept_fp32;
      }
    }
    Node n = node;
    // Shape and Size read only the dims: they take the value in whatever type it is stored (no Cast).
    const bool reads_dims_only = node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& in = node.inputs[i];
      if (in.empty() || !is_f32(in)) continue;
      auto st = stored_.find(in);
      if (reads_dims_only && st != stored_.end()) n.inputs[i] = require(in, st->second);
      else n.inputs[i] = require(in, is_neutral_input(node, i) ? DType::kF32 : compute);
    }
    // Subgraphs read outer values by name: their fp32 form must exist.
    for (const std::string& in : node.implicit_inputs)
      if (is_f32(in)) require(in, DType::kF32);
    std::vector<std::pair<std::string, std::string>> rounds;  // (f32acc name, stored name)
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string o = node.outputs[k];
      if (o.empty() || !is_f32(o)) continue;
      if (!lowered) {
        stored_[o] = DType::kF32;
        forms_[o][DType::kF32] = o;
        continue;
      }
      const std::string stored = variant_name(o, chosen);
      stored_[o] = chosen;
      forms_[o][chosen] = stored;
      dropped_types_.insert(o);
      if (computes) {
        n.outputs[k] = stored;
        set_type(stored, o, chosen);
      } else {
        n.outputs[k] = o + kAccSuffix;
        set_type(n.outputs[k], o, DType::kF32);
        set_type(stored, o, chosen);
        rounds.emplace_back(n.outputs[k], stored);
      }
    }
    out_.push_back(std::move(n));
    for (const auto& [acc, stored] : rounds) add_cast(acc, stored, chosen);
    return Status::ok();
  }

  Model* model_;
  Graph& g_;
  const PrecisionOptions& options_;
  PrecisionReport* report_;
  std::vector<Node> out_;
  /// For each value produced in this graph (or a graph input): the type it is stored in.
  std::unordered_map<std::string, DType> stored_;
  /// For each value: the names of its available forms by element type.
  std::unordered_map<std::string, std::map<DType, std::string>> forms_;
  std::unordered_map<std::string, TensorType> original_types_;
  /// Original names no longer produced in fp32 (their value_types entry goes unless re-created).
  std::set<std::string> dropped_types_;
};

}  // namespace

const char* precision_mode_name(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::kForceFp32: return "force_fp32";
    case PrecisionMode::kAllowFp32ToFp16: return "allow_fp32_to_fp16";
    case PrecisionMode::kForceFp16: return "force_fp16";
    case PrecisionMode::kAllowMixPrecision: return "allow_mix_precision";
    case PrecisionMode::kAllowFp32ToBf16: return "allow_fp32_to_bf16";
    case PrecisionMode::kForceBf16: return "force_bf16";
    case PrecisionMode::kAllowMixPrecisionBf16: return "allow_mix_precision_bf16";
  }
  return "?";
}

StatusOr<PrecisionMode> parse_precision_mode(const std::string& text) {
  static const std::vector<std::pair<std::string, PrecisionMode>> names = {
      {"force_fp32", PrecisionMode::kForceFp32},         {"fp32", PrecisionMode::kForceFp32},
      {"allow_fp32_to_fp16", PrecisionMode::kAllowFp32ToFp16}, {"force_fp16", PrecisionMode::kForceFp16},
      {"fp16", PrecisionMode::kForceFp16},               {"allow_mix_precision", PrecisionMode::kAllowMixPrecision},
      {"mix", PrecisionMode::kAllowMixPrecision},        {"allow_fp32_to_bf16", PrecisionMode::kAllowFp32ToBf16},
      {"force_bf16", PrecisionMode::kForceBf16},         {"bf16", PrecisionMode::kForceBf16},
      {"allow_mix_precision_bf16", PrecisionMode::kAllowMixPrecisionBf16}, {"mix_bf16", PrecisionMode::kAllowMixPrecisionBf16}};
  std::string all;
  for (const auto& [name, mode] : names) {
    if (name == text) return mode;
    all += (all.empty() ? "" : ", ") + name;
  }
  return invalid_argument("unknown precision mode '" + text + "'; known: " + all);
}

DType precision_mode_dtype(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::kForceFp32: return DType::kF32;
    case PrecisionMode::kAllowFp32ToFp16:
    case PrecisionMode::kForceFp16:
    case PrecisionMode::kAllowMixPrecision: return DType::kF16;
    default: return DType::kBF16;
  }
}

bool PrecisionOptions::is_identity() const {
  if (mode != PrecisionMode::kForceFp32) return false;
  for (const auto& [name, t] : node_dtype)
    if (t != DType::kF32) return false;
  return true;
}

const std::vector<std::string>& default_keep_fp32_ops() { return default_lists().keep_fp32_ops; }
const std::vector<std::string>& default_cube_ops() { return default_lists().cube_ops; }

Status load_precision_config(const std::string& path, PrecisionOptions* options) {
  std::ifstream f(path);
  if (!f) return invalid_argument("precision config '" + path + "' cannot be read");
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("precision config '" + path + "' is not a JSON object (see `ferry run --help`)");
  auto string_list = [&](const char* key, std::vector<std::string>* out) -> Status {
    if (!j.contains(key)) return Status::ok();
    const json& v = j[key];
    if (!v.is_array()) return invalid_argument("precision config '" + path + "': \"" + key + "\" must be a list of strings");
    for (const json& e : v) {
      if (!e.is_string()) return invalid_argument("precision config '" + path + "': \"" + key + "\" must be a list of strings");
      out->push_back(e.get<std::string>());
    }
    return Status::ok();
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const std::set<std::string> known = {"mode", "keep_fp32", "nodes", "keep_fp32_ops", "cube_ops", "_comment"};
    if (!known.count(it.key()))
      return invalid_argument("precision config '" + path + "': unknown key \"" + it.key() +
                              "\"; known: mode, keep_fp32, nodes, keep_fp32_ops, cube_ops");
  }
  if (j.contains("mode")) {
    if (!j["mode"].is_string()) return invalid_argument("precision config '" + path + "': \"mode\" must be a string");
    auto mode = parse_precision_mode(j["mode"].get<std::string>());
    if (!mode.is_ok()) return mode.status().with_context("precision config '" + path + "'");
    options->mode = mode.value();
  }
  RETURN_IF_ERROR(string_list("keep_fp32", &options->keep_fp32));
  if (j.contains("keep_fp32_ops")) {
    options->keep_fp32_ops.emplace();
    RETURN_IF_ERROR(string_list("keep_fp32_ops", &*options->keep_fp32_ops));
  }
  if (j.contains("cube_ops")) {
    options->cube_ops.emplace();
    RETURN_IF_ERROR(string_list("cube_ops", &*options->cube_ops));
  }
  if (j.contains("nodes")) {
    if (!j["nodes"].is_object())
      return invalid_argument("precision config '" + path + "': \"nodes\" must map node names to fp32, fp16 or bf16");
    for (auto it = j["nodes"].begin(); it != j["nodes"].end(); ++it) {
      bool ok = it.value().is_string();
      DType t = ok ? parse_dtype_word(it.value().get<std::string>(), &ok) : DType::kUndefined;
      if (!ok)
        return invalid_argument("precision config '" + path + "': node '" + it.key() + "': use \"fp32\", \"fp16\" or \"bf16\"");
      options->node_dtype[it.key()] = t;
    }
  }
  return Status::ok();
}

Status write_precision_config(const std::string& path, PrecisionMode mode, const std::vector<std::string>& keep_fp32,
                              const std::string& comment) {
  json j;
  if (!comment.empty()) j["_comment"] = comment;
  j["mode"] = precision_mode_name(mode);
  j["keep_fp32"] = keep_fp32;
  std::ofstream f(path);
  if (!f) return invalid_argument("cannot write precision config '" + path + "'");
  f << j.dump(2) << "\n";
  if (!f) return invalid_argument("writing precision config '" + path + "' failed");
  return Status::ok();
}

Status apply_precision(Model* model, const PrecisionOptions& options, PrecisionReport* report) {
  if (report) *report = PrecisionReport{};
  // Names are checked even when nothing changes, so a typo in --keep-fp32 is never silent.
  PrecisionRewriter rewriter(model, options, report);
  RETURN_IF_ERROR(rewriter.run());
  return infer_shapes(model).with_context(std::string("shape inference after precision mode ") +
                                          precision_mode_name(options.mode));
}

std::string precision_base_name(const std::string& value) {
  for (const char* suffix : {"::f16", "::bf16", kAccSuffix}) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (value.size() > n && value.compare(value.size() - n, n, suffix) == 0) return value.substr(0, value.size() - n);
  }
  return value;
}

bool is_precision_cast(const Node& node) {
  return node.op_type == "Cast" && node.name.rfind(kCastPrefix, 0) == 0;
}

}  // namespace ferry
