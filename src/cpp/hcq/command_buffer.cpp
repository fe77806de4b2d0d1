#include "tinyhybrid/hcq/command_buffer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace th::hcq {

const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::Barrier: return "barrier";
    case Op::Wait: return "wait";
    case Op::Signal: return "signal";
    case Op::Exec: return "exec";
    case Op::Copy: return "copy";
    case Op::Timestamp: return "timestamp";
  }
  return "unknown";
}

CommandBuffer::CommandBuffer() : refs_(std::make_shared<Refs>()) {}

uint32_t CommandBuffer::add_slot(uint64_t initial) {
  if (defaults_.size() >= Operand::kLiteral) throw std::length_error("CommandBuffer: too many patch slots");
  defaults_.push_back(initial);
  ++version_;
  return static_cast<uint32_t>(defaults_.size() - 1);
}

void CommandBuffer::set_default(uint32_t slot, uint64_t value) {
  if (slot >= defaults_.size())
    throw std::out_of_range("CommandBuffer: no patch slot " + std::to_string(slot) + " (it has " +
                            std::to_string(defaults_.size()) + ")");
  defaults_[slot] = value;
  ++version_;
}

void CommandBuffer::begin(Op op, uint32_t nwords) {
  // Callers check nwords <= kMaxWords; a command whose operand is rejected after begin() is removed again
  // by the Rollback in that command.
  offsets_.push_back(static_cast<uint32_t>(words_.size()));
  words_.push_back(layout::header(op, nwords));
  ++version_;
}

uint64_t CommandBuffer::field(const Operand& op, uint32_t word) {
  if (!op.patched()) return op.value;
  if (op.slot >= defaults_.size())
    throw std::out_of_range("CommandBuffer: patch slot " + std::to_string(op.slot) + " does not exist (it has " +
                            std::to_string(defaults_.size()) + "; add_slot first)");
  sites_.push_back({static_cast<uint32_t>(offsets_.size() - 1), word, op.slot, op.value});
  return defaults_[op.slot] + op.value;
}

void CommandBuffer::keep(std::shared_ptr<const void> ref) {
  if (!ref) return;
  if (std::find(refs_->begin(), refs_->end(), ref) != refs_->end()) return;
  // A queue may still hold the current list for a running submit: never change it under it.
  if (refs_.use_count() > 1) refs_ = std::make_shared<Refs>(*refs_);
  refs_->push_back(std::move(ref));
}

namespace {
// Undo a partly appended command when one of its operands is rejected.
struct Rollback {
  std::vector<uint64_t>& words;
  std::vector<uint32_t>& offsets;
  std::vector<CommandBuffer::PatchSite>& sites;
  size_t nwords = words.size(), noffsets = offsets.size(), nsites = sites.size();
  bool done = false;
  ~Rollback() {
    if (done) return;
    words.resize(nwords);
    offsets.resize(noffsets);
    sites.resize(nsites);
  }
};

void check_signal(const SignalRef& s, const char* what) {
  if (!s) throw std::invalid_argument(std::string("CommandBuffer.") + what + ": null signal");
}
}  // namespace

void CommandBuffer::signal_op(Op op, const SignalRef& signal, Operand value, const char* what) {
  check_signal(signal, what);
  Rollback rb{words_, offsets_, sites_};
  begin(op, layout::kSignalWords);
  words_.push_back(signal->address());
  words_.push_back(field(value, layout::kSignalValue));
  keep(signal);
  rb.done = true;
}

void CommandBuffer::wait(const SignalRef& signal, Operand value) { signal_op(Op::Wait, signal, value, "wait"); }
void CommandBuffer::signal(const SignalRef& signal, Operand value) { signal_op(Op::Signal, signal, value, "signal"); }

void CommandBuffer::exec(const Program& program, std::span<const Operand> args, Dims global, Dims local) {
  if (program.fn() == nullptr) throw std::invalid_argument("CommandBuffer.exec: program '" + program.name() + "' has no function");
  if (args.size() > layout::kMaxExecArgs)
    throw std::invalid_argument("CommandBuffer.exec: program '" + program.name() + "' gets " + std::to_string(args.size()) +
                                " arguments; a command holds at most " + std::to_string(layout::kMaxExecArgs));
  Rollback rb{words_, offsets_, sites_};
  begin(Op::Exec, layout::kExecArgs + static_cast<uint32_t>(args.size()));
  words_.push_back(program.address());
  if (!names_) keep(names_ = std::make_shared<std::deque<std::string>>());
  if (names_->empty() || names_->back() != program.name()) names_->push_back(program.name());
  words_.push_back(reinterpret_cast<uint64_t>(names_->back().c_str()));
  const Operand dims[6] = {global.x, global.y, global.z, local.x, local.y, local.z};
  for (uint32_t i = 0; i < 6; ++i) words_.push_back(field(dims[i], layout::kExecGlobal + i));
  for (uint32_t i = 0; i < args.size(); ++i) words_.push_back(field(args[i], layout::kExecArgs + i));
  keep(program.keepalive());
  rb.done = true;
}

void CommandBuffer::copy(Operand dst, Operand src, Operand nbytes) {
  Rollback rb{words_, offsets_, sites_};
  begin(Op::Copy, layout::kCopyWords);
  words_.push_back(field(dst, layout::kCopyDst));
  words_.push_back(field(src, layout::kCopySrc));
  words_.push_back(field(nbytes, layout::kCopySize));
  rb.done = true;
}

void CommandBuffer::timestamp(const SignalRef& signal) {
  check_signal(signal, "timestamp");
  timestamp(signal->address());
  keep(signal);
}

void CommandBuffer::timestamp(uint64_t address) {
  // A device writes the word atomically: it must be aligned (checked here, since it cannot be patched).
  if (address == 0 || address % 8 != 0)
    throw std::invalid_argument("CommandBuffer.timestamp: address " + std::to_string(address) + " is not a non-null, 8-byte aligned word");
  begin(Op::Timestamp, layout::kTimestampWords);
  words_.push_back(address);
}

void CommandBuffer::barrier() { begin(Op::Barrier, 1); }

void CommandBuffer::access(Operand buffer, uint64_t begin, uint64_t end, bool write) {
  if (end < begin)
    throw std::invalid_argument("CommandBuffer.access: range end " + std::to_string(end) + " is before its begin " + std::to_string(begin));
  if (buffer.patched() && buffer.slot >= num_slots())
    throw std::out_of_range("CommandBuffer.access: slot " + std::to_string(buffer.slot) + " of " + std::to_string(num_slots()));
  accesses_.push_back({buffer, begin, end, write});
}

std::span<const uint64_t> CommandBuffer::command(size_t i) const {
  if (i >= offsets_.size()) throw std::out_of_range("CommandBuffer: no command " + std::to_string(i));
  const uint64_t* w = words_.data() + offsets_[i];
  return {w, layout::words_of(w[0])};
}

std::shared_ptr<const void> CommandBuffer::lowered(const void* queue) const {
  return (queue == lowered_owner_ && version_ == lowered_version_) ? lowered_ : nullptr;
}

void CommandBuffer::set_lowered(const void* queue, std::shared_ptr<const void> native) const {
  lowered_owner_ = queue;
  lowered_version_ = version_;
  lowered_ = std::move(native);
}

}  // namespace th::hcq
