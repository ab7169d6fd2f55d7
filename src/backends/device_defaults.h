// What a --device value is without opening a device: whether it runs on the host CPU, the
// --opt-level it runs at when none is given and whether its batches may be split. The layers above ask here instead of naming devices.
#pragma once

#include <string>

namespace ferry {

/// Whether `device` runs on the host CPU, on host memory ("cpu", "cpu-ref"): no copies between it
/// and another host backend, and a graph compiled for one runs on the other.
bool is_host_device(const std::string& device);

/// The --opt-level `device` runs at when none is given: 0 on "cpu-ref" (the reference backend, the
/// oracle, runs graphs as imported), 2 on any other.
int default_opt_level(const std::string& device);

/// Whether the executor may run `device`'s batches as cache-sized parts (runtime/batch_split.h):
/// a host device's but "cpu-ref"'s (the oracle runs a batch whole).
bool splits_batches(const std::string& device);

/// Whether the host CPU's int8 products (oneDNN's and ONNX Runtime's u8 x s8 vpmaddubsw, no VNNI) add
/// pairs in int16 with saturation, so that weights in [-64, 64] ("reduce range", 7 bits) run at full
/// speed exactly where 8-bit weights need a split (docs/quantization.md). Read once.
bool host_int8_pairs_saturate();

}  // namespace ferry
