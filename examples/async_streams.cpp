// async_streams: one model, many requests, two streams (C++ wrapper, ferry/ferry.hpp).
// Each image of a batch .npy ([N, ...] float32) is one request; requests alternate between two
// streams, each stream runs them in order on its own worker, and both run at the same time on
// the one loaded model. The results must equal the synchronous ones bit for bit; a third check
// runs the same requests from N threads at once with ferry_execute.
//
//   async_streams digits.ferry demo/samples/digits_batch.npy
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "npy_read.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL IMAGES.npy\n", argv[0]);
    return 2;
  }
  float* raw = nullptr;
  const long total = npy_read_f32(argv[2], &raw);
  if (total < 0) return 2;
  try {
    ferry::Runtime runtime;
    ferry::Model model(argv[1]);
    const ferry_tensor_desc in = model.input(0), out = model.output(0);
    // One request = one sample: the input's size at batch 1.
    size_t sample_floats = 1;
    for (int32_t i = 1; i < in.rank; ++i) sample_floats *= static_cast<size_t>(in.dims[i]);
    const size_t requests = static_cast<size_t>(total) / sample_floats;
    size_t out_floats = 1;
    for (int32_t i = 1; i < out.rank; ++i) out_floats *= static_cast<size_t>(out.dims[i]);

    auto run_all = [&](auto&& submit) {
      std::vector<std::vector<float>> results(requests, std::vector<float>(out_floats));
      std::vector<ferry::Dataset> ins(requests), outs(requests);
      for (size_t r = 0; r < requests; ++r) {
        ins[r].add(raw + r * sample_floats, sample_floats * sizeof(float));
        outs[r].add(results[r]);
      }
      submit(ins, outs);
      return results;
    };
    auto sync = run_all([&](auto& ins, auto& outs) {
      for (size_t r = 0; r < ins.size(); ++r) model.execute(ins[r], outs[r]);
    });
    auto async = run_all([&](auto& ins, auto& outs) {
      ferry::Stream streams[2];
      for (size_t r = 0; r < ins.size(); ++r) model.execute_async(ins[r], outs[r], streams[r % 2]);
      streams[0].synchronize();
      streams[1].synchronize();
    });
    auto threaded = run_all([&](auto& ins, auto& outs) {
      std::vector<std::thread> threads;
      for (size_t r = 0; r < ins.size(); ++r) threads.emplace_back([&, r] { model.execute(ins[r], outs[r]); });
      for (auto& t : threads) t.join();
    });
    int mismatches = 0;
    for (size_t r = 0; r < requests; ++r) {
      if (std::memcmp(sync[r].data(), async[r].data(), out_floats * sizeof(float)) != 0) ++mismatches;
      if (std::memcmp(sync[r].data(), threaded[r].data(), out_floats * sizeof(float)) != 0) ++mismatches;
      size_t best = 0;
      for (size_t c = 1; c < out_floats; ++c)
        if (sync[r][c] > sync[r][best]) best = c;
      std::printf("request %zu: class %zu\n", r, best);
    }
    std::free(raw);
    if (mismatches) {
      std::printf("FAIL: %d results differ from the synchronous run\n", mismatches);
      return 1;
    }
    std::printf("ok: %zu requests on 2 streams and on %zu threads match the synchronous results bit for bit\n", requests,
                requests);
    return 0;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry error: %s\n", e.what());
    return 2;
  }
}
