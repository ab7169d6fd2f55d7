// The gRPC client of `ferry perf`; see grpc_client.h.
#include "serve/grpc_client.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <climits>

#include "serve/grpc_service.grpc.pb.h"
#include "serve/kserve_json.h"
#include "serve/spin_wait.h"

namespace ferry::serve {

namespace {

const char* code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    default: return "error";
  }
}

// Debian's Abseil is built with its debug checks: every absl::Mutex lock (gRPC's gpr_mu among them,
// several a call) updates a process-wide lock graph for deadlock detection, 2-3% of a call's CPU in
// both `ferry perf` and `ferry serve` (perf record). A release build of Abseil does not check.
void skip_mutex_deadlock_checks() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

Status from_grpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return Status::ok();
  const std::string m = what + ": gRPC " + code_name(s.error_code()) + ": " + s.error_message();
  return s.error_code() == grpc::StatusCode::NOT_FOUND ? not_found(m) : invalid_argument(m);
}

}  // namespace

struct GrpcClient::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
  inference::ModelInferRequest request;
  // infer()'s: the request serialized once (set_request), sent by reference to its slices (no
  // per-call serialization or copy of the tensors), and one response message parsed into every
  // call (its strings keep their capacity). The method is registered on the channel, as the
  // generated stub's are (the generic stub's is not: each call copied the method's name into a
  // slice of its own and took the core's unregistered-call path).
  std::unique_ptr<grpc::internal::RpcMethod> infer_method;
  grpc::ByteBuffer request_bytes;
  inference::ModelInferResponse response;
  // infer()'s calls. Each is created (its ClientContext and grpc_call, the request attached) while
  // the one before it waits for its response, and a finished call is torn down after the next one
  // went out: neither a call's set-up nor its teardown lies between a response and the next
  // request. Its response comes as bytes and is parsed then too, into `response` (about 2,900
  // instructions a call off that path: callgrind); a body that does not parse fails the infer()
  // that parsed it, the next one (the last call's, when the client closes, is not parsed). The calls
  // are still made and ended one at a time, on this thread.
  struct Call {
    grpc::ClientContext ctx;
    grpc::Status status;
    grpc::ByteBuffer response_bytes;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> rpc;
  };
  std::unique_ptr<Call> next_call;  // created, not started
  std::unique_ptr<Call> done_call;  // answered, not yet torn down
  // open_stream()'s ModelStreamInfer call: one request written and its response read per infer().
  using Stream = grpc::ClientAsyncReaderWriter<grpc::ByteBuffer, inference::ModelStreamInferResponse>;
  std::unique_ptr<grpc::ClientContext> stream_ctx;
  std::unique_ptr<Stream> stream;
  inference::ModelStreamInferResponse stream_response;
  Status stream_status = Status::ok();  // not ok once the stream ended: every later infer() fails with it
  grpc::CompletionQueue cq;  // infer()'s, polled by its caller
  SpinWait spin{0};

  // The next event on cq: polled without blocking while the spin is on, then blocking.
  bool next(void** tag, bool* ok) {
    const gpr_timespec now = gpr_time_0(GPR_CLOCK_MONOTONIC);
    for (;;) {
      const auto st = spin.spinning() ? cq.AsyncNext(tag, ok, now) : grpc::CompletionQueue::TIMEOUT;
      if (st == grpc::CompletionQueue::GOT_EVENT) return true;
      if (st == grpc::CompletionQueue::TIMEOUT && spin.again()) continue;
      return st != grpc::CompletionQueue::SHUTDOWN && cq.Next(tag, ok);
    }
  }

  std::unique_ptr<Call> prepare() {
    auto call = std::make_unique<Call>();
    call->rpc.reset(grpc::internal::ClientAsyncResponseReaderHelper::Create<grpc::ByteBuffer>(channel.get(), &cq, *infer_method,
                                                                                             &call->ctx, request_bytes));
    return call;
  }

  // A prepared call that will not be sent: cancelled, then started so that its request's reference
  // is released (the batch fails at once: nothing reaches the server), and its tag taken.
  void discard(std::unique_ptr<Call> call) {
    if (!call) return;
    call->ctx.TryCancel();
    call->rpc->StartCall();
    call->rpc->Finish(&call->response_bytes, &call->status, call.get());
    void* tag;
    bool ok;
    while (cq.Next(&tag, &ok) && tag != call.get()) {
    }
  }

  ~Impl() {
    discard(std::move(next_call));
    done_call.reset();
    if (stream) {  // cancelled, then its status read, so that the queue drains
      stream_ctx->TryCancel();
      grpc::Status st;
      stream->Finish(&st, &st);
      void* tag;
      bool ok;
      while (cq.Next(&tag, &ok) && tag != &st) {
      }
    }
    cq.Shutdown();
    void* tag;
    bool ok;
    while (cq.Next(&tag, &ok)) {
    }
  }
};

