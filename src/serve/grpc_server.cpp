// inference.GRPCInferenceService on gRPC's callback API; see grpc_server.h. Unary calls answer on
// the gRPC thread that received them, except ModelInfer and model load / unload (on a thread of
// their own: loading takes seconds). ModelInfer is on the async API: completion queues polled by
// threads of ours (kInferPollers), which decode each call and queue it on the model (or run it
// inline when nothing else is in flight, ServedModel::enqueue) and finish it from there or from
// the instance thread that ran its batch. gRPC's callback API costs about 50 us more a call on this path (one more
// thread hand-off inside gRPC; bench/grpc_floor_probe.cpp --bare callback|async).
// ModelStreamInfer queues each request as it is read and writes each response when it is ready,
// one write at a time; a per-request error goes in the response's error_message and the stream
// goes on. A client that cancels takes its queued requests with it (CANCELED), as over HTTP.
#include "serve/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "serve/grpc_codec.h"
#include "serve/grpc_service.grpc.pb.h"
#include "serve/kserve_json.h"

namespace ferry::serve {

namespace {

// Threads polling ModelInfer's completion queues (each its own queue). They decode and queue the
// calls (the instance threads finish them), and run one inline only when no other is in flight:
// one poller alone serialized every client's decoding at concurrency 16 (13-24% fewer inferences/s
// than the callback API here); two matched it within this machine's noise, four did not do better.
constexpr int kInferPollers = 2;

using inference::ModelInferRequest;
using inference::ModelInferResponse;

grpc::Status to_grpc(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::UNAVAILABLE; break;  // HTTP 503
    case StatusCode::kUnsupported: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    default: break;
  }
  return grpc::Status(code, s.message());
}

}  // namespace

struct GrpcServer::Impl {
  ModelRepository* repo;
  GrpcServerOptions opt;
  std::function<void(const std::string&)> log;
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> in_flight{0};
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> infer_cqs;  // ModelInfer's calls, one poller thread each
  std::vector<std::thread> infer_threads;
  std::shared_mutex infer_cq_mu;
  bool infer_cq_open = false;  // a response may still be finished on infer_cqs
  int port = 0;

  Impl(ModelRepository* r, GrpcServerOptions o, std::function<void(const std::string&)> l)
      : repo(r), opt(std::move(o)), log(std::move(l)) {}

  // Decodes and queues one inference request. `done` runs exactly once (on an instance thread, or
  // on this one when the request is refused or ran inline), after the response is filled in when
  // it succeeded. `one_poller`: the caller is the one thread that takes every client's calls, so a
  // request runs inline only when no other is in flight (else it would serialize them all).
  void infer(const ModelInferRequest& req, std::shared_ptr<std::atomic<bool>> cancelled, ModelInferResponse* resp,
             std::function<void(grpc::Status)> done, bool one_poller = false) {
    if (opt.logging && opt.logging->verbose_on(1)) {  // every request with its status, when it is answered
      done = [log = opt.logging, what = "gRPC ModelInfer model '" + req.model_name() + "'" +
                                        (req.model_version().empty() ? std::string() : " version " + req.model_version()) +
                                        (req.id().empty() ? std::string() : " id '" + req.id() + "'"),
              done = std::move(done)](grpc::Status st) {
        log->verbose(1, what + " -> " + (st.ok() ? std::string("OK") : "code " + std::to_string(static_cast<int>(st.error_code())) + ": " +
                                                                    st.error_message()));
        done(st);
      };
    }
    if (shutting_down.load())
      return done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down and accepts no new inference requests"));
    auto model = repo->find(req.model_name(), req.model_version());
    if (!model.is_ok()) return done(to_grpc(model.status()));
    std::shared_ptr<ServedModel> m = model.value();
    auto decoded = decode_request(req, m->signature(), opt.shm);
    if (!decoded.is_ok()) return done(to_grpc(decoded.status()));
    InferRequest request = std::move(decoded.value().request);
    request.cancelled = std::move(cancelled);
    request.version_pinned = !req.model_version().empty();
    auto names = std::make_shared<std::vector<RequestedOutput>>(std::move(decoded.value().outputs));
    const std::string id = request.id;
    const bool alone = in_flight.fetch_add(1) == 0;
    const InlinePolicy policy = !one_poller ? InlinePolicy::kInstanceFree : alone ? InlinePolicy::kIdle : InlinePolicy::kNever;
    m->enqueue(std::move(request), [this, m, names, id, resp, done = std::move(done)](InferResult r) {
      grpc::Status st = grpc::Status::OK;
      if (r.status.is_ok()) r.status = write_shm_outputs(m->signature(), *names, r.outputs);  // outputs asked into shared memory
      if (r.status.is_ok()) {
        encode_response(m->signature(), id, *names, r.outputs, resp);
        if (r.version > 0) resp->set_model_version(std::to_string(r.version));  // a successor may have run it
      } else if (r.reason == FailureReason::kCanceled) {
        st = grpc::Status(grpc::StatusCode::CANCELLED, r.status.message());
      } else {
        st = to_grpc(r.status);
      }
      in_flight.fetch_sub(1);
      done(st);
    }, policy);
  }
};

