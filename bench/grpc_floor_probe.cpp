// gRPC's own round trip on this machine, the floor under `ferry perf --protocol grpc`: p50/p90 from
// the same synchronous C++ client, one call at a time (docs/serving.md "Measured").
//   grpc_floor_probe HOST:PORT      an empty unary RPC (ServerLive) against a running `ferry serve`
//                                   (answered on gRPC's thread: no model, no batcher)
//   grpc_floor_probe --bare API [SPIN_US]
//                                   starts a bare server in this process on API callback | sync |
//                                   async (a completion queue polled by one thread) | mixed (async
//                                   ModelInfer, every other method on the callback API) and measures
//                                   ServerLive and a ModelInfer the size of digits_cnn's (3136 bytes
//                                   of raw_input_contents, a 40-byte output) answered without a model,
//                                   the handler spinning SPIN_US first (a stand-in for the compute)
// Build (after the main build generated the stubs):
//   g++ -O2 -std=c++17 -Ibuild/generated bench/grpc_floor_probe.cpp build/generated/serve/grpc_service.pb.cc
//     build/generated/serve/grpc_service.grpc.pb.cc build/generated/serve/model_config.pb.cc
//     $(pkg-config --cflags --libs grpc++ protobuf) -o /tmp/grpc_floor_probe      (one command line)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "serve/grpc_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
int g_spin_us = 0;

void answer_infer(const inference::ModelInferRequest& q, inference::ModelInferResponse* r) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < std::chrono::microseconds(g_spin_us)) {
  }
  r->set_model_name(q.model_name());
  auto* o = r->add_outputs();
  o->set_name("logits");
  o->set_datatype("FP32");
  o->add_shape(1);
  o->add_shape(10);
  r->add_raw_output_contents(std::string(40, '\0'));
}

struct SyncService final : inference::GRPCInferenceService::Service {
  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*, inference::ServerLiveResponse* r) override {
    r->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* q, inference::ModelInferResponse* r) override {
    answer_infer(*q, r);
    return grpc::Status::OK;
  }
};

struct CallbackService final : inference::GRPCInferenceService::CallbackService {
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* c, const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* r) override {
    r->set_live(true);
    auto* re = c->DefaultReactor();
    re->Finish(grpc::Status::OK);
    return re;
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* c, const inference::ModelInferRequest* q,
                                       inference::ModelInferResponse* r) override {
    answer_infer(*q, r);
    auto* re = c->DefaultReactor();
    re->Finish(grpc::Status::OK);
    return re;
  }
};

using AsyncService = inference::GRPCInferenceService::AsyncService;
using G = inference::GRPCInferenceService;
// ModelInfer on the async API, the other methods on the callback API (gRPC's callback threads then
// poll the sockets beside the completion queue's thread).
using MixedService = G::WithCallbackMethod_ServerLive<G::WithCallbackMethod_ServerReady<G::WithCallbackMethod_ModelReady<
    G::WithCallbackMethod_ServerMetadata<G::WithCallbackMethod_ModelMetadata<G::WithCallbackMethod_ModelStreamInfer<
        G::WithCallbackMethod_ModelConfig<G::WithCallbackMethod_ModelStatistics<G::WithCallbackMethod_RepositoryIndex<
            G::WithCallbackMethod_RepositoryModelLoad<G::WithCallbackMethod_RepositoryModelUnload<
                G::WithCallbackMethod_SystemSharedMemoryStatus<G::WithCallbackMethod_SystemSharedMemoryRegister<
                    G::WithCallbackMethod_SystemSharedMemoryUnregister<G::WithCallbackMethod_CudaSharedMemoryStatus<
                        G::WithCallbackMethod_CudaSharedMemoryRegister<G::WithCallbackMethod_CudaSharedMemoryUnregister<
                            G::WithCallbackMethod_TraceSetting<G::WithCallbackMethod_LogSettings<
                                G::WithAsyncMethod_ModelInfer<G::Service>>>>>>>>>>>>>>>>>>>>;
MixedService* g_mixed = nullptr;  // set for --bare mixed

// One call on the completion queue (async API): requested, answered, deleted when Finish is done.
struct AsyncCall {
  virtual ~AsyncCall() = default;
  virtual void proceed(AsyncService* s, grpc::ServerCompletionQueue* cq) = 0;
  bool finished = false;
};

