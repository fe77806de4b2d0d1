#include "drivers/nv/lower.h"

#include <algorithm>
#include <stdexcept>

namespace th::nv {

namespace {

namespace L = hcq::layout;

constexpr uint64_t mask(uint32_t width) { return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1; }

using hcq::Field;

class Lowering {
 public:
  Lowering(const hcq::CommandBuffer& cb, Gen gen, Engine engine) : cmd_(cb), gen_(gen), engine_(engine) {}

  Lowered run() {
    while (cmd_.next()) command();
    return std::move(out_);
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    throw std::invalid_argument("NV " + std::string(engine_ == Engine::Compute ? "compute" : "copy") + " queue: command " +
                                std::to_string(cmd_.index()) + " (" + hcq::op_name(cmd_.op()) + "): " + why);
  }
  void method(uint32_t subchannel, uint32_t offset, uint32_t count) { w_.stream(dma::header(dma::kIncreasing, subchannel, offset, count)); }

  uint32_t sem_hi_bits() const { return gen_ == Gen::Hopper ? host::kSemAddrHiBitsHopper : host::kSemAddrHiBitsAmpere; }
  void semaphore(const Field& address, const Field& payload, uint32_t execute, uint64_t address_add = 0) {
    if (!address.patched() && (address.value + address_add) >> (32 + sem_hi_bits()) != 0)
      refuse("a semaphore at " + std::to_string(address.value) + ", past the " + std::to_string(32 + sem_hi_bits()) +
             " bits of address the GPU's semaphores reach");
    method(0, host::kSemAddrLo, 5);
    w_.stream(address, 0, 32, address_add);
    w_.stream(address, 32, sem_hi_bits(), address_add);
    w_.stream(payload, 0, 32);
    w_.stream(payload, 32, 32);
    w_.stream(execute);
  }
  void wait_for_idle() {
    method(0, host::kWfi, 1);
    w_.stream(host::kWfiScopeAll);
  }

  void command() {
    switch (cmd_.op()) {
      case hcq::Op::Barrier: wait_for_idle(); break;
      case hcq::Op::Wait:
        semaphore(cmd_.at(L::kSignalAddr), cmd_.at(L::kSignalValue), host::kOpAcqStrictGeq | host::kAcquireSwitchTsg | host::kPayload64);
        break;
      case hcq::Op::Signal:
        semaphore(cmd_.at(L::kSignalAddr), cmd_.at(L::kSignalValue), host::kOpRelease | host::kReleaseWfi | host::kPayload64);
        break;
      case hcq::Op::Timestamp:
        // A release with its timestamp writes a 16-byte report, the payload then the time: placed so the time lands at
        // the command's address (the 8 bytes before it take the payload, 0).
        semaphore(cmd_.at(L::kTimestampAddr), Field{}, host::kOpRelease | host::kReleaseWfi | host::kPayload64 | host::kReleaseTimestamp,
                  uint64_t(0) - 8);
        break;
      case hcq::Op::Copy:
        if (engine_ != Engine::Copy) refuse("a copy runs on the copy queue");
        copy();
        break;
      case hcq::Op::Exec:
        if (engine_ != Engine::Compute) refuse("a kernel runs on the compute queue");
        exec();
        break;
    }
  }

  void copy() {
    const Field dst = cmd_.at(L::kCopyDst), src = cmd_.at(L::kCopySrc), size = cmd_.at(L::kCopySize);
    const uint32_t upper = gen_ == Gen::Hopper ? copy::kUpperBitsHopper : copy::kUpperBitsAmpere;
    // LINE_LENGTH_IN is 32 bits: a literal size past it goes in pieces; a patched one must fit.
    constexpr uint64_t kPiece = uint64_t(1) << 31;
    const uint64_t total = size.patched() ? 1 : size.value;
    for (uint64_t done = 0; done < total; done += kPiece) {
      method(kCopySubchannel, copy::kOffsetInUpper, 4);
      w_.stream(src, 32, upper, done);
      w_.stream(src, 0, 32, done);
      w_.stream(dst, 32, upper, done);
      w_.stream(dst, 0, 32, done);
      method(kCopySubchannel, copy::kLineLengthIn, 2);
      w_.stream(size.patched() ? size : Field{std::min(kPiece, total - done)});
      w_.stream(1);  // LINE_COUNT
      method(kCopySubchannel, copy::kLaunchDma, 1);
      w_.stream(copy::kLaunchCopy);
    }
  }

