// `ferry perf URL -m MODEL --concurrency-range 1:16:2 [--protocol http|grpc]`: the load generator
// for `ferry serve` (and any KServe v2 HTTP or gRPC server), shaped like Triton's perf_analyzer. Per concurrency level: a warm-up
// window, then measurement windows until three in a row agree (throughput within
// --stability-percentage), throughput and client p50/p90/p99, and the server's own queue /
// compute split and average batch from the statistics endpoint; CSV and JSON reports.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "io/npy.h"
#ifdef FERRY_HAVE_GRPC
#include "serve/grpc_client.h"
#endif
#include "serve/http_client.h"
#include "serve/inference_types.h"
#include "serve/kserve_json.h"
#include "serve/model_config.h"
#include "serve/spin_wait.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"

namespace ferry::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct PerfOptions {
  std::string url;  // "": localhost:8000 (http) or localhost:8001 (grpc)
  std::string model;
  std::string version;
  std::string concurrency_range = "1";
  std::string protocol = "http";
  std::vector<std::string> inputs;
  int64_t batch_size = 1;
  int measurement_interval_ms = 2000;
  int max_windows = 10;
  double stability = 10.0;
  bool json_data = false;
  bool streaming = false;  // gRPC: requests on one ModelStreamInfer stream per concurrent stream
  int64_t io_spin_us = serve::kDefaultIoSpinMicroseconds;
  int string_length = 128;  // random BYTES elements, as perf_analyzer's --string-length
  std::string csv;
  std::string json_out;
};

struct LevelResult {
  int concurrency = 0;
  double throughput = 0;  // inferences / s (requests x batch size)
  double p50 = 0, p90 = 0, p99 = 0, avg = 0;  // client latency, µs
  int64_t requests = 0, errors = 0;
  bool stable = false;
  /// A window in which requests failed and none succeeded (the server refuses every request):
  /// the run stops there (perf_analyzer stops at a failed request).
  bool refused = false;
  int refused_window_ms = 0;
  double server_queue_us = 0, server_compute_us = 0, avg_batch = 0;
  std::string first_error;
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) - (p > 0 ? 1 : 0));
  return v[i];
}

// The request body (binary tensor data extension, or JSON tensors) and its header length.
struct Body {
  std::string bytes;
  int64_t header_length = -1;
  /// The same inputs as tensors (gRPC sends them as raw_input_contents).
  serve::TensorList tensors;
};

