#include "tools/cli_parse.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "tools/cli_common.h"

namespace ferry::cli {
namespace {

std::string normalized(const std::string& s) {
  size_t start = s.find_first_not_of('-');
  std::string out = start == std::string::npos ? "" : s.substr(start);
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string without_dashes(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '-') out += c;
  return out;
}

std::string initials(const std::string& s) {  // "learning-rate" -> "lr"
  std::string out;
  bool start = true;
  for (char c : s) {
    if (c == '-') {
      start = true;
    } else if (start) {
      out += c;
      start = false;
    }
  }
  return out;
}

// Damerau-Levenshtein distance (adjacent transpositions count one: "trian" is one from "train").
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end != nullptr && *end == '\0';
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

/// How the user names an option: --long, else -s, else the positional's NAME.
std::string display_name(const CLI::Option* opt) {
  if (!opt->get_lnames().empty()) return "--" + opt->get_lnames().front();
  if (!opt->get_snames().empty()) return "-" + opt->get_snames().front();
  return upper(opt->get_name());
}

std::vector<CLI::App*> commands_of(CLI::App& app) {
  return app.get_subcommands([](CLI::App*) { return true; });
}

CLI::App* find_command(CLI::App& app, const std::string& name) {
  for (CLI::App* sub : commands_of(app))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (CLI::App* sub : commands_of(app)) names.push_back(sub->get_name());
  return names;
}

int unknown_command(CLI::App& app, const std::string& name) {
  std::string names;
  for (const std::string& n : command_names(app)) names += (names.empty() ? "" : ", ") + n;
  const std::string guess = did_you_mean(name, command_names(app));
  std::fprintf(stderr, "ferry: unknown command '%s'%s\nThe commands: %s. Run 'ferry help CMD' for one command's options.\n",
               name.c_str(), guess.empty() ? "" : ("; did you mean '" + guess + "'?").c_str(), names.c_str());
  return kExitBadInput;
}

/// Options of `cmd` as the user types them ("--lr", "-O"), with whether each takes a value.
struct KnownOption {
  std::string name;
  bool takes_value = false;
};

std::vector<KnownOption> known_options(const CLI::App& cmd) {
  std::vector<KnownOption> out;
  for (const CLI::Option* opt : cmd.get_options()) {
    const bool value = opt->get_type_size() != 0;
    for (const std::string& l : opt->get_lnames()) out.push_back({"--" + l, value});
    for (const std::string& s : opt->get_snames()) out.push_back({"-" + s, value});
  }
  return out;
}

/// Every option in args[from..] that `cmd` does not have, before CLI11 sees them (CLI11 reports a
/// missing required option before an unknown one: `--batchsize 16` read as "--batch-size is required").
std::vector<std::string> unknown_options(const CLI::App& cmd, const std::vector<std::string>& args, size_t from) {
  const std::vector<KnownOption> known = known_options(cmd);
  auto find = [&](const std::string& name) -> const KnownOption* {
    for (const KnownOption& k : known)
      if (k.name == name) return &k;
    return nullptr;
  };
  std::vector<std::string> unknown;
  for (size_t i = from; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-' || is_number(a)) continue;
    std::string name;
    bool inline_value = false;
    if (a[1] == '-') {
      const size_t eq = a.find('=');
      name = a.substr(0, eq);
      inline_value = eq != std::string::npos;
    } else {
      name = a.substr(0, 2);  // -O2, -t4: a short option with its value attached
      inline_value = a.size() > 2;
    }
    const KnownOption* k = find(name);
    if (k == nullptr) {
      unknown.push_back(name);
      continue;
    }
    if (k->takes_value && !inline_value) ++i;  // its value, which may start with '-'
  }
  return unknown;
}

}  // namespace

std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates) {
  const std::string t = normalized(typed);
  if (t.empty()) return "";
  const std::string t_flat = without_dashes(t);
  std::string best;
  size_t best_score = SIZE_MAX;
  for (const std::string& cand : candidates) {
    const std::string c = normalized(cand);
    if (c.empty()) continue;
    const std::string c_flat = without_dashes(c);
    size_t score = SIZE_MAX;
    // Edits allowed: a third of the longer name, 1 to 3; none for one- or two-letter names (-x is no typo of -q).
    const size_t limit = t.size() <= 2 ? 0 : std::max<size_t>(1, std::min<size_t>(3, std::max(t.size(), c.size()) / 3));
    const size_t d = std::min(edit_distance(t, c), edit_distance(t_flat, c_flat));
    if (d <= limit) score = d;
    // Initials: --learning-rate for --lr, --bs for --batch-size (two letters at least).
    if (c.size() >= 2 && t.find('-') != std::string::npos && initials(t) == c) score = std::min<size_t>(score, 1);
    if (t.size() >= 2 && c.find('-') != std::string::npos && initials(c) == t) score = std::min<size_t>(score, 1);
    // A prefix either way (--check for --checkpoint-dir, --output for --out), or one word of it.
    if (std::min(t.size(), c.size()) >= 3 && (c.rfind(t, 0) == 0 || t.rfind(c, 0) == 0)) score = std::min<size_t>(score, 2);
    if (t.size() >= 4 && c.size() > t.size() && c.compare(c.size() - t.size(), t.size(), t) == 0 && c[c.size() - t.size() - 1] == '-')
      score = std::min<size_t>(score, 2);
    if (score < best_score) {
      best_score = score;
      best = cand;
    }
  }
  return best;
}

