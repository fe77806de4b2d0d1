#include "drivers/mock/amd_gpu.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace th::mock {

namespace {

// The formats as the mock reads them (Linux amdgpu nvd.h/soc15d.h, the SDMA v5/v6 packet headers, Mesa's register
// database).
constexpr uint32_t kShStart = 0x2C00, kPgmLo = 0x2E0C, kRsrc1 = 0x2E12, kRsrc2 = 0x2E13, kRsrc3 = 0x2E28, kNumThreadX = 0x2E07,
                   kUserData0 = 0x2E40;

uint64_t addr(uint32_t lo, uint32_t hi) { return lo | (uint64_t(hi) << 32); }

}  // namespace

AmdCommandProcessor::AmdCommandProcessor(Dispatcher dispatch, std::chrono::milliseconds poll_timeout)
    : dispatch_(std::move(dispatch)), poll_timeout_(poll_timeout) {}

void AmdCommandProcessor::fault(const char* engine, size_t at, const std::string& why) const {
  throw MockFault(std::string("mock AMD ") + engine + ": dword " + std::to_string(at) + ": " + why);
}

void AmdCommandProcessor::poll(uint64_t address, uint32_t reference, uint32_t mask, uint32_t function, size_t at) {
  const auto* word = reinterpret_cast<const std::atomic<uint32_t>*>(address);
  const auto met = [&] {
    const uint32_t v = word->load(std::memory_order_acquire) & mask;
    switch (function) {  // 0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >
      case 0: return true;
      case 1: return v < reference;
      case 2: return v <= reference;
      case 3: return v == reference;
      case 4: return v != reference;
      case 5: return v >= reference;
      case 6: return v > reference;
      default: return false;
    }
  };
  if (function > 6) fault("CP", at, "wait function " + std::to_string(function));
  const auto start = std::chrono::steady_clock::now();
  while (!met()) {
    if (std::chrono::steady_clock::now() - start > poll_timeout_)
      fault("CP", at, "wait on " + hex(address) + " gave up after " + std::to_string(poll_timeout_.count()) + " ms (reference " +
                          std::to_string(reference) + ", saw " + std::to_string(word->load() & mask) + ")");
    std::this_thread::yield();
  }
}

void AmdCommandProcessor::run_pm4(std::span<const uint32_t> dw) {
  for (size_t i = 0; i < dw.size();) {
    const uint32_t h = dw[i];
    if ((h >> 30) != 3) fault("CP", i, "header " + hex(h) + " is not a type-3 packet");
    const uint32_t count = (h >> 16) & 0x3fff, opcode = (h >> 8) & 0xff;
    const uint32_t body = opcode == 0x10 && count == 0x3fff ? 0 : count + 1;  // NOP with COUNT 0x3FFF: the header alone
    if (i + 1 + body > dw.size())
      fault("CP", i, "packet " + hex(opcode) + " announces " + std::to_string(body) + " dwords, the stream has " + std::to_string(dw.size() - i - 1) + " left");
    pm4_packet(opcode, dw.subspan(i + 1, body), i);
    i += 1 + body;
  }
}

