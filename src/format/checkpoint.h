// Training checkpoints (.fckpt, docs/format.md "Training checkpoints"): the step, named tensors
// (parameters, optimizer state, BatchNorm statistics) and a JSON string of everything else the
// trainer needs to resume. One self-describing little-endian file per step, written atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

struct Checkpoint {
  int64_t step = 0;                       // optimizer steps done
  std::map<std::string, Tensor> tensors;  // "param/<name>", "state/<opt>/<name>", "bn/<name>", ...
  std::string meta_json;                  // config fingerprint, RNG state, data position, scaler state...
  /// Set by read_checkpoint: the file read, and (reading a folder) why newer checkpoints were
  /// skipped ("" when the newest one was read).
  std::string path;
  std::string warning;
};

/// "ckpt-00000042.fckpt": the file name of the checkpoint of `step` (8 digits or more).
std::string checkpoint_file_name(int64_t step);

/// Writes `dir`/ckpt-<step>.fckpt (creating `dir` if its parent exists): a temporary file in
/// `dir`, checked writes, fsync, rename, fsync of the folder. On any failure (a full disk) the
/// temporary file is removed and existing checkpoints are untouched. Then removes the oldest
/// checkpoint files beyond `keep_last` (<= 0 keeps all); only names of the form
/// ckpt-<digits>.fckpt are ever removed. Tensors may be any dtype but string.
Status write_checkpoint(const std::string& dir, const Checkpoint& c, int keep_last);

/// Reads a checkpoint file, or a folder: its newest checkpoint that reads without error,
/// falling back to older ones when newer ones are corrupt (Checkpoint::warning says which and why).
StatusOr<Checkpoint> read_checkpoint(const std::string& path);

/// Parses checkpoint bytes held in memory (copies the tensors out). `what` names the source in
/// messages. Every count, length, dim and offset is checked before anything is allocated.
StatusOr<Checkpoint> parse_checkpoint(const uint8_t* data, size_t size, const std::string& what);

/// The path of the checkpoint with the highest step in `dir` (by file name; not read).
/// NotFound when there is none.
StatusOr<std::string> latest_checkpoint(const std::string& dir);

}  // namespace ferry