  void exec() {
    if (cmd_.at(L::kExecFn).patched()) refuse("the kernel must be a literal, not a patch slot");
    const auto* k = reinterpret_cast<const Kernel*>(cmd_.at(L::kExecFn).value);
    const std::string name = reinterpret_cast<const char*>(cmd_.at(L::kExecName).value);
    const uint32_t nargs = static_cast<uint32_t>(cmd_.size() - L::kExecArgs);
    if (uint64_t(k->param_offset) + 8ull * nargs > k->cbuf0_bytes)
      refuse("kernel '" + name + "' takes " + std::to_string(nargs) + " argument words from byte " + std::to_string(k->param_offset) +
             ", past its constant buffer of " + std::to_string(k->cbuf0_bytes) + " bytes");
    if (k->cbuf0_bytes % 16 != 0) refuse("kernel '" + name + "': constant buffer size not a multiple of 16");

    // The side area: the QMD, then the constant buffer, each 256-byte aligned.
    constexpr uint32_t kAlignWords = qmd::kAlign / 4;
    const uint32_t qmd_at = w_.side_block(qmd::kWords, kAlignWords);
    const uint32_t cbuf_at = w_.side_block((k->cbuf0_bytes + 3) / 4, kAlignWords);
    for (uint32_t i = 0; i < nargs; ++i) {
      const uint32_t word = cbuf_at + k->param_offset / 4 + 2 * i;
      w_.side(word, cmd_.at(L::kExecArgs + i), 0, 32, 0);
      w_.side(word + 1, cmd_.at(L::kExecArgs + i), 0, 32, 32);
    }
    const auto q = [&] { return std::span<uint32_t>(out_.side.data() + qmd_at, qmd::kWords); };
    set_field(q(), qmd::kQmdMajorVersion, 3);
    set_field(q(), qmd::kQmdVersion, 0);
    set_field(q(), qmd::kSmGlobalCachingEnable, 1);
    for (const auto f : {qmd::kInvalidateTextureHeaderCache, qmd::kInvalidateTextureSamplerCache, qmd::kInvalidateTextureDataCache,
                         qmd::kInvalidateShaderDataCache, qmd::kInvalidateInstructionCache, qmd::kInvalidateShaderConstantCache})
      set_field(q(), f, 1);
    set_field(q(), qmd::kCwdMembarType, 1);
    set_field(q(), qmd::kApiVisibleCallLimit, 1);
    set_field(q(), qmd::kSamplerIndex, 0);
    const qmd::Field raster[3] = {qmd::kCtaRasterWidth, qmd::kCtaRasterHeight, qmd::kCtaRasterDepth};
    const qmd::Field block[3] = {qmd::kCtaThreadDimension0, qmd::kCtaThreadDimension1, qmd::kCtaThreadDimension2};
    for (uint32_t d = 0; d < 3; ++d) {
      dim(qmd_at, raster[d], cmd_.at(L::kExecGlobal + d), "grid");
      dim(qmd_at, block[d], cmd_.at(L::kExecLocal + d), "block");
    }
    const uint32_t shared = (k->shared_bytes + 127) / 128 * 128;
    set_field(q(), qmd::kSharedMemorySize, shared);
    // The SM's shared-memory carve-out in 4 KiB steps, plus one: the smallest the kernel fits, up to the generation's most.
    const uint32_t most_kib = gen_ == Gen::Hopper ? 228 : 100;
    uint32_t kib = 8;
    for (const uint32_t option : {8u, 16u, 32u, 64u, 100u, 132u, 164u, 196u, 228u})
      if ((kib = option) * 1024 >= shared || option == most_kib) break;
    if (kib * 1024 < shared) refuse("kernel '" + name + "' needs " + std::to_string(shared) + " bytes of shared memory");
    set_field(q(), qmd::kMinSmConfigSharedMemSize, kib / 4 + 1);
    set_field(q(), qmd::kTargetSmConfigSharedMemSize, kib / 4 + 1);
    set_field(q(), qmd::kMaxSmConfigSharedMemSize, most_kib / 4 + 1);
    set_field(q(), qmd::kRegisterCountV, k->registers);
    set_field(q(), qmd::kShaderLocalMemoryLowSize, (k->local_bytes + 15) / 16 * 16);
    set_field(q(), qmd::kShaderLocalMemoryHighSize, 0);
    set_field(q(), qmd::kBarrierCount, 1);
    set_field(q(), qmd::constant_buffer_valid(0), 1);
    set_field(q(), qmd::constant_buffer_size_shifted4(0), k->cbuf0_bytes >> 4);
    for (const auto& [f, from] : {std::pair{qmd::constant_buffer_addr_lower(0), 0u}, std::pair{qmd::constant_buffer_addr_upper(0), 32u}})
      w_.side_side_address(qmd_at + f.lo / 32, f.lo % 32, f.width(), cbuf_at * 4ull, from);
    set_field(q(), qmd::kProgramAddressLower, k->code & 0xffffffffu);
    set_field(q(), qmd::kProgramAddressUpper, k->code >> 32);

    // Launches run one after another, as the stream's commands do: each waits for the one before to finish.
    if (launched_) wait_for_idle();
    launched_ = true;
    method(kComputeSubchannel, compute::kSendPcasA, 1);
    w_.stream_side_address(qmd_at * 4ull, 8, 32);
    method(kComputeSubchannel, compute::kSendSignalingPcas2B, 1);
    w_.stream(compute::kPcasInvalidateCopySchedule);
  }

