// Op family 'control' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_control_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
