// The list of subcommands built from each command file's registration.
#include "tools/command_registry.h"

#include <algorithm>

namespace ferry::cli {
namespace {
std::vector<CommandSpec>& commands() {
  static std::vector<CommandSpec> list;
  return list;
}
}  // namespace

bool register_command(CommandSpec spec) {
  commands().push_back(std::move(spec));
  return true;
}

std::vector<CommandSpec> registered_commands() {
  std::vector<CommandSpec> list = commands();
  std::stable_sort(list.begin(), list.end(), [](const CommandSpec& a, const CommandSpec& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return list;
}

}  // namespace ferry::cli
