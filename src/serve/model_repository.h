// The model repository in Triton's layout: DIR/<model>/config.pbtxt (optional) and
// DIR/<model>/<version>/model.onnx or model.ferry. Loads the versions a model's version_policy
// selects, keeps each model's state (READY / UNAVAILABLE with the reason) for the index, and
// swaps versions on load/unload without dropping another model's requests.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "serve/served_model.h"

namespace ferry::serve {

class ModelRepository {
 public:
  /// `log` receives warnings and load errors (one line each).
  ModelRepository(std::string root, ServeOptions options, std::function<void(const std::string&)> log);
  ~ModelRepository();

  /// Model directories found in the repository now (sorted).
  std::vector<std::string> scan() const;
  /// Loads (or reloads) a model: its config, the versions its policy selects. On failure the
  /// model is listed UNAVAILABLE with the reason, and the error is returned.
  Status load(const std::string& name);
  /// Stops the model's versions (queued requests run first) and forgets them.
  Status unload(const std::string& name);
  /// The version to run: `version` "" picks the highest ready one. kNotFound for an unknown
  /// model or version, kResourceExhausted (503) for a known one that is not ready.
  StatusOr<std::shared_ptr<ServedModel>> find(const std::string& name, const std::string& version) const;
  /// Every model in the repository directory or loaded, with its state.
  std::vector<IndexEntry> index(bool ready_only) const;
  /// Every ready model version (for /metrics and the statistics endpoint).
  std::vector<std::shared_ptr<ServedModel>> ready_models() const;
  /// Stops every model (their queues drain first).
  void stop_all();
  const std::string& root() const { return root_; }

 private:
  struct ModelEntry {
    std::map<int64_t, std::shared_ptr<ServedModel>> versions;
    /// Versions that failed to load (or the whole model, key -1), with the reason.
    std::map<int64_t, std::string> failed;
  };
  std::string root_;
  ServeOptions options_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::map<std::string, ModelEntry> models_;
};

}  // namespace ferry::serve
