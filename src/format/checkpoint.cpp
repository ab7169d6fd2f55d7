// Training checkpoints; see checkpoint.h and docs/format.md ("Training checkpoints").
#include "format/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/checksum_impl.h"
#include "io/file.h"

namespace ferry {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints are little-endian");

constexpr char kCkptMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'C', 'K', 'P'};
constexpr uint32_t kCkptVersion = 1;
constexpr uint64_t kCkptHeaderSize = 64;
constexpr uint64_t kCkptAlign = 64;
constexpr uint64_t kMaxNameBytes = 4096;
constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".fckpt";

struct CkptHeader {
  char magic[8];          // "FERRYCKP"
  uint32_t version;       // kCkptVersion
  uint32_t header_size;   // 64
  uint64_t file_size;
  uint64_t checksum;      // XXH3-64 of the file with these 8 bytes zeroed
  int64_t step;
  uint64_t tensor_count;
  uint64_t meta_size;     // JSON bytes right after the header
  uint64_t index_size;    // tensor index bytes right after the JSON
};
static_assert(sizeof(CkptHeader) == kCkptHeaderSize, "the checkpoint header is 64 bytes");
constexpr size_t kChecksumAt = offsetof(CkptHeader, checksum);
// Smallest index entry: name length, dtype, rank, offset, nbytes (an empty name is refused).
constexpr uint64_t kMinEntryBytes = 4 + 1 + 4 + 4 + 8 + 8;

uint64_t align_up(uint64_t x) { return (x + kCkptAlign - 1) / kCkptAlign * kCkptAlign; }

std::string errno_text(int e) {
  std::string s = std::strerror(e);
  if (e == ENOSPC || e == EFBIG || e == EDQUOT)
    s += " (free space in the checkpoint folder, lower keep_last, or write checkpoints elsewhere)";
  return s;
}

// Bounds-checked little-endian reader over the index.
struct Cursor {
  const uint8_t* p;
  uint64_t left;
  template <typename T>
  bool get(T* v) {
    if (left < sizeof(T)) return false;
    std::memcpy(v, p, sizeof(T));
    p += sizeof(T);
    left -= sizeof(T);
    return true;
  }
};

// Index entries as the writer lays them out.
struct Entry {
  const std::string* name;
  const Tensor* tensor;
  uint64_t offset;
};

// Writes through stdio, hashing every byte, and remembers the first error.
class HashedWriter {
 public:
  explicit HashedWriter(FILE* f) : f_(f) { XXH3_64bits_reset(&state_); }
  void put(const void* data, size_t n) {
    if (err_ || n == 0) return;
    XXH3_64bits_update(&state_, data, n);
    if (std::fwrite(data, 1, n, f_) != n) err_ = errno ? errno : EIO;
    written_ += n;
  }
  template <typename T> void put_value(T v) { put(&v, sizeof v); }
  void pad_to(uint64_t offset) {
    static const uint8_t kZeros[kCkptAlign] = {};
    while (!err_ && written_ < offset) put(kZeros, static_cast<size_t>(std::min<uint64_t>(offset - written_, kCkptAlign)));
  }
  uint64_t digest() { return XXH3_64bits_digest(&state_); }
  int error() const { return err_; }

 private:
  FILE* f_;
  XXH3_state_t state_;
  uint64_t written_ = 0;
  int err_ = 0;
};

