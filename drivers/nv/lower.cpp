#include "drivers/nv/lower.h"

#include <algorithm>
#include <stdexcept>

namespace th::nv {

namespace {

namespace L = hcq::layout;

constexpr uint64_t mask(uint32_t width) { return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1; }

// A field of a stream command: a literal, or a slot's value plus an addend.
struct Value {
  uint64_t literal = 0;
  uint32_t slot = hcq::Operand::kLiteral;
  bool patched() const { return slot != hcq::Operand::kLiteral; }
};

class Lowering {
 public:
  Lowering(const hcq::CommandBuffer& cb, Gen gen, Engine engine) : cb_(cb), gen_(gen), engine_(engine) {}

  Lowered run() {
    const auto sites = cb_.sites();
    size_t s = 0;
    for (size_t c = 0; c < cb_.size(); ++c) {
      fields_.assign(cb_.command(c).begin(), cb_.command(c).end());
      slots_.assign(fields_.size(), hcq::Operand::kLiteral);
      for (; s < sites.size() && sites[s].command == c; ++s) {
        slots_[sites[s].word] = sites[s].slot;
        fields_[sites[s].word] = sites[s].addend;  // a patched field: the addend to the slot's value
      }
      command(c);
    }
    return std::move(out_);
  }

 private:
  Value at(uint32_t word) const { return {fields_[word], slots_[word]}; }
  [[noreturn]] void refuse(size_t c, const std::string& why) const {
    throw std::invalid_argument("NV " + std::string(engine_ == Engine::Compute ? "compute" : "copy") + " queue: command " +
                                std::to_string(c) + " (" + hcq::op_name(L::op_of(fields_[0])) + "): " + why);
  }

  void method(uint32_t subchannel, uint32_t offset, uint32_t count) {
    out_.push.push_back(dma::header(dma::kIncreasing, subchannel, offset, count));
  }
  // Bits [from, from + width) of v + add (a literal, or a slot's value at submit) as the next pushbuffer word.
  void push(const Value& v, uint32_t from = 0, uint32_t width = 32, uint64_t add = 0) {
    const uint32_t word = static_cast<uint32_t>(out_.push.size());
    if (!v.patched()) {
      out_.push.push_back(static_cast<uint32_t>(((v.literal + add) >> from) & mask(width)));
      return;
    }
    out_.push.push_back(0);
    out_.sites.push_back({v.slot, v.literal + add, false, word, 0, static_cast<uint8_t>(width), static_cast<uint8_t>(from)});
  }
  void push(uint32_t literal) { out_.push.push_back(literal); }

  uint32_t sem_hi_bits() const { return gen_ == Gen::Hopper ? host::kSemAddrHiBitsHopper : host::kSemAddrHiBitsAmpere; }
  void semaphore(size_t c, const Value& address, const Value& payload, uint32_t execute, uint64_t address_add = 0) {
    if (!address.patched() && (address.literal + address_add) >> (32 + sem_hi_bits()) != 0)
      refuse(c, "a semaphore at " + std::to_string(address.literal) + ", past the " + std::to_string(32 + sem_hi_bits()) +
                    " bits of address the GPU's semaphores reach");
    method(0, host::kSemAddrLo, 5);
    push(address, 0, 32, address_add);
    push(address, 32, sem_hi_bits(), address_add);
    push(payload, 0, 32);
    push(payload, 32, 32);
    push(execute);
  }
  void wait_for_idle() {
    method(0, host::kWfi, 1);
    push(host::kWfiScopeAll);
  }

  void command(size_t c) {
    switch (L::op_of(fields_[0])) {
      case hcq::Op::Barrier: wait_for_idle(); break;
      case hcq::Op::Wait:
        semaphore(c, at(L::kSignalAddr), at(L::kSignalValue), host::kOpAcqStrictGeq | host::kAcquireSwitchTsg | host::kPayload64);
        break;
      case hcq::Op::Signal:
        semaphore(c, at(L::kSignalAddr), at(L::kSignalValue), host::kOpRelease | host::kReleaseWfi | host::kPayload64);
        break;
      case hcq::Op::Timestamp:
        // A release with its timestamp writes a 16-byte report, the payload then the time: placed so the time lands at
        // the command's address (the 8 bytes before it take the payload, 0).
        semaphore(c, at(L::kTimestampAddr), Value{}, host::kOpRelease | host::kReleaseWfi | host::kPayload64 | host::kReleaseTimestamp,
                  uint64_t(0) - 8);
        break;
      case hcq::Op::Copy:
        if (engine_ != Engine::Copy) refuse(c, "a copy runs on the copy queue");
        copy();
        break;
      case hcq::Op::Exec:
        if (engine_ != Engine::Compute) refuse(c, "a kernel runs on the compute queue");
        exec(c);
        break;
    }
  }

