#include "common/allocator.h"

#include <malloc.h>

namespace baton {

void keep_freed_memory_in_process() {
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
}

}  // namespace baton
