// Triton's system shared-memory extension; see shared_memory.h.
#define RAPIDJSON_HAS_STDSTRING 1
#include "serve/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "serve/kserve_json.h"

namespace ferry::serve {

namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

StatusOr<std::shared_ptr<ShmRegion>> ShmRegion::open(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size) {
  const std::string what = "system shared-memory region " + quoted(name);
  if (name.empty()) return invalid_argument("a shared-memory region needs a name");
  if (key.empty()) return invalid_argument(what + ": 'key' is empty; give the shared-memory object's key (as shm_open takes it, e.g. /input0)");
  if (byte_size == 0) return invalid_argument(what + ": byte_size is 0; give the region's size in bytes");
  if (offset > std::numeric_limits<uint64_t>::max() - byte_size || offset + byte_size > uint64_t(std::numeric_limits<off_t>::max()))
    return invalid_argument(what + ": offset " + std::to_string(offset) + " + byte_size " + std::to_string(byte_size) + " is too large");
  std::shared_ptr<ShmRegion> r(new ShmRegion());
  r->name_ = name;
  r->key_ = key;
  r->offset_ = offset;
  r->byte_size_ = byte_size;
  r->writable_ = true;
  r->fd_ = shm_open(key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (r->fd_ < 0 && (errno == EACCES || errno == EROFS)) {
    r->writable_ = false;  // inputs only: an output asked into it is refused, naming the region
    r->fd_ = shm_open(key.c_str(), O_RDONLY | O_CLOEXEC, 0);
  }
  if (r->fd_ < 0)
    return invalid_argument(what + ": cannot open the shared-memory object " + quoted(key) + " (" + std::strerror(errno) +
                            "); the client creates it first (shm_open, or a file in /dev/shm) and gives its key");
  struct stat st {};
  if (fstat(r->fd_, &st) != 0) return invalid_argument(what + ": cannot stat " + quoted(key) + " (" + std::strerror(errno) + ")");
  if (offset + byte_size > static_cast<uint64_t>(st.st_size))
    return invalid_argument(what + ": offset " + std::to_string(offset) + " + byte_size " + std::to_string(byte_size) + " = " +
                            std::to_string(offset + byte_size) + " runs past the end of " + quoted(key) + " (" +
                            std::to_string(st.st_size) + " bytes)");
  // mmap's offset is a multiple of the page size: map from the page the region starts in.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  r->map_len_ = static_cast<size_t>(offset - start + byte_size);
  void* p = mmap(nullptr, r->map_len_, r->writable_ ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, r->fd_, static_cast<off_t>(start));
  if (p == MAP_FAILED) return invalid_argument(what + ": cannot map " + quoted(key) + " (" + std::strerror(errno) + ")");
  r->map_ = p;
  r->data_ = static_cast<char*>(p) + (offset - start);
  return r;
}

ShmRegion::~ShmRegion() {
  if (map_) munmap(map_, map_len_);
  if (fd_ >= 0) close(fd_);
}

Status ShmRegion::check_size() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0 || offset_ + byte_size_ > static_cast<uint64_t>(st.st_size))
    return invalid_argument("system shared-memory region " + quoted(name_) + ": the object " + quoted(key_) + " was shrunk to " +
                            std::to_string(st.st_size) + " bytes since it was registered (the region ends at byte " +
                            std::to_string(offset_ + byte_size_) + "); register it again");
  return Status::ok();
}

Status SharedMemoryRegistry::register_region(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size) {
  if (!allowed_)
    return invalid_argument("client shared memory is disabled: start the server with `--allow-client-shm true` to register regions");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(name);
    if (it != regions_.end())
      return invalid_argument("shared-memory region " + quoted(name) + " is already registered (key " + quoted(it->second->key()) +
                              "); unregister it first");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<ShmRegion> r, ShmRegion::open(name, key, offset, byte_size));
  std::lock_guard<std::mutex> lock(mu_);
  if (!regions_.emplace(name, std::move(r)).second)  // registered meanwhile by another call
    return invalid_argument("shared-memory region " + quoted(name) + " is already registered; unregister it first");
  return Status::ok();
}

