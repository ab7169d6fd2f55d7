// The ferry command line: parses options and dispatches to a subcommand.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "tools/cli_common.h"
#include "tools/commands.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "dev"
#endif

int main(int argc, char** argv) {
  using namespace ferry::cli;
  CLI::App app{"ferry " FERRY_VERSION " - carry a PyTorch model (ONNX) from one accelerator to another, and prove it still works"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FERRY_VERSION);
  app.footer("Exit codes: 0 success, 2 bad input or unsupported model, 1 internal error.\nRun 'ferry CMD --help' for a command's options.");

  InfoOptions info;
  CLI::App* info_cmd = app.add_subcommand("info", "Describe a model: inputs, outputs, opsets, producer, op histogram, parameters");
  info_cmd->add_option("model", info.model, "ONNX model file (.onnx)")->required();
  info_cmd->add_flag("--json", info.json, "Print JSON instead of text");

  RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Run a model once on inputs from .npy / .npz / ONNX .pb files");
  run_cmd->add_option("model", run.model, "ONNX model file (.onnx)")->required();
  run_cmd->add_option("-i,--input", run.inputs,
                      "[NAME=]FILE: an input as .npy, .npz (arrays matched to inputs by name) or ONNX TensorProto .pb; "
                      "without NAME= inputs are taken in the model's input order. Repeat for several inputs.");
  run_cmd->add_option("-o,--output-dir", run.output_dir,
                      "Write each output as DIR/<output name>.npy (names made file-system safe; created if missing)");
  run_cmd->add_option("-d,--device", run.device, "Device to run on: cpu (default) or cpu-ref (reference kernels)");
  run_cmd->add_option("--top-k", run.top_k, "Also print the K largest values (class, score) of each output row");
  run_cmd->add_flag("--json", run.json, "Print a JSON summary instead of text");

  OpsOptions ops;
  CLI::App* ops_cmd = app.add_subcommand("ops", "List the operators ferry implements, with their opset ranges");
  ops_cmd->add_flag("--json", ops.json, "Print JSON");
  ops_cmd->add_option("-d,--device", ops.device, "Whose supported element types to list (default cpu-ref)");
  ops_cmd->add_flag("--markdown", ops.markdown, "Print a Markdown table (docs/operators.md)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  try {
    if (*info_cmd) return cmd_info(info);
    if (*run_cmd) return cmd_run(run);
    if (*ops_cmd) return cmd_ops(ops);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ferry: error: out of memory\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: internal error: %s\n", e.what());
    return kExitInternal;
  }
  return kExitInternal;
}
