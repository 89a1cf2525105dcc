#pragma once

// What CheckpointManager's files share and nothing else uses: the tag and
// error helpers, the collectives every rank's agreement goes through,
// durable writes and the copy of one slice into another. Defined in
// checkpoint.cpp.

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace baton {

namespace dist {
class ProcessGroup;
}
struct HfFormat;
struct ModelArgs;
class SafetensorsReader;

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

/// A tensor a load reads: this process's shape of it, and where that sits
/// in the whole tensor.
struct WantedTensor {
  std::string fqn;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};

// Defined in checkpoint_load.cpp.

/// The tensor `fqn` of `reader`, checked against what index.json says of
/// it (dtype, shape, CRC-32).
at::Tensor read_checked(
    const SafetensorsReader& reader,
    const std::string& fqn,
    at::ScalarType dtype,
    const std::vector<int64_t>& shape,
    uint32_t crc32);

/// Fails when a tensor of `model_fqns` (sorted: every rank's) is missing
/// from `index`, or `index` has one that is not among them.
void check_fqns(
    const nlohmann::json& index,
    const std::string& index_path,
    const std::vector<std::string>& model_fqns);

/// Fails when `index` records the model it was saved from (checkpoints
/// since the model families) and `record` (this run's) is another family
/// or shape, naming the config key to change.
void check_model(
    const nlohmann::json& index,
    const std::string& index_path,
    const nlohmann::json& record);

/// Reads each of `wanted` from the checkpoint step folder `dir` (whose
/// index.json is `index`) into `tensors[fqn]`: the saved slices that
/// overlap it, each checked (dtype, shape, CRC-32). Fails naming the file
/// and the tensor.
void read_saved_tensors(
    const nlohmann::json& index,
    const std::filesystem::path& dir,
    const std::vector<WantedTensor>& wanted,
    std::map<std::string, at::Tensor>& tensors);

/// Reads each of `wanted` from the Hugging Face folder `dir` (of `format`'s
/// family, shaped `args`) into `tensors[fqn]`, renamed and permuted into
/// Baton's layout; fails when a name of `model_fqns` (every rank's) is
/// missing or the folder has one the model has not.
void read_hf_tensors(
    const std::filesystem::path& dir,
    const HfFormat& format,
    const ModelArgs& args,
    const std::vector<WantedTensor>& wanted,
    const std::vector<std::string>& model_fqns,
    std::map<std::string, at::Tensor>& tensors);

}  // namespace checkpoint_detail
}  // namespace baton
