// ferry_device_bench: times Executor::run of one model on one device (the GPU benchmark's
// runner, bench/gpu_bench.py; `ferry bench` supersedes it where present).
//   ferry_device_bench MODEL.onnx INPUTS.npz DEVICE WARMUP ITERS [OUTPUTS.npz]
// Prints one JSON line: {"device", "load_ms", "first_run_ms", "median_ms", "p90_ms", "min_ms", "runs",
// "backend"}. With OUTPUTS.npz the last run's outputs are written there (for the cross-check).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/executor.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

int fail(const ferry::Status& st) {
  std::fprintf(stderr, "error: %s\n", st.message().c_str());
  return st.code() == ferry::StatusCode::kInternal ? 1 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL.onnx INPUTS.npz DEVICE WARMUP ITERS [OUTPUTS.npz]\n", argv[0]);
    return 2;
  }
  const std::string model_path = argv[1], inputs_path = argv[2], device = argv[3];
  const int warmup = std::atoi(argv[4]), iters = std::max(1, std::atoi(argv[5]));
  auto t0 = std::chrono::steady_clock::now();
  auto model = ferry::load_onnx_model(model_path);
  if (!model.is_ok()) return fail(model.status());
  auto feeds = ferry::read_npz(inputs_path);
  if (!feeds.is_ok()) return fail(feeds.status());
  ferry::ExecutorOptions opts;
  opts.device = device;
  auto ex = ferry::Executor::create(model.value(), opts);
  if (!ex.is_ok()) return fail(ex.status());
  const double load_ms = ms_since(t0);
  ferry::NamedTensors outs;
  t0 = std::chrono::steady_clock::now();
  ferry::Status st = ex.value()->run(feeds.value(), &outs);
  if (!st.is_ok()) return fail(st);
  const double first_ms = ms_since(t0);
  for (int i = 0; i < warmup; ++i) {
    st = ex.value()->run(feeds.value(), &outs);
    if (!st.is_ok()) return fail(st);
  }
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    t0 = std::chrono::steady_clock::now();
    st = ex.value()->run(feeds.value(), &outs);  // outputs end on the host: the run is complete
    if (!st.is_ok()) return fail(st);
    times.push_back(ms_since(t0));
  }
  std::sort(times.begin(), times.end());
  if (argc > 6) {
    st = ferry::write_npz(argv[6], outs);
    if (!st.is_ok()) return fail(st);
  }
  std::printf(
      "{\"device\": \"%s\", \"load_ms\": %.3f, \"first_run_ms\": %.3f, \"median_ms\": %.4f, \"p90_ms\": %.4f, "
      "\"min_ms\": %.4f, \"runs\": %d, \"backend\": \"%s\"}\n",
      json_escape(device).c_str(), load_ms, first_ms, times[times.size() / 2], times[times.size() * 9 / 10], times[0],
      iters, json_escape(ex.value()->backend().description()).c_str());
  return 0;
}
