// Program: a compiled kernel a queue can run. On the CPU it is a C function with the kernel ABI below;
// loading it (dlopen of a compiled .so) is usually done by Python, which then hands over the address.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace th::hcq {

// The CPU kernel ABI. An exec with global[0] = N calls the kernel on P = min(N, worker count) threads at
// once, each with its core_id in [0, P) and num_cores = P; the kernel splits its outer loop itself.
// `args` are the exec's argument words (buffer addresses, integer values), valid during the call.
using KernelFn = void (*)(const uint64_t* args, uint32_t core_id, uint32_t num_cores);

class Program {
 public:
  Program() = default;
  // A function someone else keeps loaded (a ctypes library, a function of this program).
  Program(std::string name, KernelFn fn);
  Program(std::string name, uint64_t address);
  // A program whose function word is an address inside `keep` (a device's kernel descriptor), kept alive with it.
  Program(std::string name, uint64_t address, std::shared_ptr<const void> keep);
  // dlopen(path) and dlsym(symbol); the library stays loaded while any copy of the Program (or a
  // command buffer that runs it) lives. Throws std::runtime_error with dlerror()'s text.
  static Program load(const std::string& path, const std::string& symbol);

  const std::string& name() const noexcept { return name_; }
  KernelFn fn() const noexcept { return fn_; }
  uint64_t address() const noexcept { return reinterpret_cast<uint64_t>(fn_); }
  // What must stay alive while the program may run (a library handle); null when nothing.
  const std::shared_ptr<const void>& keepalive() const noexcept { return keep_; }

 private:
  std::string name_;
  KernelFn fn_ = nullptr;
  std::shared_ptr<const void> keep_;
};

}  // namespace th::hcq