namespace {

// ModelStreamInfer: reads one request at a time and queues it; responses are written in the
// order they finish, one StartWrite in flight; Finish once reading ended and every queued
// request was answered and written.
class StreamReactor final : public grpc::ServerBidiReactor<ModelInferRequest, inference::ModelStreamInferResponse> {
 public:
  explicit StreamReactor(GrpcServer::Impl* server) : server_(server), cancelled_(std::make_shared<std::atomic<bool>>(false)) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        reads_done_ = true;
        finish = should_finish();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    auto response = std::make_shared<inference::ModelStreamInferResponse>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    const std::string id = request_.id();
    const std::string model = request_.model_name(), version = request_.model_version();
    server_->infer(request_, cancelled_, response->mutable_infer_response(), [this, response, id, model, version](grpc::Status st) {
      if (!st.ok()) {
        response->Clear();
        response->set_error_message(st.error_message());
        auto* r = response->mutable_infer_response();
        r->set_id(id);
        r->set_model_name(model);
        r->set_model_version(version);
      }
      push(response);
    });
    request_.Clear();
    StartRead(&request_);
  }

  void OnWriteDone(bool /*ok*/) override {
    inference::ModelStreamInferResponse* next = nullptr;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out_.pop_front();
      if (!out_.empty()) {
        next = out_.front().get();
      } else {
        writing_ = false;
        finish = should_finish();
      }
    }
    if (next) StartWrite(next);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }

 private:
  // A finished request's response: written now, or after the ones before it.
  void push(std::shared_ptr<inference::ModelStreamInferResponse> r) {
    inference::ModelStreamInferResponse* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      out_.push_back(std::move(r));
      if (writing_) return;
      writing_ = true;
      next = out_.front().get();
    }
    StartWrite(next);
  }

  // Lock held.
  bool should_finish() {
    if (finished_ || !reads_done_ || pending_ > 0 || writing_ || !out_.empty()) return false;
    finished_ = true;
    return true;
  }

  GrpcServer::Impl* server_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  ModelInferRequest request_;
  std::mutex mu_;
  std::deque<std::shared_ptr<inference::ModelStreamInferResponse>> out_;
  int64_t pending_ = 0;
  bool writing_ = false, reads_done_ = false, finished_ = false;
};

grpc::ServerUnaryReactor* answer(grpc::CallbackServerContext* ctx, const grpc::Status& st) {
  auto* r = ctx->DefaultReactor();
  r->Finish(st);
  return r;
}

