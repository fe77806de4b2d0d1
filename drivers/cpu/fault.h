// Kernel faults on the CPU queue's workers. A kernel is code the queue runs for the user, like a GPU's: when it
// touches memory it may not, divides by zero or runs an illegal instruction, the queue reports a fault at the next
// wait (hcq::DeviceFault, naming the kernel) instead of the process dying. Only the workers' kernel calls are
// guarded: a fault anywhere else goes to whatever handled the signal before (Python's faulthandler, a sanitizer, or
// the default action).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tinyhybrid/hcq/program.h"

namespace th::cpu {

struct Fault {
  int signo = 0;  // 0: no fault
  int code = 0;   // siginfo's si_code
  uint64_t address = 0;
  explicit operator bool() const noexcept { return signo != 0; }
  // "SIGSEGV (invalid memory access at 0x10)"
  std::string describe() const;
};

// Calls fn(args, part, parts); a hardware fault inside it returns as a Fault (the rest of that call is abandoned).
// The calling thread must hold a FaultStack (whose first construction installs the handlers).
Fault run_guarded(hcq::KernelFn fn, const uint64_t* args, uint32_t part, uint32_t parts) noexcept;

// A worker thread's alternate signal stack, so a kernel that overflows its stack is reported too. One per thread,
// alive while the thread runs kernels.
class FaultStack {
 public:
  FaultStack();
  ~FaultStack();
  FaultStack(const FaultStack&) = delete;
  FaultStack& operator=(const FaultStack&) = delete;

 private:
  std::unique_ptr<char[]> stack_;
};

}  // namespace th::cpu
