// Prometheus text format of ModelStats and the process; see metrics.h.
#include "serve/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ferry::serve {
namespace {

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void family(std::ostringstream& o, const char* name, const char* type, const char* help) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

void process_metrics(std::ostringstream& o) {
  // /proc/self/stat: utime and stime (fields 14, 15) in clock ticks; vsize (23) bytes; rss (24) pages.
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    std::vector<std::string> f;
    while (rest >> field) f.push_back(field);
    // f[0] is field 3 (state).
    if (f.size() > 21) {
      const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      family(o, "process_cpu_seconds_total", "counter", "User and system CPU time of the server process in seconds");
      o << "process_cpu_seconds_total " << cpu << '\n';
      family(o, "process_virtual_memory_bytes", "gauge", "Virtual memory of the server process in bytes");
      o << "process_virtual_memory_bytes " << f[20] << '\n';
      family(o, "process_resident_memory_bytes", "gauge", "Resident memory of the server process in bytes");
      o << "process_resident_memory_bytes " << std::stoll(f[21]) * sysconf(_SC_PAGESIZE) << '\n';
    }
  }
  int fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++fds;
    closedir(d);
    fds -= 3;  // ".", ".." and the directory's own descriptor
  }
  family(o, "process_open_fds", "gauge", "Open file descriptors of the server process");
  o << "process_open_fds " << fds << '\n';
}

}  // namespace

std::string prometheus_text(const std::vector<std::shared_ptr<ServedModel>>& models) {
  std::ostringstream o;
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  std::vector<std::string> labels;
  for (const auto& m : models)
    labels.push_back("model=\"" + escape_label(m->name()) + "\",version=\"" + std::to_string(m->version()) + "\"");
  struct Counter {
    const char* name;
    const char* type;
    const char* help;
    uint64_t (*get)(const ServedModel&);
  };
  static const Counter counters[] = {
      {"ferry_inference_request_success", "counter", "Successful inference requests, all batch sizes",
       [](const ServedModel& m) { return m.stats().success_count.load(std::memory_order_relaxed); }},
      {"ferry_inference_count", "counter", "Inferences performed (a batch of N counts N)",
       [](const ServedModel& m) { return m.stats().inference_count.load(std::memory_order_relaxed); }},
      {"ferry_inference_exec_count", "counter", "Model executions (a batch counts 1)",
       [](const ServedModel& m) { return m.stats().execution_count.load(std::memory_order_relaxed); }},
      {"ferry_inference_pending_request_count", "gauge", "Requests queued or running",
       [](const ServedModel& m) { return static_cast<uint64_t>(std::max<int64_t>(0, m.pending())); }},
      {"ferry_inference_queue_duration_us", "counter", "Cumulative time requests waited in the queue, in microseconds",
       [](const ServedModel& m) { return m.stats().queue_ns.load(std::memory_order_relaxed) / 1000; }},
      {"ferry_inference_compute_input_duration_us", "counter", "Cumulative time preparing batch inputs, in microseconds",
       [](const ServedModel& m) { return m.stats().compute_input_ns.load(std::memory_order_relaxed) / 1000; }},
      {"ferry_inference_compute_infer_duration_us", "counter", "Cumulative model execution time, in microseconds",
       [](const ServedModel& m) { return m.stats().compute_infer_ns.load(std::memory_order_relaxed) / 1000; }},
      {"ferry_inference_compute_output_duration_us", "counter", "Cumulative time splitting batch outputs, in microseconds",
       [](const ServedModel& m) { return m.stats().compute_output_ns.load(std::memory_order_relaxed) / 1000; }},
  };
  for (const Counter& c : counters) {
    family(o, c.name, c.type, c.help);
    for (size_t i = 0; i < models.size(); ++i) o << c.name << '{' << labels[i] << "} " << c.get(*models[i]) << '\n';
  }
  family(o, "ferry_inference_request_failure", "counter", "Failed inference requests, by reason");
  for (size_t i = 0; i < models.size(); ++i)
    for (int r = 0; r < 4; ++r)
      o << "ferry_inference_request_failure{" << labels[i] << ",reason=\"" << failure_reason_name(static_cast<FailureReason>(r))
        << "\"} " << ld(models[i]->stats().fail_by_reason[static_cast<size_t>(r)]) << '\n';
  family(o, "ferry_inference_request_duration_us", "histogram", "Request time from arrival in the queue to the response, in microseconds");
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelStats& s = models[i]->stats();
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kLatencyBucketsUs.size(); ++b) {
      cumulative += ld(s.latency_buckets[b]);
      o << "ferry_inference_request_duration_us_bucket{" << labels[i] << ",le=\""
        << (b < kLatencyBucketsUs.size() ? std::to_string(kLatencyBucketsUs[b]) : std::string("+Inf")) << "\"} " << cumulative << '\n';
    }
    o << "ferry_inference_request_duration_us_sum{" << labels[i] << "} " << ld(s.latency_sum_us) << '\n';
    o << "ferry_inference_request_duration_us_count{" << labels[i] << "} " << cumulative << '\n';
  }
  process_metrics(o);
  return o.str();
}

}  // namespace ferry::serve