// CallbackService's mixins, with ModelInfer on the async API instead (marked async first, while it
// is still a sync method: a method marked callback keeps its callback handler when marked async).
using G = inference::GRPCInferenceService;
using ServiceBase = G::WithCallbackMethod_ServerLive<G::WithCallbackMethod_ServerReady<G::WithCallbackMethod_ModelReady<
    G::WithCallbackMethod_ServerMetadata<G::WithCallbackMethod_ModelMetadata<G::WithCallbackMethod_ModelStreamInfer<
        G::WithCallbackMethod_ModelConfig<G::WithCallbackMethod_ModelStatistics<G::WithCallbackMethod_RepositoryIndex<
            G::WithCallbackMethod_RepositoryModelLoad<G::WithCallbackMethod_RepositoryModelUnload<
                G::WithCallbackMethod_SystemSharedMemoryStatus<G::WithCallbackMethod_SystemSharedMemoryRegister<
                    G::WithCallbackMethod_SystemSharedMemoryUnregister<G::WithCallbackMethod_CudaSharedMemoryStatus<
                        G::WithCallbackMethod_CudaSharedMemoryRegister<G::WithCallbackMethod_CudaSharedMemoryUnregister<
                            G::WithCallbackMethod_TraceSetting<G::WithCallbackMethod_LogSettings<
                                G::WithAsyncMethod_ModelInfer<G::Service>>>>>>>>>>>>>>>>>>>>;

