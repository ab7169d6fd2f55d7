// Versions of the libraries the built-in backends' kernels run on (for `ferry doctor`): the
// backends name them, so no layer above includes those libraries' headers (ARCHITECTURE.md:
// external DNNL::dnnl).
#pragma once

#include <string>

namespace ferry {

/// "3.0.0 (<commit hash>)": the oneDNN library the cpu backend runs on, as it reports itself.
std::string onednn_version();

}  // namespace ferry
