// Op family 'tensor_index' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_tensor_index_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
