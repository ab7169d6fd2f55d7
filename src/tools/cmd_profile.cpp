// `ferry profile MODEL [bench options] [--trace FILE.json] [--top N]`: where the time goes — a
// per-node table sorted by total time (like PyTorch's key_averages), a per-op-type summary, and
// a Chrome trace.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "compiler/gears.h"
#include "tools/bench_common.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"
#include "tools/profiler.h"

namespace ferry::cli {
namespace {

using nlohmann::json;

struct ProfileOptions {
  BenchOptions bench;
  std::string trace;
  int top = 30;
};

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const std::string& i : items) {
    if (i.empty()) continue;
    s += (s.empty() ? "" : sep) + i;
  }
  return s;
}

std::string clip(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

void print_tables(const Profiler& prof, const std::vector<NodeProfile>& nodes, int top) {
  const double run_ms = prof.run_total_ms();
  double node_ms = 0;
  for (const NodeProfile& p : nodes) node_ms += p.total_ms;
  std::printf("\n%-36s %-18s %6s %11s %10s %10s %7s  %-40s %s\n", "Node", "Op", "Calls", "Total ms", "Mean ms",
              "CPU ms", "% run", "Input shapes", "Output shapes");
  std::printf("%s\n", std::string(181, '-').c_str());
  int shown = 0;
  for (const NodeProfile& p : nodes) {
    if (top > 0 && shown++ >= top) break;
    const Node& n = *p.node;
    std::string name = n.name;
    if (!n.origin.empty()) name += " [" + std::to_string(n.origin.size()) + " fused]";
    std::printf("%-36s %-18s %6lld %11.3f %10.4f %10.4f %6.2f%%  %-40s %s\n", clip(name, 36).c_str(),
                clip(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type, 18).c_str(),
                static_cast<long long>(p.calls), p.total_ms, p.total_ms / static_cast<double>(std::max<int64_t>(1, p.calls)),
                p.cpu_ms / static_cast<double>(std::max<int64_t>(1, p.calls)), run_ms > 0 ? 100.0 * p.total_ms / run_ms : 0.0, clip(join(p.input_shapes, " "), 40).c_str(),
                join(p.output_shapes, " ").c_str());
    if (!n.origin.empty()) std::printf("%-36s   covers: %s\n", "", clip(join(n.origin, ", "), 130).c_str());
  }
  if (top > 0 && static_cast<int>(nodes.size()) > top)
    std::printf("... %zu more nodes (--top 0 shows all)\n", nodes.size() - static_cast<size_t>(top));

  std::printf("\n%-30s %6s %7s %11s %12s %11s %7s\n", "Op type", "Nodes", "Calls", "Total ms", "Mean ms/call",
              "CPU ms/call", "% run");
  std::printf("%s\n", std::string(92, '-').c_str());
  for (const OpTypeProfile& o : prof.by_op_type())
    std::printf("%-30s %6lld %7lld %11.3f %12.4f %11.4f %6.2f%%\n", clip(o.op_type, 30).c_str(),
                static_cast<long long>(o.nodes), static_cast<long long>(o.calls), o.total_ms,
                o.total_ms / static_cast<double>(std::max<int64_t>(1, o.calls)),
                o.cpu_ms / static_cast<double>(std::max<int64_t>(1, o.calls)), run_ms > 0 ? 100.0 * o.total_ms / run_ms : 0.0);
  // The observer's own bookkeeping runs between nodes too: shown apart, so "between nodes" is
  // what the executor itself spends there (a run without the profiler spends only that).
  const double own_ms = prof.own_ms();
  std::printf("%-30s %6s %7s %11.3f %12s %11s %6.2f%%\n", "(executor, between nodes)", "", "", run_ms - node_ms - own_ms, "", "",
              run_ms > 0 ? 100.0 * (run_ms - node_ms - own_ms) / run_ms : 0.0);
  std::printf("%-30s %6s %7s %11.3f %12s %11s %6.2f%%\n", "(profiler's own bookkeeping)", "", "", own_ms, "", "",
              run_ms > 0 ? 100.0 * own_ms / run_ms : 0.0);
}

int cmd_profile(const ProfileOptions& opt) {
  auto setup = prepare_bench(opt.bench);
  if (!setup.is_ok()) return report(setup.status());
  BenchSetup& b = setup.value();
  Executor& ex = *b.executor;
  const int warmup = opt.bench.warmup >= 0 ? opt.bench.warmup : 2;
  const int iterations = opt.bench.iterations > 0 ? opt.bench.iterations : (opt.bench.duration > 0 ? 0 : 10);
  Profiler prof(ex.model().graph, b.feeds);
  ex.set_observer(prof.observer(), /*keeps_outputs=*/false);
  NamedTensors outputs;
  for (int i = 0; i < warmup; ++i) {
    Status st = ex.run(b.feeds, &outputs);
    if (!st.is_ok()) return report(st);
  }
  prof.reset();
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (iterations > 0 && i >= iterations) break;
    if (iterations == 0 && i >= 1 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() >= opt.bench.duration)
      break;
    prof.begin_run();
    Status st = ex.run(b.feeds, &outputs);
    prof.end_run();
    if (!st.is_ok()) return report(st);
  }
  ex.set_observer(nullptr);
  std::map<std::string, std::string> output_files;  // safe file name -> output name
  if (!opt.bench.output_dir.empty()) {
    cut_to_batch(b.batched_outputs, b.batch, &outputs);
    Status ws = write_outputs(opt.bench.output_dir, outputs, &output_files);
    if (!ws.is_ok()) return report(ws);
  }
  if (!opt.trace.empty()) {
    Status ts = prof.write_trace(opt.trace, "ferry profile " + opt.bench.model);
    if (!ts.is_ok()) return report(ts);
  }
  const std::vector<NodeProfile> nodes = prof.by_node();
  const double per_run = prof.runs() ? prof.run_total_ms() / static_cast<double>(prof.runs()) : 0.0;
  const double cpu_per_run = prof.runs() ? prof.run_cpu_ms() / static_cast<double>(prof.runs()) : 0.0;
  const double on_cpu = prof.run_total_ms() > 0 ? prof.run_cpu_ms() / (prof.run_total_ms() * std::max(1, b.threads)) : 0.0;
  if (opt.bench.json) {
    json rows = json::array();
    for (const NodeProfile& p : nodes) {
      json r = {{"node", p.node->name}, {"op_type", p.node->op_type}, {"domain", p.node->domain},
                {"calls", p.calls}, {"total_ms", p.total_ms}, {"mean_ms", p.total_ms / static_cast<double>(p.calls)},
                {"cpu_total_ms", p.cpu_ms}, {"cpu_mean_ms", p.cpu_ms / static_cast<double>(p.calls)},
                {"percent", prof.run_total_ms() > 0 ? 100.0 * p.total_ms / prof.run_total_ms() : 0.0},
                {"input_shapes", p.input_shapes}, {"output_shapes", p.output_shapes}};
      if (!p.node->origin.empty()) r["covers"] = p.node->origin;
      rows.push_back(r);
    }
    json ops = json::array();
    for (const OpTypeProfile& o : prof.by_op_type())
      ops.push_back({{"op_type", o.op_type}, {"nodes", o.nodes}, {"calls", o.calls}, {"total_ms", o.total_ms},
                     {"cpu_total_ms", o.cpu_ms}});
    json j = {{"model", opt.bench.model}, {"device", opt.bench.device}, {"threads", b.threads}, {"batch", b.batch},
              {"runs", prof.runs()}, {"run_mean_ms", per_run}, {"run_mean_cpu_ms", cpu_per_run},
              {"on_cpu_share", on_cpu}, {"batch_split_rows", ex.last_split_rows()},
              {"profiler_own_ms_per_run", prof.runs() ? prof.own_ms() / static_cast<double>(prof.runs()) : 0.0},
              {"nodes", rows}, {"op_types", ops}};
    if (!opt.trace.empty()) j["trace"] = opt.trace;
    if (!output_files.empty()) j["output_files"] = output_files;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  const double own_per_run = prof.runs() ? prof.own_ms() / static_cast<double>(prof.runs()) : 0.0;
  std::printf("ferry profile %s: %s, %d thread%s, batch %lld; %lld runs, %.3f ms per run (profiled; %.3f ms of it the "
              "profiler's own bookkeeping, which `ferry bench` does not spend)\n",
              opt.bench.model.c_str(), opt.bench.device.c_str(), b.threads, b.threads == 1 ? "" : "s",
              static_cast<long long>(b.batch), static_cast<long long>(prof.runs()), per_run, own_per_run);
  std::printf("CPU %.3f ms per run (process, all threads; CPU ms columns: since the previous node ended); on a core %.0f%% "
              "of the wall time%s\n", cpu_per_run, 100.0 * on_cpu,
              on_cpu < 0.8 ? " -- the runs waited for a core: read CPU ms, not Total/Mean ms" : "");
  if (const int64_t part = ex.last_split_rows(); part > 0)
    std::printf("batch split: each run is %lld parts of %lld rows (activations over the last-level cache); calls count parts; "
                "FERRY_BATCH_SPLIT=0 profiles the batch whole\n",
                static_cast<long long>((b.batch + part - 1) / part), static_cast<long long>(part));
  print_tables(prof, nodes, opt.top);
  if (!opt.trace.empty()) std::printf("\ntrace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", opt.trace.c_str());
  return kExitOk;
}

const bool kRegistered = register_command({"profile", 75, [](CLI::App& app) {
  auto opt = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand("profile", "Time every node: per-node and per-op-type tables, Chrome trace");
  add_bench_options(cmd, &opt->bench);
  cmd->add_option("--trace", opt->trace, "Write a Chrome trace (Trace Event Format JSON) to FILE");
  cmd->add_option("--top", opt->top, "Nodes shown in the table (default 30; 0: all)")->check(CLI::NonNegativeNumber);
  return CommandRun{cmd, [opt] { return cmd_profile(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
