// Op family 'resize' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_resize_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