StatusOr<Body> make_body(const json& meta, int32_t max_batch, const PerfOptions& opt) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::mt19937 rng(1);
  size_t k = 0;
  for (const json& in : meta["inputs"]) {
    const std::string name = in["name"];
    DType dt;
    if (!serve::dtype_from_kserve(in["datatype"].get<std::string>(), &dt))
      return unsupported("input '" + name + "': datatype " + in["datatype"].get<std::string>() + " is not supported by ferry perf");
    Tensor t;
    std::string file;
    for (const std::string& spec : opt.inputs) {
      const size_t eq = spec.find('=');
      if (eq != std::string::npos && spec.substr(0, eq) == name) file = spec.substr(eq + 1);
    }
    if (file.empty() && k < opt.inputs.size() && opt.inputs[k].find('=') == std::string::npos) file = opt.inputs[k];
    if (!file.empty()) {
      if (dt == DType::kString)
        return unsupported("input '" + name + "' is BYTES: a .npy file cannot give it; leave --input out for random strings "
                           "(--string-length characters each)");
      ASSIGN_OR_RETURN(t, read_npy(file));
      if (t.dtype() != dt) return invalid_argument(file + ": " + dtype_name(t.dtype()) + " but input '" + name + "' is " + in["datatype"].get<std::string>());
    } else {
      std::vector<int64_t> dims;
      bool first = true;
      for (const json& d : in["shape"]) {
        int64_t v = d.get<int64_t>();
        if (v < 0) v = first && max_batch > 0 ? opt.batch_size : 1;
        dims.push_back(v);
        first = false;
      }
      ASSIGN_OR_RETURN(t, Tensor::create(dt, dims, "input '" + name + "'"));
      auto* bytes = static_cast<uint8_t*>(t.mutable_raw());
      if (dt == DType::kString) {  // random printable ASCII, as perf_analyzer
        for (std::string& s : t.mutable_strings()) {
          s.resize(static_cast<size_t>(opt.string_length));
          for (char& c : s) c = static_cast<char>('!' + rng() % 94);
        }
      } else if (dt == DType::kF32) {
        std::uniform_real_distribution<float> u(0.f, 1.f);
        for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
      } else if (dt == DType::kBool) {
        for (int64_t i = 0; i < t.numel(); ++i) bytes[i] = rng() & 1;
      } else if (!dtype_is_float(dt)) {
        for (int64_t i = 0; i < t.nbytes(); i += dtype_size(dt)) bytes[i] = static_cast<uint8_t>(rng() % 10);
      }
    }
    tensors.emplace_back(name, std::move(t));
    ++k;
  }
  json req;
  req["inputs"] = json::array();
  std::string binary;
  std::vector<std::pair<std::string, std::string>> float_arrays;  // (quoted placeholder, JSON array)
  for (const auto& [name, t] : tensors) {
    json in = {{"name", name}, {"datatype", serve::kserve_dtype_name(t.dtype())}, {"shape", t.dims()}};
    if (t.dtype() == DType::kString) {
      if (opt.json_data) {
        in["data"] = t.strings();
      } else {
        in["parameters"] = {{"binary_data_size", serve::bytes_tensor_size(t)}};
        serve::append_bytes_tensor(t, &binary);
      }
    } else if (opt.json_data && t.dtype() == DType::kF32) {
      // Each value in its shortest form that reads back as the same float (std::to_chars), not as
      // the double it widens to: 784 values are 8.5 KB of JSON instead of 15 KB, which the server
      // parses and both ends copy on every request. Spliced in after the dump.
      std::string text = "[";
      char buf[32];
      for (int64_t i = 0; i < t.numel(); ++i) {
        const float v = t.data<float>()[i];
        if (i > 0) text += ',';
        if (!std::isfinite(v)) {  // JSON has no NaN or infinity: null, as nlohmann writes them
          text += "null";
          continue;
        }
        text.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
      }
      text += ']';
      const std::string mark = "@ferry-perf-data-" + std::to_string(float_arrays.size()) + "@";
      in["data"] = mark;
      float_arrays.emplace_back("\"" + mark + "\"", std::move(text));
    } else if (opt.json_data) {
      json data = json::array();
      const auto values = t.to_double_vector();
      for (double v : values) {
        if (t.dtype() == DType::kBool) data.push_back(v != 0);
        else if (dtype_is_float(t.dtype())) data.push_back(v);
        else data.push_back(static_cast<int64_t>(v));
      }
      in["data"] = std::move(data);
    } else {
      in["parameters"] = {{"binary_data_size", t.nbytes()}};
      binary.append(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes()));
    }
    req["inputs"].push_back(std::move(in));
  }
  req["parameters"] = {{"binary_data_output", !opt.json_data}};
  Body b;
  b.bytes = req.dump();
  for (const auto& [mark, text] : float_arrays) b.bytes.replace(b.bytes.find(mark), mark.size(), text);
  if (!opt.json_data) {
    b.header_length = static_cast<int64_t>(b.bytes.size());
    b.bytes += binary;
  }
  b.tensors = std::move(tensors);
  return b;
}

using ServerStats = serve::StatsTotals;

