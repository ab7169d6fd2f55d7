// See grpc_extensions.h.
#include "serve/grpc_extensions.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry::serve {

Status shm_status(const SharedMemoryRegistry* shm, const inference::SystemSharedMemoryStatusRequest& req,
                  inference::SystemSharedMemoryStatusResponse* resp) {
  if (!shm) return req.name().empty() ? Status::ok() : not_found("no system shared-memory region '" + req.name() + "' is registered");
  ASSIGN_OR_RETURN(std::vector<ShmRegionStatus> regions, shm->status(req.name()));
  for (const ShmRegionStatus& r : regions) {
    auto& out = (*resp->mutable_regions())[r.name];
    out.set_name(r.name);
    out.set_key(r.key);
    out.set_offset(r.offset);
    out.set_byte_size(r.byte_size);
  }
  return Status::ok();
}

Status shm_register(SharedMemoryRegistry* shm, const inference::SystemSharedMemoryRegisterRequest& req) {
  if (!shm) return invalid_argument("client shared memory is disabled: start the server with `--allow-client-shm true`");
  return shm->register_region(req.name(), req.key(), req.offset(), req.byte_size());
}

void shm_unregister(SharedMemoryRegistry* shm, const inference::SystemSharedMemoryUnregisterRequest& req) {
  if (shm) shm->unregister(req.name());
}

Status cuda_shm_status(const inference::CudaSharedMemoryStatusRequest& req) {
  if (req.name().empty()) return Status::ok();  // none can be registered
  return not_found("no CUDA shared-memory region '" + req.name() + "' is registered (" + cuda_shm_unsupported("CUDA shared memory") + ")");
}

Status log_settings(ServerLog* log, const inference::LogSettingsRequest& req, inference::LogSettingsResponse* resp) {
  if (!log) return resource_exhausted("LogSettings: this server has no log settings to serve");
  std::vector<std::pair<std::string, LogValue>> changes;
  for (const auto& [name, v] : req.settings()) {
    using V = inference::LogSettingsRequest::SettingValue;
    switch (v.parameter_choice_case()) {
      case V::kBoolParam: changes.emplace_back(name, v.bool_param()); break;
      case V::kUint32Param: changes.emplace_back(name, static_cast<uint64_t>(v.uint32_param())); break;
      case V::kStringParam: changes.emplace_back(name, v.string_param()); break;
      default: return invalid_argument("log setting '" + name + "' has no value");
    }
  }
  RETURN_IF_ERROR(log->update(changes));
  const LogSettings s = log->settings();
  auto& out = *resp->mutable_settings();
  out["log_file"].set_string_param(s.file);
  out["log_info"].set_bool_param(s.info);
  out["log_warnings"].set_bool_param(s.warnings);
  out["log_errors"].set_bool_param(s.errors);
  out["log_verbose_level"].set_uint32_param(s.verbose_level);
  out["log_format"].set_string_param(s.format);
  return Status::ok();
}

Status trace_setting(Tracer* tracer, const ModelRepository& repo, const inference::TraceSettingRequest& req,
                     inference::TraceSettingResponse* resp) {
  if (!tracer) return resource_exhausted("TraceSetting: this server has no trace settings to serve");
  if (!req.model_name().empty()) {
    auto m = repo.find(req.model_name(), "");
    if (!m.is_ok() && m.status().code() == StatusCode::kNotFound) return m.status();
  }
  std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>> changes;
  for (const auto& [name, v] : req.settings()) {
    if (v.value_size() == 0) changes.emplace_back(name, std::nullopt);
    else changes.emplace_back(name, std::vector<std::string>(v.value().begin(), v.value().end()));
  }
  RETURN_IF_ERROR(tracer->update(req.model_name(), changes));
  for (const auto& [name, values] : tracer->settings(req.model_name())) {
    auto& out = (*resp->mutable_settings())[name];
    for (const std::string& v : values) out.add_value(v);
  }
  return Status::ok();
}

}  // namespace ferry::serve
