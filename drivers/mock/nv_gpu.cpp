#include "drivers/mock/nv_gpu.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

namespace th::mock {

namespace {

// The formats, as the mock reads them (NVIDIA's open-gpu-doc: clc86f.h/clc56f.h for the host class and GPFIFO
// entries, clcbc0.h and clcbc0qmd.h for compute, clc8b5.h for copies).
uint64_t bits_of(const uint32_t* words, uint32_t hi, uint32_t lo) {
  uint64_t v = 0;
  for (uint32_t b = lo; b <= hi; ++b) v |= uint64_t((words[b / 32] >> (b % 32)) & 1) << (b - lo);
  return v;
}

}  // namespace

NvCommandProcessor::NvCommandProcessor(bool hopper, Dispatcher dispatch, std::chrono::milliseconds acquire_timeout)
    : hopper_(hopper), dispatch_(std::move(dispatch)), acquire_timeout_(acquire_timeout) {}

void NvCommandProcessor::fault(size_t word, const std::string& why) const {
  throw MockFault("mock NV: pushbuffer word " + std::to_string(word) + ": " + why);
}

void NvCommandProcessor::run_entry(uint32_t entry0, uint32_t entry1) {
  const uint32_t length = (entry1 >> 10) & 0x1fffff;  // ENTRY1 LENGTH 30:10
  if (length == 0) {
    if ((entry1 & 0xff) != 0) throw MockFault("mock NV: GPFIFO control entry with opcode " + std::to_string(entry1 & 0xff));
    return;  // a NOP entry
  }
  const uint64_t address = uint64_t(entry0 & ~3u) | (uint64_t(entry1 & 0xff) << 32);  // GET 31:2, GET_HI 7:0
  run(std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(address), length));
}

void NvCommandProcessor::run(std::span<const uint32_t> words) {
  for (size_t i = 0; i < words.size();) {
    const uint32_t h = words[i];
    const uint32_t opcode = h >> 29, count = (h >> 16) & 0x1fff, subchannel = (h >> 13) & 7, offset = (h & 0xfff) << 2;
    const size_t at = i++;
    if (h == 0) continue;  // DMA_NOP
    switch (opcode) {
      case 4:  // immediate data: the value is the count field
        write(subchannel, offset, count, at);
        continue;
      case 1: case 3: case 5: break;
      default: fault(at, "method header " + hex(h) + " has opcode " + std::to_string(opcode));
    }
    if (count == 0) fault(at, "method header " + hex(h) + " carries no data");
    if (i + count > words.size())
      fault(at, "method header " + hex(h) + " announces " + std::to_string(count) + " data words, the segment has " +
                    std::to_string(words.size() - i) + " left");
    for (uint32_t k = 0; k < count; ++k) {
      const uint32_t step = opcode == 1 ? k : opcode == 5 ? (k == 0 ? 0 : 1) : 0;
      write(subchannel, offset + 4 * step, words[i + k], i + k);
    }
    i += count;
  }
}

void NvCommandProcessor::write(uint32_t subchannel, uint32_t offset, uint32_t value, size_t word) {
  if (offset == 0) {  // SET_OBJECT: binds the subchannel to the class in 15:0
    const uint32_t cls = value & 0xffff;
    bound_[subchannel] = (cls & 0xff) == 0xc0 ? Engine::Compute : (cls & 0xff) == 0xb5 ? Engine::Copy : Engine::None;
    if (bound_[subchannel] == Engine::None) fault(word, "SET_OBJECT of class " + hex(cls) + ", which the mock does not run");
    return;
  }
  if (offset < 0x100) return host_method(offset, value, word);
  switch (bound_[subchannel]) {
    case Engine::Compute: return compute_method(offset, value, word);
    case Engine::Copy: return copy_method(offset, value, word);
    case Engine::None: fault(word, "method " + hex(offset) + " on subchannel " + std::to_string(subchannel) + ", which has no object");
  }
}

void NvCommandProcessor::host_method(uint32_t offset, uint32_t value, size_t word) {
  switch (offset) {
    case 0x08: return;  // NOP
    case 0x5C: sem_[0] = value; return;
    case 0x60: sem_[1] = value; return;
    case 0x64: sem_[2] = value; return;
    case 0x68: sem_[3] = value; return;
    case 0x6C: return semaphore(value, word);
    case 0x78: return;  // WFI: the mock runs every command to its end in order
    default: fault(word, "unknown host method " + hex(offset));
  }
}

void NvCommandProcessor::semaphore(uint32_t execute, size_t word) {
  // SEM_EXECUTE: OPERATION 2:0, PAYLOAD_SIZE 24 (64-bit), RELEASE_TIMESTAMP 25; the address's upper bits are 24:0 of
  // SEM_ADDR_HI on Hopper, 7:0 on Ampere, and the lower ones 31:2 of SEM_ADDR_LO.
  const uint32_t op = execute & 7;
  const bool wide = (execute >> 24) & 1, stamp = (execute >> 25) & 1;
  const uint64_t address = (sem_[0] & ~3u) | (uint64_t(sem_[1] & (hopper_ ? 0x1ffffff : 0xff)) << 32);
  const uint64_t payload = wide ? sem_[2] | (uint64_t(sem_[3]) << 32) : sem_[2];
  if (address == 0 || (wide && address % 8 != 0)) fault(word, "semaphore at " + hex(address));
  auto* word64 = reinterpret_cast<std::atomic<uint64_t>*>(address);
  auto* word32 = reinterpret_cast<std::atomic<uint32_t>*>(address);
  const auto read = [&]() -> uint64_t { return wide ? word64->load(std::memory_order_acquire) : word32->load(std::memory_order_acquire); };
  if (op == 1) {  // RELEASE
    if (wide) word64->store(payload, std::memory_order_release);
    else word32->store(static_cast<uint32_t>(payload), std::memory_order_release);
    if (stamp) reinterpret_cast<std::atomic<uint64_t>*>(address + 8)->store(clock_ns(), std::memory_order_release);
    return;
  }
  const auto met = [&] {
    const uint64_t v = read();
    switch (op) {
      case 0: return v == payload;                                           // ACQUIRE: equal
      case 2: return v >= payload;                                           // ACQ_STRICT_GEQ
      case 3: return wide ? int64_t(v - payload) >= 0 : int32_t(uint32_t(v) - uint32_t(payload)) >= 0;  // ACQ_CIRC_GEQ
      default: return false;
    }
  };
  if (op != 0 && op != 2 && op != 3) fault(word, "semaphore operation " + std::to_string(op) + " (SEM_EXECUTE " + hex(execute) + ")");
  const auto start = std::chrono::steady_clock::now();
  while (!met()) {
    if (std::chrono::steady_clock::now() - start > acquire_timeout_)
      fault(word, "semaphore acquire at " + hex(address) + " waited " + std::to_string(acquire_timeout_.count()) + " ms for " +
                      std::to_string(payload) + " (saw " + std::to_string(read()) + ")");
    std::this_thread::yield();
  }
}