class Service final : public ServiceBase {
 public:
  explicit Service(GrpcServer::Impl* s) : s_(s) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx, const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* resp) override {
    resp->set_live(true);
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx, const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* resp) override {
    resp->set_ready(!s_->shutting_down.load());
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx, const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) override {
    resp->set_ready(!s_->shutting_down.load() && s_->repo->find(req->name(), req->version()).is_ok());
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* resp) override {
    resp->set_name("ferry");
    resp->set_version(s_->opt.version);
    for (const char* e : {"binary_tensor_data", "classification", "model_repository", "model_configuration", "statistics", "parameters",
                          "system_shared_memory", "logging"})
      resp->add_extensions(e);
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) override {
    auto model = s_->repo->find(req->name(), req->version());
    if (!model.is_ok()) return answer(ctx, to_grpc(model.status()));
    const ModelSignature& sig = model.value()->signature();
    resp->set_name(sig.name);
    for (const auto& m : s_->repo->ready_models())
      if (m->name() == sig.name) resp->add_versions(std::to_string(m->version()));
    resp->set_platform(sig.platform);
    for (int k = 0; k < 2; ++k) {
      for (const TensorSpec& spec : k == 0 ? sig.inputs : sig.outputs) {
        auto* t = k == 0 ? resp->add_inputs() : resp->add_outputs();
        t->set_name(spec.name);
        t->set_datatype(kserve_dtype_name(spec.dtype));
        for (int64_t d : protocol_dims(spec, sig.max_batch)) t->add_shape(d);
      }
    }
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerBidiReactor<ModelInferRequest, inference::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* /*ctx*/) override {
    return new StreamReactor(s_);
  }

  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* req,
                                        inference::ModelConfigResponse* resp) override {
    auto model = s_->repo->find(req->name(), req->version());
    if (!model.is_ok()) return answer(ctx, to_grpc(model.status()));
    *resp->mutable_config() = model.value()->config();
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx, const inference::ModelStatisticsRequest* req,
                                            inference::ModelStatisticsResponse* resp) override {
    if (!req->name().empty()) {
      auto model = s_->repo->find(req->name(), req->version());
      if (!model.is_ok()) return answer(ctx, to_grpc(model.status()));
    }
    for (const auto& m : s_->repo->ready_models()) {
      if (!req->name().empty() && m->name() != req->name()) continue;
      if (!req->version().empty() && std::to_string(m->version()) != req->version()) continue;
      fill_stats(*m, resp->add_model_stats());
    }
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx, const inference::RepositoryIndexRequest* req,
                                            inference::RepositoryIndexResponse* resp) override {
    for (const IndexEntry& e : s_->repo->index(req->ready())) {
      auto* m = resp->add_models();
      m->set_name(e.name);
      m->set_version(e.version);
      m->set_state(e.state);
      m->set_reason(e.reason);
    }
    return answer(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* req,
                                                inference::RepositoryModelLoadResponse*) override {
    if (!req->parameters().empty())
      return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "load parameters (such as '" + req->parameters().begin()->first +
                                          "') are not supported by ferry: the model's config.pbtxt and files are read from the repository"));
    return load_or_unload(ctx, req->model_name(), true);
  }

  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* req,
                                                  inference::RepositoryModelUnloadResponse*) override {
    return load_or_unload(ctx, req->model_name(), false);
  }

  // Triton's system shared-memory extension on the registry the HTTP front end shares; CUDA shared
  // memory is not supported by this build (its status lists no region, registering is refused).
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryStatusRequest* req,
                                                     inference::SystemSharedMemoryStatusResponse* resp) override {
    if (!s_->opt.shm) return answer(ctx, req->name().empty() ? grpc::Status::OK : to_grpc(not_found("no system shared-memory region '" + req->name() + "' is registered")));
    auto regions = s_->opt.shm->status(req->name());
    if (!regions.is_ok()) return answer(ctx, to_grpc(regions.status()));
    for (const ShmRegionStatus& r : regions.value()) {
      auto& out = (*resp->mutable_regions())[r.name];
      out.set_name(r.name);
      out.set_key(r.key);
      out.set_offset(r.offset);
      out.set_byte_size(r.byte_size);
    }
    return answer(ctx, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* req,
                                                       inference::SystemSharedMemoryRegisterResponse*) override {
    if (!s_->opt.shm)
      return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "client shared memory is disabled: start the server with `--allow-client-shm true`"));
    return answer(ctx, to_grpc(s_->opt.shm->register_region(req->name(), req->key(), req->offset(), req->byte_size())));
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(grpc::CallbackServerContext* ctx,
                                                         const inference::SystemSharedMemoryUnregisterRequest* req,
                                                         inference::SystemSharedMemoryUnregisterResponse*) override {
    if (s_->opt.shm) s_->opt.shm->unregister(req->name());
    return answer(ctx, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(grpc::CallbackServerContext* ctx, const inference::CudaSharedMemoryStatusRequest* req,
                                                   inference::CudaSharedMemoryStatusResponse*) override {
    if (req->name().empty()) return answer(ctx, grpc::Status::OK);  // none can be registered
    return answer(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no CUDA shared-memory region '" + req->name() + "' is registered (" +
                                                                     cuda_shm_unsupported("CUDA shared memory") + ")"));
  }
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(grpc::CallbackServerContext* ctx, const inference::CudaSharedMemoryRegisterRequest*,
                                                     inference::CudaSharedMemoryRegisterResponse*) override {
    return answer(ctx, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, cuda_shm_unsupported("CudaSharedMemoryRegister")));
  }
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(grpc::CallbackServerContext* ctx, const inference::CudaSharedMemoryUnregisterRequest*,
                                                       inference::CudaSharedMemoryUnregisterResponse*) override {
    return answer(ctx, grpc::Status::OK);  // nothing registered: unregistering is idempotent, as for system regions
  }
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* ctx, const inference::TraceSettingRequest*,
                                         inference::TraceSettingResponse*) override {
    return answer(ctx, grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                    "TraceSetting: request tracing is not supported by ferry; verbose logging (LogSettings "
                                    "log_verbose_level 1) logs every request with its status"));
  }
  // Triton's logging extension: the request's settings applied (all or none), then all of them.
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* ctx, const inference::LogSettingsRequest* req,
                                        inference::LogSettingsResponse* resp) override {
    if (!s_->opt.logging) return answer(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "LogSettings: this server has no log settings to serve"));
    std::vector<std::pair<std::string, LogValue>> changes;
    for (const auto& [name, v] : req->settings()) {
      using V = inference::LogSettingsRequest::SettingValue;
      switch (v.parameter_choice_case()) {
        case V::kBoolParam: changes.emplace_back(name, v.bool_param()); break;
        case V::kUint32Param: changes.emplace_back(name, static_cast<uint64_t>(v.uint32_param())); break;
        case V::kStringParam: changes.emplace_back(name, v.string_param()); break;
        default: return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "log setting '" + name + "' has no value"));
      }
    }
    Status st = s_->opt.logging->update(changes);
    if (!st.is_ok()) return answer(ctx, to_grpc(st));
    const ::ferry::serve::LogSettings s = s_->opt.logging->settings();
    auto& out = *resp->mutable_settings();
    out["log_file"].set_string_param(s.file);
    out["log_info"].set_bool_param(s.info);
    out["log_warnings"].set_bool_param(s.warnings);
    out["log_errors"].set_bool_param(s.errors);
    out["log_verbose_level"].set_uint32_param(s.verbose_level);
    out["log_format"].set_string_param(s.format);
    return answer(ctx, grpc::Status::OK);
  }

 private:
  grpc::ServerUnaryReactor* load_or_unload(grpc::CallbackServerContext* ctx, const std::string& name, bool load) {
    if (!s_->opt.explicit_control)
      return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "explicit model load / unload is not allowed: start `ferry serve --model-control-mode explicit`"));
    if (s_->shutting_down.load()) return answer(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    if (name.empty()) return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "model_name is empty"));
    // Loading takes seconds: on a thread of its own, so gRPC's callback threads keep serving.
    auto* reactor = ctx->DefaultReactor();
    ModelRepository* repo = s_->repo;
    std::thread([reactor, repo, name, load] {
      Status st = load ? repo->load(name) : repo->unload(name);
      if (st.is_ok()) return reactor->Finish(grpc::Status::OK);
      // A model that fails to load is a bad request (HTTP 400), not an unavailable server.
      reactor->Finish(grpc::Status(st.code() == StatusCode::kNotFound ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::INVALID_ARGUMENT,
                                   st.message()));
    }).detach();
    return reactor;
  }

  GrpcServer::Impl* s_;
};

