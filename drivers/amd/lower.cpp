#include "drivers/amd/lower.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace th::amd {

namespace {

namespace L = hcq::layout;
using hcq::Field;

class Lowering {
 public:
  Lowering(const hcq::CommandBuffer& cb, Gen gen, Engine engine) : cmd_(cb), gen_(gen), engine_(engine) {}

  hcq::Lowered run() {
    while (cmd_.next()) engine_ == Engine::Compute ? compute() : copy_engine();
    return std::move(out_);
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    throw std::invalid_argument("AMD " + std::string(engine_ == Engine::Compute ? "compute" : "SDMA") + " queue: command " +
                                std::to_string(cmd_.index()) + " (" + hcq::op_name(cmd_.op()) + "): " + why);
  }
  void address(const Field& a, uint64_t add = 0) {
    w_.stream(a, 0, 32, add);
    w_.stream(a, 32, 32, add);
  }
  void set_sh(uint32_t reg, std::initializer_list<uint32_t> values) {
    w_.stream(pm4::header(pm4::kSetShReg, 1 + static_cast<uint32_t>(values.size())));
    w_.stream(reg - pm4::kShRegStart);
    for (const uint32_t v : values) w_.stream(v);
  }
  void release_mem(const Field& at, const Field& data, uint32_t data_sel) {
    w_.stream(pm4::header(pm4::kReleaseMem, 7));
    w_.stream(pm4::kReleaseEvent);
    w_.stream(data_sel);
    address(at);
    w_.stream(data, 0, 32);
    w_.stream(data, 32, 32);
    w_.stream(0);  // INT_CTXID
  }
  void partial_flush() {
    w_.stream(pm4::header(pm4::kEventWrite, 1));
    w_.stream(pm4::kCsPartialFlush);
  }

  // ---- PM4, a compute queue
  void compute() {
    switch (cmd_.op()) {
      case hcq::Op::Wait:
        // WAIT_REG_MEM compares 32 bits: the low word of the 64-bit signal (values below 2^32).
        w_.stream(pm4::header(pm4::kWaitRegMem, 6));
        w_.stream(pm4::kWaitGeqMemory);
        address(cmd_.at(L::kSignalAddr));
        w_.stream(cmd_.at(L::kSignalValue), 0, 32);
        w_.stream(0xffffffffu);
        w_.stream(pm4::kPollInterval);
        break;
      case hcq::Op::Signal: release_mem(cmd_.at(L::kSignalAddr), cmd_.at(L::kSignalValue), pm4::kDataSel64); break;
      case hcq::Op::Timestamp: release_mem(cmd_.at(L::kTimestampAddr), Field{}, pm4::kDataSelClock); break;
      case hcq::Op::Barrier:
        partial_flush();
        w_.stream(pm4::header(pm4::kAcquireMem, 7));
        for (const uint32_t v : {0u, 0xffffffffu, 0xffffffu, 0u, 0u, 0xAu, pm4::kGcrAll}) w_.stream(v);
        break;
      case hcq::Op::Copy: refuse("a copy runs on the SDMA queue");
      case hcq::Op::Exec: exec(); break;
    }
  }

