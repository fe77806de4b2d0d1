#include "drivers/nv/nv_queue.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "tinyhybrid/hcq/wait.h"

namespace th::nv {

NvQueue::NvQueue(std::string name, Gen gen, Engine engine, const Channel& channel, hcq::SignalRef timeline)
    : name_(std::move(name)),
      gen_(gen),
      engine_(engine),
      ch_(channel),
      timeline_(std::move(timeline)),
      push_(name_ + " pushbuffer", channel.push.bytes),
      side_(name_ + " side area", channel.side.bytes) {
  const uint64_t entries = ch_.gpfifo.bytes / 8;
  if (entries < 2 || (entries & (entries - 1)) != 0) throw std::invalid_argument(name_ + ": the GPFIFO ring must hold a power of two of entries");
  if (ch_.push.bytes % 4 != 0 || ch_.side.bytes % qmd::kAlign != 0 || ch_.side.gpu % qmd::kAlign != 0)
    throw std::invalid_argument(name_ + ": the pushbuffer ring must be whole words, the side ring 256-byte aligned");
  check_side_area(ch_.side.gpu, ch_.side.bytes);
  if (!ch_.gp_put || !ch_.gp_get || !ch_.doorbell || !timeline_) throw std::invalid_argument(name_ + ": the channel lacks GPPut, GPGet, the doorbell or a timeline");
  const uint32_t reach = 32 + (gen_ == Gen::Hopper ? host::kSemAddrHiBitsHopper : host::kSemAddrHiBitsAmpere);
  if (timeline_->address() >> reach != 0)
    throw std::invalid_argument(name_ + ": its timeline '" + timeline_->name() + "' lies past the " + std::to_string(reach) +
                                " bits of address the GPU's semaphores reach (put it in GPU memory)");
}

bool NvQueue::would_block(const hcq::CommandBuffer&) const {
  const uint64_t entries = ch_.gpfifo.bytes / 8;
  return (put_ + 1) % entries == *ch_.gp_get;
}

uint64_t NvQueue::submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches) {
  patches = slot_values(cb, patches);
  const std::lock_guard lock(mu_);
  const auto low = hcq::cached_lowering(cb, this, [&](const hcq::CommandBuffer& c) { return lower(c, gen_, engine_); });
  const uint64_t value = submitted_.load(std::memory_order_relaxed) + 1;
  const uint64_t reached = timeline_->value();
  push_.retire(reached);
  side_.retire(reached);
  while (!retained_.empty() && retained_.front().first <= reached) retained_.pop_front();

  const uint64_t push_words = low->stream.size() + 6;  // the methods, then the timeline's release
  const uint64_t push_at = push_.offset(push_.reserve(push_words * 4, 4, timeline_));
  const uint64_t side_at = low->side.empty() ? 0 : side_.offset(side_.reserve(low->side.size() * 4, qmd::kAlign, timeline_));
  auto* push = reinterpret_cast<uint32_t*>(ch_.push.host + push_at);
  auto* side = reinterpret_cast<uint32_t*>(ch_.side.host + side_at);
  std::memcpy(push, low->stream.data(), low->stream.size() * 4);
  if (!low->side.empty()) std::memcpy(side, low->side.data(), low->side.size() * 4);
  low->patch(std::span<uint32_t>(push, low->stream.size()), std::span<uint32_t>(side, low->side.size()), patches,
             ch_.side.gpu + side_at);
  const auto release = semaphore_release(gen_, timeline_->address(), value);
  std::memcpy(push + low->stream.size(), release.data(), sizeof(release));

  // The entry, then GPPut, then the doorbell, each visible before the next (the GPU reads them in that order).
  const uint64_t entries = ch_.gpfifo.bytes / 8;
  hcq::Backoff backoff;
  while ((put_ + 1) % entries == *ch_.gp_get) {
    backoff.step();
    if (backoff.elapsed() > hcq::kDefaultTimeout) throw std::runtime_error(name_ + ": the GPFIFO ring stayed full (GPGet " + std::to_string(*ch_.gp_get) + ")");
  }
  const auto entry = gpfifo_entry(ch_.push.gpu + push_at, static_cast<uint32_t>(push_words));
  std::memcpy(ch_.gpfifo.host + (put_ % entries) * 8, entry.data(), 8);
  put_ = static_cast<uint32_t>((put_ + 1) % entries);
  std::atomic_thread_fence(std::memory_order_release);
  *ch_.gp_put = put_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *ch_.doorbell = ch_.token;

  submitted_.store(value, std::memory_order_release);
  push_.commit(value);
  side_.commit(value);
  if (auto refs = cb.retained()) retained_.emplace_back(value, std::move(refs));
  return value;
}

}  // namespace th::nv
