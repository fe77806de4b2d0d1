// A vector of trivially copyable items whose first N live inside the object: the scratch lists of the rewrite engine
// and the symbolic rules are short, and a heap allocation per call would cost more than the work.
#pragma once
#include <array>
#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace th {

template <class T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds plain data");

 public:
  SmallVector() = default;
  SmallVector(std::initializer_list<T> items) {
    for (const T& v : items) push_back(v);
  }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  void push_back(const T& v) {
    if (!spilled_ && size_ == N) {
      spill_.assign(inline_.begin(), inline_.end());
      spilled_ = true;
    }
    if (spilled_) spill_.push_back(v);
    else inline_[size_] = v;
    ++size_;
  }
  void pop_back() {
    if (spilled_) spill_.pop_back();
    --size_;
  }
  T& back() { return data()[size_ - 1]; }
  T& operator[](size_t i) { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }

 private:
  // Once past N items everything lives in spill_ (for good), so the items stay contiguous.
  T* data() { return spilled_ ? spill_.data() : inline_.data(); }
  std::array<T, N> inline_;
  std::vector<T> spill_;
  size_t size_ = 0;
  bool spilled_ = false;
};

}  // namespace th