void SharedMemoryRegistry::unregister(const std::string& name) {
  std::map<std::string, std::shared_ptr<ShmRegion>> gone;  // unmapped outside the lock (when no request holds them)
  std::lock_guard<std::mutex> lock(mu_);
  if (name.empty()) {
    gone.swap(regions_);
    return;
  }
  auto it = regions_.find(name);
  if (it != regions_.end()) {
    gone.emplace(name, std::move(it->second));
    regions_.erase(it);
  }
}

StatusOr<std::vector<ShmRegionStatus>> SharedMemoryRegistry::status(const std::string& name) const {
  std::vector<ShmRegionStatus> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [n, r] : regions_)
    if (name.empty() || n == name) out.push_back({n, r->key(), r->offset(), r->byte_size()});
  if (!name.empty() && out.empty()) return not_found("no system shared-memory region " + quoted(name) + " is registered");
  return out;
}

StatusOr<std::optional<ShmSlice>> SharedMemoryRegistry::resolve(const ShmParams& p, const std::string& what) const {
  if (!p.any()) return std::optional<ShmSlice>();
  if (!p.region || !p.byte_size)
    return invalid_argument(what + ": parameter " + (p.region ? "'shared_memory_byte_size'" : "'shared_memory_region'") +
                            " is missing: a tensor in shared memory gives shared_memory_region and shared_memory_byte_size "
                            "(shared_memory_offset is optional, default 0)");
  std::shared_ptr<const ShmRegion> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(*p.region);
    if (it != regions_.end()) r = it->second;
  }
  if (!r)
    return invalid_argument(what + ": shared_memory_region " + quoted(*p.region) + " is not registered" +
                            (allowed_ ? std::string(" (POST /v2/systemsharedmemory/region/NAME/register, or gRPC SystemSharedMemoryRegister)")
                                      : std::string(" (client shared memory is disabled: start the server with `--allow-client-shm true`)")));
  const uint64_t offset = p.offset.value_or(0), size = *p.byte_size;
  if (offset > r->byte_size() || size > r->byte_size() - offset)
    return invalid_argument(what + ": shared_memory_offset " + std::to_string(offset) + " + shared_memory_byte_size " + std::to_string(size) +
                            " = " + std::to_string(offset + size) + " runs past the end of region " + quoted(r->name()) + " (" +
                            std::to_string(r->byte_size()) + " bytes)");
  RETURN_IF_ERROR(r->check_size());
  return std::optional<ShmSlice>(ShmSlice{r, offset, size});
}

StatusOr<std::optional<ShmSlice>> resolve_shm(const SharedMemoryRegistry* registry, const ShmParams& p, const std::string& what) {
  if (registry) return registry->resolve(p, what);
  if (!p.any()) return std::optional<ShmSlice>();
  return invalid_argument(what + ": shared-memory parameters are not accepted here (no shared-memory registry)");
}

StatusOr<Tensor> shm_input_tensor(const ShmSlice& s, DType dtype, const std::vector<int64_t>& dims, const std::string& what) {
  const std::string where = what + " (shared-memory region " + quoted(s.region->name()) + ", offset " + std::to_string(s.offset) + ")";
  if (dtype == DType::kString) return decode_bytes_tensor(std::string_view(s.data(), s.byte_size), dims, where);
  ASSIGN_OR_RETURN(int64_t count, checked_element_count(dims, what));
  const uint64_t nbytes = static_cast<uint64_t>(count * dtype_size(dtype));
  if (s.byte_size != nbytes)
    return invalid_argument(what + ": shared_memory_byte_size " + std::to_string(s.byte_size) + " but shape " + dims_to_string(dims) + " of " +
                            kserve_dtype_name(dtype) + " needs " + std::to_string(nbytes) + " bytes");
  if (reinterpret_cast<uintptr_t>(s.data()) % 64 == 0)  // in place: the kernels get the alignment they want
    return Tensor::wrap(dtype, dims, std::shared_ptr<const void>(s.region, s.data()), s.data());
  return copy_input_tensor(dtype, dims, s.data(), what);
}

