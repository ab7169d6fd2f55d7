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
  /// A reload that fails keeps the versions already serving (Triton's rule); a version whose
  /// directory and the config are unchanged since the last load keeps its running instance.
  Status load(const std::string& name);
  /// Stops the model's versions (queued requests run first) and forgets them.
  Status unload(const std::string& name);
  /// Poll mode: rescans the repository and loads new models, reloads models whose files changed
  /// (size or modification time of config.pbtxt or a version directory's files), unloads models
  /// whose directory is gone. Each change is logged; returns how many models it touched.
  int poll();
  /// The version to run: `version` "" picks the highest ready one. kNotFound for an unknown
  /// model or version, kResourceExhausted (503) for a known one that is not ready.
  StatusOr<std::shared_ptr<ServedModel>> find(const std::string& name, const std::string& version) const;
  /// Every model in the repository directory or loaded, with its state.
  std::vector<IndexEntry> index(bool ready_only) const;
  /// Every ready model version (for /metrics and the statistics endpoint).
  std::vector<std::shared_ptr<ServedModel>> ready_models() const;
  /// Every model it knows (loaded, or whose load failed) is ready: no failed version, at least
  /// one serving. Unloaded models do not count. Triton's strict readiness (--strict-readiness).
  bool all_ready() const;
  /// Stops every model (their queues drain first).
  void stop_all();
  const std::string& root() const { return root_; }

 private:
  struct ModelEntry {
    std::map<int64_t, std::shared_ptr<ServedModel>> versions;
    /// Versions that failed to load (or the whole model, key -1), with the reason.
    std::map<int64_t, std::string> failed;
    /// What the last load saw on disk: the files outside the version directories, and each
    /// version directory's files (relative path, size, modification time).
    std::string config_fp;
    std::map<int64_t, std::string> version_fp;
  };
  /// The fingerprints of a model directory as they are now.
  void fingerprint(const std::string& name, std::string* config_fp, std::map<int64_t, std::string>* version_fp) const;
  std::string root_;
  ServeOptions options_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::map<std::string, ModelEntry> models_;
};

}  // namespace ferry::serve