template <typename Req, typename Resp, bool kInfer>
struct Call final : AsyncCall {
  grpc::ServerContext ctx;
  Req req;
  Resp resp;
  grpc::ServerAsyncResponseWriter<Resp> writer{&ctx};
  static void request(AsyncService* s, grpc::ServerCompletionQueue* cq) {
    auto* c = new Call;
    if constexpr (kInfer)
      g_mixed ? g_mixed->RequestModelInfer(&c->ctx, &c->req, &c->writer, cq, cq, c) : s->RequestModelInfer(&c->ctx, &c->req, &c->writer, cq, cq, c);
    else
      s->RequestServerLive(&c->ctx, &c->req, &c->writer, cq, cq, c);
  }
  void proceed(AsyncService* s, grpc::ServerCompletionQueue* cq) override {
    if (finished) return delete this;
    request(s, cq);
    if constexpr (kInfer)
      answer_infer(req, &resp);
    else
      resp.set_live(true);
    finished = true;
    writer.Finish(resp, grpc::Status::OK, this);
  }
};

template <typename Stub, typename Req, typename Resp, typename Fn>
int measure(const char* what, Stub* stub, const Req& req, Fn call) {
  for (int round = 0; round < 3; ++round) {  // the first round warms the connection up
    std::vector<double> us;
    for (int i = 0; i < 3000; ++i) {
      const auto t0 = Clock::now();
      grpc::ClientContext ctx;
      Resp resp;
      const grpc::Status st = (stub->*call)(&ctx, req, &resp);
      if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", what, st.error_message().c_str());
        return 1;
      }
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    if (round > 0) std::printf("%s round trip: p50 %.0f us, p90 %.0f us (3000 calls)\n", what, us[us.size() / 2], us[us.size() * 9 / 10]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool bare = argc >= 3 && std::strcmp(argv[1], "--bare") == 0;
  if (!(argc == 2 && argv[1][0] != '-') && !(bare && argc <= 4)) {
    std::fprintf(stderr, "usage: grpc_floor_probe HOST:PORT | grpc_floor_probe --bare callback|sync|async|mixed [SPIN_US]\n");
    return 2;
  }
  std::string target = argv[1];
  std::unique_ptr<grpc::Server> server;
  SyncService sync;
  CallbackService callback;
  AsyncService async;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  std::thread poller;
  if (bare) {
    const std::string api = argv[2];
    g_spin_us = argc == 4 ? std::atoi(argv[3]) : 0;
    int port = 0;
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    if (api == "mixed") {  // its ServerLive is not implemented: only ModelInfer is measured
      g_mixed = new MixedService;
      b.RegisterService(g_mixed);
      cq = b.AddCompletionQueue();
    } else if (api == "sync") {
      b.RegisterService(&sync);
    } else if (api == "callback") {
      b.RegisterService(&callback);
    } else if (api == "async") {
      b.RegisterService(&async);
      cq = b.AddCompletionQueue();
    } else {
      std::fprintf(stderr, "--bare %s: want callback, sync, async or mixed\n", api.c_str());
      return 2;
    }
    server = b.BuildAndStart();
    if (!server) return 1;
    if (cq) {
      if (!g_mixed) Call<inference::ServerLiveRequest, inference::ServerLiveResponse, false>::request(&async, cq.get());
      Call<inference::ModelInferRequest, inference::ModelInferResponse, true>::request(&async, cq.get());
      poller = std::thread([&] {
        void* tag;
        bool ok;
        while (cq->Next(&tag, &ok)) {
          if (ok)
            static_cast<AsyncCall*>(tag)->proceed(&async, cq.get());
          else
            delete static_cast<AsyncCall*>(tag);
        }
      });
    }
    target = "127.0.0.1:" + std::to_string(port);
    std::printf("bare %s server, handler spin %d us\n", api.c_str(), g_spin_us);
  }
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  using Stub = inference::GRPCInferenceService::Stub;
  int rc = g_mixed ? 0 : measure<Stub, inference::ServerLiveRequest, inference::ServerLiveResponse>("ServerLive", stub.get(), {}, &Stub::ServerLive);
  if (bare && rc == 0) {
    inference::ModelInferRequest req;
    req.set_model_name("m");
    auto* in = req.add_inputs();
    in->set_name("image");
    in->set_datatype("FP32");
    for (int d : {1, 1, 28, 28}) in->add_shape(d);
    req.add_raw_input_contents(std::string(3136, '\0'));
    rc = measure<Stub, inference::ModelInferRequest, inference::ModelInferResponse>("ModelInfer", stub.get(), req, &Stub::ModelInfer);
  }
  if (server) {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (cq) {
      cq->Shutdown();
      poller.join();
    }
  }
  return rc;
}
