// Shared pieces of the ferry CLI: exit codes, error printing, loading models and inputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "runtime/executor.h"

namespace ferry::cli {

constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

/// Prints "ferry: error: <message>" to stderr and returns the exit code for the status.
int report(const Status& status);

/// Loads an .onnx model, or a compiled .ferry model (by the file's magic; a file with several
/// batch gears gives its smallest), with a message that names the file. Without `require_known_ops`,
/// models with ops ferry does not implement load too (for describing them).
StatusOr<std::shared_ptr<Model>> load_model(const std::string& path, bool require_known_ops = true);

/// One `--input` spec split into the model input it names ("" when none) and the file.
struct InputSpec {
  std::string name;
  std::string file;
  /// Set when the spec could be read another way too (say which input the file went to).
  std::string note;
};

/// Splits `--input [NAME=]FILE`. Input names may hold '/', ':' or '=' (gpu_0/data_0, x=y): the
/// longest model input name followed by '=' wins; then NAME=FILE when NAME has no '/' and the
/// whole spec is not an existing file; otherwise the whole spec is a file.
InputSpec split_input_spec(const Model& model, const std::string& spec);

/// Reads `--input [NAME=]FILE` specs (.npy, .npz, .pb, or a .jpg/.png image through the eval
/// transform: the model's metadata (io/image_metadata.h), else its square input size or
/// `image_size`) and matches them to the model's inputs.
StatusOr<NamedTensors> load_inputs(const Model& model, const std::vector<std::string>& specs, int64_t image_size = 0);

/// "1.2 MiB"
std::string human_bytes(int64_t bytes);

/// The inference commands' (run, bench, profile) malloc settings: allocations below 32 MiB from the
/// heap and the heap's free top kept, instead of glibc's adaptive mmap / trim thresholds. A batch
/// split of the front (runtime/executor.h) runs kernels on two batch sizes per run, and their
/// temporaries (oneDNN scratchpads, kernel buffers) then went back and forth between mmap and the
/// heap: freshly zeroed pages every run (MobileNetV2 b8 at 2 threads: minor faults growing ~450 a
/// second, p90/p50 1.25-1.73 against 1.06-1.08 with these settings). The executor's own
/// malloc_trim after a recording run still gives the heap back. Set once per process, before the
/// executor is made; FERRY_MALLOC_DEFAULTS=0 (or the user's own GLIBC_TUNABLES /
/// MALLOC_*_ environment) leaves glibc's defaults. `ferry train` keeps glibc's defaults (its
/// --plan-memory is checked against the measured peak RSS).
void apply_inference_malloc_defaults();

}  // namespace ferry::cli
