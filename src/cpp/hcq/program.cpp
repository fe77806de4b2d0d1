#include "tinyhybrid/hcq/program.h"

#include <dlfcn.h>

#include <stdexcept>
#include <utility>

namespace th::hcq {

Program::Program(std::string name, KernelFn fn) : name_(std::move(name)), fn_(fn) {
  if (fn_ == nullptr) throw std::invalid_argument("program '" + name_ + "': null function address");
}

Program::Program(std::string name, uint64_t address)
    : Program(std::move(name), reinterpret_cast<KernelFn>(static_cast<uintptr_t>(address))) {}

Program::Program(std::string name, uint64_t address, std::shared_ptr<const void> keep) : Program(std::move(name), address) {
  keep_ = std::move(keep);
}

Program Program::load(const std::string& path, const std::string& symbol) {
  // RTLD_LOCAL: kernels of different libraries may share symbol names.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    throw std::runtime_error("program '" + symbol + "': cannot load " + path + ": " + (err ? err : "unknown error"));
  }
  // Owns the handle from here on, so every error path below closes it.
  std::shared_ptr<void> lib(handle, [](void* h) { dlclose(h); });
  dlerror();
  void* sym = dlsym(handle, symbol.c_str());
  if (sym == nullptr) {
    const char* err = dlerror();
    throw std::runtime_error("program '" + symbol + "': no such symbol in " + path + (err ? std::string(": ") + err : ""));
  }
  Program p(symbol, reinterpret_cast<KernelFn>(sym));
  p.keep_ = std::move(lib);
  return p;
}

}  // namespace th::hcq
