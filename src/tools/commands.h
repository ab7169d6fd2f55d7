// The CLI's subcommands. Each returns the process exit code (0 ok, 1 internal, 2 bad input).
#pragma once

#include <string>
#include <vector>

namespace ferry::cli {

struct InfoOptions {
  std::string model;
  bool json = false;
  int64_t batch = 0;  // a compiled model with batch gears: describe the gear for this batch (0: the smallest)
  bool resident = false;  // make the executor, run twice, report Executor::resident_bytes by kind
  std::string device = "cpu";
  int threads = 0;
};
int cmd_info(const InfoOptions& options);

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::string output_dir;
  std::string device = "cpu";
  bool json = false;
  int top_k = 0;
  int opt_level = -1;
  int threads = 0;
  /// Precision mode (passes/precision.h), nodes kept in fp32, and a precision config file.
  std::string precision;
  std::vector<std::string> keep_fp32;
  std::string precision_config;
  /// "2G", "512M"; empty: the memory available now (MemAvailable); "none": no check.
  std::string memory_limit;
  /// Runs of the same inputs: the first plans memory, later ones run from the arena; every run's
  /// outputs must equal the first's bit for bit (exit 1 otherwise). The last run's are reported.
  int runs = 1;
  /// A .jpg/.png --input: the crop size S when the model's metadata does not give it.
  int64_t image_size = 0;
};
int cmd_run(const RunOptions& options);

struct OpsOptions {
  std::string device = "cpu-ref";
  bool json = false;
  bool markdown = false;
  bool train = false;
};
int cmd_ops(const OpsOptions& options);

}  // namespace ferry::cli
