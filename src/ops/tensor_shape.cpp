// Op family 'tensor_shape' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_tensor_shape_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
