// The count of CPU tensor memory: what is held now and the most held at
// once, through tensors made and freed.

#include "common/allocator.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace baton {
namespace {

TEST(CpuTensorMemory, CountsWhatIsHeldAndThePeak) {
  track_cpu_tensor_memory();
  track_cpu_tensor_memory();  // idempotent
  constexpr int64_t kMiB = 1 << 20;
  const int64_t before = cpu_tensor_bytes();
  reset_cpu_tensor_peak();
  EXPECT_EQ(cpu_tensor_peak_bytes(), before);
  {
    auto a = torch::empty({kMiB / 4}, torch::kFloat);  // 1 MiB
    EXPECT_EQ(cpu_tensor_bytes() - before, kMiB);
    {
      auto b = torch::ones({kMiB / 2}, torch::kFloat);  // 2 MiB
      EXPECT_EQ(cpu_tensor_bytes() - before, 3 * kMiB);
      EXPECT_FLOAT_EQ(b.sum().item<float>(), kMiB / 2);
    }
    EXPECT_EQ(cpu_tensor_bytes() - before, kMiB);
  }
  EXPECT_EQ(cpu_tensor_bytes(), before);
  EXPECT_GE(cpu_tensor_peak_bytes() - before, 3 * kMiB);
  reset_cpu_tensor_peak();
  EXPECT_EQ(cpu_tensor_peak_bytes(), cpu_tensor_bytes());
}

TEST(CpuTensorMemory, RawAllocationsAreCountedAndFreed) {
  track_cpu_tensor_memory();
  const int64_t before = cpu_tensor_bytes();
  auto* allocator = c10::GetCPUAllocator();
  void* p = allocator->raw_allocate(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);  // c10's alignment
  EXPECT_EQ(cpu_tensor_bytes() - before, 4096);
  allocator->raw_deallocate(p);
  EXPECT_EQ(cpu_tensor_bytes(), before);
}

}  // namespace
}  // namespace baton
