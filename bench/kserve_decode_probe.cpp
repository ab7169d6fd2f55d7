// The KServe v2 JSON request decoder alone (decode_infer_request, src/serve/kserve_json.cpp): p50 of
// 3000 decodes of one body against digits_cnn's signature (input 'input' FP32 [1,1,28,28]), one
// thread, hot cache (docs/serving.md "Measured"). Make the bodies with
//   /usr/bin/python3 -c "import json, numpy as np; x = np.random.RandomState(1).rand(784).astype(np.float32);
//     open('/tmp/body_py.json', 'w').write(json.dumps({'inputs': [{'name': 'input', 'datatype': 'FP32',
//     'shape': [1, 1, 28, 28], 'data': x.tolist()}]}, separators=(',', ':')))"       (Python's doubles: 15.2 KB)
// and build, after the main build (one command line):
//   g++ -O2 -std=c++17 -Isrc -Ibuild/generated bench/kserve_decode_probe.cpp build/libferry_serve_protocol.a
//     build/libferry_ir.a build/libferry_common.a $(pkg-config --libs protobuf) -lsimdjson -lpthread -o /tmp/kserve_decode_probe
//   /tmp/kserve_decode_probe /tmp/body_py.json
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "serve/kserve_json.h"

int main(int argc, char** argv) {
  using namespace ferry;
  using namespace ferry::serve;
  if (argc < 2) {
    std::fprintf(stderr, "usage: kserve_decode_probe BODY.json\n");
    return 2;
  }
  std::stringstream ss;
  ss << std::ifstream(argv[1]).rdbuf();
  const std::string body = ss.str();
  ModelSignature sig;
  sig.name = "m";
  sig.inputs.push_back({"input", DType::kF32, {1, 1, 28, 28}});
  sig.outputs.push_back({"out", DType::kF32, {1, 10}});
  std::vector<double> us;
  for (int i = 0; i < 3000; ++i) {
    const auto t = std::chrono::steady_clock::now();
    auto r = decode_infer_request(body, -1, sig);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
    if (!r.is_ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      return 1;
    }
  }
  std::sort(us.begin(), us.end());
  std::printf("%s (%zu bytes): decode_infer_request p50 %.1f us\n", argv[1], body.size(), us[us.size() / 2]);
  return 0;
}
