#pragma once

#include <cstdint>

namespace baton {

/// Keeps freed memory inside the process instead of handing large blocks
/// back to the kernel. glibc maps every allocation over its mmap threshold
/// (at most 32 MiB) afresh and unmaps it on free, so each activation-sized
/// tensor pays page faults on first touch: measured here, one attention
/// layer of the debug model ran 12x faster with this set. Process-wide and
/// idempotent; call before the first tensor is allocated.
void keep_freed_memory_in_process();

/// Counts the bytes of every CPU tensor allocation from now on: installs,
/// once, an allocator over libtorch's CPU one that keeps the bytes held now
/// and the most held at once. Process-wide and idempotent; call before the
/// model is built, or the tensors made earlier are not counted (their frees
/// are not either).
void track_cpu_tensor_memory();

/// Bytes of CPU tensors (and other CPU allocator blocks) held now, and the
/// most held at once since the last reset_cpu_tensor_peak(); 0 when
/// tracking is off.
int64_t cpu_tensor_bytes();
int64_t cpu_tensor_peak_bytes();
/// Starts a new peak from what is held now.
void reset_cpu_tensor_peak();

}  // namespace baton
