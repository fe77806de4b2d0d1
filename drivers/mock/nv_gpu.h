// A mock NVIDIA command processor: it reads a GPFIFO channel's pushbuffer segments as the GPU's front end would, with a
// decoder of its own written from the published formats (not from drivers/nv's encoder, which it checks), and runs
// them on host memory: host semaphore acquires and releases (32- and 64-bit, with timestamps), WFI, DMA copies, and
// compute launches, whose QMD it decodes and hands to a dispatcher (the host runs the kernel). GPU addresses are host
// addresses. A malformed stream is a MockFault naming the word, never a hang: acquires give up after a timeout.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "drivers/mock/mock_common.h"

namespace th::mock {

// A launch as its QMD describes it.
struct NvLaunch {
  uint64_t qmd = 0;      // where the QMD was read
  uint64_t program = 0;  // the kernel's first instruction
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint64_t cbuf0 = 0;  // constant buffer 0: its address and size
  uint32_t cbuf0_bytes = 0;
  uint32_t shared_bytes = 0, registers = 0;
};

class NvCommandProcessor {
 public:
  using Dispatcher = std::function<void(const NvLaunch&)>;
  // hopper: the GPFIFO class is HOPPER_CHANNEL_GPFIFO_A (semaphore addresses of 57 bits), else Ampere's (40 bits).
  // Subchannel 1 holds the compute object and subchannel 4 the copy object until a SET_OBJECT rebinds one.
  NvCommandProcessor(bool hopper, Dispatcher dispatch, std::chrono::milliseconds acquire_timeout = std::chrono::seconds(10));

  // Runs the pushbuffer segment a GPFIFO entry points at (its two words); the segment's words are read from host memory.
  void run_entry(uint32_t entry0, uint32_t entry1);
  // Runs a segment of pushbuffer words.
  void run(std::span<const uint32_t> words);

  uint64_t launches() const noexcept { return launches_; }

 private:
  enum class Engine : uint8_t { None, Compute, Copy };
  void write(uint32_t subchannel, uint32_t offset, uint32_t value, size_t word);
  void host_method(uint32_t offset, uint32_t value, size_t word);
  void compute_method(uint32_t offset, uint32_t value, size_t word);
  void copy_method(uint32_t offset, uint32_t value, size_t word);
  void semaphore(uint32_t execute, size_t word);
  void launch(uint64_t qmd, size_t word);
  [[noreturn]] void fault(size_t word, const std::string& why) const;

  const bool hopper_;
  const Dispatcher dispatch_;
  const std::chrono::milliseconds acquire_timeout_;
  Engine bound_[8] = {Engine::None, Engine::Compute, Engine::None, Engine::None, Engine::Copy, Engine::None, Engine::None, Engine::None};
  // The method registers the actions read: host semaphore, compute launch, copy.
  uint32_t sem_[4] = {0, 0, 0, 0};  // ADDR_LO, ADDR_HI, PAYLOAD_LO, PAYLOAD_HI
  uint32_t pcas_a_ = 0;
  uint32_t copy_in_[2] = {0, 0}, copy_out_[2] = {0, 0}, line_length_ = 0, line_count_ = 0;
  uint64_t launches_ = 0;
};

}  // namespace th::mock
