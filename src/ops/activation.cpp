// Op family 'activation' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_activation_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
