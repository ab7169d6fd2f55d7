#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <vector>

namespace ferry {

namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

Status open_error(const std::string& path, int err) {
  if (err == ENOENT) return not_found("cannot open '" + path + "': no such file; check the path");
  return invalid_argument("cannot open '" + path + "': " + errno_text(err));
}

// Reads everything from `fd` (used for pipes and other files that cannot be mapped).
StatusOr<FileBytes> read_all(int fd, const std::string& path) {
  auto buf = std::make_shared<std::vector<uint8_t>>();
  size_t used = 0;
  for (;;) {
    if (buf->size() - used < (1u << 16)) buf->resize(buf->size() + std::max<size_t>(buf->size(), 1u << 16));
    ssize_t n = ::read(fd, buf->data() + used, buf->size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return invalid_argument("cannot read '" + path + "': " + errno_text(errno));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  buf->resize(used);
  FileBytes fb;
  fb.data = buf->data();
  fb.size = used;
  fb.writable = true;
  fb.owner = std::shared_ptr<const void>(buf, buf.get());
  return fb;
}

}  // namespace

StatusOr<FileBytes> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_error(path, errno);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};

  struct stat st;
  if (::fstat(fd, &st) != 0) return invalid_argument("cannot stat '" + path + "': " + errno_text(errno));
  if (S_ISDIR(st.st_mode)) return invalid_argument("'" + path + "' is a folder, not a file");
  if (!S_ISREG(st.st_mode)) return read_all(fd, path);

  FileBytes fb;
  if (st.st_size == 0) {
    static const uint8_t kEmpty[1] = {0};
    fb.data = kEmpty;
    return fb;
  }
  size_t size = static_cast<size_t>(st.st_size);
  // Private writable mapping: copy-on-write, so tensors that view it may be modified safely.
  bool writable = true;
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) {
    writable = false;  // e.g. strict overcommit refuses to reserve the copy-on-write space
    addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  if (addr == MAP_FAILED) return read_all(fd, path);
  // Every byte is read next (checksums, parsing): map the cached pages in one call rather than
  // one fault per 64 KiB (Linux 5.14+; older kernels refuse it and fault as before).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
  (void)::madvise(addr, size, MADV_POPULATE_READ);
  fb.owner = std::shared_ptr<const void>(addr, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  fb.data = static_cast<const uint8_t*>(addr);
  fb.size = size;
  fb.writable = writable;
  fb.mapped = true;
  return fb;
}

// ---------------------------------------------------------------------------------------------
// AtomicFileWriter

namespace {
constexpr size_t kWriteBufferSize = 1 << 16;
std::atomic<uint64_t> g_tmp_counter{0};
}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, std::string tmp_path, int fd)
    : path_(std::move(path)), tmp_path_(std::move(tmp_path)), fd_(fd) {
  buffer_.reserve(kWriteBufferSize);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::create(const std::string& path) {
  if (path.empty()) return invalid_argument("cannot write a file with an empty path");
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return invalid_argument("cannot write '" + path + "': the path names a folder, not a file");
  int last_err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string tmp = dir + "." + base + ".tmp." + std::to_string(::getpid()) + "." +
                      std::to_string(g_tmp_counter.fetch_add(1));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, tmp, fd));
    last_err = errno;
    if (last_err != EEXIST) break;
  }
  return invalid_argument("cannot create '" + path + "': " + errno_text(last_err) +
                          "; check that the folder exists and is writable");
}

Status AtomicFileWriter::io_error(const std::string& action, int err) const {
  return invalid_argument("cannot " + action + " '" + path_ + "' (temporary file '" + tmp_path_ + "'): " +
                          errno_text(err) + "; check free disk space and permissions");
}

Status AtomicFileWriter::write_fd(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

Status AtomicFileWriter::flush_buffer() {
  if (buffer_.empty()) return Status::ok();
  Status st = write_fd(buffer_.data(), buffer_.size());
  buffer_.clear();
  return st;
}

Status AtomicFileWriter::write(const void* data, size_t n) {
  if (fd_ < 0) return internal_error("AtomicFileWriter::write after commit for '" + path_ + "'");
  if (n == 0) return Status::ok();
  size_ += n;
  if (buffer_.size() + n <= kWriteBufferSize) {
    buffer_.append(static_cast<const char*>(data), n);
    return Status::ok();
  }
  RETURN_IF_ERROR(flush_buffer());
  if (n < kWriteBufferSize) {
    buffer_.append(static_cast<const char*>(data), n);
    return Status::ok();
  }
  return write_fd(data, n);
}

Status AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t n) {
  if (fd_ < 0) return internal_error("AtomicFileWriter::write_at after commit for '" + path_ + "'");
  if (offset > size_ || n > size_ - offset)
    return internal_error("AtomicFileWriter::write_at past the end of '" + path_ + "'");
  RETURN_IF_ERROR(flush_buffer());
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::ok();
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return internal_error("AtomicFileWriter::commit called twice for '" + path_ + "'");
  RETURN_IF_ERROR(flush_buffer());
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) return io_error("sync", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return io_error("close", errno);
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    return invalid_argument("cannot rename '" + tmp_path_ + "' to '" + path_ + "': " + errno_text(err) +
                            (err == EISDIR ? "; the destination is a folder" : ""));
  }
  committed_ = true;
  return Status::ok();
}

