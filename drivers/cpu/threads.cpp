#include "drivers/cpu/threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "tinyhybrid/hcq/cpu.h"

namespace th::cpu {

namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "/a/b" -> {"/a/b", "/a", ""}: a limit on any ancestor applies too.
std::vector<std::string> self_and_ancestors(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path);
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || path.empty()) break;
    path.resize(slash);
  }
  return out;
}

void take_min(std::optional<double>& best, double v) {
  if (v > 0 && (!best || v < *best)) best = v;
}

// v2 "max 100000" (no limit) or "250000 100000".
void read_v2(const std::string& dir, std::optional<double>& best) {
  const auto text = read_file(dir + "/cpu.max");
  if (!text) return;
  std::istringstream in(*text);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return;
  take_min(best, std::atof(quota.c_str()) / period);
}

// v1: cpu.cfs_quota_us is -1 when unlimited.
void read_v1(const std::string& dir, std::optional<double>& best) {
  const auto quota = read_file(dir + "/cpu.cfs_quota_us"), period = read_file(dir + "/cpu.cfs_period_us");
  if (!quota || !period) return;
  const double q = std::atof(quota->c_str()), p = std::atof(period->c_str());
  if (q > 0 && p > 0) take_min(best, q / p);
}

}  // namespace

std::optional<double> cgroup_cpu_limit(const std::string& sysfs_root, const std::string& proc_self_cgroup) {
  std::optional<double> best;
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  // Lines are "id:controllers:path"; v2 is "0::path". Inside a container the path may name the host's
  // hierarchy while the container sees its own cgroup at the mount root, so the root is read as well.
  while (std::getline(lines, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      for (const auto& p : self_and_ancestors(path)) read_v2(sysfs_root + p, best);
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name != "cpu") continue;
      for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"})
        for (const auto& p : self_and_ancestors(path)) read_v1(sysfs_root + mount + p, best);
    }
  }
  read_v2(sysfs_root, best);
  read_v1(sysfs_root + "/cpu", best);
  return best;
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

void pin_current_thread(int cpu) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace th::cpu

namespace th::hcq {

uint32_t usable_cpu_count() {
  uint32_t n = static_cast<uint32_t>(th::cpu::allowed_cpus().size());
  if (n == 0) n = std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  const auto self = th::cpu::read_file("/proc/self/cgroup");
  if (const auto limit = th::cpu::cgroup_cpu_limit("/sys/fs/cgroup", self ? *self : "")) {
    n = std::min<uint32_t>(n, static_cast<uint32_t>(std::ceil(*limit - 1e-9)));
  }
  return std::max<uint32_t>(n, 1);
}

uint32_t default_cpu_threads() {
  if (const char* env = std::getenv("NUM_CPU_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v <= 4096) return static_cast<uint32_t>(v);
  }
  return usable_cpu_count();
}

}  // namespace th::hcq