void NvCommandProcessor::compute_method(uint32_t offset, uint32_t value, size_t word) {
  switch (offset) {
    case 0x2B4: pcas_a_ = value; return;  // SEND_PCAS_A: the QMD's address >> 8
    case 0x2C0: {                         // SEND_SIGNALING_PCAS2_B: PCAS_ACTION 3:0
      const uint32_t action = value & 0xf;
      if (action == 0) return;
      if (action != 3 && action != 9) fault(word, "PCAS action " + std::to_string(action) + " is not a launch");
      return launch(uint64_t(pcas_a_) << 8, word);
    }
    case 0x1698: return;  // INVALIDATE_SHADER_CACHES_NO_WFI
    default: fault(word, "unknown compute method " + hex(offset));
  }
}

void NvCommandProcessor::copy_method(uint32_t offset, uint32_t value, size_t word) {
  switch (offset) {
    case 0x400: copy_in_[1] = value; return;   // OFFSET_IN_UPPER
    case 0x404: copy_in_[0] = value; return;   // OFFSET_IN_LOWER
    case 0x408: copy_out_[1] = value; return;  // OFFSET_OUT_UPPER
    case 0x40C: copy_out_[0] = value; return;  // OFFSET_OUT_LOWER
    case 0x418: line_length_ = value; return;
    case 0x41C: line_count_ = value; return;
    case 0x300: {  // LAUNCH_DMA
      const uint32_t transfer = value & 3, semaphore = (value >> 3) & 3;
      if (transfer == 0) return;
      if (semaphore != 0) fault(word, "LAUNCH_DMA with a semaphore release (" + hex(value) + "), which the mock does not run");
      if (((value >> 7) & 1) == 0 || ((value >> 8) & 1) == 0) fault(word, "LAUNCH_DMA of a block-linear layout (" + hex(value) + ")");
      if ((value >> 9) & 1) fault(word, "LAUNCH_DMA of several lines (" + hex(value) + ")");
      if ((value >> 12) & 3) fault(word, "LAUNCH_DMA of physical addresses (" + hex(value) + ")");
      const uint64_t upper = hopper_ ? 0x1ffffff : 0x1ffff;
      const uint64_t src = copy_in_[0] | (uint64_t(copy_in_[1] & upper) << 32), dst = copy_out_[0] | (uint64_t(copy_out_[1] & upper) << 32);
      if (line_length_ != 0) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), line_length_);
      return;
    }
    default: fault(word, "unknown copy method " + hex(offset));
  }
}

void NvCommandProcessor::launch(uint64_t qmd, size_t word) {
  if (qmd == 0) fault(word, "launch of a QMD at address 0");
  const auto* q = reinterpret_cast<const uint32_t*>(qmd);
  if (bits_of(q, 583, 580) != 3 || bits_of(q, 579, 576) != 0)
    fault(word, "QMD at " + hex(qmd) + " is version " + std::to_string(bits_of(q, 583, 580)) + "." + std::to_string(bits_of(q, 579, 576)) +
                    ", not 3.0");
  NvLaunch l;
  l.qmd = qmd;
  l.program = bits_of(q, 1567, 1536) | (bits_of(q, 1584, 1568) << 32);
  l.grid[0] = static_cast<uint32_t>(bits_of(q, 415, 384));
  l.grid[1] = static_cast<uint32_t>(bits_of(q, 431, 416));
  l.grid[2] = static_cast<uint32_t>(bits_of(q, 463, 448));
  l.block[0] = static_cast<uint32_t>(bits_of(q, 607, 592));
  l.block[1] = static_cast<uint32_t>(bits_of(q, 623, 608));
  l.block[2] = static_cast<uint32_t>(bits_of(q, 639, 624));
  if (bits_of(q, 640, 640) != 1) fault(word, "QMD at " + hex(qmd) + " has no constant buffer 0");
  l.cbuf0 = bits_of(q, 1055, 1024) | (bits_of(q, 1072, 1056) << 32);
  l.cbuf0_bytes = static_cast<uint32_t>(bits_of(q, 1087, 1075) << 4);
  l.shared_bytes = static_cast<uint32_t>(bits_of(q, 561, 544));
  l.registers = static_cast<uint32_t>(bits_of(q, 656, 648));
  for (const uint32_t d : {l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2]})
    if (d == 0) fault(word, "QMD at " + hex(qmd) + " launches an empty grid or block");
  ++launches_;
  if (dispatch_) dispatch_(l);
}

}  // namespace th::mock
