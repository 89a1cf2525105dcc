#include "common/allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <malloc.h>

#include <atomic>
#include <mutex>

namespace baton {

void keep_freed_memory_in_process() {
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
}

namespace {

std::atomic<int64_t> held_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<bool> tracking{false};

/// libtorch's CPU allocator with a count: each block carries its size in a
/// header of kHeader bytes (c10's 64-byte alignment kept), so the raw
/// deleter, which gets only the pointer, can subtract it.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    auto* block = static_cast<char*>(base_->raw_allocate(n + kHeader));
    *reinterpret_cast<size_t*>(block) = n;
    const int64_t now =
        held_bytes.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    int64_t peak = peak_bytes.load();
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
    }
    void* data = block + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release;
  }

  void copy_data(
      void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static void release(void* data) {
    char* block = static_cast<char*>(data) - kHeader;
    held_bytes.fetch_sub(
        static_cast<int64_t>(*reinterpret_cast<size_t*>(block)));
    instance_base->raw_deallocate(block);
  }

  static constexpr size_t kHeader = 64;
  static c10::Allocator* instance_base;

 private:
  c10::Allocator* base_;
};

c10::Allocator* CountingCpuAllocator::instance_base = nullptr;

}  // namespace

void track_cpu_tensor_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    CountingCpuAllocator::instance_base = base;
    // Never freed: tensors may outlive every other static.
    static auto* counting = new CountingCpuAllocator(base);
    c10::SetCPUAllocator(counting, /*priority=*/1);
    tracking = true;
  });
}

int64_t cpu_tensor_bytes() {
  return tracking ? held_bytes.load() : 0;
}

int64_t cpu_tensor_peak_bytes() {
  return tracking ? peak_bytes.load() : 0;
}

void reset_cpu_tensor_peak() {
  peak_bytes = held_bytes.load();
}

}  // namespace baton
