#pragma once

// A Hugging Face `transformers` folder, as `checkpoint.initial_load_hf`
// reads it and `checkpoint.export_format: hf` writes it
// (docs/checkpoints.md):
//   DIR/config.json                    the family's config fields
//   DIR/model.safetensors.index.json   {"metadata": {"total_size": N},
//                                       "weight_map": {name: file}}
//   DIR/model-0000K-of-0000N.safetensors (or one DIR/model.safetensors,
//                                       with or without the index)
// The names, the permutations and config.json's fields are the model
// family's (ModelSpec::hf, models/hf_format.h). Internal to checkpoint/.

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/hf_format.h"
#include "models/model_args.h"

namespace baton {
struct SafetensorsEntry;
}

namespace baton::hf_folder {

inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";
inline constexpr const char* kSingleFile = "model.safetensors";
inline constexpr const char* kGenerationConfigFile = "generation_config.json";

/// The model.safetensors.index.json of `entries`, all in `file`.
nlohmann::json index_json(
    const std::vector<SafetensorsEntry>& entries, const std::string& file);

/// Checks DIR (the value of checkpoint.initial_load_hf): config.json is
/// there, parses, is read by `format` (the run's family) into the shape of
/// `model` (the run's, `model_name` in messages: "llama3 8B"), and a
/// weights file (the index or model.safetensors) is beside it. Throws
/// ConfigError naming the key, the file and the field.
void check_folder(
    const std::filesystem::path& dir,
    const HfFormat& format,
    const ModelArgs& model,
    const std::string& model_name);

/// The tensors of an HF folder and the file that lists them.
struct WeightMap {
  /// The index, or model.safetensors without one: where a missing or extra
  /// name is reported.
  std::string listing;
  /// HF name -> file name in the folder.
  std::map<std::string, std::string> files;
};
/// Reads DIR's index (or model.safetensors' header). Throws CheckpointError
/// naming the file when it is malformed.
WeightMap read_weight_map(const std::filesystem::path& dir);

/// Whether a tensor of an HF folder is one Baton has no use for and may
/// skip: the rotary tables (`rotary_emb.inv_freq`) older exports saved.
bool ignorable(const std::string& hf_name);

}  // namespace baton::hf_folder
