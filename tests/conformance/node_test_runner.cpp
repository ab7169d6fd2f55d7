// Runs the ONNX backend node tests (model.onnx + test_data_set_*/{input,output}_*.pb) through
// ferry and compares outputs as the onnx package does (rtol 1e-3, atol 1e-7 unless the filter
// file gives a looser, explained tolerance). Each test runs in a forked child with a time limit,
// so a crash or hang is reported as that test's failure instead of ending the run.
//
// Usage: ferry_node_tests SUITE_DIR FILTERS.jsonc [--device D] [--filter SUBSTR] [--verbose]
// Exit 0 when every test passed or was expected to fail; 1 when a test not on the exclusion
// list failed, or a listed one passed (the list must stay true).
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "onnx/onnx_import.h"
#include "runtime/executor.h"

namespace {

using ferry::NamedValues;
using ferry::Value;
using ferry::Status;
using ferry::Tensor;

std::vector<std::string> list_dir(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) == 0 && n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    // natural order: input_2 before input_10
    if (a.size() != b.size()) return a.size() < b.size();
    return a < b;
  });
  return out;
}

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-7;
};

Status compare(const Tensor& got, const Tensor& want, const Tolerance& tol, const std::string& what) {
  if (got.dtype() != want.dtype())
    return ferry::invalid_argument(what + ": dtype " + ferry::dtype_name(got.dtype()) + ", expected " +
                                   ferry::dtype_name(want.dtype()));
  if (got.dims() != want.dims())
    return ferry::invalid_argument(what + ": shape " + ferry::dims_to_string(got.dims()) + ", expected " +
                                   ferry::dims_to_string(want.dims()));
  if (got.dtype() == ferry::DType::kString) {
    for (int64_t i = 0; i < got.numel(); ++i)
      if (got.strings()[i] != want.strings()[i])
        return ferry::invalid_argument(what + ": string element " + std::to_string(i) + " is '" + got.strings()[i] +
                                       "', expected '" + want.strings()[i] + "'");
    return Status::ok();
  }
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.get_double(i), e = want.get_double(i);
    bool ok;
    if (std::isnan(e)) ok = std::isnan(a);
    else if (std::isinf(e)) ok = a == e;
    else ok = std::fabs(a - e) <= tol.atol + tol.rtol * std::fabs(e);
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
      worst = std::max(worst, std::fabs(a - e));
    }
  }
  if (bad)
    return ferry::invalid_argument(what + ": " + std::to_string(bad) + " of " + std::to_string(got.numel()) +
                                   " elements differ (first at " + std::to_string(first) + ": got " +
                                   std::to_string(got.get_double(first)) + ", expected " +
                                   std::to_string(want.get_double(first)) + "; max abs diff " + std::to_string(worst) + ")");
  return Status::ok();
}

Status compare_values(const Value& got, const Value& want, const Tolerance& tol, const std::string& what) {
  if (got.has_element != want.has_element)
    return ferry::invalid_argument(what + ": got " + got.describe() + ", expected " + want.describe());
  if (!want.has_element) return Status::ok();
  if (want.is_sequence()) {
    if (!got.is_sequence()) return ferry::invalid_argument(what + ": got " + got.describe() + ", expected a sequence");
    if (got.sequence.size() != want.sequence.size())
      return ferry::invalid_argument(what + ": sequence of " + std::to_string(got.sequence.size()) + " tensors, expected " +
                                     std::to_string(want.sequence.size()));
    for (size_t i = 0; i < got.sequence.size(); ++i)
      RETURN_IF_ERROR(compare(got.sequence[i], want.sequence[i], tol, what + " item " + std::to_string(i)));
    return Status::ok();
  }
  if (!got.is_tensor()) return ferry::invalid_argument(what + ": got " + got.describe() + ", expected a tensor");
  return compare(got.tensor, want.tensor, tol, what);
}

Status run_test(const std::string& dir, const std::string& device, const Tolerance& tol) {
  ASSIGN_OR_RETURN(auto model, ferry::load_onnx_model(dir + "/model.onnx"));
  ASSIGN_OR_RETURN(auto ex, ferry::Executor::create(model, ferry::ExecutorOptions{device}));
  std::vector<std::string> sets = list_dir(dir, "test_data_set_");
  if (sets.empty()) return ferry::invalid_argument("no test_data_set_* folders");
  for (const std::string& set : sets) {
    const std::string sd = dir + "/" + set;
    NamedValues feeds;
    std::vector<std::string> inputs = list_dir(sd, "input_");
    const auto& gin = model->graph.inputs;
    const auto& gout = model->graph.outputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string name;
      ferry::ValueKind kind = i < gin.size() ? gin[i].type.kind : ferry::ValueKind::kTensor;
      ASSIGN_OR_RETURN(Value v, ferry::read_value_pb(sd + "/" + inputs[i], kind, &name));
      if (i < gin.size()) name = gin[i].name;
      feeds.emplace_back(name, std::move(v));
    }
    NamedValues outs;
    RETURN_IF_ERROR(ex->run_values(feeds, &outs));
    std::vector<std::string> expected = list_dir(sd, "output_");
    if (expected.size() != outs.size())
      return ferry::invalid_argument(set + ": " + std::to_string(outs.size()) + " outputs, expected " +
                                     std::to_string(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      ferry::ValueKind kind = i < gout.size() ? gout[i].type.kind : ferry::ValueKind::kTensor;
      ASSIGN_OR_RETURN(Value want, ferry::read_value_pb(sd + "/" + expected[i], kind));
      RETURN_IF_ERROR(compare_values(outs[i].second, want, tol, set + " output " + std::to_string(i) + " '" + outs[i].first + "'"));
    }
  }
  return Status::ok();
}

