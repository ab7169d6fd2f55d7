// Precision modes (named as Ascend ATC names them) applied by graph rewriting: nodes chosen to
// run in fp16 or bf16 get their float inputs converted (Cast nodes; weights converted once into
// new initializers), compute in the low-precision type and store their outputs in it, so every
// rounding an accelerator would do happens on the CPU too. Not part of the optimization
// pipeline: applied only when asked (ExecutorOptions::precision, `ferry run --precision`).
//
//   force_fp32             nothing changes (the default)
//   allow_fp32_to_fp16     matrix ops ("cube_ops": Conv, MatMul, Gemm, ...) in fp16, the rest fp32
//   force_fp16             every float op in fp16
//   allow_mix_precision    fp16, except the numerically sensitive "keep_fp32_ops"
//                          (Softmax, LayerNorm, reductions, Exp/Log/Pow, losses)
//   allow_fp32_to_bf16, force_bf16, allow_mix_precision_bf16: the same with bfloat16
//
// The op lists are data (data/precision/mix_precision.json, compiled in); a precision config
// file overrides them and adds per-node choices. Graph inputs and outputs stay fp32.
//
// Naming: a value `v` stored in fp16 is `v::f16` (bf16: `v::bf16`); its fp32 form keeps the name
// `v` (a Cast from `v::f16`, present only where an fp32 reader or a graph output needs it). A
// node whose kernel has no low-precision path computes in fp32 between Casts, writing
// `v::f32acc` and storing it rounded as `v::f16` (like a tensor core: fp32 arithmetic, low-
// precision storage). precision_base_name() maps every variant back to `v`, so two runs at
// different precisions compare value by value.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

enum class PrecisionMode {
  kForceFp32,
  kAllowFp32ToFp16,
  kForceFp16,
  kAllowMixPrecision,
  kAllowFp32ToBf16,
  kForceBf16,
  kAllowMixPrecisionBf16,
};

/// "allow_mix_precision", ...
const char* precision_mode_name(PrecisionMode mode);
/// Accepts the ATC names and the short forms fp32, fp16, bf16 (= force_*) and mix (= allow_mix_precision).
StatusOr<PrecisionMode> parse_precision_mode(const std::string& text);
/// The low-precision element type a mode uses (kF32 for force_fp32).
DType precision_mode_dtype(PrecisionMode mode);

struct PrecisionOptions {
  PrecisionMode mode = PrecisionMode::kForceFp32;
  /// Nodes kept in fp32 whatever the mode; a name matches Node::name or any name in Node::origin
  /// (so ONNX node names work on optimized graphs).
  std::vector<std::string> keep_fp32;
  /// Per-node element type (kF32, kF16 or kBF16), from a config file; wins over keep_fp32 and the mode.
  std::map<std::string, DType> node_dtype;
  /// Replaces the default keep_fp32_ops list of the allow_mix_precision modes.
  std::optional<std::vector<std::string>> keep_fp32_ops;
  /// Replaces the default cube_ops list of the allow_fp32_to_* modes.
  std::optional<std::vector<std::string>> cube_ops;

  /// True when applying the options changes nothing (force_fp32 and no per-node choices).
  bool is_identity() const;
};

/// Reads a precision config (JSON) into `options`:
///   {"mode": "allow_mix_precision", "keep_fp32": ["Softmax_3"], "nodes": {"Conv_0": "fp16"},
///    "keep_fp32_ops": [...], "cube_ops": [...]}     (every key optional)
/// Lists add to what `options` holds; "mode" replaces it. Errors name the file and key.
Status load_precision_config(const std::string& path, PrecisionOptions* options);
/// Writes {"mode": ..., "keep_fp32": [...]} (what `ferry compare --fix` produces).
Status write_precision_config(const std::string& path, PrecisionMode mode, const std::vector<std::string>& keep_fp32,
                              const std::string& comment = "");

/// The defaults compiled from data/precision/mix_precision.json.
const std::vector<std::string>& default_keep_fp32_ops();
const std::vector<std::string>& default_cube_ops();

struct PrecisionReport {
  int64_t nodes_lowered = 0;         // nodes computing or storing in fp16/bf16
  int64_t nodes_computed_in_fp32 = 0;  // lowered nodes whose kernel lacks the type (fp32 between Casts)
  int64_t nodes_kept_fp32 = 0;       // float nodes the mode, keep list or config kept in fp32
  int64_t casts_inserted = 0;
  int64_t initializers_converted = 0;
  /// Names of lowered nodes (Node::name), in topological order (the candidates of --fix).
  std::vector<std::string> lowered;
};

/// Rewrites model->graph (main graph; subgraph-carrying nodes stay fp32) for `options`, then
/// re-runs shape inference to check the result. Errors name unknown node names in the options.
Status apply_precision(Model* model, const PrecisionOptions& options, PrecisionReport* report = nullptr);

/// "x::f16" / "x::bf16" / "x::f32acc" -> "x"; other names unchanged.
std::string precision_base_name(const std::string& value);
/// True for the Cast nodes apply_precision inserts (their outputs are variants of values
/// another node produced, so per-layer tools skip them).
bool is_precision_cast(const Node& node);

}  // namespace ferry
