// The compiled model (.ferry file, docs/format.md): one or more optimized graphs ("gears", one
// per batch size) plus their weights, written by `ferry compile` and loaded by the CLI and the
// C API. Loading maps the file and uses the weights in place (no copy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// One compiled plan: the optimized model for one batch size (batch 0: the model's own shapes).
struct CompiledGear {
  int64_t batch = 0;
  std::shared_ptr<Model> model;
};

/// A per-node kernel choice made by `ferry compile --tune`.
struct TuningChoice {
  std::string node;
  std::string op_type;
  std::string impl;        // "reference", "optimized:0", ...
  double ms = 0;           // time of the chosen implementation
  double reference_ms = 0; // time of the reference kernel
};

struct CompiledModel {
  // From the file header.
  uint32_t format_version = 0;
  std::string ferry_version;
  std::string isa;     // "x86_64"
  std::string device;  // the --device compiled for
  uint64_t file_size = 0;
  uint64_t checksum = 0;
  uint64_t weights_bytes = 0;
  // From the graph section.
  std::string source;          // the model file compiled
  int opt_level = 0;
  std::string precision_mode;  // "fp32", ...
  int threads = 0;             // tuned intra-op threads (0: not tuned)
  std::vector<CompiledGear> gears;  // sorted by batch
  std::vector<TuningChoice> tuning;

  /// The gear for `batch`: the smallest gear >= batch (the only gear when batch is 0 or the
  /// file has one fixed-shape gear). nullptr when batch exceeds the largest gear.
  const CompiledGear* gear_for_batch(int64_t batch) const;
};

/// What the writer is given.
struct CompiledModelSpec {
  std::string source;
  std::string device = "cpu";
  int opt_level = 0;
  std::string precision_mode = "fp32";
  int threads = 0;
  std::vector<CompiledGear> gears;
  std::vector<TuningChoice> tuning;
};

/// The format version this build writes and reads.
constexpr uint32_t kCompiledFormatVersion = 2;  // 2: weights stored once, packed (issue 40)

/// The instruction-set architecture this build targets ("x86_64", "aarch64").
std::string host_isa();
/// The ferry version compiled into the library ("0.1.0").
std::string ferry_version();

/// True when the first bytes are a .ferry header's magic (a cheap sniff; nothing is validated).
bool has_compiled_magic(const void* data, size_t size);
/// Reads the first bytes of `path` and says whether it is a .ferry file (false on any error).
bool is_compiled_model_file(const std::string& path);

/// Writes the compiled model to `path` atomically (temporary file + rename).
Status write_compiled_model(const std::string& path, const CompiledModelSpec& spec);
/// Serializes into memory (tests, load-from-memory).
StatusOr<std::string> serialize_compiled_model(const CompiledModelSpec& spec);

/// Maps `path` and loads it. Errors (kInvalidModel) name the file and say what is wrong:
/// not a .ferry file, another format version / ferry version / ISA, truncated, checksum
/// mismatch, malformed graph section.
StatusOr<CompiledModel> load_compiled_model(const std::string& path);
/// Loads from bytes owned by `owner` (the weights are used in place, so `owner` is kept alive
/// by the returned tensors). `data` must be 64-byte aligned; `what` names the source in errors.
StatusOr<CompiledModel> parse_compiled_model(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                             const std::string& what);
/// Copies `size` bytes into an aligned buffer and parses them.
StatusOr<CompiledModel> parse_compiled_model_copy(const void* data, size_t size, const std::string& what);

}  // namespace ferry