StatusOr<std::unique_ptr<GrpcClient>> GrpcClient::connect(const std::string& url, int64_t spin_us) {
  std::string target = url;
  for (const char* prefix : {"grpc://", "http://"})
    if (target.rfind(prefix, 0) == 0) target = target.substr(std::char_traits<char>::length(prefix));
  while (!target.empty() && target.back() == '/') target.pop_back();
  if (target.empty()) return invalid_argument("the server URL is empty (want host:port)");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own: `ferry perf --concurrency 64` is 64 connections
  // What a unary call without a deadline, compression or a retry policy does not need: transparent
  // retries (the retry filter copies every call's metadata and send ops), the deadline and
  // compression filters (GRPC_ARG_MINIMAL_STACK). About 10 us of client CPU a call here
  // (docs/serving.md "Measured").
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);
  // No channelz node: its per-call and per-message counters (call started / succeeded, messages
  // and streams on the socket) are for a channelz service, which `ferry perf` does not serve.
  args.SetInt(GRPC_ARG_ENABLE_CHANNELZ, 0);
  skip_mutex_deadlock_checks();
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
    return invalid_argument("cannot connect to " + target + " over gRPC within 10 s (is `ferry serve` running with --grpc-port?)");
  std::unique_ptr<GrpcClient> c(new GrpcClient());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->channel = channel;
  c->impl_->spin = SpinWait(spin_us);
  c->impl_->stub = inference::GRPCInferenceService::NewStub(channel);
  c->impl_->infer_method = std::make_unique<grpc::internal::RpcMethod>("/inference.GRPCInferenceService/ModelInfer",
                                                                      grpc::internal::RpcMethod::NORMAL_RPC, channel);
  return c;
}

GrpcClient::~GrpcClient() = default;

StatusOr<std::string> GrpcClient::model_metadata_json(const std::string& model, const std::string& version) {
  inference::ModelMetadataRequest req;
  req.set_name(model);
  req.set_version(version);
  inference::ModelMetadataResponse resp;
  grpc::ClientContext ctx;
  RETURN_IF_ERROR(from_grpc(impl_->stub->ModelMetadata(&ctx, req, &resp), "ModelMetadata '" + model + "'"));
  // Shapes are shown as the server gave them (batch axis included), so max_batch 0 here.
  ModelSignature sig;
  sig.name = resp.name();
  sig.platform = resp.platform();
  std::vector<int64_t> versions;
  for (const std::string& v : resp.versions()) versions.push_back(std::strtoll(v.c_str(), nullptr, 10));
  for (int k = 0; k < 2; ++k) {
    for (const auto& t : k == 0 ? resp.inputs() : resp.outputs()) {
      TensorSpec s;
      s.name = t.name();
      if (!dtype_from_kserve(t.datatype(), &s.dtype)) s.dtype = DType::kString;
      s.dims.assign(t.shape().begin(), t.shape().end());
      (k == 0 ? sig.inputs : sig.outputs).push_back(std::move(s));
    }
  }
  return serve::model_metadata_json(sig, versions);
}

StatusOr<int32_t> GrpcClient::max_batch_size(const std::string& model, const std::string& version) {
  inference::ModelConfigRequest req;
  req.set_name(model);
  req.set_version(version);
  inference::ModelConfigResponse resp;
  grpc::ClientContext ctx;
  RETURN_IF_ERROR(from_grpc(impl_->stub->ModelConfig(&ctx, req, &resp), "ModelConfig '" + model + "'"));
  return resp.config().max_batch_size();
}

StatusOr<StatsTotals> GrpcClient::statistics(const std::string& model, const std::string& version) {
  inference::ModelStatisticsRequest req;
  req.set_name(model);
  req.set_version(version);
  inference::ModelStatisticsResponse resp;
  grpc::ClientContext ctx;
  RETURN_IF_ERROR(from_grpc(impl_->stub->ModelStatistics(&ctx, req, &resp), "ModelStatistics '" + model + "'"));
  StatsTotals s;
  for (const auto& m : resp.model_stats()) {
    const auto& is = m.inference_stats();
    s.success += is.success().count();
    s.queue_ns += is.queue().ns();
    s.queue_count += is.queue().count();
    s.infer_ns += is.compute_infer().ns();
    s.inferences += m.inference_count();
    s.executions += m.execution_count();
  }
  return s;
}