// One ModelInfer call on the async API. Its tags come back on the completion queue's thread:
// started (a client called; the next call is requested at once), done (the call ended, or the
// client cancelled it: a queued request is dropped, CANCELLED) and finished (the response went
// out). It is deleted when both done and finished came back (or at once when it never started).
class AsyncInfer {
 public:
  enum Kind { kStarted, kDone, kFinished };
  struct Tag {
    AsyncInfer* call;
    Kind kind;
  };

  static void request(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) {
    auto* c = new AsyncInfer(s, cq);
    c->ctx_.AsyncNotifyWhenDone(&c->done_tag_);
    static_cast<Service*>(s->service.get())->RequestModelInfer(&c->ctx_, &c->req_, &c->writer_, cq, cq, &c->started_tag_);
  }

  // On the completion queue's thread.
  static void proceed(const Tag* tag, bool ok) {
    AsyncInfer* c = tag->call;
    switch (tag->kind) {
      case kStarted:
        if (!ok) {  // the server is shutting down: this call never started
          delete c;
          return;
        }
        request(c->s_, c->cq_);
        c->s_->infer(c->req_, c->cancelled_, &c->resp_, [c](grpc::Status st) { c->finish(st); }, /*one_poller=*/true);
        return;
      case kDone:
        if (c->ctx_.IsCancelled()) c->cancelled_->store(true);
        return c->release();
      case kFinished:
        return c->release();
    }
  }

 private:
  AsyncInfer(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) : s_(s), cq_(cq), cancelled_(std::make_shared<std::atomic<bool>>(false)) {}

  // From the thread that answered (this one, or an instance thread).
  void finish(const grpc::Status& st) {
    {
      std::shared_lock<std::shared_mutex> lock(s_->infer_cq_mu);
      if (s_->infer_cq_open) return writer_.Finish(resp_, st, &finished_tag_);
    }
    release();  // the queue is gone: no finished tag will come
  }

