// The ferry command line: builds the CLI from the registered subcommands and dispatches.
// Commands register themselves (src/tools/command_registry.h); this file never lists them.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>

#include "tools/cli_common.h"
#include "tools/cli_parse.h"
#include "tools/command_registry.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "dev"
#endif

int main(int argc, char** argv) {
  using namespace ferry::cli;
  CLI::App app{"ferry " FERRY_VERSION " - carry a PyTorch model (ONNX) from one accelerator to another, and prove it still works"};
  app.name("ferry");  // usage lines say "ferry CMD", whatever path ran it
  app.require_subcommand(1);
  app.set_version_flag("--version", FERRY_VERSION);
  app.footer("Exit codes: 0 success, 2 bad input or unsupported model, 1 internal error.\nRun 'ferry help CMD' (or 'ferry CMD --help') for a command's options.");

  std::vector<CommandRun> commands;
  for (const CommandSpec& spec : registered_commands()) commands.push_back(spec.add(app));

  show_defaults_in_help(app);
  const int parsed = parse_command_line(app, argc, argv);
  if (parsed >= 0) return parsed;
  try {
    for (const CommandRun& c : commands)
      if (c.app != nullptr && *c.app) return c.run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ferry: error: out of memory\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: internal error: %s\n", e.what());
    return kExitInternal;
  }
  return kExitInternal;
}
