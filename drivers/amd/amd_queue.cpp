#include "drivers/amd/amd_queue.h"

#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tinyhybrid/hcq/wait.h"

namespace th::amd {

namespace {

// What ends a submit: the timeline raised to `value`, after the submit's work (a compute ring's end-of-pipe release,
// or an SDMA fence of each half). Written as a stream command of its own, through the same encoder.
hcq::Lowered timeline_release(Gen gen, Engine engine, const hcq::SignalRef& timeline, uint64_t value) {
  hcq::CommandBuffer cb;
  cb.signal(timeline, value);
  return lower(cb, gen, engine);
}

}  // namespace

AmdQueue::AmdQueue(std::string name, Gen gen, Engine engine, const RingChannel& channel, hcq::SignalRef timeline)
    : name_(std::move(name)), gen_(gen), engine_(engine), ch_(channel), ring_dwords_(channel.ring.bytes / 4), timeline_(std::move(timeline)) {
  if (ring_dwords_ < 64 || (ring_dwords_ & (ring_dwords_ - 1)) != 0) throw std::invalid_argument(name_ + ": the ring must be a power of two of at least 64 dwords");
  if (ch_.side.bytes % 16 != 0) throw std::invalid_argument(name_ + ": the side ring must be a multiple of 16 bytes");
  if (!ch_.wptr || !ch_.rptr || !ch_.doorbell || !timeline_) throw std::invalid_argument(name_ + ": the ring lacks its pointers, doorbell or timeline");
}

std::shared_ptr<const hcq::Lowered> AmdQueue::lowered_for(const hcq::CommandBuffer& cb) {
  if (auto cached = cb.lowered(this)) return std::static_pointer_cast<const hcq::Lowered>(cached);
  auto fresh = std::make_shared<const hcq::Lowered>(lower(cb, gen_, engine_));
  cb.set_lowered(this, fresh);
  return fresh;
}

bool AmdQueue::would_block(const hcq::CommandBuffer&) const { return wptr_ - *ch_.rptr > ring_dwords_ / 2; }

void AmdQueue::wait_ring_space(uint64_t dwords) {
  if (dwords > ring_dwords_) throw std::invalid_argument(name_ + ": a submit of " + std::to_string(dwords) + " dwords exceeds its ring");
  hcq::Backoff backoff;
  while (wptr_ + dwords - *ch_.rptr > ring_dwords_) {
    backoff.step();
    if (backoff.elapsed() > hcq::kDefaultTimeout)
      throw std::runtime_error(name_ + ": the ring stayed full (read pointer " + std::to_string(*ch_.rptr) + ")");
  }
}

void AmdQueue::write(std::span<const uint32_t> dwords) {
  auto* ring = reinterpret_cast<uint32_t*>(ch_.ring.host);
  std::memcpy(ring + wptr_ % ring_dwords_, dwords.data(), dwords.size() * 4);
  wptr_ += dwords.size();
}

uint64_t AmdQueue::submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches) {
  if (!patches.empty() && patches.size() != cb.num_slots())
    throw std::invalid_argument(name_ + ": submit got " + std::to_string(patches.size()) + " patch values for a command buffer with " +
                                std::to_string(cb.num_slots()) + " slots");
  if (patches.empty()) patches = cb.slot_defaults();
  const std::lock_guard lock(mu_);
  const auto low = lowered_for(cb);
  const uint64_t value = submitted_.load(std::memory_order_relaxed) + 1;
  const auto reached = timeline_->value();
  while (!retained_.empty() && retained_.front().first <= reached) retained_.pop_front();
  while (!side_inflight_.empty() && side_inflight_.front().first <= reached) side_inflight_.pop_front();

  // The side ring: the arguments, after the GPU is done with what used those bytes before.
  uint64_t side_at = (side_head_ + 15) / 16 * 16;
  const uint64_t side_bytes = low->side.size() * 4;
  if (side_bytes > ch_.side.bytes) throw std::invalid_argument(name_ + ": a submit's arguments exceed the side ring");
  if (side_at % ch_.side.bytes + side_bytes > ch_.side.bytes) side_at += ch_.side.bytes - side_at % ch_.side.bytes;
  // Earlier arguments the GPU may still read from these bytes: those of the first submit reaching past the region's
  // previous lap (and so of every one before it), or of the last when none does.
  if (side_at + side_bytes > ch_.side.bytes && !side_inflight_.empty()) {
    const uint64_t limit = side_at + side_bytes - ch_.side.bytes;
    uint64_t v = side_inflight_.back().first;
    for (const auto& [value, end] : side_inflight_)
      if (end > limit) {
        v = value;
        break;
      }
    if (!timeline_->wait_for(v, hcq::kDefaultTimeout)) throw hcq::SignalTimeout(timeline_->name(), v, timeline_->value(), hcq::kDefaultTimeout);
  }
  side_head_ = side_at + side_bytes;

  std::vector<uint32_t> stream(low->stream);
  auto* side = reinterpret_cast<uint32_t*>(ch_.side.host + side_at % ch_.side.bytes);
  if (!low->side.empty()) std::memcpy(side, low->side.data(), side_bytes);
  low->patch(stream, std::span<uint32_t>(side, low->side.size()), patches, ch_.side.gpu + side_at % ch_.side.bytes);
  const auto release = timeline_release(gen_, engine_, timeline_, value);
  stream.insert(stream.end(), release.stream.begin(), release.stream.end());

  // Packets never straddle the ring's end: a NOP fills it first (PM4: a NOP of that length; SDMA: one-dword NOPs).
  const uint64_t to_end = ring_dwords_ - wptr_ % ring_dwords_;
  if (stream.size() > to_end) {
    wait_ring_space(to_end + stream.size());
    std::vector<uint32_t> fill(to_end, sdma::header(sdma::kNop));
    // PM4: one NOP over the rest (a body of 0 dwords is COUNT 0x3FFF, the header-only NOP)
    if (engine_ == Engine::Compute) fill[0] = pm4::header(pm4::kNop, static_cast<uint32_t>(to_end - 1));
    write(fill);
  } else {
    wait_ring_space(stream.size());
  }
  write(stream);
  std::atomic_thread_fence(std::memory_order_release);
  *ch_.wptr = wptr_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *ch_.doorbell = engine_ == Engine::Copy ? wptr_ * 4 : wptr_;

  submitted_.store(value, std::memory_order_release);
  if (!low->side.empty()) side_inflight_.emplace_back(value, side_head_);
  if (auto refs = cb.retained()) retained_.emplace_back(value, std::move(refs));
  return value;
}

}  // namespace th::amd
