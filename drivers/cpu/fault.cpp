#include "drivers/cpu/fault.h"

#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <mutex>

namespace th::cpu {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
constexpr size_t kStackBytes = 64 * 1024;

// Process-wide by nature: a signal disposition belongs to the process. Written once, under call_once, before any
// guarded call can fault.
struct sigaction g_previous[std::size(kSignals)];

// Where a fault in the running kernel call returns to, and what it was: per thread.
thread_local sigjmp_buf* t_resume = nullptr;
thread_local Fault t_fault;

const struct sigaction* previous(int signo) {
  for (size_t i = 0; i < std::size(kSignals); ++i)
    if (kSignals[i] == signo) return &g_previous[i];
  return nullptr;
}

void on_fault(int signo, siginfo_t* info, void* context) {
  if (sigjmp_buf* resume = t_resume) {
    t_resume = nullptr;
    t_fault = Fault{signo, info->si_code, reinterpret_cast<uint64_t>(info->si_addr)};
    siglongjmp(*resume, 1);
  }
  // Not a kernel's: the handler before ours, or the default action (sigaction resets, then the signal again).
  const struct sigaction* prev = previous(signo);
  if (prev != nullptr && (prev->sa_flags & SA_SIGINFO) != 0 && prev->sa_sigaction != nullptr) {
    prev->sa_sigaction(signo, info, context);
    return;
  }
  if (prev != nullptr && (prev->sa_flags & SA_SIGINFO) == 0 && prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
    prev->sa_handler(signo);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(signo, &dfl, nullptr);
  raise(signo);
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction act {};
    act.sa_sigaction = on_fault;
    // NODEFER: the signal stays unblocked after the jump out of the handler, so sigsetjmp need not save the mask
    // (a system call per kernel call).
    act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&act.sa_mask);
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &act, &g_previous[i]);
  });
}

const char* cause(int signo, int code) {
  switch (signo) {
    case SIGSEGV: return code == SEGV_ACCERR ? "memory access not permitted" : "invalid memory access";
    case SIGBUS: return "bus error (misaligned or unmapped memory)";
    case SIGFPE:
      if (code == FPE_INTDIV) return "integer divide by zero";
      if (code == FPE_INTOVF) return "integer overflow";
      return "arithmetic exception";
    case SIGILL: return "illegal instruction";
    default: return "fault";
  }
}

}  // namespace

std::string Fault::describe() const {
  const char* name = signo == SIGSEGV ? "SIGSEGV" : signo == SIGBUS ? "SIGBUS" : signo == SIGFPE ? "SIGFPE" : signo == SIGILL ? "SIGILL" : "signal";
  char at[32];
  std::snprintf(at, sizeof(at), "0x%llx", static_cast<unsigned long long>(address));
  return std::string(name) + " (" + cause(signo, code) + " at " + at + ")";
}

Fault run_guarded(hcq::KernelFn fn, const uint64_t* args, uint32_t part, uint32_t parts) noexcept {
  sigjmp_buf resume;
  if (sigsetjmp(resume, 0) != 0) return t_fault;  // from on_fault: the call was abandoned
  t_resume = &resume;
  fn(args, part, parts);
  t_resume = nullptr;
  return {};
}

FaultStack::FaultStack() : stack_(std::make_unique<char[]>(kStackBytes)) {
  install();
  stack_t ss{};
  ss.ss_sp = stack_.get();
  ss.ss_size = kStackBytes;
  sigaltstack(&ss, nullptr);
}

FaultStack::~FaultStack() {
  stack_t ss{};
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
}

}  // namespace th::cpu
