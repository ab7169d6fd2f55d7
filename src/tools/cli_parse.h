// Parsing the ferry command line with messages a first-time user can act on, for every command at
// once (ferry_main.cpp calls it; commands only declare their options):
//   ferry trian ...              -> "ferry: unknown command 'trian'; did you mean 'train'?"
//   ferry train --learning-rate  -> "ferry train: unknown option --learning-rate; did you mean --lr?"
//   ferry train model.onnx       -> every missing required option in one message
//   ferry help [CMD]             -> the same text as `ferry [CMD] --help`
// and each command's --help shows every option's default.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace ferry::cli {

/// Parses argv into `app` (whose subcommands are all added). Returns -1 when a command is to run,
/// otherwise the exit code: 0 after help or the version, kExitBadInput after an explained error.
int parse_command_line(CLI::App& app, int argc, char** argv);

/// The candidate closest to `typed` as a user would mistype or abbreviate it (edit distance, '_'
/// for '-', a missing '-', initials such as --learning-rate for --lr, a prefix), or "" when none
/// is close. Leading dashes are ignored in the comparison and kept in the result.
std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates);

/// Makes each command's --help show the default of every option with a value whose description
/// does not already give it ("[default: X]"), so no option has a silent default.
void show_defaults_in_help(CLI::App& app);

}  // namespace ferry::cli