  void exec() {
    if (cmd_.at(L::kExecFn).patched()) refuse("the kernel must be a literal, not a patch slot");
    const auto* k = reinterpret_cast<const Kernel*>(cmd_.at(L::kExecFn).value);
    const std::string name = reinterpret_cast<const char*>(cmd_.at(L::kExecName).value);
    const uint32_t nargs = static_cast<uint32_t>(cmd_.size() - L::kExecArgs);
    if (8ull * nargs > k->kernarg_bytes)
      refuse("kernel '" + name + "' takes " + std::to_string(nargs) + " argument words, past its kernarg segment of " +
             std::to_string(k->kernarg_bytes) + " bytes");
    if (k->code % 256 != 0) refuse("kernel '" + name + "': its code must be 256-byte aligned");
    if (k->kernarg_sgpr > 14) refuse("kernel '" + name + "': kernarg SGPR " + std::to_string(k->kernarg_sgpr) + " past the 16 user SGPRs");
    const uint32_t args_at = w_.side_block(std::max<uint32_t>(4, (k->kernarg_bytes + 3) / 4), 4);  // 16-byte aligned
    for (uint32_t i = 0; i < nargs; ++i) {
      w_.side(args_at + 2 * i, cmd_.at(L::kExecArgs + i), 0, 32, 0);
      w_.side(args_at + 2 * i + 1, cmd_.at(L::kExecArgs + i), 0, 32, 32);
    }
    // Launches run one after another, as the stream's commands do.
    if (launched_) partial_flush();
    launched_ = true;
    // COMPUTE_PGM_LO/HI take the code address >> 8.
    set_sh(pm4::kComputePgmLo, {static_cast<uint32_t>(k->code >> 8), static_cast<uint32_t>(k->code >> 40)});
    set_sh(pm4::kComputePgmRsrc1, {k->rsrc1, k->rsrc2});
    set_sh(pm4::kComputePgmRsrc3, {k->rsrc3});
    set_sh(pm4::kComputeTmpringSize, {0});
    set_sh(pm4::kComputeRestartX, {0, 0, 0});
    set_sh(pm4::kComputeStartX, {0, 0, 0});
    set_sh(pm4::kComputeResourceLimits, {0});
    w_.stream(pm4::header(pm4::kSetShReg, 3));
    w_.stream(pm4::kComputeUserData0 + k->kernarg_sgpr - pm4::kShRegStart);
    w_.stream_side_address(args_at * 4ull, 0, 32);
    w_.stream_side_address(args_at * 4ull, 32, 32);
    w_.stream(pm4::header(pm4::kSetShReg, 4));
    w_.stream(pm4::kComputeNumThreadX - pm4::kShRegStart);
    for (uint32_t d = 0; d < 3; ++d) dim(cmd_.at(L::kExecLocal + d), 0xffff, "block");
    w_.stream(pm4::header(pm4::kDispatchDirect, 4));
    for (uint32_t d = 0; d < 3; ++d) dim(cmd_.at(L::kExecGlobal + d), 0xffffffffu, "grid");
    w_.stream(pm4::kInitiator | (k->wave32 ? pm4::kCsW32En : 0));
  }
  void dim(const Field& v, uint64_t most, const char* what) {
    if (!v.patched() && (v.value == 0 || v.value > most))
      refuse(std::string(what) + " size " + std::to_string(v.value) + " outside [1, " + std::to_string(most) + "]");
    w_.stream(v, 0, 32);
  }

  // ---- SDMA, a copy queue
  void copy_engine() {
    switch (cmd_.op()) {
      case hcq::Op::Copy: copy(); break;
      case hcq::Op::Signal:
        // FENCE writes 32 bits: the low word, then the high one, so a reader never sees a value past the one written.
        for (const uint32_t half : {0u, 1u}) {
          w_.stream(sdma::header(sdma::kFence) | sdma::kFenceUncached);
          address(cmd_.at(L::kSignalAddr), 4 * half);
          w_.stream(cmd_.at(L::kSignalValue), 32 * half, 32);
        }
        break;
      case hcq::Op::Wait:
        w_.stream(sdma::header(sdma::kPollRegmem) | sdma::kPollGeqMemory);
        address(cmd_.at(L::kSignalAddr));
        w_.stream(cmd_.at(L::kSignalValue), 0, 32);  // 32 bits, as on the compute queue
        w_.stream(0xffffffffu);
        w_.stream(sdma::kPollIntervalRetry);
        break;
      case hcq::Op::Timestamp:
        w_.stream(sdma::header(sdma::kTimestamp, sdma::kSubTimestampGetGlobal));
        address(cmd_.at(L::kTimestampAddr));
        break;
      case hcq::Op::Barrier: w_.stream(sdma::header(sdma::kNop)); break;  // the engine runs its packets in order
      case hcq::Op::Exec: refuse("a kernel runs on the compute queue");
    }
  }

