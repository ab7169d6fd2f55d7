// Op family 'nn' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_nn_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