  void release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  GrpcServer::Impl* s_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext ctx_;
  ModelInferRequest req_;
  ModelInferResponse resp_;
  grpc::ServerAsyncResponseWriter<ModelInferResponse> writer_{&ctx_};
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::atomic<int> refs_{2};  // done and finished
  Tag started_tag_{this, kStarted}, done_tag_{this, kDone}, finished_tag_{this, kFinished};
};

}  // namespace

GrpcServer::GrpcServer(ModelRepository* repository, GrpcServerOptions options, std::function<void(const std::string&)> log)
    : impl_(std::make_unique<Impl>(repository, std::move(options), std::move(log))) {}

GrpcServer::~GrpcServer() { stop(); }

Status GrpcServer::start() {
  const std::string& a = impl_->opt.address;
  const std::string host = a.find(':') != std::string::npos && a.front() != '[' ? "[" + a + "]" : a;
  const std::string where = host + ":" + std::to_string(impl_->opt.port);
  impl_->service = std::make_unique<Service>(impl_.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(where, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(impl_->service.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(impl_->opt.max_message_size, INT_MAX)));
  builder.SetMaxSendMessageSize(INT_MAX);
  // gRPC turns SO_REUSEPORT on by default: a second server on a busy port would bind silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (int i = 0; i < kInferPollers; ++i) impl_->infer_cqs.push_back(builder.AddCompletionQueue());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0) {
    impl_->server.reset();
    for (auto& cq : impl_->infer_cqs) {
      cq->Shutdown();
      void* tag;
      bool ok;
      while (cq->Next(&tag, &ok)) {
      }
    }
    impl_->infer_cqs.clear();
    return invalid_argument("cannot listen for gRPC on " + where + " (the port is in use or the address is not local; choose another "
                            "--grpc-port, or --allow-grpc false)");
  }
  impl_->infer_cq_open = true;
  for (auto& cq : impl_->infer_cqs) {
    AsyncInfer::request(impl_.get(), cq.get());
    impl_->infer_threads.emplace_back([cq = cq.get(), spin_us = impl_->opt.io_spin_us] {
      // Right after work, poll the queue without blocking for up to spin_us before blocking in
      // Next (SpinWait: bounded, never on busy cores): the next call is taken without a wake-up.
      SpinWait spin(spin_us);
      const gpr_timespec now = gpr_time_0(GPR_CLOCK_MONOTONIC);
      void* tag;
      bool ok;
      for (;;) {
        // No spin on (none started: busy cores, backed off, or no budget): straight to the blocking Next.
        const auto st = spin.spinning() ? cq->AsyncNext(&tag, &ok, now) : grpc::CompletionQueue::TIMEOUT;
        if (st == grpc::CompletionQueue::SHUTDOWN) break;
        if (st == grpc::CompletionQueue::TIMEOUT) {
          if (spin.again()) continue;
          if (!cq->Next(&tag, &ok)) break;
        }
        AsyncInfer::proceed(static_cast<const AsyncInfer::Tag*>(tag), ok);
        spin.arm();
      }
    });
  }
  return Status::ok();
}

int GrpcServer::port() const { return impl_->port; }
void GrpcServer::begin_shutdown() { impl_->shutting_down.store(true); }
int64_t GrpcServer::in_flight() const { return impl_->in_flight.load(); }

void GrpcServer::stop() {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
  {
    std::unique_lock<std::shared_mutex> lock(impl_->infer_cq_mu);
    impl_->infer_cq_open = false;
  }
  for (auto& cq : impl_->infer_cqs) cq->Shutdown();
  for (auto& t : impl_->infer_threads) t.join();  // drain the queues: every call's last tag comes back
  impl_->infer_threads.clear();
  impl_->server.reset();
  impl_->infer_cqs.clear();
  impl_->service.reset();
}

}  // namespace ferry::serve
