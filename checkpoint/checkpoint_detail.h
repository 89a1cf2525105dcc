#pragma once

// What CheckpointManager's files share and nothing else uses: the tag and
// error helpers, the collectives every rank's agreement goes through,
// durable writes and the copy of one slice into another. Defined in
// checkpoint.cpp.

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace baton {

namespace dist {
class ProcessGroup;
}

namespace checkpoint_detail {

inline const std::string kTag = "[checkpoint] ";

double seconds_since(std::chrono::steady_clock::time_point start);

/// Every member's `s`, in group-rank order.
std::vector<std::string> all_gather_strings(
    dist::ProcessGroup& group, const std::string& s);

/// Throws CheckpointError("[checkpoint] " + what).
[[noreturn]] void fail(const std::string& what);

/// `message` without a leading "[checkpoint] ".
std::string untagged(const std::string& message);

/// The first non-empty error of any rank, thrown on every rank (so that no
/// rank goes on alone and nobody waits for a rank that stopped).
void throw_any(dist::ProcessGroup& group, const std::string& error);

at::Tensor cpu_rng_state();

/// Writes `text` to `path` and fsyncs it.
void write_synced(const std::filesystem::path& path, const std::string& text);

/// Replaces `to` by `from` (both folders) and makes the rename durable.
void replace_folder(
    const std::filesystem::path& from, const std::filesystem::path& to);

/// Copies the part of `src` (a slice at `src_offsets` of the whole tensor)
/// that falls in `dst` (a slice at `dst_offsets`); returns its elements.
int64_t copy_overlap(
    const at::Tensor& src,
    const std::vector<int64_t>& src_offsets,
    at::Tensor& dst,
    const std::vector<int64_t>& dst_offsets);

}  // namespace checkpoint_detail
}  // namespace baton
