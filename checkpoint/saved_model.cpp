#include "checkpoint/saved_model.h"

#include <ATen/ATen.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_detail.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/safetensors.h"
#include "common/error.h"
#include "common/text.h"
#include "models/model_spec.h"

namespace baton {

namespace fs = std::filesystem;
using json = nlohmann::json;
using checkpoint_detail::fail;

namespace {

/// The step folder `dir` names: itself when it holds an index, else its
/// latest complete step.
std::pair<fs::path, int64_t> step_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fail(
        dir.string() +
        ": not a folder; allowed: a checkpoint folder "
        "(<dump_folder>/checkpoint) or one of its step-N folders");
  }
  if (fs::exists(dir / checkpoint_index::kIndexFile, ec)) {
    const auto step = checkpoint_index::parse_step_dir(
        fs::absolute(dir).lexically_normal().filename().string());
    return {dir, step.value_or(-1)};
  }
  const auto steps = CheckpointManager::list_steps(dir);
  if (steps.empty()) {
    fail(
        dir.string() +
        ": holds no complete checkpoint (no step-N folder "
        "with an index.json); allowed: a checkpoint folder "
        "(<dump_folder>/checkpoint, written with checkpoint.enable) or one "
        "of its step-N folders");
  }
  return {dir / checkpoint_index::step_dir_name(steps.back()), steps.back()};
}

std::string family_names() {
  return join(model_registry().names(), ", ");
}

}  // namespace

SavedModel read_checkpoint_model(const fs::path& dir) {
  register_builtin_models();
  SavedModel saved;
  std::tie(saved.dir, saved.step) = step_folder(dir);
  const json index = checkpoint_index::read_index(saved.dir);
  const std::string index_path =
      (saved.dir / checkpoint_index::kIndexFile).string();
  if (!index.contains("model") || !index["model"].is_object()) {
    fail(
        index_path +
        ": records no model (a checkpoint saved before Baton "
        "recorded its family); allowed: a checkpoint saved since, or its "
        "HF export with --hf");
  }
  const json& record = index["model"];
  try {
    saved.family = record.at("model").get<std::string>();
    saved.args = model_args_from_json(record);
    saved.tokenizer = record.value("tokenizer", std::string());
    saved.tokenizer_path = record.value("tokenizer_path", std::string());
    saved.name = saved.family + " " + record.value("flavor", std::string());
  } catch (const std::exception& e) {
    fail(index_path + ": its model record is malformed (" + e.what() + ")");
  }
  if (!model_registry().contains(saved.family)) {
    fail(
        index_path + ": saved from model family '" + saved.family +
        "', which this binary has not registered; allowed: " + family_names());
  }
  return saved;
}

SavedModel read_hf_model(const fs::path& dir, const std::string& where) {
  register_builtin_models();
  const fs::path file = dir / hf_folder::kConfigFile;
  std::ifstream in(file);
  if (!in) {
    throw ConfigError(
        where + ": " + dir.string() + ": has no " + hf_folder::kConfigFile +
        " (or it cannot be read); allowed: a Hugging Face folder "
        "(config.json, model.safetensors or its shards and index)");
  }
  json config;
  try {
    config = json::parse(in);
  } catch (const std::exception& e) {
    throw ConfigError(
        where + ": " + file.string() + ": not valid JSON: " + e.what());
  }
  const std::string model_type =
      config.is_object() ? config.value("model_type", std::string()) : "";
  SavedModel saved;
  std::vector<std::string> known;
  for (const auto& name : model_registry().names()) {
    const HfFormat& format = model_registry().get(name).hf;
    if (!format.defined()) {
      continue;
    }
    known.push_back(format.model_type + " (" + name + ")");
    if (format.model_type == model_type) {
      saved.family = name;
    }
  }
  if (saved.family.empty()) {
    throw ConfigError(
        where + ": " + file.string() + ": model_type '" + model_type +
        "' is not a family this binary has registered; allowed: " +
        join(known, ", "));
  }
  saved.args = model_registry()
                   .get(saved.family)
                   .hf.read_config(config, where + ": " + file.string());
  saved.name = saved.family + " (" + file.string() + ")";
  saved.dir = dir;
  saved.hf = true;
  if (!fs::exists(dir / hf_folder::kIndexFile) &&
      !fs::exists(dir / hf_folder::kSingleFile)) {
    throw ConfigError(
        where + ": " + dir.string() + ": has neither " + hf_folder::kIndexFile +
        " nor " + hf_folder::kSingleFile);
  }
  if (fs::exists(dir / "tokenizer.json")) {
    saved.tokenizer = "huggingface";
    saved.tokenizer_path = (dir / "tokenizer.json").string();
  }
  return saved;
}

void load_saved_weights(const SavedModel& saved, torch::nn::Module& model) {
  std::vector<checkpoint_detail::WantedTensor> wanted;
  std::vector<std::string> fqns;
  for (const auto& item : model.named_parameters()) {
    const at::Tensor& p = item.value();
    const std::vector<int64_t> shape = p.sizes().vec();
    wanted.push_back(
        {item.key(),
         saved.hf ? p.scalar_type() : at::kFloat,
         shape,
         shape,
         std::vector<int64_t>(shape.size(), 0)});
    fqns.push_back(item.key());
  }
  std::sort(fqns.begin(), fqns.end());
  fqns.erase(std::unique(fqns.begin(), fqns.end()), fqns.end());
  std::map<std::string, at::Tensor> tensors;
  if (saved.hf) {
    const HfFormat& format = model_registry().get(saved.family).hf;
    checkpoint_detail::read_hf_tensors(
        saved.dir, format, saved.args, wanted, fqns, tensors);
  } else {
    // A checkpoint holds float32 weights (and the optimizer's state,
    // which is not read).
    const json index = checkpoint_index::read_index(saved.dir);
    const std::string index_path =
        (saved.dir / checkpoint_index::kIndexFile).string();
    std::vector<std::string> saved_fqns = fqns;
    for (const auto& [fqn, entry] : index.at("tensors").items()) {
      if (fqn.rfind("optimizer.", 0) == 0) {
        saved_fqns.push_back(fqn);
      }
    }
    std::sort(saved_fqns.begin(), saved_fqns.end());
    checkpoint_detail::check_fqns(index, index_path, saved_fqns);
    checkpoint_detail::read_saved_tensors(index, saved.dir, wanted, tensors);
  }
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters()) {
    item.value().copy_(tensors.at(item.key()));
  }
}

}  // namespace baton