// The step a checkpoint file name encodes, or -1 when the name is not ckpt-<8+ digits>.fckpt.
int64_t step_of_name(const std::string& name) {
  const size_t np = sizeof kPrefix - 1, ns = sizeof kSuffix - 1;
  if (name.size() < np + 8 + ns || name.compare(0, np, kPrefix) != 0 ||
      name.compare(name.size() - ns, ns, kSuffix) != 0)
    return -1;
  const std::string digits = name.substr(np, name.size() - np - ns);
  if (digits.size() > 18) return -1;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Checkpoint files in `dir` as (step, path), oldest first.
StatusOr<std::vector<std::pair<int64_t, std::string>>> list_checkpoints(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    const int e = errno;
    if (e == ENOENT) return not_found("checkpoint folder '" + dir + "' does not exist");
    return invalid_argument("checkpoint folder '" + dir + "' cannot be read: " + std::strerror(e) +
                            (e == EACCES ? " (check its permissions)" : ""));
  }
  std::vector<std::pair<int64_t, std::string>> out;
  while (const dirent* ent = ::readdir(d)) {
    const int64_t step = step_of_name(ent->d_name);
    if (step >= 0) out.emplace_back(step, dir + "/" + ent->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return invalid_argument("cannot open checkpoint folder '" + dir + "' to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0 && e != EINVAL) return invalid_argument("cannot sync checkpoint folder '" + dir + "': " + std::strerror(e));
  return Status::ok();
}

Status check_for_writing(const Checkpoint& c) {
  if (c.step < 0) return invalid_argument("checkpoint step " + std::to_string(c.step) + " is negative");
  for (const auto& [name, t] : c.tensors) {
    const std::string what = "checkpoint tensor '" + name + "'";
    if (name.empty()) return invalid_argument("a checkpoint tensor has an empty name");
    if (name.size() > kMaxNameBytes)
      return invalid_argument(what.substr(0, 80) + "...': name longer than " + std::to_string(kMaxNameBytes) + " bytes");
    if (!t.defined()) return invalid_argument(what + " is undefined (no dtype)");
    if (t.dtype() == DType::kString) return invalid_argument(what + ": string tensors cannot be checkpointed");
    if (t.nbytes() > 0 && !t.raw()) return invalid_argument(what + " has no data");
  }
  return Status::ok();
}

// Writes the whole file to `f`; returns 0 or the errno of the first failed write.
int write_body(FILE* f, const Checkpoint& c) {
  uint64_t index_size = 0;
  for (const auto& [name, t] : c.tensors) index_size += 4 + name.size() + 4 + 4 + 8 * t.dims().size() + 8 + 8;
  uint64_t offset = align_up(kCkptHeaderSize + c.meta_json.size() + index_size);
  std::vector<Entry> entries;
  for (const auto& [name, t] : c.tensors) {
    entries.push_back({&name, &t, offset});
    offset = align_up(offset + static_cast<uint64_t>(t.nbytes()));
  }
  CkptHeader h{};
  std::memcpy(h.magic, kCkptMagic, sizeof h.magic);
  h.version = kCkptVersion;
  h.header_size = kCkptHeaderSize;
  h.file_size = offset;
  h.checksum = 0;
  h.step = c.step;
  h.tensor_count = entries.size();
  h.meta_size = c.meta_json.size();
  h.index_size = index_size;
  HashedWriter w(f);
  w.put(&h, sizeof h);
  w.put(c.meta_json.data(), c.meta_json.size());
  for (const Entry& e : entries) {
    w.put_value(static_cast<uint32_t>(e.name->size()));
    w.put(e.name->data(), e.name->size());
    w.put_value(static_cast<uint32_t>(e.tensor->dtype()));
    w.put_value(static_cast<uint32_t>(e.tensor->rank()));
    for (int64_t d : e.tensor->dims()) w.put_value(d);
    w.put_value(e.offset);
    w.put_value(static_cast<uint64_t>(e.tensor->nbytes()));
  }
  for (const Entry& e : entries) {
    w.pad_to(e.offset);
    w.put(e.tensor->raw(), static_cast<size_t>(e.tensor->nbytes()));
  }
  w.pad_to(offset);
  if (w.error()) return w.error();
  const uint64_t sum = w.digest();
  if (std::fflush(f) != 0 || std::fseek(f, static_cast<long>(kChecksumAt), SEEK_SET) != 0 ||
      std::fwrite(&sum, sizeof sum, 1, f) != 1 || std::fflush(f) != 0)
    return errno ? errno : EIO;
  return 0;
}

}  // namespace

std::string checkpoint_file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%08lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  return buf;
}

Status write_checkpoint(const std::string& dir_in, const Checkpoint& c, int keep_last) {
  RETURN_IF_ERROR(check_for_writing(c));
  const std::string dir = dir_in.empty() ? "." : dir_in;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return invalid_argument("cannot create checkpoint folder '" + dir + "': " + std::strerror(errno));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return invalid_argument("checkpoint folder '" + dir + "' is not a folder");
  const std::string final_path = dir + "/" + checkpoint_file_name(c.step);
  const std::string tmp_path = dir + "/." + checkpoint_file_name(c.step) + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return invalid_argument("cannot create '" + tmp_path + "' to write checkpoint step " + std::to_string(c.step) +
                            ": " + std::strerror(errno));
  FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    ::unlink(tmp_path.c_str());
    return internal_error("fdopen failed for '" + tmp_path + "'");
  }
  int err = write_body(f, c);
  if (!err && ::fsync(::fileno(f)) != 0) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno ? errno : EIO;
  if (!err && ::rename(tmp_path.c_str(), final_path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp_path.c_str());
    return resource_exhausted("writing checkpoint '" + final_path + "' failed: " + errno_text(err) +
                              "; the previous checkpoints are unchanged");
  }
  RETURN_IF_ERROR(fsync_dir(dir));
  if (keep_last > 0) {
    ASSIGN_OR_RETURN(auto files, list_checkpoints(dir));
    const size_t keep = static_cast<size_t>(keep_last);
    for (size_t i = 0; i + keep < files.size(); ++i)
      if (files[i].second != final_path) ::unlink(files[i].second.c_str());
  }
  return Status::ok();
}