  void copy() {
    const Value dst = at(L::kCopyDst), src = at(L::kCopySrc), size = at(L::kCopySize);
    const uint32_t upper = gen_ == Gen::Hopper ? copy::kUpperBitsHopper : copy::kUpperBitsAmpere;
    // LINE_LENGTH_IN is 32 bits: a literal size past it goes in pieces; a patched one must fit (checked at submit).
    constexpr uint64_t kPiece = uint64_t(1) << 31;
    const uint64_t total = size.patched() ? 1 : size.literal;
    for (uint64_t done = 0; done < total; done += kPiece) {
      method(kCopySubchannel, copy::kOffsetInUpper, 4);
      push(src, 32, upper, done);
      push(src, 0, 32, done);
      push(dst, 32, upper, done);
      push(dst, 0, 32, done);
      method(kCopySubchannel, copy::kLineLengthIn, 2);
      if (size.patched()) {
        push(size);
      } else {
        push(static_cast<uint32_t>(std::min(kPiece, total - done)));
      }
      push(1);  // LINE_COUNT
      method(kCopySubchannel, copy::kLaunchDma, 1);
      push(copy::kLaunchCopy);
    }
  }

  void exec(size_t c) {
    if (slots_[L::kExecFn] != hcq::Operand::kLiteral) refuse(c, "the kernel must be a literal, not a patch slot");
    const auto* k = reinterpret_cast<const Kernel*>(fields_[L::kExecFn]);
    const std::string name = reinterpret_cast<const char*>(fields_[L::kExecName]);
    const uint32_t nargs = static_cast<uint32_t>(fields_.size() - L::kExecArgs);
    if (uint64_t(k->param_offset) + 8ull * nargs > k->cbuf0_bytes)
      refuse(c, "kernel '" + name + "' takes " + std::to_string(nargs) + " argument words from byte " +
                    std::to_string(k->param_offset) + ", past its constant buffer of " + std::to_string(k->cbuf0_bytes) + " bytes");
    if (k->cbuf0_bytes % 16 != 0) refuse(c, "kernel '" + name + "': constant buffer size not a multiple of 16");

    // The side area: the QMD, then the constant buffer, each 256-byte aligned.
    auto& side = out_.side;
    const uint32_t qmd_at = static_cast<uint32_t>(side.size());
    side.resize(qmd_at + qmd::kWords, 0);
    const uint32_t cbuf_at = static_cast<uint32_t>(side.size());
    side.resize(cbuf_at + (k->cbuf0_bytes + qmd::kAlign - 1) / qmd::kAlign * (qmd::kAlign / 4), 0);
    for (uint32_t i = 0; i < nargs; ++i) {
      const Value arg = at(L::kExecArgs + i);
      const uint32_t w = cbuf_at + k->param_offset / 4 + 2 * i;
      write_side(w, arg, 0);
      write_side(w + 1, arg, 32);
    }
    const std::span<uint32_t> q(side.data() + qmd_at, qmd::kWords);
    set_field(q, qmd::kQmdMajorVersion, 3);
    set_field(q, qmd::kQmdVersion, 0);
    set_field(q, qmd::kSmGlobalCachingEnable, 1);
    for (const auto f : {qmd::kInvalidateTextureHeaderCache, qmd::kInvalidateTextureSamplerCache, qmd::kInvalidateTextureDataCache,
                         qmd::kInvalidateShaderDataCache, qmd::kInvalidateInstructionCache, qmd::kInvalidateShaderConstantCache})
      set_field(q, f, 1);
    set_field(q, qmd::kCwdMembarType, 1);
    set_field(q, qmd::kApiVisibleCallLimit, 1);
    set_field(q, qmd::kSamplerIndex, 0);
    const qmd::Field raster[3] = {qmd::kCtaRasterWidth, qmd::kCtaRasterHeight, qmd::kCtaRasterDepth};
    const qmd::Field block[3] = {qmd::kCtaThreadDimension0, qmd::kCtaThreadDimension1, qmd::kCtaThreadDimension2};
    for (uint32_t d = 0; d < 3; ++d) {
      dim(c, qmd_at, raster[d], at(L::kExecGlobal + d), "grid");
      dim(c, qmd_at, block[d], at(L::kExecLocal + d), "block");
    }
    const uint32_t shared = (k->shared_bytes + 127) / 128 * 128;
    set_field(q, qmd::kSharedMemorySize, shared);
    // The SM's shared-memory carve-out in 4 KiB steps, plus one: the smallest the kernel fits, up to the generation's most.
    const uint32_t most_kib = gen_ == Gen::Hopper ? 228 : 100;
    uint32_t kib = 8;
    for (const uint32_t option : {8u, 16u, 32u, 64u, 100u, 132u, 164u, 196u, 228u})
      if ((kib = option) * 1024 >= shared || option == most_kib) break;
    if (kib * 1024 < shared) refuse(c, "kernel '" + name + "' needs " + std::to_string(shared) + " bytes of shared memory");
    set_field(q, qmd::kMinSmConfigSharedMemSize, kib / 4 + 1);
    set_field(q, qmd::kTargetSmConfigSharedMemSize, kib / 4 + 1);
    set_field(q, qmd::kMaxSmConfigSharedMemSize, most_kib / 4 + 1);
    set_field(q, qmd::kRegisterCountV, k->registers);
    set_field(q, qmd::kShaderLocalMemoryLowSize, (k->local_bytes + 15) / 16 * 16);
    set_field(q, qmd::kShaderLocalMemoryHighSize, 0);
    set_field(q, qmd::kBarrierCount, 1);
    set_field(q, qmd::constant_buffer_valid(0), 1);
    set_field(q, qmd::constant_buffer_size_shifted4(0), k->cbuf0_bytes >> 4);
    relocate(qmd_at, qmd::constant_buffer_addr_lower(0), cbuf_at * 4ull, 0);
    relocate(qmd_at, qmd::constant_buffer_addr_upper(0), cbuf_at * 4ull, 32);
    set_field(q, qmd::kProgramAddressLower, k->code & 0xffffffffu);
    set_field(q, qmd::kProgramAddressUpper, k->code >> 32);

    // Launches run one after another, as the stream's commands do: each waits for the one before to finish.
    if (launched_) wait_for_idle();
    launched_ = true;
    method(kComputeSubchannel, compute::kSendPcasA, 1);
    out_.sites.push_back({Site::kSideBase, qmd_at * 4ull, false, static_cast<uint32_t>(out_.push.size()), 0, 32, 8});
    push(0);
    method(kComputeSubchannel, compute::kSendSignalingPcas2B, 1);
    push(compute::kPcasInvalidateCopySchedule);
  }

