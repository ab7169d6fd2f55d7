// Subcommand registration: each command file adds itself to the CLI, so a new command is a new
// file and ferry_main.cpp never changes.
//
//   namespace {
//   const bool registered = ferry::cli::register_command({"bench", 40, [](CLI::App& app) {
//     auto opt = std::make_shared<BenchOptions>();
//     CLI::App* cmd = app.add_subcommand("bench", "...");
//     cmd->add_option("model", opt->model, "...")->required();
//     return ferry::cli::CommandRun{cmd, [opt] { return cmd_bench(*opt); }};
//   }});
//   }
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace ferry::cli {

/// What a registered command hands back: its CLI11 subcommand and the action to run when chosen.
struct CommandRun {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

struct CommandSpec {
  std::string name;
  /// Position in `ferry --help` (lower first): the user's journey order.
  int order = 100;
  /// Adds the subcommand and its options to the root app.
  std::function<CommandRun(CLI::App&)> add;
};

/// Adds a command; call from a namespace-scope initializer in the command's own .cpp file.
bool register_command(CommandSpec spec);
/// Every registered command, sorted by `order` then name.
std::vector<CommandSpec> registered_commands();

}  // namespace ferry::cli
