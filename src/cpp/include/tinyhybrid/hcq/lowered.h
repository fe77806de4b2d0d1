// A command buffer lowered into a device's own words (a GPU's pushbuffer or ring packets), once, with its patch
// sites mapped onto those words: what a GPU queue keeps in CommandBuffer::lowered() and copies into its ring on
// every submit, writing only the sites.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tinyhybrid/hcq/command_buffer.h"

namespace th::hcq {

// A 32-bit word of the lowered form that takes a value at submit: bits [from, from + width) of (the slot's value +
// addend) go to bits [bit, bit + width) of the word. Slot kSideBase stands for the side area's device address (a
// pointer from the stream, or from the side area, into the side area).
struct LoweredSite {
  static constexpr uint32_t kSideBase = UINT32_MAX;
  uint32_t slot;
  uint64_t addend;
  bool side;  // a word of the side area (else of the stream)
  uint32_t word;
  uint8_t bit, width, from;
};

struct Lowered {
  std::vector<uint32_t> stream;  // the queue's command words
  std::vector<uint32_t> side;    // what the commands read from memory (launch descriptors, kernel arguments)
  std::vector<LoweredSite> sites;
  // Writes every site into copies of the stream and the side area (placed at device address side_base), with one
  // value per slot of the command buffer.
  void patch(std::span<uint32_t> stream_words, std::span<uint32_t> side_words, std::span<const uint64_t> slots, uint64_t side_base) const;
};

// `cb` lowered for `queue`: the form cached on the buffer when it is still current, else lower(cb), then cached.
template <class Lower>
std::shared_ptr<const Lowered> cached_lowering(const CommandBuffer& cb, const void* queue, Lower&& lower) {
  if (auto cached = cb.lowered(queue)) return std::static_pointer_cast<const Lowered>(cached);
  auto fresh = std::make_shared<const Lowered>(lower(cb));
  cb.set_lowered(queue, fresh);
  return fresh;
}

// A ring of device memory that submits take regions of, in order (positions count bytes from the start, the ring
// offset is the position modulo its size). A region is reused once the timeline passed the submit that last held it.
class RingSpace {
 public:
  RingSpace(std::string what, uint64_t bytes) : what_(std::move(what)), bytes_(bytes) {}
  // The start of `n` bytes aligned to `align`, never split at the ring's end, after waiting (on `timeline`) for the
  // submits whose regions they reuse. std::invalid_argument when n exceeds the ring.
  uint64_t reserve(uint64_t n, uint64_t align, const SignalRef& timeline);
  // The regions reserved since the last commit belong to the submit that ends at timeline value `value`.
  void commit(uint64_t value) { held_.emplace_back(value, head_); }
  void retire(uint64_t reached);  // forgets the submits the timeline has passed
  uint64_t offset(uint64_t position) const noexcept { return position % bytes_; }

 private:
  std::string what_;
  uint64_t bytes_, head_ = 0;
  std::deque<std::pair<uint64_t, uint64_t>> held_;  // (timeline value, position after its regions)
};

// A field of a stream command as a lowering reads it: a literal, or a patch slot's value plus `value`.
struct Field {
  uint64_t value = 0;
  uint32_t slot = Operand::kLiteral;
  bool patched() const noexcept { return slot != Operand::kLiteral; }
};

// A command buffer's commands one at a time, each field with its patch site resolved.
class CommandReader {
 public:
  explicit CommandReader(const CommandBuffer& cb) : cb_(cb) {}
  bool next();  // to the next command (the first on the first call); false past the last
  size_t index() const noexcept { return index_ - 1; }
  Op op() const noexcept { return layout::op_of(words_[0]); }
  size_t size() const noexcept { return words_.size(); }
  Field at(uint32_t word) const noexcept { return {words_[word], slots_[word]}; }

 private:
  const CommandBuffer& cb_;
  size_t index_ = 0, site_ = 0;
  std::vector<uint64_t> words_;
  std::vector<uint32_t> slots_;
};

// Appends to a Lowered: literal words, and bits of fields, where a patched field becomes a site.
class LoweredWriter {
 public:
  explicit LoweredWriter(Lowered& out) : out_(out) {}
  void stream(uint32_t literal) { out_.stream.push_back(literal); }
  // Bits [from, from + width) of v + add as the next stream word.
  void stream(const Field& v, uint32_t from = 0, uint32_t width = 32, uint64_t add = 0);
  // Bits [from, from + width) of v + add into bits [bit, bit + width) of side word `word` (already there).
  void side(uint32_t word, const Field& v, uint32_t bit = 0, uint32_t width = 32, uint32_t from = 0, uint64_t add = 0);
  // The same with the side area's own address plus `offset` as the value (a pointer into the side area).
  void stream_side_address(uint64_t offset, uint32_t from, uint32_t width);
  void side_side_address(uint32_t word, uint32_t bit, uint32_t width, uint64_t offset, uint32_t from);
  // Reserves `words` zeroed side words at a multiple of `align_words`; returns the first one's index.
  uint32_t side_block(uint32_t words, uint32_t align_words);

 private:
  Lowered& out_;
};

}  // namespace th::hcq