  void write_side(uint32_t word, const Value& v, uint32_t from) {
    if (!v.patched()) {
      out_.side[word] = static_cast<uint32_t>(v.literal >> from);
      return;
    }
    out_.sites.push_back({v.slot, v.literal, true, word, 0, 32, static_cast<uint8_t>(from)});
  }
  // A QMD field that holds part of a side-area address (the field lies within one word).
  void relocate(uint32_t qmd_at, qmd::Field f, uint64_t offset, uint32_t from) {
    out_.sites.push_back({Site::kSideBase, offset, true, qmd_at + f.lo / 32, static_cast<uint8_t>(f.lo % 32),
                          static_cast<uint8_t>(f.width()), static_cast<uint8_t>(from)});
  }
  void dim(size_t c, uint32_t qmd_at, qmd::Field f, const Value& v, const char* what) {
    if (v.patched()) {
      out_.sites.push_back({v.slot, v.literal, true, qmd_at + f.lo / 32, static_cast<uint8_t>(f.lo % 32),
                            static_cast<uint8_t>(f.width()), 0});
      return;
    }
    if (v.literal == 0 || v.literal > mask(f.width()))
      refuse(c, std::string(what) + " size " + std::to_string(v.literal) + " outside [1, " + std::to_string(mask(f.width())) + "]");
    set_field(std::span<uint32_t>(out_.side.data() + qmd_at, qmd::kWords), f, v.literal);
  }

  const hcq::CommandBuffer& cb_;
  const Gen gen_;
  const Engine engine_;
  std::vector<uint64_t> fields_;
  std::vector<uint32_t> slots_;
  bool launched_ = false;
  Lowered out_;
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

void Lowered::patch(std::span<uint32_t> push_words, std::span<uint32_t> side_words, std::span<const uint64_t> slots,
                    uint64_t side_base) const {
  if (side_base % qmd::kAlign != 0 || (side_base + side.size() * 4) >> 40 != 0)
    throw std::invalid_argument("NV side area at " + std::to_string(side_base) + ": QMDs need 256-byte alignment below 2^40");
  for (const Site& s : sites) {
    const uint64_t v = (s.slot == Site::kSideBase ? side_base : slots[s.slot]) + s.addend;
    uint32_t& w = s.side ? side_words[s.word] : push_words[s.word];
    const uint32_t m = static_cast<uint32_t>(mask(s.width)) << s.bit;
    w = (w & ~m) | ((static_cast<uint32_t>((v >> s.from) & mask(s.width)) << s.bit) & m);
  }
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
