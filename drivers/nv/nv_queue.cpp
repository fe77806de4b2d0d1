#include "drivers/nv/nv_queue.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "tinyhybrid/hcq/wait.h"

namespace th::nv {

NvQueue::NvQueue(std::string name, Gen gen, Engine engine, const Channel& channel, hcq::SignalRef timeline)
    : name_(std::move(name)), gen_(gen), engine_(engine), ch_(channel), timeline_(std::move(timeline)) {
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

std::shared_ptr<const Lowered> NvQueue::lowered_for(const hcq::CommandBuffer& cb) {
  if (auto cached = cb.lowered(this)) return std::static_pointer_cast<const Lowered>(cached);
  auto fresh = std::make_shared<const Lowered>(lower(cb, gen_, engine_));
  cb.set_lowered(this, fresh);
  return fresh;
}

bool NvQueue::would_block(const hcq::CommandBuffer&) const {
  const uint64_t entries = ch_.gpfifo.bytes / 8;
  return (put_ + 1) % entries == *ch_.gp_get;
}

uint64_t NvQueue::reserve(uint64_t& head, uint64_t bytes, uint64_t ring_bytes, uint64_t align, bool side) {
  if (bytes > ring_bytes) throw std::invalid_argument(name_ + ": a submit of " + std::to_string(bytes) + " bytes exceeds its ring of " + std::to_string(ring_bytes));
  head = (head + align - 1) / align * align;
  if (head % ring_bytes + bytes > ring_bytes) head += ring_bytes - head % ring_bytes;  // wrap: never split a region
  // What the GPU read of the ring before [head, head + bytes) came round to it must be done: the first submit whose
  // data reaches past head + bytes - ring_bytes, and so every one before it.
  const uint64_t limit = head + bytes - ring_bytes;
  if (head + bytes > ring_bytes && !inflight_.empty()) {
    const Inflight* wait = &inflight_.back();  // when none reaches past: the last, as every entry then may overlap
    for (const Inflight& f : inflight_)
      if ((side ? f.side_end : f.push_end) > limit) {
        wait = &f;
        break;
      }
    if (!timeline_->wait_for(wait->value, hcq::kDefaultTimeout))
      throw hcq::SignalTimeout(timeline_->name(), wait->value, timeline_->value(), hcq::kDefaultTimeout);
  }
  const uint64_t start = head;
  head += bytes;
  return start;
}

uint64_t NvQueue::submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches) {
  if (!patches.empty() && patches.size() != cb.num_slots())
    throw std::invalid_argument(name_ + ": submit got " + std::to_string(patches.size()) + " patch values for a command buffer with " +
                                std::to_string(cb.num_slots()) + " slots");
  if (patches.empty()) patches = cb.slot_defaults();
  const std::lock_guard lock(mu_);
  const auto low = lowered_for(cb);
  const uint64_t value = submitted_.load(std::memory_order_relaxed) + 1;
  for (const uint64_t reached = timeline_->value(); !inflight_.empty() && inflight_.front().value <= reached;) inflight_.pop_front();
  while (!retained_.empty() && retained_.front().first <= timeline_->value()) retained_.pop_front();

  const uint64_t push_words = low->stream.size() + 6;  // the methods, then the timeline's release
  const uint64_t push_at = reserve(push_head_, push_words * 4, ch_.push.bytes, 4, false);
  const uint64_t side_at = low->side.empty() ? side_head_ : reserve(side_head_, low->side.size() * 4, ch_.side.bytes, qmd::kAlign, true);
  auto* push = reinterpret_cast<uint32_t*>(ch_.push.host + push_at % ch_.push.bytes);
  auto* side = reinterpret_cast<uint32_t*>(ch_.side.host + side_at % ch_.side.bytes);
  std::memcpy(push, low->stream.data(), low->stream.size() * 4);
  if (!low->side.empty()) std::memcpy(side, low->side.data(), low->side.size() * 4);
  low->patch(std::span<uint32_t>(push, low->stream.size()), std::span<uint32_t>(side, low->side.size()), patches,
             ch_.side.gpu + side_at % ch_.side.bytes);
  const auto release = semaphore_release(gen_, timeline_->address(), value);
  std::memcpy(push + low->stream.size(), release.data(), sizeof(release));

  // The entry, then GPPut, then the doorbell, each visible before the next (the GPU reads them in that order).
  const uint64_t entries = ch_.gpfifo.bytes / 8;
  hcq::Backoff backoff;
  while ((put_ + 1) % entries == *ch_.gp_get) {
    backoff.step();
    if (backoff.elapsed() > hcq::kDefaultTimeout) throw std::runtime_error(name_ + ": the GPFIFO ring stayed full (GPGet " + std::to_string(*ch_.gp_get) + ")");
  }
  const auto entry = gpfifo_entry(ch_.push.gpu + push_at % ch_.push.bytes, static_cast<uint32_t>(push_words));
  std::memcpy(ch_.gpfifo.host + (put_ % entries) * 8, entry.data(), 8);
  put_ = static_cast<uint32_t>((put_ + 1) % entries);
  std::atomic_thread_fence(std::memory_order_release);
  *ch_.gp_put = put_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *ch_.doorbell = ch_.token;

  submitted_.store(value, std::memory_order_release);
  inflight_.push_back({value, push_head_, side_head_});
  if (auto refs = cb.retained()) retained_.emplace_back(value, std::move(refs));
  return value;
}

}  // namespace th::nv
