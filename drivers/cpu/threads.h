// How many worker threads the CPU device gets: the CPUs this process may run on, capped by its cgroup's
// CPU quota (a container given 2.5 CPUs of a 64-core host must not start 64 spinning workers).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace th::cpu {

// The tightest CPU limit (quota / period, in CPUs) of the cgroups this process is in, reading
// `<sysfs_root>/...` and the text of /proc/self/cgroup; nullopt when no quota is set. Both v2 (cpu.max)
// and v1 (cpu/cpu.cfs_quota_us, cpu.cfs_period_us) hierarchies are read, ancestors included.
std::optional<double> cgroup_cpu_limit(const std::string& sysfs_root, const std::string& proc_self_cgroup);

// The CPUs this process may run on (its affinity mask), in order; empty where that is unknown.
std::vector<int> allowed_cpus();
// Keeps the calling thread on `cpu` (a failure leaves it free to move: pinning is an optimisation).
void pin_current_thread(int cpu) noexcept;

}  // namespace th::cpu
