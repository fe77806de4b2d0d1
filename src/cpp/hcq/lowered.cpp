#include "tinyhybrid/hcq/lowered.h"

#include <stdexcept>

namespace th::hcq {

void Lowered::patch(std::span<uint32_t> stream_words, std::span<uint32_t> side_words, std::span<const uint64_t> slots,
                    uint64_t side_base) const {
  for (const LoweredSite& s : sites) {
    const uint64_t v = (s.slot == LoweredSite::kSideBase ? side_base : slots[s.slot]) + s.addend;
    uint32_t& w = s.side ? side_words[s.word] : stream_words[s.word];
    const uint32_t field = s.width >= 32 ? UINT32_MAX : (uint32_t(1) << s.width) - 1;
    w = (w & ~(field << s.bit)) | ((static_cast<uint32_t>(v >> s.from) & field) << s.bit);
  }
}

uint64_t RingSpace::reserve(uint64_t n, uint64_t align, const SignalRef& timeline) {
  if (n > bytes_) throw std::invalid_argument(what_ + ": a submit of " + std::to_string(n) + " bytes exceeds its ring of " + std::to_string(bytes_));
  uint64_t at = (head_ + align - 1) / align * align;
  if (at % bytes_ + n > bytes_) at += bytes_ - at % bytes_;  // wrap: never split a region
  // What the device read from these bytes a lap before must be done: the first submit whose regions reach past
  // at + n - bytes (and so every one before it), or the last when none does, as each may then overlap.
  if (at + n > bytes_ && !held_.empty()) {
    const uint64_t limit = at + n - bytes_;
    uint64_t value = held_.back().first;
    for (const auto& [v, end] : held_)
      if (end > limit) {
        value = v;
        break;
      }
    timeline->wait(value, kDefaultTimeout);
  }
  head_ = at + n;
  return at;
}

void RingSpace::retire(uint64_t reached) {
  while (!held_.empty() && held_.front().first <= reached) held_.pop_front();
}

bool CommandReader::next() {
  if (index_ >= cb_.size()) return false;
  const auto cmd = cb_.command(index_);
  words_.assign(cmd.begin(), cmd.end());
  slots_.assign(words_.size(), Operand::kLiteral);
  const auto sites = cb_.sites();
  for (; site_ < sites.size() && sites[site_].command == index_; ++site_) {
    slots_[sites[site_].word] = sites[site_].slot;
    words_[sites[site_].word] = sites[site_].addend;
  }
  ++index_;
  return true;
}

namespace {
constexpr uint64_t low_bits(uint32_t width) { return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1; }
}  // namespace

void LoweredWriter::stream(const Field& v, uint32_t from, uint32_t width, uint64_t add) {
  const uint32_t word = static_cast<uint32_t>(out_.stream.size());
  if (!v.patched()) {
    out_.stream.push_back(static_cast<uint32_t>(((v.value + add) >> from) & low_bits(width)));
    return;
  }
  out_.stream.push_back(0);
  out_.sites.push_back({v.slot, v.value + add, false, word, 0, static_cast<uint8_t>(width), static_cast<uint8_t>(from)});
}

void LoweredWriter::side(uint32_t word, const Field& v, uint32_t bit, uint32_t width, uint32_t from, uint64_t add) {
  if (!v.patched()) {
    const uint32_t field = static_cast<uint32_t>(low_bits(width)) << bit;
    out_.side[word] = (out_.side[word] & ~field) | ((static_cast<uint32_t>((v.value + add) >> from) << bit) & field);
    return;
  }
  out_.sites.push_back({v.slot, v.value + add, true, word, static_cast<uint8_t>(bit), static_cast<uint8_t>(width), static_cast<uint8_t>(from)});
}

void LoweredWriter::stream_side_address(uint64_t offset, uint32_t from, uint32_t width) {
  out_.sites.push_back({LoweredSite::kSideBase, offset, false, static_cast<uint32_t>(out_.stream.size()), 0, static_cast<uint8_t>(width),
                        static_cast<uint8_t>(from)});
  out_.stream.push_back(0);
}

void LoweredWriter::side_side_address(uint32_t word, uint32_t bit, uint32_t width, uint64_t offset, uint32_t from) {
  out_.sites.push_back({LoweredSite::kSideBase, offset, true, word, static_cast<uint8_t>(bit), static_cast<uint8_t>(width), static_cast<uint8_t>(from)});
}

uint32_t LoweredWriter::side_block(uint32_t words, uint32_t align_words) {
  const uint32_t at = static_cast<uint32_t>((out_.side.size() + align_words - 1) / align_words * align_words);
  out_.side.resize(at + words, 0);
  return at;
}

}  // namespace th::hcq
