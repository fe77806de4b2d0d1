// CommandBuffer: a batch of queue commands encoded once into a flat stream of 64-bit words, then
// submitted any number of times. Words that change between submits (buffer addresses, symbolic integer
// values, signal values) are patch sites bound to numbered slots; a submit supplies one value per slot
// and the queue writes them while copying the stream into its ring: nothing is re-encoded.
//
// The stream is device-independent: every command is a header word followed by its fields (layout
// below). The CPU ring runs these words as they are (one command per ring slot); a GPU queue lowers the
// stream once into its own packets (PM4, GPFIFO), maps the patch sites onto the lowered words, and keeps
// the result in the buffer's lowered() cache.
#pragma once
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tinyhybrid/hcq/program.h"
#include "tinyhybrid/hcq/signal.h"

namespace th::hcq {

enum class Op : uint8_t { Barrier = 0, Wait = 1, Signal = 2, Exec = 3, Copy = 4, Timestamp = 5 };
const char* op_name(Op op) noexcept;

// The word layout of each command. Word 0 is the header: the op in bits 0..7 and the command's word
// count (header included) in bits 8..15.
namespace layout {
inline constexpr uint32_t kMaxWords = 64;  // one CPU ring slot
constexpr uint64_t header(Op op, uint32_t nwords) { return uint64_t(op) | (uint64_t(nwords) << 8); }
constexpr Op op_of(uint64_t header) { return Op(header & 0xff); }
constexpr uint32_t words_of(uint64_t header) { return uint32_t((header >> 8) & 0xff); }

// Wait (until *addr >= value) and Signal (*addr = value, release): [header, addr, value]
inline constexpr uint32_t kSignalAddr = 1, kSignalValue = 2, kSignalWords = 3;
// Exec: [header, function, name, global x y z, local x y z, args...]. `name` is the address of the kernel's name (a
// NUL-terminated string the buffer keeps alive while it or a submit of it lives): what a fault message names.
inline constexpr uint32_t kExecFn = 1, kExecName = 2, kExecGlobal = 3, kExecLocal = 6, kExecArgs = 9;
inline constexpr uint32_t kMaxExecArgs = kMaxWords - kExecArgs;
// Copy (non-overlapping, like a DMA engine): [header, dst, src, nbytes]
inline constexpr uint32_t kCopyDst = 1, kCopySrc = 2, kCopySize = 3, kCopyWords = 4;
// Timestamp (*addr = monotonic ns): [header, addr]
inline constexpr uint32_t kTimestampAddr = 1, kTimestampWords = 2;
}  // namespace layout

// A reference to a patch slot, usable wherever an Operand goes. The field receives the slot's value plus
// `offset` (a byte offset into a patched buffer: one slot serves every range of that buffer).
struct Patch {
  uint32_t slot;
  uint64_t offset = 0;
};

// A command field: a literal word (negative integers are stored in two's complement), or a patch slot.
struct Operand {
  static constexpr uint32_t kLiteral = UINT32_MAX;
  uint64_t value = 0;  // a literal's value; a patched field's addend
  uint32_t slot = kLiteral;

  constexpr Operand() = default;
  constexpr Operand(uint64_t v) noexcept : value(v) {}  // NOLINT: literals read naturally
  constexpr Operand(Patch p) noexcept : value(p.offset), slot(p.slot) {}  // NOLINT
  static Operand address(const void* p) noexcept { return Operand(reinterpret_cast<uint64_t>(p)); }
  constexpr bool patched() const noexcept { return slot != kLiteral; }
};

// Launch dimensions; missing ones are 1. On the CPU only global x matters (how many parts run at once).
struct Dims {
  Operand x{1}, y{1}, z{1};
  constexpr Dims() = default;
  constexpr Dims(Operand x_, Operand y_ = Operand(1), Operand z_ = Operand(1)) : x(x_), y(y_), z(z_) {}  // NOLINT
};

// A byte range of memory that a submit reads or writes, declared beside the commands (not encoded): the dependency
// tracker orders submits of different queues, and the host's accesses, by them. `buffer` names the memory (its base
// address, usually patched); [begin, end) is relative to it, and end = kWhole reaches to the buffer's end.
struct Access {
  static constexpr uint64_t kWhole = UINT64_MAX;
  Operand buffer;
  uint64_t begin = 0, end = kWhole;
  bool write = false;
};

class CommandBuffer {
 public:
  // One command field that takes its value from a slot at submit (plus a fixed addend).
  struct PatchSite {
    uint32_t command;  // index of the command
    uint32_t word;     // word within the command (header = 0)
    uint32_t slot;
    uint64_t addend = 0;
  };

