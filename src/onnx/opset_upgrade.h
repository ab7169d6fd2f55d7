// Old ai.onnx opsets (1-6) are upgraded at import with libonnx's version converter, so the op
// registry needs only the opset-7+ forms of the classic layers.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "onnx/onnx_pb.h"

namespace ferry {

/// The ai.onnx opset an older model is upgraded to: the first where the classic layers take
/// numpy broadcasting (Add/Gemm/PRelu 7, Sum/Max/Min/Mean 8) and lose consumed_inputs/is_test.
constexpr int64_t kUpgradeTargetOpset = 8;

/// Upgrades `mp` in place from ai.onnx opset `from` (< kUpgradeTargetOpset) to
/// kUpgradeTargetOpset. A failure names the node and op the converter could not take (when
/// `name_failing_node`: it converts nodes one by one). `what` names the model in messages.
Status upgrade_opset(onnx::ModelProto* mp, int64_t from, const std::string& what, bool name_failing_node = true);

}  // namespace ferry
