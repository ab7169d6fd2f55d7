// The ferry executable's OpenMP defaults, in place before any library initializes.
//
// oneDNN (and the cpu backend's own kernels) run on libgomp, which reads its settings from the
// environment once, when it is loaded. How idle worker threads wait between parallel regions
// decides two things on this kind of machine (2 cores, shared):
//   - blocking at once (OMP_WAIT_POLICY=PASSIVE) costs a futex wake-up per region, 20-70 us here:
//     UNet b1 on 2 threads ran no faster than on 1 (4.48 vs 4.57 ms; 3.60 ms with a short spin);
//   - spinning while another process needs the core starves it: `ferry bench mobilenet_v2 -t 2`
//     with the cores shared measured p50 127-143 ms with libgomp's long default spin vs 4.2 ms
//     passive.
// So ferry picks at start-up: idle threads spin briefly (GOMP_SPINCOUNT=10000: 10000 pause
// instructions, 240 us on the AMD EPYC Zen 3 host) before they block, unless other runnable tasks
// already fill every core it may use (the running count in /proc/loadavg against the affinity
// mask): then they block at once (OMP_WAIT_POLICY=PASSIVE). The choice holds for the process's
// life: load that comes after start-up meets spinning threads (docs/performance.md, "Sharing the
// cores with other processes": at load 9-12, MobileNetV2 int8 at 2 threads ran 6x, ResNet-50 1.4-2x
// the blocking policy's time).
// (The first version spun only when no other task was running at all; one snapshot of that count
// often showed a transient task, and a side-by-side run then measured MobileNetV2 b1 on 2 threads
// at 3.63 ms passive against ORT's 2.37 ms spinning.) A user's own
// OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins; FERRY_OMP_DEFAULTS=0 leaves libgomp's defaults.
//
// The environment must hold the setting when libgomp's constructor runs, and a setenv() this early
// does not survive libc's own start-up, so the hook re-executes the program once with the variable
// added (a few milliseconds). .preinit_array functions run before any shared library's
// constructors; only executables may have them, which is why this file lives with the CLI. Only
// system calls and plain string code run here.
#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

namespace {

// Runnable tasks on the machine now, this process included (the 4th field of /proc/loadavg,
// "running/total"); -1 when unreadable.
int running_tasks() {
  const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* p = buf;
  for (int field = 0; field < 3; ++field) {  // skip the three load averages
    while (*p && *p != ' ') ++p;
    while (*p == ' ') ++p;
  }
  int v = 0;
  bool any = false;
  for (; *p >= '0' && *p <= '9'; ++p, any = true) v = v * 10 + (*p - '0');
  return any && *p == '/' ? v : -1;
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  return CPU_COUNT(&set);
}

void set_openmp_defaults(int, char** argv, char** envp) {
  constexpr int kMaxEnv = 4096;
  static char* env[kMaxEnv + 2];
  static char passive[] = "OMP_WAIT_POLICY=PASSIVE";
  static char short_spin[] = "GOMP_SPINCOUNT=10000";
  int n = 0;
  for (; envp && envp[n]; ++n) {
    if (n >= kMaxEnv || std::strncmp(envp[n], "OMP_WAIT_POLICY=", 16) == 0 ||
        std::strncmp(envp[n], "GOMP_SPINCOUNT=", 15) == 0 || std::strcmp(envp[n], "FERRY_OMP_DEFAULTS=0") == 0)
      return;  // the user's choice
    env[n] = envp[n];
  }
  // The fewest running tasks over ten samples 1 ms apart: a process that is only starting or
  // exiting (a pipeline's other end, the previous benchmark's engine) drops out; work that keeps
  // the cores busy stays in every sample.
  const int cpus = usable_cpus();
  int running = running_tasks();
  for (int i = 1; i < 10 && running > 1; ++i) {
    const struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
    const int r = running_tasks();
    if (r >= 1 && r < running) running = r;
  }
  // Other runnable tasks that would take every core: block at once (measured with two busy
  // processes on the 2 cores: MobileNetV2 -t 2 p50 5.1-5.7 ms passive, 6.7-35 ms with the short
  // spin). Anything less keeps the short spin.
  const bool crowded = running < 1 || cpus < 2 || running - 1 >= cpus;
  env[n] = crowded ? passive : short_spin;
  env[n + 1] = nullptr;
  execve("/proc/self/exe", argv, env);  // returns only on failure: run on with libgomp's defaults
}

__attribute__((section(".preinit_array"), used)) void (*const kSetOpenmpDefaults)(int, char**, char**) =
    set_openmp_defaults;

}  // namespace