namespace {

// parse_checkpoint; `done(p, n)` is told of bytes it will not need resident again: each piece of
// the file once checksummed, then of each tensor once copied (read_checkpoint_file drops those
// pages of its mapping, so a resume holds the file's tensors once, copied, not mapped beside them).
constexpr size_t kPiece = size_t(8) << 20;  // what parse_checkpoint_releasing lets go at a time

StatusOr<Checkpoint> parse_checkpoint_releasing(const uint8_t* data, size_t size, const std::string& what,
                                                const std::function<void(const uint8_t*, size_t)>& done) {
  if (size < sizeof kCkptMagic || std::memcmp(data, kCkptMagic, sizeof kCkptMagic) != 0)
    return invalid_model(what + ": not a ferry checkpoint (no 'FERRYCKP' magic)");
  if (size < kCkptHeaderSize)
    return invalid_model(what + ": truncated: " + std::to_string(size) + " bytes, shorter than the 64-byte header");
  CkptHeader h;
  std::memcpy(&h, data, sizeof h);
  if (h.version != kCkptVersion)
    return invalid_model(what + ": checkpoint format version " + std::to_string(h.version) +
                         ", this ferry reads version " + std::to_string(kCkptVersion));
  if (h.header_size != kCkptHeaderSize)
    return invalid_model(what + ": header size " + std::to_string(h.header_size) + ", expected 64 (the file is corrupted)");
  if (h.file_size != size)
    return invalid_model(what + (size < h.file_size ? ": truncated: " : ": wrong size: ") + std::to_string(size) +
                         " bytes, the header says " + std::to_string(h.file_size) +
                         " (an interrupted copy? use an older checkpoint)");
  // ferry_checksum_zeroed_field's XXH3 in 8 MiB pieces, each let go once hashed: a large
  // checkpoint is never resident whole for its checksum.
  XXH3_state_t state;
  const uint64_t zero = 0;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, data, kChecksumAt);
  XXH3_64bits_update(&state, &zero, sizeof zero);
  for (size_t at = kChecksumAt + sizeof zero; at < size; at += kPiece) {
    const size_t n = std::min(kPiece, size - at);
    XXH3_64bits_update(&state, data + at, n);
    done(data + at, n);
  }
  if (XXH3_64bits_digest(&state) != h.checksum)
    return invalid_model(what + ": checksum mismatch (the file is corrupted); use an older checkpoint");
  if (h.step < 0) return invalid_model(what + ": negative step " + std::to_string(h.step));
  const uint64_t body = size - kCkptHeaderSize;
  if (h.meta_size > body || h.index_size > body - h.meta_size)
    return invalid_model(what + ": metadata (" + std::to_string(h.meta_size) + " bytes) and index (" +
                         std::to_string(h.index_size) + " bytes) run past the end of the file");
  if (h.tensor_count > h.index_size / kMinEntryBytes)
    return invalid_model(what + ": " + std::to_string(h.tensor_count) + " tensors cannot fit in a " +
                         std::to_string(h.index_size) + "-byte index");
  const uint64_t data_start = kCkptHeaderSize + h.meta_size + h.index_size;
  Checkpoint c;
  c.step = h.step;
  c.meta_json.assign(reinterpret_cast<const char*>(data) + kCkptHeaderSize, h.meta_size);
  Cursor cur{data + kCkptHeaderSize + h.meta_size, h.index_size};
  uint64_t prev_end = data_start;
  for (uint64_t i = 0; i < h.tensor_count; ++i) {
    const std::string where = what + ": tensor " + std::to_string(i);
    uint32_t name_len = 0, dtype_raw = 0, rank = 0;
    if (!cur.get(&name_len) || name_len == 0 || name_len > kMaxNameBytes || name_len > cur.left)
      return invalid_model(where + ": bad name length " + std::to_string(name_len) + " (the index is corrupted)");
    std::string name(reinterpret_cast<const char*>(cur.p), name_len);
    cur.p += name_len;
    cur.left -= name_len;
    const std::string tw = what + ": tensor '" + name + "'";
    DType dtype;
    if (!cur.get(&dtype_raw) || !dtype_from_onnx(static_cast<int32_t>(dtype_raw), &dtype) || dtype == DType::kString)
      return invalid_model(tw + ": unknown element type " + std::to_string(dtype_raw));
    if (!cur.get(&rank) || rank > kMaxRank)
      return invalid_model(tw + ": rank " + std::to_string(rank) + " over the limit of " + std::to_string(kMaxRank));
    std::vector<int64_t> dims(rank);
    for (uint32_t k = 0; k < rank; ++k)
      if (!cur.get(&dims[k])) return invalid_model(tw + ": the index ends inside its dims");
    ASSIGN_OR_RETURN(int64_t n, checked_element_count(dims, tw));
    uint64_t offset = 0, nbytes = 0;
    if (!cur.get(&offset) || !cur.get(&nbytes)) return invalid_model(tw + ": the index ends inside its entry");
    if (nbytes != static_cast<uint64_t>(n * dtype_size(dtype)))
      return invalid_model(tw + ": " + std::to_string(nbytes) + " bytes stored, shape " + dims_to_string(dims) + " of " +
                           dtype_name(dtype) + " needs " + std::to_string(n * dtype_size(dtype)));
    if (offset % kCkptAlign != 0 || offset < prev_end || offset > size || nbytes > size - offset)
      return invalid_model(tw + ": data [" + std::to_string(offset) + ", +" + std::to_string(nbytes) +
                           ") is misaligned, overlaps another tensor or runs past the end of the file");
    prev_end = offset + nbytes;
    if (c.tensors.count(name)) return invalid_model(tw + " is stored twice");
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(dtype, dims, tw));
    for (uint64_t at = 0; at < nbytes; at += kPiece) {  // in pieces: the file's pages go as the copy grows
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, nbytes - at));
      std::memcpy(static_cast<uint8_t*>(t.mutable_raw()) + at, data + offset + at, n);
      done(data + offset + at, n);
    }
    if (dtype == DType::kBool)  // only 0 and 1 are valid bools
      for (int64_t k = 0; k < n; ++k) t.mutable_data<uint8_t>()[k] = t.data<uint8_t>()[k] != 0;
    c.tensors.emplace(std::move(name), std::move(t));
  }
  if (cur.left != 0)
    return invalid_model(what + ": " + std::to_string(cur.left) + " unexpected bytes at the end of the tensor index");
  return c;
}

}  // namespace

