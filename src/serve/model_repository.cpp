// Model repository scanning, version policies, load and unload; see model_repository.h.
#include "serve/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ferry::serve {

namespace fs = std::filesystem;

namespace {

bool is_version_name(const std::string& s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

StatusOr<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return not_found(p.string() + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ModelRepository::ModelRepository(std::string root, ServeOptions options, std::function<void(const std::string&)> log)
    : root_(std::move(root)), options_(std::move(options)), log_(std::move(log)) {}

ModelRepository::~ModelRepository() { stop_all(); }

std::vector<std::string> ModelRepository::scan() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n[0] == '.') continue;
    if (e.is_directory(ec)) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status ModelRepository::load(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return not_found("model name '" + name + "' is not a directory name in the repository");
  const fs::path dir = fs::path(root_) / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return not_found("model '" + name + "' is not in the repository " + root_ + " (no directory " + dir.string() + ")");
  // What is on disk now (taken before reading it: a change during the load shows at the next poll),
  // and what is serving now (a version unchanged on disk keeps its instance).
  std::string cfg_fp;
  std::map<int64_t, std::string> ver_fp;
  fingerprint(name, &cfg_fp, &ver_fp);
  std::map<int64_t, std::shared_ptr<ServedModel>> previous;
  std::string prev_cfg_fp;
  std::map<int64_t, std::string> prev_ver_fp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it != models_.end()) {
      previous = it->second.versions;
      prev_cfg_fp = it->second.config_fp;
      prev_ver_fp = it->second.version_fp;
    }
  }
  // A failed reload keeps the versions already serving (Triton's rule); a failed first load lists
  // the model UNAVAILABLE with the reason.
  auto fail = [&](Status st) {
    log_("error: " + st.message());
    std::lock_guard<std::mutex> lock(mu_);
    ModelEntry& e = models_[name];
    e.config_fp = cfg_fp;
    e.version_fp = ver_fp;
    if (!e.versions.empty()) {
      log_("model '" + name + "': the reload failed; the versions already loaded keep serving");
      return st;
    }
    e.failed.clear();
    e.failed[-1] = st.message();
    return st;
  };
  // The configuration: config.pbtxt, or derived from the model when there is none.
  ParsedConfig parsed;
  const fs::path cfg_path = dir / "config.pbtxt";
  if (fs::exists(cfg_path, ec)) {
    auto text = read_text(cfg_path);
    if (!text.is_ok()) return fail(text.status());
    auto p = parse_model_config(text.value(), (fs::path(name) / "config.pbtxt").string());
    if (!p.is_ok()) return fail(p.status());
    parsed = std::move(p).value();
    if (!parsed.config.name().empty() && parsed.config.name() != name)
      return fail(invalid_argument(name + "/config.pbtxt: name '" + parsed.config.name() +
                                   "' differs from the model's directory name '" + name + "'"));
  } else if (!options_.auto_complete_config) {
    return fail(not_found("model '" + name + "': no " + cfg_path.string() + ", and --disable-auto-complete-config (or "
                          "--strict-model-config true) asks every model for one; write it, or serve without the flag to "
                          "derive it from the model"));
  }
  parsed.config.set_name(name);
  for (const std::string& w : parsed.warnings) log_("warning: " + w);
  auto labels = read_output_labels(parsed.config, dir.string(), (fs::path(name) / "config.pbtxt").string());
  if (!labels.is_ok()) return fail(labels.status());
  // Versions: numeric subdirectories, chosen by version_policy.
  std::vector<int64_t> versions;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && is_version_name(e.path().filename().string()))
      versions.push_back(std::stoll(e.path().filename().string()));
  std::sort(versions.begin(), versions.end());
  if (versions.empty())
    return fail(not_found("model '" + name + "': no version directory (" + dir.string() + "/1/model.onnx is the layout)"));
  std::vector<int64_t> chosen;
  const auto& vp = parsed.config.version_policy();
  if (vp.has_all()) {
    chosen = versions;
  } else if (vp.has_specific()) {
    for (int64_t v : vp.specific().versions()) {
      if (std::find(versions.begin(), versions.end(), v) == versions.end())
        return fail(not_found("model '" + name + "': version_policy specific lists version " + std::to_string(v) +
                              " but there is no directory " + (dir / std::to_string(v)).string()));
      chosen.push_back(v);
    }
  } else {
    size_t n = vp.has_latest() && vp.latest().num_versions() > 0 ? vp.latest().num_versions() : 1;
    n = std::min(n, versions.size());
    chosen.assign(versions.end() - static_cast<std::ptrdiff_t>(n), versions.end());
  }
  std::map<int64_t, std::shared_ptr<ServedModel>> loaded;
  std::map<int64_t, std::string> failed;
  Status first_error = Status::ok();
  for (int64_t v : chosen) {
    const fs::path vdir = dir / std::to_string(v);
    std::string file = parsed.config.default_model_filename();
    if (file.empty()) file = fs::exists(vdir / "model.onnx", ec) || !fs::exists(vdir / "model.ferry", ec) ? "model.onnx" : "model.ferry";
    if (file.find('/') != std::string::npos || file == "..")
      return fail(invalid_argument(name + "/config.pbtxt: default_model_filename '" + file + "' must be a file name inside the version directory"));
    const fs::path path = vdir / file;
    auto pv = previous.find(v);
    if (pv != previous.end() && prev_cfg_fp == cfg_fp && prev_ver_fp.count(v) && ver_fp.count(v) && prev_ver_fp[v] == ver_fp[v]) {
      loaded[v] = pv->second;  // unchanged: keeps serving, nothing reloaded
      continue;
    }
    Status st = Status::ok();
    if (!fs::is_regular_file(path, ec)) {
      st = not_found("model '" + name + "' version " + std::to_string(v) + ": no model file " + path.string() +
                     " (model.onnx or model.ferry)");
    } else {
      std::vector<std::string> warnings;
      auto m = ServedModel::load(name, v, path.string(), parsed.config, options_, &warnings, labels.value());
      for (const std::string& w : warnings) log_("warning: " + w);
      if (m.is_ok()) loaded[v] = m.value();
      else st = m.status().with_context("model '" + name + "' version " + std::to_string(v));
    }
    if (!st.is_ok()) {
      failed[v] = st.message();
      log_("error: " + st.message());
      if (first_error.is_ok()) first_error = st;
    }
  }
  std::vector<std::pair<std::shared_ptr<ServedModel>, std::shared_ptr<ServedModel>>> to_stop;  // version, successor
  {
    std::lock_guard<std::mutex> lock(mu_);
    ModelEntry& e = models_[name];
    e.config_fp = cfg_fp;
    e.version_fp = ver_fp;
    if (loaded.empty() && !e.versions.empty()) {
      log_("model '" + name + "': the reload failed; the versions already loaded keep serving");
      return first_error;
    }
    for (auto& [v, m] : e.versions) {
      auto nv = loaded.find(v);
      if (nv != loaded.end() && nv->second == m) continue;  // unchanged, kept
      // The successor of a replaced version: the same number if it is still served, else the
      // highest new one (what a request that named no version gets now).
      to_stop.emplace_back(m, nv != loaded.end() ? nv->second : (loaded.empty() ? nullptr : loaded.rbegin()->second));
    }
    e.versions = std::move(loaded);
    e.failed = std::move(failed);
  }
  // The replaced versions finish what they had queued; a request that found one of them just
  // before the swap goes on to its successor.
  for (auto& [m, next] : to_stop) m->retire(next);
  return first_error;
}

