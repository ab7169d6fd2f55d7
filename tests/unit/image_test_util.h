// Image test fixtures shared by test_image.cpp and test_train_data.cpp: image files of every
// kind and PIL / torchvision references, made once per process by tests/unit/image_fixtures.py.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::testing {

/// The fixture folder, or "" (with `reason`) when python3 with PIL and torchvision is missing.
inline const std::string& image_fixture_dir(std::string* reason = nullptr) {
  static std::once_flag once;
  static std::string dir, why;
  std::call_once(once, []() {
    namespace fs = std::filesystem;
    std::string d = (fs::path(::testing::TempDir()) / ("ferry_image_fixtures_" + std::to_string(::getpid()))).string();
    fs::remove_all(d);
    fs::create_directories(d);
    std::string cmd = "/usr/bin/python3 " FERRY_SOURCE_DIR "/tests/unit/image_fixtures.py '" + d + "' > '" + d +
                      "/log.txt' 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(d + "/log.txt");
      why = "image fixtures not generated (needs /usr/bin/python3 with PIL, torch, torchvision): " +
            std::string(std::istreambuf_iterator<char>(log), {});
      fs::remove_all(d);
      return;
    }
    dir = d;
    // Removed when the test binary exits.
    static struct Cleanup {
      std::string d;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    } cleanup{d};
  });
  if (reason != nullptr) *reason = why;
  return dir;
}

#define FERRY_REQUIRE_IMAGE_FIXTURES(dir_var)                                  \
  std::string _fixture_reason;                                                 \
  const std::string dir_var = ::ferry::testing::image_fixture_dir(&_fixture_reason); \
  if (dir_var.empty()) GTEST_SKIP() << _fixture_reason

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// A per-test scratch folder, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    path_ = (std::filesystem::path(::testing::TempDir()) /
             ("ferry_img_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ferry::testing
