// The forms kernels share across the executors of one model; see shared_forms.h.
#include "backends/shared_forms.h"

#include <cstdio>

namespace ferry {
namespace {
thread_local std::shared_ptr<SharedWeightForms> t_forms;
}  // namespace

std::shared_ptr<SharedWeightForms> current_shared_forms() { return t_forms; }

ScopedSharedForms::ScopedSharedForms(std::shared_ptr<SharedWeightForms> forms) : saved_(std::move(t_forms)) {
  t_forms = std::move(forms);
}
ScopedSharedForms::~ScopedSharedForms() { t_forms = std::move(saved_); }

std::string weight_form_key(const char* kind, const void* initializer, const std::string& detail) {
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", initializer);
  std::string key = std::string(kind) + "|" + addr;
  if (!detail.empty()) key += "|" + detail;
  return key;
}

}  // namespace ferry