void ModelRepository::fingerprint(const std::string& name, std::string* config_fp, std::map<int64_t, std::string>* version_fp) const {
  const fs::path dir = fs::path(root_) / name;
  std::vector<std::string> cfg_lines;
  std::map<int64_t, std::vector<std::string>> ver_lines;
  std::error_code ec;
  // Symlinked version directories and files are followed (deployments swap them); depth is bounded
  // so that a symlink cycle cannot make the walk endless.
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied | fs::directory_options::follow_directory_symlink,
                                      ec),
      end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() >= 8) it.disable_recursion_pending();
    const fs::path rel = it->path().lexically_relative(dir);
    const std::string first = rel.begin()->string();
    const bool in_version = is_version_name(first);
    std::error_code fe;
    if (it->is_directory(fe)) {
      if (in_version && it.depth() == 0) ver_lines[std::stoll(first)];  // an empty version directory is a version too
      continue;
    }
    const auto size = it->file_size(fe);
    const auto mtime = fs::last_write_time(it->path(), fe).time_since_epoch().count();
    std::string line = rel.string() + "|" + std::to_string(size) + "|" + std::to_string(mtime) + "\n";
    if (in_version) ver_lines[std::stoll(first)].push_back(std::move(line));
    else cfg_lines.push_back(std::move(line));
  }
  std::sort(cfg_lines.begin(), cfg_lines.end());
  config_fp->assign("files outside the versions:\n");
  for (const std::string& l : cfg_lines) *config_fp += l;
  version_fp->clear();
  for (auto& [v, lines] : ver_lines) {
    std::sort(lines.begin(), lines.end());
    std::string& fp = (*version_fp)[v];
    for (const std::string& l : lines) fp += l;
  }
}

