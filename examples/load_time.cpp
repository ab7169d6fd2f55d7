// load_time: how long a model takes from file to first answer through the C API: load
// (map + validate + prepare kernels) and the first inference, timed separately, then the median
// of further runs. Inputs are zeros of each input's fixed size. Prints one JSON line.
//
//   load_time resnet50.ferry      load_time resnet50.onnx      (bench/ uses both)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [RUNS]\n", argv[0]);
    return 2;
  }
  const int runs = argc > 2 ? std::max(0, std::atoi(argv[2])) : 5;
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  try {
    ferry::Runtime runtime;
    const auto t0 = Clock::now();
    ferry::Model model(argv[1]);
    const auto t1 = Clock::now();
    std::vector<std::vector<unsigned char>> bufs;
    ferry::Dataset in, out;
    for (size_t i = 0; i < model.num_inputs(); ++i) {
      const ferry_tensor_desc d = model.input(i);
      if (d.size_bytes == 0) {
        std::fprintf(stderr, "input '%s' has no fixed size; compile with --input-shape\n", d.name);
        return 2;
      }
      bufs.emplace_back(d.size_bytes, 0);
      in.add(bufs.back().data(), bufs.back().size());
    }
    for (size_t i = 0; i < model.num_outputs(); ++i) {
      const ferry_tensor_desc d = model.output(i);
      bufs.emplace_back(d.size_bytes ? d.size_bytes : (size_t(1) << 26), 0);
      out.add(bufs.back().data(), bufs.back().size());
    }
    model.execute(in, out);
    const auto t2 = Clock::now();
    std::vector<double> times;
    for (int r = 0; r < runs; ++r) {
      const auto a = Clock::now();
      model.execute(in, out);
      times.push_back(ms(a, Clock::now()));
    }
    std::sort(times.begin(), times.end());
    const double median = times.empty() ? 0.0 : times[times.size() / 2];
    std::printf("{\"model\": \"%s\", \"load_ms\": %.2f, \"first_inference_ms\": %.2f, \"load_and_first_ms\": %.2f, "
                "\"median_inference_ms\": %.2f, \"runs\": %d}\n",
                argv[1], ms(t0, t1), ms(t1, t2), ms(t0, t2), median, runs);
    return 0;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry error: %s\n", e.what());
    return 2;
  }
}
