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
    : name_(std::move(name)),
      gen_(gen),
      engine_(engine),
      ch_(channel),
      ring_dwords_(channel.ring.bytes / 4),
      timeline_(std::move(timeline)),
      side_(name_ + " arguments", channel.side.bytes) {
  if (ring_dwords_ < 64 || (ring_dwords_ & (ring_dwords_ - 1)) != 0) throw std::invalid_argument(name_ + ": the ring must be a power of two of at least 64 dwords");
  if (ch_.side.bytes % 16 != 0) throw std::invalid_argument(name_ + ": the side ring must be a multiple of 16 bytes");
  if (!ch_.wptr || !ch_.rptr || !ch_.doorbell || !timeline_) throw std::invalid_argument(name_ + ": the ring lacks its pointers, doorbell or timeline");
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
  patches = slot_values(cb, patches);
  const std::lock_guard lock(mu_);
  const auto low = hcq::cached_lowering(cb, this, [&](const hcq::CommandBuffer& c) { return lower(c, gen_, engine_); });
  const uint64_t value = submitted_.load(std::memory_order_relaxed) + 1;
  const auto reached = timeline_->value();
  while (!retained_.empty() && retained_.front().first <= reached) retained_.pop_front();
  side_.retire(reached);

  // The side ring: the arguments, after the GPU is done with what used those bytes before.
  const uint64_t side_bytes = low->side.size() * 4;
  const uint64_t side_at = side_bytes == 0 ? 0 : side_.offset(side_.reserve(side_bytes, 16, timeline_));

  std::vector<uint32_t> stream(low->stream);
  auto* side = reinterpret_cast<uint32_t*>(ch_.side.host + side_at);
  if (!low->side.empty()) std::memcpy(side, low->side.data(), side_bytes);
  low->patch(stream, std::span<uint32_t>(side, low->side.size()), patches, ch_.side.gpu + side_at);
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
  side_.commit(value);
  if (auto refs = cb.retained()) retained_.emplace_back(value, std::move(refs));
  return value;
}

}  // namespace th::amd