int ModelRepository::poll() {
  const std::vector<std::string> on_disk = scan();
  std::vector<std::string> gone, changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [n, e] : models_)
      if (!std::binary_search(on_disk.begin(), on_disk.end(), n)) gone.push_back(n);
  }
  for (const std::string& n : on_disk) {
    std::string cfg_fp;
    std::map<int64_t, std::string> ver_fp;
    fingerprint(n, &cfg_fp, &ver_fp);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(n);
    if (it == models_.end() || it->second.config_fp != cfg_fp || it->second.version_fp != ver_fp) changed.push_back(n);
  }
  for (const std::string& n : gone) {
    Status st = unload(n);
    if (!st.is_ok()) log_("poll: " + st.message());
    else log_("poll: model '" + n + "' is gone from the repository; unloaded (its queued requests finish first)");
  }
  for (const std::string& n : changed) {
    if (load(n).is_ok()) log_("poll: loaded model '" + n + "'");
  }
  return static_cast<int>(gone.size() + changed.size());
}

Status ModelRepository::unload(const std::string& name) {
  std::map<int64_t, std::shared_ptr<ServedModel>> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      std::error_code ec;
      if (!fs::is_directory(fs::path(root_) / name, ec)) return not_found("failed to unload '" + name + "': no model of that name");
      return Status::ok();
    }
    old = std::move(it->second.versions);
    models_.erase(it);
  }
  for (auto& [v, m] : old) m->stop();
  return Status::ok();
}

StatusOr<std::shared_ptr<ServedModel>> ModelRepository::find(const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return not_found("Request for unknown model: '" + name + "' is not found");
  const ModelEntry& e = it->second;
  if (version.empty()) {
    if (e.versions.empty()) {
      std::string why = e.failed.empty() ? "it is not loaded" : e.failed.begin()->second;
      return resource_exhausted("model '" + name + "' is not ready: " + why);
    }
    return e.versions.rbegin()->second;
  }
  if (!is_version_name(version)) return not_found("Request for unknown model: '" + name + "' version '" + version + "' is not found");
  const int64_t v = std::stoll(version);
  auto vit = e.versions.find(v);
  if (vit != e.versions.end()) return vit->second;
  auto fit = e.failed.find(v);
  if (fit != e.failed.end()) return resource_exhausted("model '" + name + "' version " + version + " is not ready: " + fit->second);
  return not_found("Request for unknown model: '" + name + "' version " + version + " is not found");
}

std::vector<IndexEntry> ModelRepository::index(bool ready_only) const {
  std::vector<IndexEntry> out;
  std::vector<std::string> on_disk = scan();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, e] : models_) {
    for (const auto& [v, m] : e.versions) out.push_back({name, std::to_string(v), "READY", ""});
    if (ready_only) continue;
    for (const auto& [v, why] : e.failed) out.push_back({name, v < 0 ? "" : std::to_string(v), "UNAVAILABLE", why});
  }
  if (!ready_only)
    for (const std::string& n : on_disk)
      if (!models_.count(n)) out.push_back({n, "", "UNAVAILABLE", "unloaded"});
  std::sort(out.begin(), out.end(), [](const IndexEntry& a, const IndexEntry& b) {
    return a.name != b.name ? a.name < b.name : a.version < b.version;
  });
  return out;
}

std::vector<std::shared_ptr<ServedModel>> ModelRepository::ready_models() const {
  std::vector<std::shared_ptr<ServedModel>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, e] : models_)
    for (const auto& [v, m] : e.versions) out.push_back(m);
  return out;
}

bool ModelRepository::all_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, e] : models_)
    if (e.versions.empty() || !e.failed.empty()) return false;
  return true;
}

void ModelRepository::stop_all() {
  std::map<std::string, ModelEntry> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(models_);
  }
  for (auto& [n, e] : all)
    for (auto& [v, m] : e.versions) m->stop();
}

}  // namespace ferry::serve