// The read-only, size-limited form (model files, external data, checkpoints).
void drop_mapped_pages(const FileBytes& f, const uint8_t* begin, size_t length) {
  if (f.mapped) drop_pages(begin, length);
}

void drop_pages(const uint8_t* begin, size_t length) {
  if (length == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(begin) + length) / page * page;
  if (e > b) (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

StatusOr<OpenedFile> open_regular_file(const std::string& path, int64_t max_bytes, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return not_found(what + " '" + path + "' does not exist");
    return invalid_argument(what + " '" + path + "' cannot be opened: " + std::strerror(e));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(what + " '" + path + "' is not a regular file");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return resource_exhausted(what + " '" + path + "' is " + std::to_string(st.st_size) +
                              " bytes, over the limit of " + std::to_string(max_bytes) + " bytes");
  }
  return OpenedFile{fd, static_cast<int64_t>(st.st_size)};
}

StatusOr<FileBytes> map_file(const std::string& path, int64_t max_bytes, const std::string& what) {
  ASSIGN_OR_RETURN(const OpenedFile opened, open_regular_file(path, max_bytes, what));
  const int fd = opened.fd;
  FileBytes f;
  f.size = static_cast<size_t>(opened.size);
  if (f.size == 0) {
    ::close(fd);
    static const uint8_t kEmpty = 0;
    f.data = &kEmpty;
    return f;
  }
  void* p = ::mmap(nullptr, f.size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return invalid_argument(what + " '" + path + "' cannot be mapped: " + std::strerror(errno));
  const size_t size = f.size;
  f.data = static_cast<const uint8_t*>(p);
  f.mapped = true;
  f.owner = std::shared_ptr<const void>(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return f;
}

StatusOr<std::string> resolve_inside(const std::string& base_dir, const std::string& relative,
                                     const std::string& what) {
  if (relative.empty()) return invalid_model(what + ": empty file location");
  if (relative[0] == '/' || relative[0] == '\\')
    return invalid_model(what + ": location '" + relative + "' is an absolute path; external data must be a "
                         "file inside the model's folder");
  if (relative.find('\0') != std::string::npos) return invalid_model(what + ": location contains a NUL byte");
  // Refuse any ".." component (with / or \ separators).
  size_t start = 0;
  while (start <= relative.size()) {
    size_t end = relative.find_first_of("/\\", start);
    if (end == std::string::npos) end = relative.size();
    if (relative.compare(start, end - start, "..") == 0)
      return invalid_model(what + ": location '" + relative + "' contains '..'; external data must be a file "
                           "inside the model's folder");
    start = end + 1;
  }
  char base_real[PATH_MAX];
  if (!::realpath(base_dir.empty() ? "." : base_dir.c_str(), base_real))
    return invalid_argument(what + ": model folder '" + base_dir + "' cannot be resolved");
  std::string joined = std::string(base_real) + "/" + relative;
  char real[PATH_MAX];
  if (!::realpath(joined.c_str(), real))
    return not_found(what + ": external data file '" + relative + "' not found next to the model (looked for '" +
                     joined + "')");
  std::string base_s(base_real);
  std::string real_s(real);
  if (real_s.compare(0, base_s.size(), base_s) != 0 || (real_s.size() > base_s.size() && real_s[base_s.size()] != '/' && base_s != "/"))
    return invalid_model(what + ": location '" + relative + "' resolves to '" + real_s +
                         "', outside the model's folder (a symbolic link?); refused");
  struct stat st;
  if (::stat(real, &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_model(what + ": external data '" + relative + "' is not a regular file");
  return real_s;
}

std::string dir_name(const std::string& path) {
  size_t p = path.find_last_of('/');
  if (p == std::string::npos) return ".";
  if (p == 0) return "/";
  return path.substr(0, p);
}

}  // namespace ferry
