#include "io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace ferry {

StatusOr<MappedFile> map_file(const std::string& path, int64_t max_bytes, const std::string& what) {
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
  MappedFile f;
  f.size = static_cast<size_t>(st.st_size);
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