void GrpcClient::set_request(const std::string& model, const std::string& version, const TensorList& inputs) {
  auto& r = impl_->request;
  r.Clear();
  r.set_model_name(model);
  r.set_model_version(version);
  for (const auto& [name, t] : inputs) {
    auto* in = r.add_inputs();
    in->set_name(name);
    in->set_datatype(kserve_dtype_name(t.dtype()));
    for (int64_t d : t.dims()) in->add_shape(d);
    if (t.dtype() == DType::kString) {  // 4-byte little-endian length + bytes per element, as Triton
      std::string* raw = r.add_raw_input_contents();
      append_bytes_tensor(t, raw);
    } else {
      r.add_raw_input_contents(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes()));
    }
  }
  std::string bytes;
  r.SerializeToString(&bytes);
  grpc::Slice slice(bytes);
  impl_->discard(std::move(impl_->next_call));  // made with the request before
  impl_->request_bytes = grpc::ByteBuffer(&slice, 1);
}

Status GrpcClient::open_stream() {
  Impl& c = *impl_;
  static const std::string kMethod = "/inference.GRPCInferenceService/ModelStreamInfer";
  c.stream_ctx = std::make_unique<grpc::ClientContext>();
  c.stream = grpc::TemplatedGenericStub<grpc::ByteBuffer, inference::ModelStreamInferResponse>(c.channel).PrepareCall(
      c.stream_ctx.get(), kMethod, &c.cq);
  c.stream->StartCall(&c.stream);
  void* tag = nullptr;
  bool ok = false;
  if (!c.next(&tag, &ok) || !ok) {
    c.stream_status = internal_error("ModelStreamInfer: the stream could not be opened");
    return c.stream_status;
  }
  return Status::ok();
}

Status GrpcClient::infer() {
  // On the async API with a queue of this client's, so that the wait for the response can poll
  // the queue without blocking first (SpinWait) instead of blocking at once as the sync stub does.
  Impl& c = *impl_;
  if (c.stream || !c.stream_status.is_ok()) return infer_on_stream();  // (a stream that ended stays the error)
  std::unique_ptr<Impl::Call> call = c.next_call ? std::move(c.next_call) : c.prepare();
  call->rpc->StartCall();
  call->rpc->Finish(&call->response_bytes, &call->status, call.get());
  // While the server works: the response before this one is parsed, its call torn down, and the
  // next call created.
  Status parsed = Status::ok();
  if (c.done_call && c.done_call->status.ok()) {
    grpc::ProtoBufferReader reader(&c.done_call->response_bytes);
    if (!c.response.ParseFromZeroCopyStream(&reader))
      parsed = internal_error("ModelInfer '" + c.request.model_name() + "': a response's body is not a ModelInferResponse");
  }
  c.done_call.reset();
  c.next_call = c.prepare();
  c.spin.arm();
  void* tag = nullptr;
  bool ok = false;
  if (!c.next(&tag, &ok)) return internal_error("ModelInfer: the client's completion queue shut down");
  c.done_call = std::move(call);
  if (!ok) return internal_error("ModelInfer '" + c.request.model_name() + "': the call did not complete");
  if (!c.done_call->status.ok()) return from_grpc(c.done_call->status, "ModelInfer '" + c.request.model_name() + "'");
  return parsed;
}

Status GrpcClient::infer_on_stream() {
  Impl& c = *impl_;
  if (!c.stream_status.is_ok()) return c.stream_status;
  c.stream->Write(c.request_bytes, &c.request_bytes);
  c.stream->Read(&c.stream_response, &c.stream_response);
  c.spin.arm();
  bool written = false, read = false;
  for (int events = 0; events < 2; ++events) {
    void* tag = nullptr;
    bool ok = false;
    if (!c.next(&tag, &ok)) return c.stream_status = internal_error("ModelStreamInfer: the client's completion queue shut down");
    (tag == &c.request_bytes ? written : read) = ok;
  }
  const std::string what = "ModelStreamInfer '" + c.request.model_name() + "'";
  if (!written || !read) {  // the stream ended: its status says why
    grpc::Status status;
    c.stream->Finish(&status, &status);
    void* tag = nullptr;
    bool ok = false;
    c.next(&tag, &ok);
    c.stream.reset();
    c.stream_status = status.ok() ? internal_error(what + ": the server ended the stream") : from_grpc(status, what);
    return c.stream_status;
  }
  if (!c.stream_response.error_message().empty()) return invalid_argument(what + ": " + c.stream_response.error_message());
  return Status::ok();
}

}  // namespace ferry::serve
