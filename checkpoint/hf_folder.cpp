#include "checkpoint/hf_folder.h"

#include <fstream>
#include <stdexcept>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/error.h"
#include "models/common/hf_decoder.h"

namespace baton::hf_folder {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kKey = "checkpoint.initial_load_hf";

[[noreturn]] void config_problem(
    const fs::path& file, const std::string& what) {
  throw ConfigError(kKey + ": " + file.string() + ": " + what);
}

}  // namespace

json index_json(
    const std::vector<SafetensorsEntry>& entries, const std::string& file) {
  json index = {
      {"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  uint64_t total = 0;
  for (const auto& e : entries) {
    total += e.end - e.begin;
    index["weight_map"][e.name] = file;
  }
  index["metadata"]["total_size"] = total;
  return index;
}

void check_folder(
    const fs::path& dir,
    const HfFormat& format,
    const ModelArgs& model,
    const std::string& model_name) {
  const fs::path file = dir / kConfigFile;
  const std::string folder = "a Hugging Face " + format.architecture +
                             " folder (config.json, model.safetensors or its "
                             "shards and index)";
  std::ifstream in(file);
  if (!in) {
    throw ConfigError(
        kKey + ": " + dir.string() + ": has no " + kConfigFile +
        " (or it cannot be read); allowed: " + folder);
  }
  json c;
  try {
    c = json::parse(in);
  } catch (const std::exception& e) {
    config_problem(file, std::string("not valid JSON: ") + e.what());
  }
  const ModelArgs read = format.read_config(c, kKey + ": " + file.string());
  if (const auto difference = models::hf_shape_difference(read, model)) {
    config_problem(
        file,
        *difference + " (" + model_name +
            "); choose the model.flavor (and tokenizer) the checkpoint was "
            "trained with");
  }
  if (!fs::exists(dir / kIndexFile) && !fs::exists(dir / kSingleFile)) {
    throw ConfigError(
        kKey + ": " + dir.string() + ": has neither " + kIndexFile + " nor " +
        kSingleFile + "; allowed: " + folder);
  }
}

WeightMap read_weight_map(const fs::path& dir) {
  WeightMap map;
  const fs::path index = dir / kIndexFile;
  if (!fs::exists(index)) {
    map.listing = (dir / kSingleFile).string();
    const SafetensorsReader reader(map.listing);
    for (const auto& e : reader.entries()) {
      map.files[e.name] = kSingleFile;
    }
    return map;
  }
  map.listing = index.string();
  const auto bad = [&](const std::string& what) {
    throw CheckpointError("[checkpoint] " + map.listing + ": " + what);
  };
  std::ifstream in(index);
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    bad("has no \"weight_map\" object (name -> file)");
  }
  for (const auto& [name, file] : j["weight_map"].items()) {
    // Shards sit beside the index: a path elsewhere is not one.
    if (!file.is_string() || file.get<std::string>().empty() ||
        file.get<std::string>().find('/') != std::string::npos) {
      bad("tensor '" + name + "' maps to " + file.dump() +
          "; allowed: a file name in the folder");
    }
    map.files[name] = file.get<std::string>();
  }
  return map;
}

bool ignorable(const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq");
}

}  // namespace baton::hf_folder
