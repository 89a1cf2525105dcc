#pragma once

// The on-disk format of a checkpoint: folder and file names, the tensor
// names of the optimizer state, and index.json (docs/checkpoints.md).
// Internal to checkpoint/.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace baton {

struct CheckpointLayout;

namespace checkpoint_index {

inline constexpr const char* kFormat = "baton-checkpoint";
/// 4: `layout` lists the mesh's axes by name (3: it names the degrees pp,
/// dp_replicate, dp_shard and tp); 3: `dataloader` holds the global
/// stream's one state (2: one per DP rank); 2: `layout` is an object (1: a
/// description string). Every version loads.
inline constexpr int kVersion = 4;
inline constexpr const char* kIndexFile = "index.json";

/// "step-N".
std::string step_dir_name(int64_t step);
/// N of a folder named exactly "step-N", else nothing.
std::optional<int64_t> parse_step_dir(const std::string& name);
/// "rank-00003.safetensors".
std::string rank_file_name(int64_t rank);
/// "optimizer.<param>.<field>".
std::string optimizer_fqn(const std::string& param, const char* field);

/// The layout as the index records it: the mesh's axes with their degrees,
/// the pipeline's stages per rank and schedule, the world size.
nlohmann::json layout_json(const CheckpointLayout& layout);
/// True when `saved` (an index's `layout`, of version 3 or 4) is the layout
/// `layout` runs (axes of degree 1 aside):
/// the same ranks hold the same things, so RNG states carry over.
bool same_layout(const nlohmann::json& saved, const CheckpointLayout& layout);
/// "pp 2 x tp 2 (2 stages per rank, Interleaved1F1B)" (version 4), "pp 2,
/// 2 stages per rank (Interleaved1F1B), dp 1" (version 3), for a log line.
std::string describe_layout(const nlohmann::json& layout);

/// Where one saved piece of a tensor is: its file, its first index along
/// each dimension of the whole tensor, its own shape, its CRC-32.
struct TensorSlice {
  std::string file;
  std::vector<int64_t> offsets;
  std::vector<int64_t> shape;
  uint32_t crc32 = 0;
};

/// One tensor's entry in the index: its dtype, whole shape and the slices
/// that hold it. In the file a tensor saved whole is `{"file", "dtype",
/// "shape", "crc32"}`; a sharded one is `{"dtype", "shape", "slices":
/// [{"file", "offsets", "shape", "crc32"}, ...]}`, the slices tiling it.
struct TensorEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<TensorSlice> slices;
};
/// Elements of a tensor of `shape` (1 for a scalar).
int64_t numel_of(const std::vector<int64_t>& shape);
/// Elements the box of `shape` at `offsets` shares with the other box.
int64_t overlap(
    const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& shape,
    const std::vector<int64_t>& other_offsets,
    const std::vector<int64_t>& other_shape);
/// Why `slices` do not tile a tensor of `shape` exactly (one inside it,
/// two overlapping, some elements in none); "" when they do.
std::string tiling_problem(
    const std::vector<int64_t>& shape, const std::vector<TensorSlice>& slices);

/// The entry of `fqn` in `index`, its slices checked to tile it; throws
/// CheckpointError naming `index_path` and the tensor when it is missing or
/// malformed.
TensorEntry tensor_entry(
    const nlohmann::json& index,
    const std::string& fqn,
    const std::string& index_path);

/// An index entry for the piece `shape` at `offsets` of a tensor of
/// `global_shape` that one rank wrote to `file` (make_index merges the
/// ranks' pieces).
nlohmann::json slice_json(
    const std::string& file,
    const std::string& dtype,
    const std::vector<int64_t>& global_shape,
    const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& shape,
    uint32_t crc32);

/// The index of the checkpoint in `dir`, its format and version checked;
/// throws CheckpointError naming the file.
nlohmann::json read_index(const std::filesystem::path& dir);

/// The index of a save: format, step, counters, layout and the optimizer's
/// state layout by name (`optimizer`), and what every
/// rank reported in `rank_metas` (each one's tensors, loader and RNG
/// state), the slices of a sharded tensor merged into its entry. Throws
/// std::logic_error when two ranks wrote one whole tensor, or when a
/// tensor's slices do not tile it.
nlohmann::json make_index(
    int64_t step,
    int64_t tokens_seen,
    const nlohmann::json& lr_steps,
    const CheckpointLayout& layout,
    const std::vector<std::string>& rank_metas,
    const std::string& optimizer = "AdamW");

/// Bytes of the tensors an index lists.
uint64_t tensor_bytes(const nlohmann::json& index);

}  // namespace checkpoint_index
}  // namespace baton
