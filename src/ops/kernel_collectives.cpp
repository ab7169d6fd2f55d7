// The calling thread's kernel collectives (see kernel_collectives.h).
#include "ops/kernel_collectives.h"

namespace ferry {
namespace {
thread_local KernelCollectives* tls_collectives = nullptr;
}  // namespace

KernelCollectives* kernel_collectives() { return tls_collectives; }

ScopedKernelCollectives::ScopedKernelCollectives(KernelCollectives* c) : previous_(tls_collectives) { tls_collectives = c; }
ScopedKernelCollectives::~ScopedKernelCollectives() { tls_collectives = previous_; }

}  // namespace ferry
