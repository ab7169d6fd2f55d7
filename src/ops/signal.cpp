#include "ops/op_util.h"

namespace ferry {
void register_signal_ops(OpRegistry&) {}
}  // namespace ferry