// One connection to the server, over the protocol asked for: one per concurrent stream.
class Client {
 public:
  static StatusOr<std::unique_ptr<Client>> connect(const PerfOptions& opt) {
    auto c = std::make_unique<Client>();
    c->opt_ = &opt;
    c->path_ = "/v2/models/" + opt.model + (opt.version.empty() ? "" : "/versions/" + opt.version);
#ifdef FERRY_HAVE_GRPC
    if (opt.protocol == "grpc") {
      ASSIGN_OR_RETURN(c->grpc_, serve::GrpcClient::connect(opt.url, opt.io_spin_us));
      if (opt.streaming) RETURN_IF_ERROR(c->grpc_->open_stream());
      return c;
    }
#endif
    ASSIGN_OR_RETURN(c->http_, serve::HttpClient::connect(opt.url, opt.io_spin_us));
    return c;
  }
  /// The model's metadata as KServe JSON.
  StatusOr<std::string> metadata() {
#ifdef FERRY_HAVE_GRPC
    if (grpc_) return grpc_->model_metadata_json(opt_->model, opt_->version);
#endif
    ASSIGN_OR_RETURN(serve::HttpResponse r, http_->request("GET", path_, ""));
    if (r.status != 200) return invalid_argument("GET " + path_ + ": HTTP " + std::to_string(r.status) + " " + r.body);
    return r.body;
  }
  /// max_batch_size from the model's config (0 when it cannot be read).
  int32_t max_batch_size() {
#ifdef FERRY_HAVE_GRPC
    if (grpc_) {
      auto m = grpc_->max_batch_size(opt_->model, opt_->version);
      return m.is_ok() ? m.value() : 0;
    }
#endif
    auto cfg = http_->request("GET", path_ + "/config", "");
    if (cfg.is_ok() && cfg.value().status == 200) {
      const json c = json::parse(cfg.value().body, nullptr, false);
      if (!c.is_discarded() && c.contains("max_batch_size")) return c["max_batch_size"].get<int32_t>();
    }
    return 0;
  }
  void set_body(const Body& body) {
    body_ = &body;
    headers_.clear();
    if (body.header_length >= 0) headers_.emplace_back("Inference-Header-Content-Length", std::to_string(body.header_length));
#ifdef FERRY_HAVE_GRPC
    if (grpc_) grpc_->set_request(opt_->model, opt_->version, body.tensors);
#endif
  }
  /// One inference request; the error is the server's.
  Status infer() {
#ifdef FERRY_HAVE_GRPC
    if (grpc_) return grpc_->infer();
#endif
    ASSIGN_OR_RETURN(serve::HttpResponse r, http_->request("POST", path_ + "/infer", body_->bytes, headers_));
    if (r.status != 200) return invalid_argument("HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
    return Status::ok();
  }
  ServerStats stats() {
#ifdef FERRY_HAVE_GRPC
    if (grpc_) {
      auto s = grpc_->statistics(opt_->model, opt_->version);
      return s.is_ok() ? s.value() : ServerStats();
    }
#endif
    return read_stats(*http_, path_);
  }

 private:
  static ServerStats read_stats(serve::HttpClient& c, const std::string& path);
  const PerfOptions* opt_ = nullptr;
  std::string path_;
  const Body* body_ = nullptr;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::unique_ptr<serve::HttpClient> http_;
#ifdef FERRY_HAVE_GRPC
  std::unique_ptr<serve::GrpcClient> grpc_;
#endif
};

ServerStats Client::read_stats(serve::HttpClient& c, const std::string& path) {
  ServerStats s;
  auto r = c.request("GET", path + "/stats", "");
  if (!r.is_ok() || r.value().status != 200) return s;
  const json j = json::parse(r.value().body, nullptr, false);
  if (j.is_discarded() || !j.contains("model_stats")) return s;
  for (const json& m : j["model_stats"]) {
    const json& is = m["inference_stats"];
    s.success += is["success"]["count"].get<uint64_t>();
    s.queue_ns += is["queue"]["ns"].get<uint64_t>();
    s.queue_count += is["queue"]["count"].get<uint64_t>();
    s.infer_ns += is["compute_infer"]["ns"].get<uint64_t>();
    s.inferences += m["inference_count"].get<uint64_t>();
    s.executions += m["execution_count"].get<uint64_t>();
  }
  return s;
}

LevelResult run_level(const PerfOptions& opt, const Body& body, int concurrency) {
  struct Stream {
    std::mutex mu;
    std::vector<double> latencies;
    int64_t errors = 0;
    std::string first_error;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i) {
    streams.push_back(std::make_unique<Stream>());
    Stream* s = streams.back().get();
    threads.emplace_back([&, s] {
      auto client = Client::connect(opt);
      if (!client.is_ok()) {
        std::lock_guard<std::mutex> lock(s->mu);
        s->errors++;
        s->first_error = client.status().message();
        return;
      }
      client.value()->set_body(body);
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = Clock::now();
        Status r = client.value()->infer();
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(s->mu);
        if (r.is_ok()) {
          s->latencies.push_back(us);
        } else {
          s->errors++;
          if (s->first_error.empty()) s->first_error = r.message();
        }
      }
    });
  }
  auto take = [&](std::vector<double>* lat, int64_t* errors, std::string* first_error) {
    for (auto& s : streams) {
      std::lock_guard<std::mutex> lock(s->mu);
      lat->insert(lat->end(), s->latencies.begin(), s->latencies.end());
      s->latencies.clear();
      *errors += s->errors;
      s->errors = 0;
      if (first_error->empty()) *first_error = s->first_error;
    }
  };
  LevelResult res;
  res.concurrency = concurrency;
  auto stats_client = Client::connect(opt);
  // A window whose requests all failed ends the run: a server that refuses everything (503 /
  // UNAVAILABLE while it drains, a model unloaded under the run, a closed port) answers at once, so the
  // streams would otherwise retry in a tight loop for every window left and count errors by the
  // million. Queue-full rejections beside requests that succeed are counted and retried (overload).
  auto refused = [&](const std::vector<double>& lat, int64_t errors, int window_ms) {
    if (!lat.empty() || errors == 0) return false;
    res.refused = true;
    res.refused_window_ms = window_ms;
    return true;
  };
  // Warm-up window, dropped.
  std::this_thread::sleep_for(std::chrono::milliseconds(opt.measurement_interval_ms / 2));
  {
    std::vector<double> drop;
    int64_t e = 0;
    take(&drop, &e, &res.first_error);
    res.errors += e;
    refused(drop, e, opt.measurement_interval_ms / 2);
  }
  ServerStats before = stats_client.is_ok() && !res.refused ? stats_client.value()->stats() : ServerStats();
  std::vector<std::vector<double>> windows;
  std::vector<double> secs, rates;
  for (int w = 0; w < opt.max_windows && !res.refused; ++w) {
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(opt.measurement_interval_ms));
    std::vector<double> lat;
    int64_t e = 0;
    take(&lat, &e, &res.first_error);
    res.errors += e;
    if (refused(lat, e, opt.measurement_interval_ms)) break;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(lat.size()) / s);
    secs.push_back(s);
    windows.push_back(std::move(lat));
    if (rates.size() >= 3) {
      const double a = rates[rates.size() - 1], b = rates[rates.size() - 2], c = rates[rates.size() - 3];
      const double mean = (a + b + c) / 3;
      if (mean > 0 && std::max({a, b, c}) <= mean * (1 + opt.stability / 100) && std::min({a, b, c}) >= mean * (1 - opt.stability / 100)) {
        res.stable = true;
        break;
      }
    }
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  ServerStats after = stats_client.is_ok() && !res.refused ? stats_client.value()->stats() : ServerStats();
  // The last three windows (or fewer) are the measurement.
  std::vector<double> lat;
  double total_s = 0;
  for (size_t i = windows.size() >= 3 ? windows.size() - 3 : 0; i < windows.size(); ++i) {
    lat.insert(lat.end(), windows[i].begin(), windows[i].end());
    total_s += secs[i];
  }
  res.requests = static_cast<int64_t>(lat.size());
  res.throughput = total_s > 0 ? static_cast<double>(lat.size()) * static_cast<double>(opt.batch_size) / total_s : 0;
  double sum = 0;
  for (double v : lat) sum += v;
  res.avg = lat.empty() ? 0 : sum / static_cast<double>(lat.size());
  res.p50 = percentile(lat, 50);
  res.p90 = percentile(lat, 90);
  res.p99 = percentile(lat, 99);
  // (Not for a refused level: the server's statistics may be gone with the model.)
  const double ran = res.refused || after.queue_count < before.queue_count ? 0 : static_cast<double>(after.queue_count - before.queue_count);
  if (ran > 0) {
    res.server_queue_us = static_cast<double>(after.queue_ns - before.queue_ns) / ran / 1000.0;
    res.server_compute_us = static_cast<double>(after.infer_ns - before.infer_ns) / ran / 1000.0;
  }
  const uint64_t execs = res.refused || after.executions < before.executions ? 0 : after.executions - before.executions;
  if (execs > 0) res.avg_batch = static_cast<double>(after.inferences - before.inferences) / static_cast<double>(execs);
  return res;
}

