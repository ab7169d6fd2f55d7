// The entry point of libferry_backend_cuda.so (src/backends/backend_module.h): ferry dlopens the
// module when a cuda device is asked for and opens the device through it.
#include "backends/backend_module.h"

namespace ferry {
StatusOr<std::unique_ptr<Backend>> open_cuda_backend(const std::string& device);
}  // namespace ferry

FERRY_DEFINE_BACKEND_MODULE(::ferry::open_cuda_backend)
