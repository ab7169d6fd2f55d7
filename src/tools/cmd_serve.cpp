// `ferry serve --model-repository DIR`: a Triton-compatible inference server (KServe v2 over
// HTTP/REST and gRPC, /metrics) on src/serve/. Flags and defaults are Triton's. SIGTERM / SIGINT:
// readiness false at once, new requests refused (HTTP 503, gRPC UNAVAILABLE), queued and running
// ones finish (at most --exit-timeout-secs), exit 0.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef FERRY_HAVE_GRPC
#include "serve/grpc_server.h"
#endif
#include "serve/http_server.h"
#include "serve/model_repository.h"
#include "serve/server_log.h"
#include "serve/trace.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"

namespace ferry::cli {
namespace {

// Triton's flags that have nothing to set in ferry: accepted so that a Triton launch line starts
// unchanged, each named in a warning with why (never silently ignored). Security flags (SSL) are
// not among them: a server asked for TLS must not serve in clear.
struct IgnoredTritonFlag {
  const char* name;
  const char* why;
};
constexpr IgnoredTritonFlag kIgnoredTritonFlags[] = {
    {"--backend-config", "ferry runs the models itself; per-model settings go in config.pbtxt parameters (threads, precision)"},
    {"--backend-directory", "ferry loads no backends"},
    {"--repoagent-directory", "ferry runs no repository agents"},
    {"--pinned-memory-pool-byte-size", "ferry keeps no pinned host memory pool"},
    {"--cuda-memory-pool-byte-size", "ferry keeps no CUDA memory pool for transfers"},
    {"--min-supported-compute-capability", "ferry selects devices with --device"},
    {"--buffer-manager-thread-count", "ferry has no buffer manager threads"},
    {"--model-load-thread-count", "ferry loads models one at a time"},
    {"--grpc-infer-allocation-pool-size", "ferry's gRPC front end keeps no request pool to size"},
    {"--allow-gpu-metrics", "ferry reports no GPU metrics"},
    {"--allow-cpu-metrics", "ferry always reports the process's CPU and memory"},
    {"--metrics-interval-ms", "ferry reads its metrics when they are scraped"},
    {"--id", "ferry's server metadata names it \"ferry\""},
    {"--rate-limit", "ferry has no rate limiter: instances take batches as they are free"},
    {"--response-cache-byte-size", "ferry keeps no response cache"},
};

struct ServeOptions {
  std::string repository;
  std::string address = "0.0.0.0";
  int http_port = 8000;
  int metrics_port = 8002;
  std::string grpc_address;  // "": the --http-address
  int grpc_port = 8001;
  bool allow_grpc = true;
  bool allow_http = true;
  bool allow_metrics = true;
  std::string control_mode = "none";
  double poll_secs = 15;
  std::vector<std::string> load_models;
  std::vector<std::vector<std::string>> ignored_values =
      std::vector<std::vector<std::string>>(std::size(kIgnoredTritonFlags));  // per kIgnoredTritonFlags entry
  int exit_timeout_secs = 30;
  int64_t max_input_size = int64_t(64) << 20;
  int32_t grpc_max_message_size = INT32_MAX;  // Triton's fixed gRPC limit
  bool exit_on_error = true;
  bool strict_readiness = true;
  bool disable_auto_complete = false;
  bool strict_model_config = false;  // Triton's older name: true = --disable-auto-complete-config
  int threads = 0;
  int http_threads = 8;
  int64_t io_spin_us = serve::kDefaultIoSpinMicroseconds;
  std::string device = "cpu";
  int log_verbose = 0;
  bool log_info = true, log_warning = true, log_error = true;
  std::string log_format = "default";
  std::string log_file;
  std::string trace_file;
  std::vector<std::string> trace_level;  // empty: OFF
  uint64_t trace_rate = 1000, trace_log_frequency = 0;
  int64_t trace_count = -1;
  bool allow_client_shm = false;
};

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const char c = static_cast<char>(sig);
  if (write(g_signal_pipe[1], &c, 1) < 0) {
  }
}

int cmd_serve(const ServeOptions& opt) {
  // The log: its levels, format and file are Triton's flags, and can be changed at run time over
  // the logging extension (GET/POST /v2/logging, gRPC LogSettings).
  serve::LogSettings ls;
  ls.file = opt.log_file;
  ls.info = opt.log_info;
  ls.warnings = opt.log_warning;
  ls.errors = opt.log_error;
  ls.verbose_level = static_cast<uint32_t>(opt.log_verbose);
  ls.format = opt.log_format;
  auto server_log = serve::ServerLog::open(ls);
  if (!server_log.is_ok()) return report(server_log.status());
  serve::ServerLog* logging = server_log.value().get();
  // The trace extension: sampled requests' timestamps and tensors into --trace-file; settings
  // changed at run time over /v2/trace/setting and gRPC TraceSetting.
  serve::TraceSettings ts;
  for (const std::string& l : opt.trace_level) {
    if (l == "TIMESTAMPS") ts.timestamps = true;
    else if (l == "TENSORS") ts.tensors = true;
    else if (l != "OFF") {
      std::fprintf(stderr, "error: --trace-level '%s': expected OFF, TIMESTAMPS or TENSORS\n", l.c_str());
      return 2;
    }
  }
  if ((ts.timestamps || ts.tensors) && std::find(opt.trace_level.begin(), opt.trace_level.end(), "OFF") != opt.trace_level.end()) {
    std::fprintf(stderr, "error: --trace-level OFF cannot be given with another level\n");
    return 2;
  }
  ts.log_frequency = opt.trace_log_frequency;
  ts.rate = opt.trace_rate;
  ts.count = opt.trace_count;
  auto tracer = serve::Tracer::open(opt.trace_file, ts);
  if (!tracer.is_ok()) return report(tracer.status());
  auto log = [logging](const std::string& line) { logging->write(line); };
  for (size_t i = 0; i < std::size(kIgnoredTritonFlags); ++i)
    for (const std::string& v : opt.ignored_values[i])
      log(std::string("warning: ") + kIgnoredTritonFlags[i].name + " " + v + ": Triton's flag has no effect in ferry (" +
          kIgnoredTritonFlags[i].why + "); ignored");
  if (opt.control_mode != "none" && opt.control_mode != "explicit" && opt.control_mode != "poll") {
    std::fprintf(stderr, "error: --model-control-mode '%s': expected none, explicit or poll\n", opt.control_mode.c_str());
    return 2;
  }
  if (opt.control_mode != "explicit" && !opt.load_models.empty()) {
    std::fprintf(stderr, "error: --load-model needs --model-control-mode explicit (in mode %s every model is loaded)\n",
                 opt.control_mode.c_str());
    return 2;
  }
  const bool polling = opt.control_mode == "poll";
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    std::perror("pipe");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  apply_inference_malloc_defaults();
  serve::ServeOptions so;
  so.device = opt.device;
  so.threads = opt.threads;
  so.auto_complete_config = !opt.disable_auto_complete && !opt.strict_model_config;
  serve::ModelRepository repo(opt.repository, so, log);
  std::vector<std::string> to_load;
  const std::vector<std::string> found = repo.scan();
  if (found.empty() && opt.control_mode != "explicit")
    log("warning: no model directories in " + opt.repository);
  if (opt.control_mode != "explicit") {
    to_load = found;
  } else {
    for (const std::string& n : opt.load_models) {
      if (n == "*") to_load.insert(to_load.end(), found.begin(), found.end());
      else to_load.push_back(n);
    }
  }
  bool failed = false;
  for (const std::string& n : to_load) {
    Status st = repo.load(n);
    if (st.is_ok()) log("loaded model '" + n + "'");
    else failed = true;
  }
  if (failed && opt.exit_on_error) {
    log("error: a model failed to load and --exit-on-error is true; exiting (--exit-on-error=false serves the others)");
    repo.stop_all();
    return 2;
  }
  // Shared-memory regions, one namespace for both front ends; registering is refused unless
  // --allow-client-shm (as Triton since 26.04: a client could make the server map any object it can open).
  serve::SharedMemoryRegistry shm(opt.allow_client_shm);
  serve::HttpServerOptions ho;
  ho.shm = &shm;
  ho.logging = logging;
  ho.tracer = tracer.value().get();
  ho.address = opt.address;
  ho.http_port = opt.allow_http ? opt.http_port : -1;
  ho.metrics_port = opt.allow_metrics ? opt.metrics_port : -1;
  ho.threads = opt.http_threads;
  ho.io_spin_us = opt.io_spin_us;
  ho.max_input_size = opt.max_input_size;
  ho.explicit_control = opt.control_mode == "explicit";
  ho.strict_readiness = opt.strict_readiness;
#ifdef FERRY_VERSION
  ho.version = FERRY_VERSION;
#endif
#ifdef FERRY_HAVE_GRPC
  std::unique_ptr<serve::GrpcServer> grpc;
  if (opt.allow_grpc) {
    serve::GrpcServerOptions go;
    go.address = opt.grpc_address.empty() ? opt.address : opt.grpc_address;
    go.port = opt.grpc_port;
    go.max_message_size = opt.grpc_max_message_size;
    go.explicit_control = ho.explicit_control;
    go.strict_readiness = opt.strict_readiness;
    go.shm = &shm;
    go.logging = logging;
    go.tracer = ho.tracer;
    go.io_spin_us = opt.io_spin_us;
    go.version = ho.version;
    grpc = std::make_unique<serve::GrpcServer>(&repo, go, log);
    Status gst = grpc->start();
    if (!gst.is_ok()) {
      repo.stop_all();
      return report(gst);
    }
    log("gRPC on " + go.address + ":" + std::to_string(grpc->port()));
  }
#else
  if (opt.allow_grpc)
    log("warning: this build of ferry has no gRPC front end (configured with -DFERRY_GRPC=OFF); serving HTTP only");
#endif
  serve::HttpServer server(&repo, ho, log);
  Status st = server.start();
  if (!st.is_ok()) {
#ifdef FERRY_HAVE_GRPC
    if (grpc) grpc->stop();
#endif
    repo.stop_all();
    return report(st);
  }
  log((server.http_port() >= 0 ? "HTTP on " + opt.address + ":" + std::to_string(server.http_port()) : std::string("HTTP off (--allow-http false)")) +
      (server.metrics_port() >= 0 ? ", metrics on " + opt.address + ":" + std::to_string(server.metrics_port()) : std::string()));
  // Wait for SIGTERM / SIGINT; in poll mode, rescan the repository every --repository-poll-secs
  // (loads and unloads run here, never on a thread that serves requests).
  char sig = 0;
  const auto poll_every = std::chrono::milliseconds(static_cast<int64_t>(opt.poll_secs * 1000));
  auto next_poll = std::chrono::steady_clock::now() + poll_every;
  for (;;) {
    int wait_ms = -1;
    if (polling) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - std::chrono::steady_clock::now()).count();
      wait_ms = static_cast<int>(std::max<int64_t>(0, left));
    }
    pollfd pfd{g_signal_pipe[0], POLLIN, 0};
    const int r = poll(&pfd, 1, wait_ms);
    if (r > 0 && read(g_signal_pipe[0], &sig, 1) == 1) break;
    if (polling && std::chrono::steady_clock::now() >= next_poll) {
      repo.poll();
      next_poll = std::chrono::steady_clock::now() + poll_every;
    }
  }
  server.begin_shutdown();
