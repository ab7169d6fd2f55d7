// Op family 'normalization' (see op_families.inc).
#include "ops/op_util.h"

namespace ferry {

void register_normalization_ops(OpRegistry& r) { (void)r; }

}  // namespace ferry