  CommandBuffer();

  // A new patch slot; submits that pass no patches use `initial`. Returns the slot index.
  uint32_t add_slot(uint64_t initial = 0);
  // Change what a slot holds for submits without patches.
  void set_default(uint32_t slot, uint64_t value);

  // The commands. Each validates its operands (std::invalid_argument, std::out_of_range for a bad slot)
  // and keeps what it references (signals, loaded libraries) alive while the buffer or a submit of it lives.
  void wait(const SignalRef& signal, Operand value);
  void signal(const SignalRef& signal, Operand value);
  void exec(const Program& program, std::span<const Operand> args, Dims global = {}, Dims local = {});
  void exec(const Program& program, std::initializer_list<Operand> args, Dims global = {}, Dims local = {}) {
    exec(program, std::span<const Operand>(args.begin(), args.size()), global, local);
  }
  void copy(Operand dst, Operand src, Operand nbytes);
  void timestamp(const SignalRef& signal);  // the signal's word receives the time (a profiling slot)
  // An 8-byte aligned host word the caller keeps alive, and the 8 bytes before it too: a GPU may write a 16-byte
  // report whose time comes last (NV's semaphore release).
  void timestamp(uint64_t address);
  void barrier();                           // later commands see all memory effects of earlier ones
  // Declares that a submit of this buffer reads (or writes) bytes [begin, end) of `buffer`. Throws
  // std::invalid_argument if end < begin, std::out_of_range for a bad slot.
  void access(Operand buffer, uint64_t begin = 0, uint64_t end = Access::kWhole, bool write = false);
  std::span<const Access> accesses() const noexcept { return accesses_; }

  // What queues read.
  size_t size() const noexcept { return offsets_.size(); }
  bool empty() const noexcept { return offsets_.empty(); }
  std::span<const uint64_t> words() const noexcept { return words_; }
  std::span<const uint32_t> offsets() const noexcept { return offsets_; }  // first word of each command
  std::span<const uint64_t> command(size_t i) const;                        // the words of command i
  std::span<const PatchSite> sites() const noexcept { return sites_; }      // in command order
  std::span<const uint64_t> slot_defaults() const noexcept { return defaults_; }
  size_t num_slots() const noexcept { return defaults_.size(); }
  // What a submit must keep alive until it completes (shared, so a queue can hold it cheaply).
  std::shared_ptr<const void> retained() const noexcept { return refs_; }
  // Bumped by every change; lowered forms are valid for one version.
  uint64_t version() const noexcept { return version_; }

  // A device queue's lowered form of this buffer, cached per (queue, version): null when there is none.
  std::shared_ptr<const void> lowered(const void* queue) const;
  void set_lowered(const void* queue, std::shared_ptr<const void> native) const;

 private:
  using Refs = std::vector<std::shared_ptr<const void>>;
  uint64_t field(const Operand& op, uint32_t word);  // records a patch site for a slot operand
  void begin(Op op, uint32_t nwords);
  void signal_op(Op op, const SignalRef& signal, Operand value, const char* what);  // wait and signal share it
  void keep(std::shared_ptr<const void> ref);

  std::vector<uint64_t> words_;
  std::vector<uint32_t> offsets_;
  std::vector<PatchSite> sites_;
  std::vector<uint64_t> defaults_;
  std::vector<Access> accesses_;
  std::shared_ptr<std::deque<std::string>> names_;  // the execs' kernel names (a deque: their addresses never move)
  std::shared_ptr<Refs> refs_;  // distinct references; copied on write while a submit shares them
  uint64_t version_ = 0;
  mutable const void* lowered_owner_ = nullptr;
  mutable uint64_t lowered_version_ = 0;
  mutable std::shared_ptr<const void> lowered_;
};

}  // namespace th::hcq
