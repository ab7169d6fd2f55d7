// Triton's system shared-memory extension: clients register regions of POSIX shared-memory
// objects (shm_open keys, /dev/shm) by name, then name a region, offset and size in an inference
// request's input or output parameters (shared_memory_region / shared_memory_offset /
// shared_memory_byte_size) instead of sending the tensor's bytes. One registry serves the HTTP and
// gRPC front ends (one namespace, as Triton's). Inputs are read in place where they are aligned;
// outputs are written into their region before the response goes out. CUDA shared memory is
// answered "not supported by this build". Only POSIX calls and the wire-independent types: the
// front ends translate their parameters into ShmParams.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "serve/inference_types.h"

namespace ferry::serve {

struct RequestedOutput;  // kserve_json.h

/// One registered region: `byte_size` bytes at `offset` of the shared-memory object `key`, mapped
/// from registration until it is unregistered and no request uses it any more.
class ShmRegion {
 public:
  /// Opens `key` (read-write, else read-only), checks offset + byte_size against its size and maps it.
  static StatusOr<std::shared_ptr<ShmRegion>> open(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  uint64_t byte_size() const { return byte_size_; }
  bool writable() const { return writable_; }
  char* data() const { return data_; }
  /// The object still covers the region (a client may have shrunk it since: reading the mapping
  /// past the object's end would kill the server with SIGBUS).
  Status check_size() const;

 private:
  ShmRegion() = default;
  std::string name_, key_;
  uint64_t offset_ = 0, byte_size_ = 0;
  bool writable_ = false;
  int fd_ = -1;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  char* data_ = nullptr;
};

/// A tensor's bytes in a region.
struct ShmSlice {
  std::shared_ptr<const ShmRegion> region;  // keeps the mapping alive while a request holds it
  uint64_t offset = 0;                      // within the region
  uint64_t byte_size = 0;
  char* data() const { return region->data() + offset; }
};

/// A tensor's shared-memory parameters as the request gave them.
struct ShmParams {
  std::optional<std::string> region;
  std::optional<uint64_t> offset, byte_size;
  bool any() const { return region || offset || byte_size; }
};

struct ShmRegionStatus {
  std::string name, key;
  uint64_t offset = 0, byte_size = 0;
};

class SharedMemoryRegistry {
 public:
  /// `allowed` false (`--allow-client-shm false`): registration is refused, saying how to allow it.
  explicit SharedMemoryRegistry(bool allowed) : allowed_(allowed) {}
  bool allowed() const { return allowed_; }
  Status register_region(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size);
  /// Unregisters `name` ("": every region). A name that is not registered is not an error (as
  /// Triton: unregistering is idempotent). Requests that hold the region finish with it.
  void unregister(const std::string& name);
  /// Every region ("") or the named one (kNotFound when it is not registered).
  StatusOr<std::vector<ShmRegionStatus>> status(const std::string& name) const;
  /// Resolves one tensor's parameters: nullopt when it has none; errors name `what` (the tensor),
  /// the region and the bounds: region and byte_size both needed, the region registered, offset +
  /// byte_size inside it.
  StatusOr<std::optional<ShmSlice>> resolve(const ShmParams& p, const std::string& what) const;

 private:
  bool allowed_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ShmRegion>> regions_;
};

/// registry->resolve(p, what), or, without a registry (a decoder given none), an error when the
/// tensor has shared-memory parameters.
StatusOr<std::optional<ShmSlice>> resolve_shm(const SharedMemoryRegistry* registry, const ShmParams& p, const std::string& what);

/// An input's tensor from its slice: `byte_size` must be the tensor's size (BYTES: its
/// serialization, 4-byte lengths); read in place when the data is 64-byte aligned, else copied.
StatusOr<Tensor> shm_input_tensor(const ShmSlice& s, DType dtype, const std::vector<int64_t>& dims, const std::string& what);

/// Before the request runs: each output to be written to shared memory whose size is known from
/// the config and the batch fits its slice, and the region is writable.
Status check_shm_outputs(const ModelSignature& sig, const std::vector<RequestedOutput>& outputs, int64_t batch);
/// After it ran: writes the outputs requested in shared memory into their slices (a
/// classification as its BYTES serialization); an output larger than its slice fails, naming both.
Status write_shm_outputs(const ModelSignature& sig, const std::vector<RequestedOutput>& requested, const TensorList& outputs);

/// The HTTP endpoints of both extensions: `path` after "v2" starts with "systemsharedmemory" or
/// "cudasharedmemory". GET [region/NAME/]status, POST region/NAME/register ({key, offset,
/// byte_size}), POST [region/NAME/]unregister. Returns the HTTP status and the JSON body.
struct ShmHttpAnswer {
  unsigned status = 200;
  std::string body;
};
ShmHttpAnswer shm_http(SharedMemoryRegistry* registry, const std::vector<std::string>& path, bool get, bool post, std::string_view body);

/// The error every CUDA shared-memory request gets.
std::string cuda_shm_unsupported(const char* what);

}  // namespace ferry::serve
