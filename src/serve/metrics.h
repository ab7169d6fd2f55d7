// Prometheus text exposition of the served models' counters (GET :8002/metrics): per model and
// version, Triton's families under the ferry_ prefix, a latency histogram (buckets aggregate
// across replicas, summaries do not), and the process's CPU time, memory and descriptors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "serve/served_model.h"

namespace ferry::serve {

std::string prometheus_text(const std::vector<std::shared_ptr<ServedModel>>& models);

}  // namespace ferry::serve
