// The server's log and Triton's logging extension; see server_log.h.
#define RAPIDJSON_HAS_STDSTRING 1
#include "serve/server_log.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <limits>

namespace ferry::serve {

namespace {

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

Status check_format(const std::string& f) {
  if (f != "default" && f != "ISO8601") return invalid_argument("log_format '" + f + "': expected default or ISO8601");
  return Status::ok();
}

}  // namespace

StatusOr<std::unique_ptr<ServerLog>> ServerLog::open(LogSettings settings) {
  RETURN_IF_ERROR(check_format(settings.format));
  std::unique_ptr<ServerLog> log(new ServerLog());
  if (!settings.file.empty()) {
    log->out_ = std::fopen(settings.file.c_str(), "a");
    if (!log->out_)
      return invalid_argument("--log-file " + settings.file + ": cannot open it for appending (" + std::strerror(errno) + ")");
  }
  log->verbose_.store(settings.verbose_level);
  log->s_ = std::move(settings);
  return log;
}

ServerLog::~ServerLog() {
  if (out_ && out_ != stderr) std::fclose(out_);
}

void ServerLog::emit(const std::string& line) {
  if (s_.format == "ISO8601") {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[40];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    std::fprintf(out_, "%s.%06dZ ferry serve: %s\n", stamp, static_cast<int>(us), line.c_str());
  } else {
    std::fprintf(out_, "ferry serve: %s\n", line.c_str());
  }
  std::fflush(out_);
}

void ServerLog::write(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool on = starts_with(line, "error:") ? s_.errors : starts_with(line, "warning:") ? s_.warnings : s_.info;
  if (on) emit(line);
}

void ServerLog::verbose(uint32_t level, const std::string& line) {
  if (!verbose_on(level)) return;
  std::lock_guard<std::mutex> lock(mu_);
  emit("verbose: " + line);
}

LogSettings ServerLog::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

Status ServerLog::update(const std::vector<std::pair<std::string, LogValue>>& changes) {
  std::lock_guard<std::mutex> lock(mu_);
  LogSettings next = s_;
  for (const auto& [name, v] : changes) {
    const std::string what = "log setting '" + name + "'";
    if (name == "log_info" || name == "log_warnings" || name == "log_errors") {
      if (!std::holds_alternative<bool>(v)) return invalid_argument(what + " is a boolean");
      (name == "log_info" ? next.info : name == "log_warnings" ? next.warnings : next.errors) = std::get<bool>(v);
    } else if (name == "log_verbose_level") {
      if (!std::holds_alternative<uint64_t>(v) || std::get<uint64_t>(v) > std::numeric_limits<uint32_t>::max())
        return invalid_argument(what + " is an unsigned 32-bit integer (0: no verbose lines)");
      next.verbose_level = static_cast<uint32_t>(std::get<uint64_t>(v));
    } else if (name == "log_format") {
      if (!std::holds_alternative<std::string>(v)) return invalid_argument(what + " is a string: default or ISO8601");
      next.format = std::get<std::string>(v);
      RETURN_IF_ERROR(check_format(next.format));
    } else if (name == "log_file") {
      if (!std::holds_alternative<std::string>(v) || std::get<std::string>(v) != s_.file)
        return invalid_argument(what + " cannot be changed while the server runs (it is '" + s_.file +
                                "'; \"\" is stderr): start `ferry serve --log-file PATH`");
    } else {
      return invalid_argument("unknown log setting '" + name +
                              "'; the settings are log_file, log_info, log_warnings, log_errors, log_verbose_level, log_format");
    }
  }
  s_ = std::move(next);
  verbose_.store(s_.verbose_level);
  return Status::ok();
}

std::string ServerLog::settings_json() const {
  const LogSettings s = settings();
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("log_file");
  w.String(s.file);
  w.Key("log_info");
  w.Bool(s.info);
  w.Key("log_warnings");
  w.Bool(s.warnings);
  w.Key("log_errors");
  w.Bool(s.errors);
  w.Key("log_verbose_level");
  w.Uint(s.verbose_level);
  w.Key("log_format");
  w.String(s.format);
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

Status ServerLog::update_json(std::string_view body) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject())
    return invalid_argument("the log settings request is not a JSON object such as {\"log_verbose_level\": 1}");
  std::vector<std::pair<std::string, LogValue>> changes;
  const rapidjson::Value& obj = doc;  // const iterators: compared without C++20's reversed-operator ambiguity
  for (const auto& m : obj.GetObject()) {
    std::string name(m.name.GetString(), m.name.GetStringLength());
    if (m.value.IsBool()) changes.emplace_back(std::move(name), m.value.GetBool());
    else if (m.value.IsUint64()) changes.emplace_back(std::move(name), m.value.GetUint64());
    else if (m.value.IsString()) changes.emplace_back(std::move(name), std::string(m.value.GetString(), m.value.GetStringLength()));
    else return invalid_argument("log setting '" + name + "': the value is not a boolean, an unsigned integer or a string");
  }
  return update(changes);
}

}  // namespace ferry::serve
