// A mock AMD command processor and SDMA engine: they read PM4 and SDMA streams with decoders of their own, written
// from the published formats (not from drivers/amd's encoder, which they check), and run them on host memory:
// register writes and DISPATCH_DIRECT (handed to a dispatcher with the registers the kernel would see), RELEASE_MEM
// and FENCE writes, GPU-clock timestamps, WAIT_REG_MEM and POLL_REGMEM (given up after a timeout), INDIRECT_BUFFER,
// COPY_LINEAR. A malformed stream is a MockFault naming the dword.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>

#include "drivers/mock/mock_common.h"

namespace th::mock {

// A dispatch as the compute registers describe it.
struct AmdLaunch {
  uint64_t program = 0;  // COMPUTE_PGM_LO/HI << 8
  uint32_t rsrc1 = 0, rsrc2 = 0, rsrc3 = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t user_data[16] = {};
  bool wave32 = false;
};

class AmdCommandProcessor {
 public:
  using Dispatcher = std::function<void(const AmdLaunch&)>;
  explicit AmdCommandProcessor(Dispatcher dispatch, std::chrono::milliseconds poll_timeout = std::chrono::seconds(10));
  void run_pm4(std::span<const uint32_t> dwords);
  void run_sdma(std::span<const uint32_t> dwords);
  uint64_t launches() const noexcept { return launches_; }

 private:
  void pm4_packet(uint32_t opcode, std::span<const uint32_t> body, size_t at);
  void poll(uint64_t address, uint32_t reference, uint32_t mask, uint32_t function, size_t at);
  [[noreturn]] void fault(const char* engine, size_t at, const std::string& why) const;

  const Dispatcher dispatch_;
  const std::chrono::milliseconds poll_timeout_;
  std::unordered_map<uint32_t, uint32_t> sh_;  // SH registers by dword address
  uint64_t launches_ = 0;
  int depth_ = 0;  // INDIRECT_BUFFER nesting
};

}  // namespace th::mock
