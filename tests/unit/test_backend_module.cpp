// Backend modules (src/backends/backend_module.h): listed without being loaded, and a module that
// cannot be found or opened is a clear error naming the file, where it was looked for and what to do.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/backend.h"
#include "backends/backend_module.h"

namespace ferry {
namespace {

TEST(BackendModule, MissingModuleIsAClearError) {
  BackendEntry e{"npu-test", "a module that is not there", nullptr, nullptr, "libferry_backend_npu_test.so"};
  auto api = load_backend_module(e);
  ASSERT_FALSE(api.is_ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(api.status().message().find("libferry_backend_npu_test.so was not found"), std::string::npos)
      << api.status().message();
  EXPECT_NE(api.status().message().find("FERRY_BACKEND_PATH"), std::string::npos) << api.status().message();
  EXPECT_FALSE(backend_module_loaded(e));
}

TEST(BackendModule, FileThatIsNoLibraryIsAClearError) {
  const std::string dir = ::testing::TempDir() + "ferry_backend_module_test";
  ASSERT_EQ(std::system(("mkdir -p '" + dir + "'").c_str()), 0);
  std::ofstream(dir + "/libferry_backend_bogus.so") << "not an ELF file";
  const char* before = std::getenv("FERRY_BACKEND_PATH");
  const std::string saved = before ? before : "";
  ASSERT_EQ(setenv("FERRY_BACKEND_PATH", ("/nonexistent:" + dir).c_str(), 1), 0);
  BackendEntry e{"bogus", "a module that is no library", nullptr, nullptr, "libferry_backend_bogus.so"};
  auto api = load_backend_module(e);
  if (before) setenv("FERRY_BACKEND_PATH", saved.c_str(), 1);
  else unsetenv("FERRY_BACKEND_PATH");
  ASSERT_FALSE(api.is_ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(api.status().message().find("could not be loaded"), std::string::npos) << api.status().message();
  EXPECT_NE(api.status().message().find(dir + "/libferry_backend_bogus.so"), std::string::npos)
      << api.status().message();
}

TEST(BackendModule, BuiltInDevicesAreNoModules) {
  for (const BackendEntry& e : backend_entries()) {
    const std::string name = e.name;
    if (name == "cpu" || name == "cpu-ref") {
      EXPECT_EQ(e.module, nullptr) << name;
      EXPECT_NE(e.factory, nullptr) << name;
    } else {
      EXPECT_NE(e.module, nullptr) << name;  // every other device is a module, loaded on demand
    }
  }
}

}  // namespace
}  // namespace ferry
