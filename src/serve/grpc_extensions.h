// Triton's protocol extensions on inference.GRPCInferenceService's messages: system / CUDA shared
// memory (serve/shared_memory.h), LogSettings (serve/server_log.h) and TraceSetting
// (serve/trace.h), each a request message -> its response, with ferry's Status (grpc_server.cpp
// answers them with the usual status codes). On the generated protobuf messages only (no gRPC).
#pragma once

#include "common/status.h"
#include "serve/grpc_service.pb.h"
#include "serve/model_repository.h"
#include "serve/server_log.h"
#include "serve/shared_memory.h"
#include "serve/trace.h"

namespace ferry::serve {

/// `shm` null: no region (a named one is not found).
Status shm_status(const SharedMemoryRegistry* shm, const inference::SystemSharedMemoryStatusRequest& req,
                  inference::SystemSharedMemoryStatusResponse* resp);
Status shm_register(SharedMemoryRegistry* shm, const inference::SystemSharedMemoryRegisterRequest& req);
/// Idempotent: a name that is not registered is not an error.
void shm_unregister(SharedMemoryRegistry* shm, const inference::SystemSharedMemoryUnregisterRequest& req);
/// CUDA shared memory is not supported by this build: no region to list (a named one is not found).
Status cuda_shm_status(const inference::CudaSharedMemoryStatusRequest& req);
/// The request's settings applied (all or none), then every setting into the response.
Status log_settings(ServerLog* log, const inference::LogSettingsRequest& req, inference::LogSettingsResponse* resp);
/// The request's settings applied to the global ones or model_name's (a value with no entries
/// returns a model's setting to the global one), then the settings into the response.
Status trace_setting(Tracer* tracer, const ModelRepository& repo, const inference::TraceSettingRequest& req,
                     inference::TraceSettingResponse* resp);

}  // namespace ferry::serve
