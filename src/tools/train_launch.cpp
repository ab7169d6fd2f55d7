// The `ferry train --nproc N` launcher (see train_launch.h).
#include "tools/train_launch.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/env_switch.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> own_arguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  return args;
}

// The worker's command line: ours without --nproc and --threads (given anew, divided).
std::vector<std::string> worker_arguments(const std::vector<std::string>& args, int threads) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--nproc" || a == "--threads") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0 || a.rfind("--threads=", 0) == 0) continue;
    out.push_back(a);
  }
  out.push_back("--threads");
  out.push_back(std::to_string(threads));
  return out;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int launch_train_workers(int nproc, int threads) {
  if (env_value("RANK") || env_value("WORLD_SIZE")) {
    std::fprintf(stderr, "ferry: error: --nproc starts its own ranks on this machine, but RANK/WORLD_SIZE are set: "
                         "drop --nproc to run one rank of that job, or unset them\n");
    return 2;
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int per_rank = std::max(1, threads / nproc);
  const std::vector<std::string> args = worker_arguments(own_arguments(), per_rank);
  const std::string port = std::to_string(free_port());
  const pid_t launcher = ::getpid();
  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "ferry: error: cannot start rank %d: %s\n", r, std::strerror(errno));
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a worker never outlives its launcher
      if (::getppid() != launcher) ::_exit(1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", std::to_string(per_rank).c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "ferry: error: rank %d: cannot execute /proc/self/exe: %s\n", r, std::strerror(errno));
      ::_exit(1);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  int running = nproc, failed_rank = -1, failed_status = 0;
  Clock::time_point failed_at;
  bool terminated = false, killed = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, failed_rank >= 0 ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {  // after a failure: let the survivors report the loss themselves, then stop them
      const double since = std::chrono::duration<double>(Clock::now() - failed_at).count();
      const int sig = since > 8 ? SIGKILL : since > 3 ? SIGTERM : 0;
      if (sig && !(sig == SIGTERM ? terminated : killed)) {
        for (pid_t p : pids)
          if (p > 0) ::kill(p, sig);
        (sig == SIGTERM ? terminated : killed) = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    int rank = -1;
    for (int r = 0; r < nproc; ++r)
      if (pids[static_cast<size_t>(r)] == pid) rank = r;
    if (rank < 0) continue;
    pids[static_cast<size_t>(rank)] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && failed_rank < 0) {
      failed_rank = rank;
      failed_status = status;
      failed_at = Clock::now();
      std::fprintf(stderr, "ferry train: rank %d of %d (pid %d) %s; stopping the other ranks\n", rank, nproc,
                   static_cast<int>(pid), describe_exit(status).c_str());
    }
  }
  if (failed_rank < 0) return 0;
  std::fprintf(stderr, "ferry: error: rank %d of %d %s (see its message above)\n", failed_rank, nproc,
               describe_exit(failed_status).c_str());
  return WIFEXITED(failed_status) && WEXITSTATUS(failed_status) == 2 ? 2 : 1;
}

}  // namespace ferry::cli
