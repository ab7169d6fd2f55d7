// Op family 'reduce' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_reduce_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
