// The ferry executable's OpenMP defaults, in place before any library initializes.
//
// oneDNN (and the cpu backend's own kernels) run on libgomp, which reads its settings from the
// environment once, when it is loaded. Its default wait policy spins between parallel regions; on
// a machine where other processes compete for the cores, a spinning thread burns the quantum its
// descheduled partner needs, and 2-thread runs become 10-100x slower (measured with
// `ferry bench mobilenet_v2 -t 2`, 2 cores shared with other work: p50 127-143 ms spinning vs 4.2 ms
// passive). ferry therefore runs with OMP_WAIT_POLICY=PASSIVE unless the user set OMP_WAIT_POLICY.
//
// The environment must hold the setting when libgomp's constructor runs, and a setenv() this early
// does not survive libc's own start-up, so the hook re-executes the program once with the variable
// added (a few milliseconds). .preinit_array functions run before any shared library's
// constructors; only executables may have them, which is why this file lives with the CLI.
#include <unistd.h>

#include <cstring>

namespace {

void set_openmp_defaults(int, char** argv, char** envp) {
  constexpr int kMaxEnv = 4096;
  static char* env[kMaxEnv + 2];
  static char policy[] = "OMP_WAIT_POLICY=PASSIVE";
  int n = 0;
  for (; envp && envp[n]; ++n) {
    if (std::strncmp(envp[n], "OMP_WAIT_POLICY=", 16) == 0 || n >= kMaxEnv) return;  // the user's choice
    env[n] = envp[n];
  }
  env[n] = policy;
  env[n + 1] = nullptr;
  execve("/proc/self/exe", argv, env);  // returns only on failure: run on with libgomp's defaults
}

__attribute__((section(".preinit_array"), used)) void (*const kSetOpenmpDefaults)(int, char**, char**) =
    set_openmp_defaults;

}  // namespace