namespace {

const TensorSpec* output_spec(const ModelSignature& sig, const std::string& name) {
  for (const TensorSpec& t : sig.outputs)
    if (t.name == name) return &t;
  return nullptr;
}

std::string too_small(const RequestedOutput& r, uint64_t need) {
  return "output '" + r.name + "': " + std::to_string(need) + " bytes do not fit shared_memory_byte_size " + std::to_string(r.shm->byte_size) +
         " (region " + quoted(r.shm->region->name()) + ", offset " + std::to_string(r.shm->offset) + ")";
}

}  // namespace

Status check_shm_outputs(const ModelSignature& sig, const std::vector<RequestedOutput>& outputs, int64_t batch) {
  for (const RequestedOutput& r : outputs) {
    if (!r.shm) continue;
    if (!r.shm->region->writable())
      return invalid_argument("output '" + r.name + "': shared-memory region " + quoted(r.shm->region->name()) + " is read-only (its object " +
                              quoted(r.shm->region->key()) + " could only be opened for reading)");
    const TensorSpec* spec = output_spec(sig, r.name);
    if (!spec || spec->dtype == DType::kString || r.classification > 0) continue;  // size known after the run
    int64_t count = sig.max_batch > 0 ? batch : 1;
    bool known = true;
    for (int64_t d : spec->dims) {
      if (d < 0) known = false;
      else count *= d;
    }
    const uint64_t need = static_cast<uint64_t>(count * dtype_size(spec->dtype));
    if (known && need > r.shm->byte_size) return invalid_argument(too_small(r, need));
  }
  return Status::ok();
}

Status write_shm_outputs(const ModelSignature& sig, const std::vector<RequestedOutput>& requested, const TensorList& outputs) {
  for (const RequestedOutput& r : requested) {
    if (!r.shm) continue;
    const Tensor* t = nullptr;
    for (const auto& [n, x] : outputs)
      if (n == r.name) t = &x;
    if (!t) continue;
    Tensor classified;
    if (r.classification > 0) {
      ASSIGN_OR_RETURN(classified, classify(*t, r.classification, sig.max_batch > 0, output_labels(sig, r.name)));
      t = &classified;
    }
    RETURN_IF_ERROR(r.shm->region->check_size());
    if (t->dtype() == DType::kString) {
      std::string bytes;
      append_bytes_tensor(*t, &bytes);
      if (bytes.size() > r.shm->byte_size) return invalid_argument(too_small(r, bytes.size()));
      std::memcpy(r.shm->data(), bytes.data(), bytes.size());
      continue;
    }
    const uint64_t nbytes = static_cast<uint64_t>(t->nbytes());
    if (nbytes > r.shm->byte_size) return invalid_argument(too_small(r, nbytes));
    if (nbytes > 0) std::memcpy(r.shm->data(), t->raw(), nbytes);
  }
  return Status::ok();
}

std::string cuda_shm_unsupported(const char* what) {
  return std::string(what) + ": CUDA shared memory is not supported by this build of ferry (it serves from host memory); "
                             "use system shared memory (/v2/systemsharedmemory, gRPC SystemSharedMemoryRegister) or send the tensors in the request";
}

namespace {

unsigned http_code(const Status& s) { return s.code() == StatusCode::kNotFound ? 404 : 400; }

std::string status_json(const std::vector<ShmRegionStatus>& regions) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartArray();
  for (const ShmRegionStatus& r : regions) {
    w.StartObject();
    w.Key("name");
    w.String(r.name);
    w.Key("key");
    w.String(r.key);
    w.Key("offset");
    w.Uint64(r.offset);
    w.Key("byte_size");
    w.Uint64(r.byte_size);
    w.EndObject();
  }
  w.EndArray();
  return std::string(sb.GetString(), sb.GetSize());
}