void show_defaults_in_help(CLI::App& app) {
  for (CLI::App* cmd : commands_of(app)) {
    for (CLI::Option* opt : cmd->get_options([](const CLI::Option*) { return true; })) {
      if (opt->get_type_size() == 0 || opt->get_required() || !opt->nonpositional()) continue;
      const std::string& desc = opt->get_description();
      if (desc.find("default") != std::string::npos) continue;  // the description gives it in words
      opt->capture_default_str();
      const std::string value = opt->get_default_str();
      opt->default_str("");  // shown once, in the description
      if (value.empty() || value == "[]" || value == "\"\"") continue;
      // -1, or 0 where only positive values are accepted, stands for "not given": not a default to show.
      if (value == "-1" || (value == "0" && opt->get_type_name().find("POSITIVE") != std::string::npos &&
                            opt->get_type_name().find("NONNEGATIVE") == std::string::npos))
        continue;
      opt->description(desc + " [default: " + value + "]");
    }
  }
}

int parse_command_line(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "help") {  // `ferry help [CMD]`, as git and go have it
    if (args.size() == 1) {
      std::fputs(app.help().c_str(), stdout);
      return kExitOk;
    }
    CLI::App* cmd = find_command(app, args[1]);
    if (cmd == nullptr) return unknown_command(app, args[1]);
    std::fputs(cmd->help(app.get_name()).c_str(), stdout);
    return kExitOk;
  }
  if (args.empty()) {
    std::string names;
    for (const std::string& n : command_names(app)) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "ferry: give a command: %s\nRun 'ferry --help' for what each does, 'ferry help CMD' for one command's options.\n",
                 names.c_str());
    return kExitBadInput;
  }
  CLI::App* cmd = nullptr;
  size_t cmd_at = 0;
  for (; cmd_at < args.size(); ++cmd_at) {
    const std::string& a = args[cmd_at];
    if (a.empty() || a[0] != '-') {
      cmd = find_command(app, a);
      if (cmd == nullptr) return unknown_command(app, a);
      break;
    }
  }
  if (cmd != nullptr) {
    const std::vector<std::string> unknown = unknown_options(*cmd, args, cmd_at + 1);
    if (!unknown.empty()) {
      std::vector<std::string> names;
      for (const KnownOption& k : known_options(*cmd)) names.push_back(k.name);
      for (const std::string& u : unknown) {
        const std::string guess = did_you_mean(u, names);
        std::fprintf(stderr, "ferry %s: unknown option %s%s\n", cmd->get_name().c_str(), u.c_str(),
                     guess.empty() ? "" : ("; did you mean " + guess + "?").c_str());
      }
      std::fprintf(stderr, "Run 'ferry help %s' for its options.\n", cmd->get_name().c_str());
      return kExitBadInput;
    }
  }
  const std::string who = cmd ? "ferry " + cmd->get_name() : "ferry";
  const std::string more = cmd ? "Run 'ferry help " + cmd->get_name() + "' for its options." : "Run 'ferry --help'.";
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    std::string missing;
    size_t count = 0;
    if (cmd != nullptr)
      for (const CLI::Option* opt : cmd->get_options())
        if (opt->get_required() && opt->count() == 0) {
          missing += (missing.empty() ? "" : ", ") + display_name(opt);
          ++count;
        }
    if (count == 0) {
      std::fprintf(stderr, "%s: %s\n%s\n", who.c_str(), e.what(), more.c_str());
      return kExitBadInput;
    }
    std::fprintf(stderr, "%s: missing %s%s%s\n%s\n", who.c_str(), count > 1 ? "required options " : "", missing.c_str(),
                 count == 1 ? " (required)" : "", more.c_str());
    return kExitBadInput;
  } catch (const CLI::ExtrasError& e) {
    std::string what = e.what();
    const std::string cli11 = "The following argument";
    if (what.rfind(cli11, 0) == 0 && what.find(": ") != std::string::npos) what = "unexpected argument(s) " + what.substr(what.find(": ") + 2);
    std::fprintf(stderr, "%s: %s\n%s\n", who.c_str(), what.c_str(), more.c_str());
    return kExitBadInput;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\n%s\n", who.c_str(), e.what(), more.c_str());
    return kExitBadInput;
  }
  return -1;
}

}  // namespace ferry::cli
