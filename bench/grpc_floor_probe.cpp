// gRPC's own round trip on this machine, the floor under `ferry perf --protocol grpc`: p50/p90 of
// an empty unary RPC (ServerLive, answered on gRPC's thread, no model, no batcher) from the same
// synchronous C++ client, one call at a time (docs/serving.md "Measured"). Build (after the main
// build generated the stubs) and run against a `ferry serve --grpc-port P`:
//   g++ -O2 -std=c++17 -Ibuild/generated bench/grpc_floor_probe.cpp build/generated/serve/grpc_service.pb.cc \
//     build/generated/serve/grpc_service.grpc.pb.cc build/generated/serve/model_config.pb.cc \
//     $(pkg-config --cflags --libs grpc++ protobuf) -o /tmp/grpc_floor_probe
//   /tmp/grpc_floor_probe 127.0.0.1:P
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "serve/grpc_service.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: grpc_floor_probe HOST:PORT\n");
    return 2;
  }
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  for (int round = 0; round < 3; ++round) {  // the first round warms the connection up
    std::vector<double> us;
    for (int i = 0; i < 3000; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      grpc::ClientContext ctx;
      inference::ServerLiveRequest req;
      inference::ServerLiveResponse resp;
      const grpc::Status st = stub->ServerLive(&ctx, req, &resp);
      if (!st.ok()) {
        std::fprintf(stderr, "ServerLive: %s\n", st.error_message().c_str());
        return 1;
      }
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    if (round > 0) std::printf("ServerLive round trip: p50 %.0f us, p90 %.0f us (3000 calls)\n", us[us.size() / 2], us[us.size() * 9 / 10]);
  }
  return 0;
}