int cmd_perf(const PerfOptions& options) {
  PerfOptions opt = options;
  if (opt.protocol != "http" && opt.protocol != "grpc") {
    std::fprintf(stderr, "error: --protocol %s: ferry perf speaks http and grpc\n", opt.protocol.c_str());
    return 2;
  }
#ifndef FERRY_HAVE_GRPC
  if (opt.protocol == "grpc") {
    std::fprintf(stderr, "error: --protocol grpc: this build of ferry has no gRPC client (configured with -DFERRY_GRPC=OFF)\n");
    return 2;
  }
#endif
  if (opt.url.empty()) opt.url = opt.protocol == "grpc" ? "localhost:8001" : "localhost:8000";
  if (opt.streaming && opt.protocol != "grpc") {
    std::fprintf(stderr, "error: --streaming is for --protocol grpc (ModelStreamInfer)\n");
    return 2;
  }
  if (opt.protocol == "grpc" && opt.json_data) {
    std::fprintf(stderr, "error: --json-data is for --protocol http (gRPC sends raw_input_contents)\n");
    return 2;
  }
  // start[:end[:step]], as perf_analyzer (the step is added).
  std::vector<int> levels;
  {
    int a = 1, b = 0, c = 1;
    const int n = std::sscanf(opt.concurrency_range.c_str(), "%d:%d:%d", &a, &b, &c);
    if (n < 1 || a < 1 || (n >= 2 && b < a) || c < 1 || (n >= 2 && b > 4096)) {
      std::fprintf(stderr, "error: --concurrency-range '%s': want START[:END[:STEP]] with 1 <= START <= END\n", opt.concurrency_range.c_str());
      return 2;
    }
    if (n == 1) b = a;
    for (int v = a; v <= b; v += c) levels.push_back(v);
  }
  auto client = Client::connect(opt);
  if (!client.is_ok()) return report(client.status());
  auto meta = client.value()->metadata();
  if (!meta.is_ok()) {
    std::fprintf(stderr, "error: %s\n", meta.status().message().c_str());
    return 2;
  }
  const int32_t max_batch = client.value()->max_batch_size();
  if (opt.batch_size > 1 && opt.batch_size > max_batch) {
    std::fprintf(stderr, "error: --batch-size %lld but model '%s' has max_batch_size %d\n", static_cast<long long>(opt.batch_size),
                 opt.model.c_str(), max_batch);
    return 2;
  }
  auto body = make_body(json::parse(meta.value()), max_batch, opt);
  if (!body.is_ok()) return report(body.status());
  std::printf("ferry perf: %s model '%s', %s, batch %lld, windows of %d ms\n", opt.url.c_str(), opt.model.c_str(),
              opt.protocol == "grpc" ? (opt.streaming ? "gRPC stream, raw tensors" : "gRPC raw tensors") : opt.json_data ? "HTTP JSON tensors" : "HTTP binary tensors", static_cast<long long>(opt.batch_size), opt.measurement_interval_ms);
  std::printf("%11s %12s %10s %10s %10s %10s %12s %12s %9s %7s\n", "concurrency", "infer/sec", "p50 us", "p90 us", "p99 us",
              "avg us", "srv queue us", "srv comp us", "avg batch", "errors");
  std::vector<LevelResult> results;
  for (int c : levels) {
    LevelResult r = run_level(opt, body.value(), c);
    std::printf("%11d %12.1f %10.0f %10.0f %10.0f %10.0f %12.1f %12.1f %9.2f %7lld%s\n", r.concurrency, r.throughput, r.p50, r.p90,
                r.p99, r.avg, r.server_queue_us, r.server_compute_us, r.avg_batch, static_cast<long long>(r.errors),
                r.stable ? "" : "  (not stable)");
    std::fflush(stdout);
    results.push_back(r);
    if (r.refused) {
      std::fprintf(stderr,
                   "error: no request succeeded in a %d ms window at concurrency %d (%lld failed); the server's first error: %s\n"
                   "ferry perf stopped there (perf_analyzer stops at a failed request): check that model '%s' is loaded and "
                   "ready and that the server is not draining\n",
                   r.refused_window_ms, r.concurrency, static_cast<long long>(r.errors), r.first_error.c_str(), opt.model.c_str());
      break;
    }
    if (r.errors > 0 && !r.first_error.empty()) std::fprintf(stderr, "ferry perf: first error: %s\n", r.first_error.c_str());
  }
  if (!opt.csv.empty()) {
    std::ofstream f(opt.csv);
    f << "Concurrency,Inferences/Second,Client p50 latency,Client p90 latency,Client p99 latency,Client avg latency,"
         "Server Queue,Server Compute Infer,Avg Batch,Errors,Stable\n";
    for (const LevelResult& r : results)
      f << r.concurrency << ',' << r.throughput << ',' << r.p50 << ',' << r.p90 << ',' << r.p99 << ',' << r.avg << ','
        << r.server_queue_us << ',' << r.server_compute_us << ',' << r.avg_batch << ',' << r.errors << ',' << (r.stable ? 1 : 0) << '\n';
    if (!f) return report(invalid_argument("cannot write " + opt.csv));
  }
  if (!opt.json_out.empty()) {
    json j = json::array();
    for (const LevelResult& r : results)
      j.push_back({{"concurrency", r.concurrency}, {"throughput", r.throughput}, {"p50_us", r.p50}, {"p90_us", r.p90},
                   {"p99_us", r.p99}, {"avg_us", r.avg}, {"server_queue_us", r.server_queue_us},
                   {"server_compute_infer_us", r.server_compute_us}, {"avg_batch", r.avg_batch}, {"requests", r.requests},
                   {"errors", r.errors}, {"stable", r.stable}, {"refused", r.refused}});
    std::ofstream f(opt.json_out);
    f << j.dump(2) << '\n';
    if (!f) return report(invalid_argument("cannot write " + opt.json_out));
  }
  for (const LevelResult& r : results)
    if (r.errors > 0) return 1;
  return 0;
}