  void copy() {
    const Field dst = cmd_.at(L::kCopyDst), src = cmd_.at(L::kCopySrc), size = cmd_.at(L::kCopySize);
    const uint64_t piece = gen_ == Gen::Gfx11 ? sdma::kMaxCopyV6 : sdma::kMaxCopyV5;
    const uint64_t total = size.patched() ? 1 : size.value;
    for (uint64_t done = 0; done < total; done += piece) {
      w_.stream(sdma::header(sdma::kCopy, sdma::kSubCopyLinear));
      // COUNT is bytes minus 1
      w_.stream(size.patched() ? size : Field{std::min(piece, total - done)}, 0, 32, uint64_t(0) - 1);
      w_.stream(0);  // PARAMETER
      address(src, done);
      address(dst, done);
    }
  }

  hcq::CommandReader cmd_;
  const Gen gen_;
  const Engine engine_;
  bool launched_ = false;
  hcq::Lowered out_;
  hcq::LoweredWriter w_{out_};
};

}  // namespace

hcq::Lowered lower(const hcq::CommandBuffer& cb, Gen gen, Engine engine) { return Lowering(cb, gen, engine).run(); }

std::array<uint32_t, 16> aql_dispatch(uint64_t kernel_object, uint64_t kernarg, const uint32_t grid[3], const uint16_t block[3],
                                      uint32_t dims, uint32_t private_bytes, uint32_t group_bytes, uint64_t completion_signal) {
  if (dims < 1 || dims > 3) throw std::invalid_argument("AQL dispatch: dimensions must be 1, 2 or 3");
  const uint32_t header = aql::kKernelDispatch | aql::kBarrier | aql::kAcquireSystem | aql::kReleaseSystem;
  return {header | (dims << 16),  // header, setup
          block[0] | (uint32_t(block[1]) << 16), block[2],  // workgroup_size_x/y, workgroup_size_z + reserved0
          grid[0], grid[1], grid[2], private_bytes, group_bytes,
          static_cast<uint32_t>(kernel_object), static_cast<uint32_t>(kernel_object >> 32),
          static_cast<uint32_t>(kernarg), static_cast<uint32_t>(kernarg >> 32), 0, 0,
          static_cast<uint32_t>(completion_signal), static_cast<uint32_t>(completion_signal >> 32)};
}

std::array<uint32_t, 16> aql_barrier_and(std::span<const uint64_t> deps, uint64_t completion_signal) {
  if (deps.size() > 5) throw std::invalid_argument("AQL barrier-AND: at most 5 dependencies");
  std::array<uint32_t, 16> p{};
  p[0] = aql::kBarrierAnd | aql::kBarrier | aql::kAcquireSystem | aql::kReleaseSystem;
  for (size_t i = 0; i < deps.size(); ++i) {
    p[2 + 2 * i] = static_cast<uint32_t>(deps[i]);
    p[3 + 2 * i] = static_cast<uint32_t>(deps[i] >> 32);
  }
  p[14] = static_cast<uint32_t>(completion_signal);
  p[15] = static_cast<uint32_t>(completion_signal >> 32);
  return p;
}

std::array<uint32_t, 4> indirect_buffer(uint64_t address, uint32_t dwords, uint32_t vmid) {
  if (address % 4 != 0 || dwords == 0 || dwords >= (1u << 20) || vmid > 15)
    throw std::invalid_argument("INDIRECT_BUFFER: a 4-byte aligned address, 1 to 2^20 - 1 dwords, a VMID below 16");
  return {pm4::header(pm4::kIndirectBuffer, 3), static_cast<uint32_t>(address), static_cast<uint32_t>(address >> 32),
          dwords | pm4::kIbValid | (vmid << 24)};
}

}  // namespace th::amd
