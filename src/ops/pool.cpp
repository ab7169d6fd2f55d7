// Op family 'pool' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_pool_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
