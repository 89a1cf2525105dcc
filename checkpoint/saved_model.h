#pragma once

// A trained model read back outside a training run (`baton generate`):
// what a Baton checkpoint or a Hugging Face folder says it holds (family,
// shape, tokenizer), and its weights into a whole model on one process.

#include <torch/nn/module.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "models/model_args.h"

namespace baton {

struct SavedModel {
  /// The family's registry name ("llama3") and how messages name the
  /// model ("llama3 debugmodel").
  std::string family;
  std::string name;
  ModelArgs args;
  /// The tokenizer registry's kind and its file ("" for bytes), as the
  /// run recorded them or as found beside an HF folder ("huggingface",
  /// its tokenizer.json); kind "" where neither says.
  std::string tokenizer;
  std::string tokenizer_path;
  /// The folder the weights are read from: the checkpoint's step folder,
  /// or the HF folder.
  std::filesystem::path dir;
  /// The checkpoint's step (-1 for an HF folder).
  int64_t step = -1;
  bool hf = false;
};

/// The Baton checkpoint at `dir`: a checkpoint folder
/// (`<dump_folder>/checkpoint`, its latest complete step) or one step
/// folder (`step-N`, holding index.json). Throws CheckpointError (exit 1)
/// naming the folder when it holds no complete step, its index is damaged,
/// or the index records no model (saved before the model families) or one
/// of a family not registered.
SavedModel read_checkpoint_model(const std::filesystem::path& dir);

/// The Hugging Face folder at `dir`: config.json's model_type names the
/// registered family whose HF layout has it, which reads the shape; a
/// tokenizer.json beside it is the tokenizer ("huggingface"). Throws
/// ConfigError (exit 2) naming `where` (the flag), the file and the field
/// for a folder without config.json, a config of no registered family, or
/// a field the family cannot take.
SavedModel read_hf_model(
    const std::filesystem::path& dir, const std::string& where);

/// Copies the weights `saved` names into `model`, a whole model of
/// saved.args on one process (every parameter whole, float32 or bfloat16),
/// after reading and checking every one of them (checksums, shapes, no
/// missing or extra tensor); throws CheckpointError naming the file and the
/// tensor, leaving `model` as it was.
void load_saved_weights(const SavedModel& saved, torch::nn::Module& model);

}  // namespace baton