// Runs one test in a child process; returns "" on pass or the failure message.
std::string run_isolated(const std::string& dir, const std::string& device, const Tolerance& tol, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(timeout_s));
    Status st = run_test(dir, device, tol);
    std::string msg = st.is_ok() ? "" : st.to_string();
    ssize_t w = write(fds[1], msg.data(), msg.size());
    (void)w;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return sig == SIGALRM ? "timed out after " + std::to_string(timeout_s) + " s" : "CRASHED with signal " + std::to_string(sig);
  }
  return msg;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SUITE_DIR FILTERS.jsonc [--device D] [--filter SUBSTR] [--verbose]\n", argv[0]);
    return 2;
  }
  std::string suite = argv[1], filters_path = argv[2], device = "cpu-ref", only;
  bool verbose = false;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "--filter" && i + 1 < argc) only = argv[++i];
    else if (a == "--verbose") verbose = true;
  }
  std::ifstream f(filters_path);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", filters_path.c_str());
    return 2;
  }
  nlohmann::json filters;
  try {
    filters = nlohmann::json::parse(f, nullptr, true, /*ignore_comments=*/true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", filters_path.c_str(), e.what());
    return 2;
  }
  // The "cpu" device shares cpu-ref's list unless it has its own.
  std::string list_key = filters["exclusions"].contains(device) ? device : "cpu-ref";
  std::map<std::string, std::string> excluded;
  for (auto& [k, v] : filters["exclusions"][list_key].items()) excluded[k] = v.get<std::string>();
  // Listed tests whose expected values are someone else's random draws: they may match by chance.
  std::set<std::string> chance;
  if (filters.contains("may_pass_by_chance"))
    for (const auto& t : filters["may_pass_by_chance"]) chance.insert(t.get<std::string>());
  std::map<std::string, Tolerance> tolerances;
  for (auto& [k, v] : filters["tolerances"].items()) tolerances[k] = Tolerance{v.value("rtol", 1e-3), v.value("atol", 1e-7)};

  const std::string node_dir = suite + "/node";
  std::vector<std::string> tests = list_dir(node_dir, "test_");
  std::sort(tests.begin(), tests.end());
  if (tests.empty()) {
    std::fprintf(stderr, "no tests under %s\n", node_dir.c_str());
    return 2;
  }
  int passed = 0, failed = 0, skipped = 0, unexpected_fail = 0, unexpected_pass = 0;
  std::vector<std::string> report;
  for (const std::string& t : tests) {
    if (!only.empty() && t.find(only) == std::string::npos) continue;
    Tolerance tol;
    if (tolerances.count(t)) tol = tolerances[t];
    std::string msg = run_isolated(node_dir + "/" + t, device, tol, 120);
    const bool listed = excluded.count(t) > 0;
    if (msg.empty()) {
      ++passed;
      if (listed && chance.count(t)) {
        if (verbose) std::printf("ok    %s (listed, but its draws may match by chance)\n", t.c_str());
      } else if (listed) {
        ++unexpected_pass;
        report.push_back("UNEXPECTED PASS " + t + " (listed as: " + excluded[t] + "): remove it from the exclusion list");
      } else if (verbose) {
        std::printf("ok    %s\n", t.c_str());
      }
    } else {
      ++failed;
      if (!listed) {
        ++unexpected_fail;
        report.push_back("FAIL  " + t + ": " + msg);
      } else if (verbose) {
        std::printf("xfail %s: %s\n", t.c_str(), msg.c_str());
      }
    }
  }
  for (const std::string& line : report) std::printf("%s\n", line.c_str());
  std::printf("device %s: %d passed, %d failed, %d skipped (%zu on the exclusion list; %d unexpected failures, %d unexpected passes)\n",
              device.c_str(), passed, failed, skipped, excluded.size(), unexpected_fail, unexpected_pass);
  return (unexpected_fail || unexpected_pass) ? 1 : 0;
}