const bool kRegistered = register_command({"perf", 76, [](CLI::App& app) {
  auto opt = std::make_shared<PerfOptions>();
  CLI::App* cmd = app.add_subcommand("perf", "Load generator for `ferry serve` / KServe v2 HTTP and gRPC servers (as Triton's perf_analyzer)");
  cmd->add_option("url", opt->url, "Server host:port (default localhost:8000 for http, localhost:8001 for grpc)");
  cmd->add_option("-m,--model-name", opt->model, "Model to load")->required();
  cmd->add_option("-x,--model-version", opt->version, "Model version (default: the server's choice)");
  cmd->add_option("--concurrency-range", opt->concurrency_range, "START[:END[:STEP]] concurrent requests (STEP added; default 1)");
  cmd->add_option("-i,--protocol", opt->protocol, "http (default) or grpc (inference.GRPCInferenceService, raw_input_contents)");
  cmd->add_option("--input", opt->inputs, "[NAME=]FILE.npy for an input (default: random data); repeatable");
  cmd->add_option("-b,--batch-size", opt->batch_size, "Rows per request for a batching model (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("-p,--measurement-interval", opt->measurement_interval_ms, "Window length in ms (default 2000)")->check(CLI::Range(50, 600000));
  cmd->add_option("--max-trials", opt->max_windows, "Most windows per level before reporting it unstable (default 10)")->check(CLI::Range(3, 1000));
  cmd->add_option("-s,--stability-percentage", opt->stability, "Three windows in a row within this percent are stable (default 10)");
  cmd->add_option("--string-length", opt->string_length, "Characters of each random BYTES element (default 128)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--json-data", opt->json_data, "Send JSON tensors (default: the binary tensor data extension)");
  cmd->add_flag("--streaming", opt->streaming,
                "gRPC: send each stream's requests on one ModelStreamInfer call, one at a time (default: a ModelInfer call each)");
  cmd->add_option("--io-spin-microseconds", opt->io_spin_us,
                  "After sending a request, poll for the response without blocking for up to this long before blocking; "
                  "only when the machine has an idle core (default " + std::to_string(serve::kDefaultIoSpinMicroseconds) + "; 0: never)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("-f,--csv", opt->csv, "Write the results as CSV");
  cmd->add_option("--json", opt->json_out, "Write the results as JSON");
  return CommandRun{cmd, [opt] { return cmd_perf(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