#ifdef FERRY_HAVE_GRPC
  if (grpc) grpc->begin_shutdown();
#endif
  // A request is counted by its front end from its arrival to its response, and by its model while
  // it waits in the queue: the larger count is the number of requests still in progress.
  auto busy = [&] {
    int64_t front = server.in_flight();
#ifdef FERRY_HAVE_GRPC
    if (grpc) front += grpc->in_flight();
#endif
    int64_t queued = 0;
    for (const auto& m : repo.ready_models()) queued += m->pending();
    return std::max(front, queued);
  };
  auto requests = [](int64_t n) { return std::to_string(n) + (n == 1 ? " request" : " requests"); };
  log(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + ": not ready; finishing " + requests(busy()) +
      " (at most --exit-timeout-secs " + std::to_string(opt.exit_timeout_secs) + ")");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.exit_timeout_secs);
  while (busy() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int64_t left = busy();
  if (left > 0) {
    log("exit timeout expired with " + requests(left) + " unfinished; exiting");
    std::fflush(stderr);
    std::_Exit(1);
  }
  server.stop();
#ifdef FERRY_HAVE_GRPC
  if (grpc) grpc->stop();
#endif
  repo.stop_all();  // before the server's I/O context goes: late callbacks post to it
  log("stopped");
  return 0;
}