void AmdCommandProcessor::pm4_packet(uint32_t opcode, std::span<const uint32_t> b, size_t at) {
  const auto need = [&](size_t n) {
    if (b.size() != n) fault("CP", at, "packet " + hex(opcode) + " has " + std::to_string(b.size()) + " dwords, not " + std::to_string(n));
  };
  switch (opcode) {
    case 0x10: return;  // NOP
    case 0x76: {        // SET_SH_REG: the offset, then the values of consecutive registers
      if (b.size() < 2) fault("CP", at, "SET_SH_REG without values");
      for (size_t k = 1; k < b.size(); ++k) sh_[kShStart + (b[0] & 0xffff) + static_cast<uint32_t>(k - 1)] = b[k];
      return;
    }
    case 0x15: {  // DISPATCH_DIRECT: dims, initiator
      need(4);
      if ((b[3] & 1) == 0) fault("CP", at, "DISPATCH_DIRECT without COMPUTE_SHADER_EN");
      AmdLaunch l;
      l.program = (uint64_t(sh_[kPgmLo]) | (uint64_t(sh_[kPgmLo + 1]) << 32)) << 8;
      l.rsrc1 = sh_[kRsrc1];
      l.rsrc2 = sh_[kRsrc2];
      l.rsrc3 = sh_[kRsrc3];
      for (uint32_t d = 0; d < 3; ++d) {
        l.grid[d] = b[d];
        l.block[d] = sh_[kNumThreadX + d] & 0xffff;
        if (l.grid[d] == 0 || l.block[d] == 0) fault("CP", at, "DISPATCH_DIRECT of an empty grid or block");
      }
      for (uint32_t u = 0; u < 16; ++u) l.user_data[u] = sh_[kUserData0 + u];
      l.wave32 = (b[3] >> 15) & 1;
      ++launches_;
      if (dispatch_) dispatch_(l);
      return;
    }
    case 0x49: {  // RELEASE_MEM: event, DATA_SEL 31:29, address, data
      need(7);
      const uint32_t data_sel = b[1] >> 29;
      const uint64_t a = addr(b[2], b[3]);
      if (data_sel == 1) reinterpret_cast<std::atomic<uint32_t>*>(a)->store(b[4], std::memory_order_release);
      else if (data_sel == 2) reinterpret_cast<std::atomic<uint64_t>*>(a)->store(addr(b[4], b[5]), std::memory_order_release);
      else if (data_sel == 3) reinterpret_cast<std::atomic<uint64_t>*>(a)->store(clock_ns(), std::memory_order_release);
      else if (data_sel != 0) fault("CP", at, "RELEASE_MEM DATA_SEL " + std::to_string(data_sel));
      return;
    }
    case 0x3C: {  // WAIT_REG_MEM: FUNCTION 2:0, MEM_SPACE 5:4 (1: memory)
      need(6);
      if (((b[0] >> 4) & 3) != 1) fault("CP", at, "WAIT_REG_MEM on a register, which the mock does not model");
      return poll(addr(b[1], b[2]), b[3], b[4], b[0] & 7, at);
    }
    case 0x46: return;  // EVENT_WRITE (a partial flush: the mock runs everything in order)
    case 0x58: need(7); return;  // ACQUIRE_MEM (caches)
    case 0x3F: {  // INDIRECT_BUFFER: address, IB_SIZE 19:0
      need(3);
      if (++depth_ > 4) fault("CP", at, "INDIRECT_BUFFER nested past 4 levels");
      run_pm4(std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(addr(b[0] & ~3u, b[1])), b[2] & 0xfffff));
      --depth_;
      return;
    }
    default: fault("CP", at, "unknown PM4 opcode " + hex(opcode));
  }
}

void AmdCommandProcessor::run_sdma(std::span<const uint32_t> dw) {
  for (size_t i = 0; i < dw.size();) {
    const uint32_t h = dw[i], op = h & 0xff, sub = (h >> 8) & 0xff;
    const auto take = [&](size_t n) {
      if (i + n > dw.size()) fault("SDMA", i, "packet " + std::to_string(op) + " needs " + std::to_string(n) + " dwords");
      const auto p = dw.subspan(i, n);
      i += n;
      return p;
    };
    switch (op) {
      case 0: take(1); break;  // NOP
      case 1: {                // COPY, sub-op 0 COPY_LINEAR: count - 1, parameter, src, dst
        if (sub != 0) fault("SDMA", i, "COPY sub-op " + std::to_string(sub));
        const auto p = take(7);
        std::memmove(reinterpret_cast<void*>(addr(p[5], p[6])), reinterpret_cast<const void*>(addr(p[3], p[4])), uint64_t(p[1]) + 1);
        break;
      }
      case 5: {  // FENCE: address, 32-bit data
        const auto p = take(4);
        reinterpret_cast<std::atomic<uint32_t>*>(addr(p[1], p[2]))->store(p[3], std::memory_order_release);
        break;
      }
      case 8: {  // POLL_REGMEM: FUNC 30:28, MEM_POLL 31; address, value, mask
        const auto p = take(6);
        if ((h >> 31) == 0) fault("SDMA", i - 6, "POLL_REGMEM of a register, which the mock does not model");
        poll(addr(p[1], p[2]), p[3], p[4], (h >> 28) & 7, i - 6);
        break;
      }
      case 13: {  // TIMESTAMP, sub-op 2 GET_GLOBAL: address
        if (sub != 2) fault("SDMA", i, "TIMESTAMP sub-op " + std::to_string(sub));
        const auto p = take(3);
        reinterpret_cast<std::atomic<uint64_t>*>(addr(p[1], p[2]))->store(clock_ns(), std::memory_order_release);
        break;
      }
      default: fault("SDMA", i, "unknown SDMA opcode " + std::to_string(op));
    }
  }
}

}  // namespace th::mock