// {"key": "/k", "offset": 0, "byte_size": 64}
ShmHttpAnswer http_register(SharedMemoryRegistry* registry, const std::string& name, std::string_view body) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
  const std::string what = "register system shared-memory region '" + name + "'";
  if (doc.HasParseError() || !doc.IsObject())
    return {400, error_json(what + ": the body is not a JSON object {\"key\": ..., \"offset\": ..., \"byte_size\": ...}")};
  const rapidjson::Value& obj = doc;  // const iterators: compared without C++20's reversed-operator ambiguity
  auto field = [&](const char* k) -> const rapidjson::Value* {
    auto it = obj.FindMember(k);
    return it == obj.MemberEnd() ? nullptr : &it->value;
  };
  const rapidjson::Value* key = field("key");
  const rapidjson::Value* offset = field("offset");
  const rapidjson::Value* size = field("byte_size");
  if (!key || !key->IsString()) return {400, error_json(what + ": 'key' is missing or not a string")};
  if (offset && !offset->IsUint64()) return {400, error_json(what + ": 'offset' is not a non-negative integer")};
  if (!size || !size->IsUint64()) return {400, error_json(what + ": 'byte_size' is missing or not a non-negative integer")};
  Status st = registry->register_region(name, key->GetString(), offset ? offset->GetUint64() : 0, size->GetUint64());
  if (!st.is_ok()) return {http_code(st), error_json(st.message())};
  return {200, ""};
}

}  // namespace

ShmHttpAnswer shm_http(SharedMemoryRegistry* registry, const std::vector<std::string>& p, bool get, bool post, std::string_view body) {
  // p: "v2", "systemsharedmemory" | "cudasharedmemory", ["region", NAME], ACTION
  const bool cuda = p.size() > 1 && p[1] == "cudasharedmemory";
  std::string name, action;
  if (p.size() == 3) {
    action = p[2];
  } else if (p.size() == 5 && p[2] == "region") {
    name = p[3];
    action = p[4];
  } else {
    return {404, error_json("not found: the shared-memory endpoints are /v2/" + p[1] + "[/region/NAME]/status|unregister and /v2/" + p[1] +
                            "/region/NAME/register")};
  }
  auto wrong_method = [&](const char* want) {
    return ShmHttpAnswer{405, error_json("/v2/" + p[1] + " " + action + " takes " + want)};
  };
  if (action == "status") {
    if (!get) return wrong_method("GET");
    if (cuda) {  // no CUDA region can be registered: none to list
      if (!name.empty()) return {404, error_json("no CUDA shared-memory region '" + name + "' is registered (" + cuda_shm_unsupported("CUDA shared memory") + ")")};
      return {200, "[]"};
    }
    if (!registry) return {200, "[]"};
    auto s = registry->status(name);
    if (!s.is_ok()) return {http_code(s.status()), error_json(s.status().message())};
    return {200, status_json(s.value())};
  }
  if (action == "register") {
    if (!post) return wrong_method("POST");
    if (name.empty()) return {404, error_json("not found: register is /v2/" + p[1] + "/region/NAME/register")};
    if (cuda) return {400, error_json(cuda_shm_unsupported(("register CUDA shared-memory region '" + name + "'").c_str()))};
    if (!registry) return {400, error_json("client shared memory is disabled: start the server with `--allow-client-shm true` to register regions")};
    return http_register(registry, name, body);
  }
  if (action == "unregister") {
    if (!post) return wrong_method("POST");
    if (!cuda && registry) registry->unregister(name);
    return {200, ""};
  }
  return {404, error_json("not found: /v2/" + p[1] + " has status, register and unregister")};
}

}  // namespace ferry::serve