const bool kRegistered = register_command({"serve", 75, [](CLI::App& app) {
  auto opt = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a Triton-layout model repository over KServe v2 HTTP/REST and gRPC (Triton's protocol)");
  cmd->add_option("--model-repository,--model-store", opt->repository,
                  "DIR/<model>/[config.pbtxt] and DIR/<model>/<version>/model.onnx|model.ferry (--model-store: Triton's older name)")
      ->required();
  cmd->add_option("--http-address", opt->address, "Address to listen on (default 0.0.0.0)");
  cmd->add_option("--http-port", opt->http_port, "HTTP port (default 8000; 0: a free port, printed at start)")->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-port", opt->metrics_port, "Prometheus metrics port (default 8002; 0: a free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-port", opt->grpc_port, "gRPC port (default 8001; 0: a free port, printed at start)")->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-address", opt->grpc_address, "Address gRPC listens on (default: the --http-address)");
  cmd->add_option("--allow-http", opt->allow_http, "Serve HTTP/REST (KServe v2; default true; the metrics port is separate)");
  cmd->add_option("--allow-grpc", opt->allow_grpc, "Serve gRPC (inference.GRPCInferenceService; default true)");
  cmd->add_option("--allow-metrics", opt->allow_metrics, "Serve /metrics (default true)");
  cmd->add_option("--model-control-mode", opt->control_mode,
                  "none (every model loaded at start, no load/unload), explicit (--load-model, and the repository API) or poll "
                  "(every model loaded at start, the repository rescanned every --repository-poll-secs)");
  cmd->add_option("--repository-poll-secs", opt->poll_secs, "In poll mode, seconds between rescans of the repository (default 15)")
      ->check(CLI::Range(0.05, 86400.0));
  cmd->add_option("--load-model", opt->load_models, "In explicit mode, a model to load at start ('*': all); repeatable");
  cmd->add_option("--exit-timeout-secs", opt->exit_timeout_secs, "On SIGTERM, seconds to finish queued requests (default 30)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--http-max-input-size", opt->max_input_size, "Largest request body in bytes (default 64 MB); larger: 413")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--grpc-max-message-size", opt->grpc_max_message_size,
                  "ferry's own: largest gRPC request message in bytes (default 2147483647, Triton's fixed limit); larger: "
                  "RESOURCE_EXHAUSTED. --http-max-input-size does not apply to gRPC, as in Triton")
      ->check(CLI::Range(1, INT32_MAX));
  cmd->add_option("--exit-on-error", opt->exit_on_error, "Exit when a model fails to load at start (default true)");
  cmd->add_flag("--disable-auto-complete-config", opt->disable_auto_complete,
                "Every model needs a config.pbtxt listing its inputs and outputs (default: derived from the model)");
  cmd->add_option("--strict-model-config", opt->strict_model_config,
                  "Triton's older flag: true is --disable-auto-complete-config (default false)");
  for (size_t i = 0; i < std::size(kIgnoredTritonFlags); ++i)
    cmd->add_option(kIgnoredTritonFlags[i].name, opt->ignored_values[i],
                    std::string("Triton's; no effect in ferry (") + kIgnoredTritonFlags[i].why + "): warned about and ignored")
        ->group("Triton flags ferry ignores");
  cmd->add_option("--strict-readiness", opt->strict_readiness,
                  "Server readiness only while every loaded model is ready: one that failed to load makes it not ready (default true)");
  cmd->add_option("-t,--threads", opt->threads, "Compute threads per model, divided between its instances (default: the machine's cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--http-thread-count", opt->http_threads, "HTTP I/O threads (default 8)")->check(CLI::Range(1, 256));
  cmd->add_option("--io-spin-microseconds", opt->io_spin_us,
                  "After a request, an HTTP I/O thread or gRPC poller polls for the next without blocking for up to this long "
                  "before blocking; only when the machine has an idle core (default " + std::to_string(serve::kDefaultIoSpinMicroseconds) +
                      "; 0: never)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("-d,--device", opt->device, "Device the models run on (default cpu)");
  cmd->add_option("--allow-client-shm", opt->allow_client_shm,
                  "Let clients register system shared-memory regions and name them in inference requests (default false, as Triton)");
  cmd->add_option("--log-verbose", opt->log_verbose, "Verbose logging level: >= 1 logs every request with its answer (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--log-info", opt->log_info, "Log information lines (default true)");
  cmd->add_option("--log-warning", opt->log_warning, "Log warnings (default true)");
  cmd->add_option("--log-error", opt->log_error, "Log errors (default true)");
  cmd->add_option("--log-format", opt->log_format, "default (\"ferry serve: ...\") or ISO8601 (the UTC time first)");
  cmd->add_option("--log-file", opt->log_file, "Append the log to this file instead of stderr");
  cmd->add_option("--trace-file", opt->trace_file,
                  "Append sampled requests' traces to this file, one JSON object a line (the trace extension)");
  cmd->add_option("--trace-level", opt->trace_level,
                  "OFF (default), TIMESTAMPS, TENSORS (inputs and outputs); repeat for both; changeable at run time (/v2/trace/setting)");
  cmd->add_option("--trace-log-frequency", opt->trace_log_frequency,
                  "0 (default): traces appended to --trace-file; N: to FILE.0, FILE.1, ..., N traces a file");
  cmd->add_option("--trace-rate", opt->trace_rate, "Trace one request in this many (default 1000)")->check(CLI::PositiveNumber);
  cmd->add_option("--trace-count", opt->trace_count, "Stop after tracing this many requests (default -1: no limit)")->check(CLI::Range(int64_t(-1), INT64_MAX));
  return CommandRun{cmd, [opt] { return cmd_serve(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