  void dim(uint32_t qmd_at, qmd::Field f, const Field& v, const char* what) {
    if (!v.patched() && (v.value == 0 || v.value > mask(f.width())))
      refuse(std::string(what) + " size " + std::to_string(v.value) + " outside [1, " + std::to_string(mask(f.width())) + "]");
    w_.side(qmd_at + f.lo / 32, v, f.lo % 32, f.width());
  }

  hcq::CommandReader cmd_;
  const Gen gen_;
  const Engine engine_;
  bool launched_ = false;
  Lowered out_;
  hcq::LoweredWriter w_{out_};
};

}  // namespace

void set_field(std::span<uint32_t> words, qmd::Field f, uint64_t v) {
  if (v > mask(f.width()))
    throw std::invalid_argument("QMD field [" + std::to_string(f.hi) + ":" + std::to_string(f.lo) + "] cannot hold " + std::to_string(v));
  for (uint32_t b = 0; b < f.width();) {
    const uint32_t bit = f.lo + b, word = bit / 32, shift = bit % 32;
    const uint32_t n = std::min(32 - shift, f.width() - b);
    const uint32_t m = static_cast<uint32_t>(mask(n)) << shift;
    words[word] = (words[word] & ~m) | (static_cast<uint32_t>((v >> b) & mask(n)) << shift);
    b += n;
  }
}

uint64_t get_field(std::span<const uint32_t> words, qmd::Field f) {
  uint64_t v = 0;
  for (uint32_t b = 0; b < f.width();) {
    const uint32_t bit = f.lo + b, shift = bit % 32, n = std::min(32 - shift, f.width() - b);
    v |= ((uint64_t(words[bit / 32]) >> shift) & mask(n)) << b;
    b += n;
  }
  return v;
}

void check_side_area(uint64_t side_base, uint64_t bytes) {
  if (side_base % qmd::kAlign != 0 || (side_base + bytes) >> 40 != 0)
    throw std::invalid_argument("NV side area at " + std::to_string(side_base) + ": QMDs need 256-byte alignment below 2^40");
}

Lowered lower(const hcq::CommandBuffer& cb, Gen gen, Engine engine) { return Lowering(cb, gen, engine).run(); }

std::array<uint32_t, 6> semaphore_release(Gen gen, uint64_t address, uint64_t value) {
  const uint32_t hi_bits = gen == Gen::Hopper ? host::kSemAddrHiBitsHopper : host::kSemAddrHiBitsAmpere;
  return {dma::header(dma::kIncreasing, 0, host::kSemAddrLo, 5), static_cast<uint32_t>(address),
          static_cast<uint32_t>((address >> 32) & mask(hi_bits)), static_cast<uint32_t>(value), static_cast<uint32_t>(value >> 32),
          host::kOpRelease | host::kReleaseWfi | host::kPayload64};
}

std::array<uint32_t, 2> gpfifo_entry(uint64_t address, uint32_t dwords, bool sync_wait) {
  if (address % 4 != 0 || address >> 40 != 0) throw std::invalid_argument("GPFIFO entry: the segment address must be 4-byte aligned, below 2^40");
  if (dwords == 0 || dwords >= (1u << 21)) throw std::invalid_argument("GPFIFO entry: a segment is 1 to 2^21 - 1 words");
  return {static_cast<uint32_t>(address & 0xfffffffcu),
          static_cast<uint32_t>((address >> 32) & 0xff) | (dwords << 10) | (sync_wait ? 1u << 31 : 0u)};
}

}  // namespace th::nv