StatusOr<Checkpoint> parse_checkpoint(const uint8_t* data, size_t size, const std::string& what) {
  return parse_checkpoint_releasing(data, size, what, [](const uint8_t*, size_t) {});
}

StatusOr<std::string> latest_checkpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(auto files, list_checkpoints(dir));
  if (files.empty()) return not_found("no checkpoint (ckpt-<step>.fckpt) in '" + dir + "'");
  return files.back().second;
}

namespace {
StatusOr<Checkpoint> read_checkpoint_file(const std::string& path) {
  ASSIGN_OR_RETURN(FileBytes f, map_file(path, INT64_MAX, "checkpoint"));
  ASSIGN_OR_RETURN(Checkpoint c, parse_checkpoint_releasing(f.data, f.size, "checkpoint '" + path + "'",
                                                            [&f](const uint8_t* p, size_t n) { drop_mapped_pages(f, p, n); }));
  c.path = path;
  return c;
}
}  // namespace

StatusOr<Checkpoint> read_checkpoint(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found("checkpoint '" + path + "' does not exist");
    const int e = errno;
    return invalid_argument("checkpoint '" + path + "' cannot be read: " + std::strerror(e) +
                            (e == EACCES ? " (check its permissions)" : ""));
  }
  if (!S_ISDIR(st.st_mode)) return read_checkpoint_file(path);
  ASSIGN_OR_RETURN(auto files, list_checkpoints(path));
  if (files.empty()) return not_found("no checkpoint (ckpt-<step>.fckpt) in '" + path + "'");
  std::string skipped;
  for (size_t i = files.size(); i-- > 0;) {
    auto c = read_checkpoint_file(files[i].second);
    if (c.is_ok()) {
      Checkpoint out = std::move(c).value();
      if (!skipped.empty()) out.warning = "skipped newer checkpoint(s): " + skipped + "; resumed from '" + out.path + "'";
      return out;
    }
    skipped += (skipped.empty() ? "" : "; ") + c.status().message();
  }
  return invalid_model("no readable checkpoint in '" + path + "': " + skipped);
}

}  // namespace ferry
