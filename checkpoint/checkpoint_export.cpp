// CheckpointManager's end of run: the wait for the last save and the
// model-only export, every rank writing its pieces and rank 0 merging them
// into one file, in Baton's names or as a Hugging Face Llama folder.

#include <ATen/ATen.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_detail.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/safetensors.h"
#include "data/tokenizer.h"

namespace baton {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using checkpoint_detail::copy_overlap;
using checkpoint_detail::fail;
using checkpoint_detail::replace_folder;
using checkpoint_detail::seconds_since;
using checkpoint_detail::throw_any;
using checkpoint_detail::untagged;
using checkpoint_detail::write_synced;
using checkpoint_index::rank_file_name;

/// The export pieces' metadata key of a slice's place: "slice:<fqn>".
const std::string kSlicePrefix = "slice:";

at::ScalarType export_dtype(const std::string& name) {
  if (name == "bfloat16") {
    return at::kBFloat16;
  }
  if (name == "float16") {
    return at::kHalf;
  }
  return at::kFloat;
}

/// One rank's piece of an exported tensor: where it lies in the whole.
struct ExportPiece {
  const SafetensorsReader* reader;
  SafetensorsEntry entry;
  std::vector<int64_t> offsets;
  std::vector<int64_t> global_shape;
};

/// The whole tensor the pieces of one name tile.
at::Tensor assemble(const std::vector<ExportPiece>& list) {
  const auto& head = list.front();
  at::Tensor whole = at::empty(head.global_shape, head.entry.dtype);
  int64_t filled = 0;
  for (const auto& piece : list) {
    at::Tensor t = at::empty(piece.entry.shape, piece.entry.dtype);
    piece.reader->read_bytes(piece.entry, t.data_ptr());
    filled += copy_overlap(
        t,
        piece.offsets,
        whole,
        std::vector<int64_t>(head.global_shape.size(), 0));
  }
  if (filled != whole.numel()) {
    throw std::logic_error(
        "[checkpoint] export: tensor '" + head.entry.name +
        "': its pieces hold " + std::to_string(filled) + " of " +
        std::to_string(whole.numel()) + " elements");
  }
  return whole;
}

/// Opens every rank's piece in `tmp` ("piece-*") into `readers`; returns
/// each tensor's pieces by name, with where each lies in the whole.
std::map<std::string, std::vector<ExportPiece>> read_pieces(
    const fs::path& tmp,
    std::vector<std::unique_ptr<SafetensorsReader>>& readers) {
  std::map<std::string, std::vector<ExportPiece>> by_name;
  for (const auto& entry : fs::directory_iterator(tmp)) {
    if (entry.path().filename().string().rfind("piece-", 0) != 0) {
      continue;
    }
    readers.push_back(
        std::make_unique<SafetensorsReader>(entry.path().string()));
    const auto& reader = *readers.back();
    for (const auto& e : reader.entries()) {
      ExportPiece piece{
          &reader, e, std::vector<int64_t>(e.shape.size(), 0), e.shape};
      const auto it = reader.metadata().find(kSlicePrefix + e.name);
      if (it != reader.metadata().end()) {
        const json where = json::parse(it->second);
        piece.offsets = where.at("offsets").get<std::vector<int64_t>>();
        piece.global_shape = where.at("shape").get<std::vector<int64_t>>();
      }
      by_name[e.name].push_back(std::move(piece));
    }
  }
  return by_name;
}

}  // namespace

void CheckpointManager::finish(const TrainState& state) {
  wait();
  if (config_.model_only_export) {
    export_model(state);
  }
}

void CheckpointManager::export_model(const TrainState& state) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = folder_ / "export";
  const fs::path tmp = folder_ / "export.partial";
  const at::ScalarType dtype = export_dtype(config_.export_dtype);
  std::string error;
  try {
    if (layout_.rank == 0) {
      fs::remove_all(tmp);
      fs::create_directories(tmp);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_any(*group_, error);
  // Each part's weights once (whole ones from DP rank 0, the slices of
  // sharded ones from replica 0's ranks, where the piece's metadata says),
  // converted one tensor at a time.
  try {
    std::vector<SafetensorsItem> items;
    SafetensorsWriteOptions options;
    options.sync = false;
    for (const auto& part : parts_) {
      for (const auto& item : part->module().named_parameters()) {
        const at::Tensor p = item.value().detach();
        const ParamSlice* slice = part->slice(item.key());
        if (!writes(*part, item.key(), p)) {
          continue;
        }
        if (slice) {
          options.metadata[kSlicePrefix + item.key()] = json{
              {"offsets", slice->offsets},
              {"shape", slice->global_shape}}.dump();
        }
        items.push_back({item.key(), dtype, p.sizes().vec(), [p, dtype] {
                           return p.to(at::kCPU).to(dtype);
                         }});
      }
    }
    if (!items.empty()) {
      write_safetensors(
          (tmp / ("piece-" + rank_file_name(layout_.rank))).string(),
          items,
          options);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_any(*group_, error);
  if (layout_.rank == 0) {
    try {
      merge_export(state, tmp, dir, start);
    } catch (const std::exception& e) {
      error = "[checkpoint] model export failed: " + untagged(e.what());
    }
  }
  throw_any(*group_, error);
}

void CheckpointManager::write_hf_tokenizer(
    const fs::path& tmp, const json& record) const {
  std::string text;
  std::string why = "the run has no tokenizer";
  if (tokenizer_) {
    try {
      text = tokenizer_->hf_tokenizer_json();
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  // The weights are the export; a tokenizer that cannot say itself so
  // leaves them without one rather than failing it.
  if (text.empty()) {
    LOG(WARNING) << "checkpoint: the export has no tokenizer.json: model."
                    "tokenizer '"
                 << record.value("tokenizer", std::string("?")) << "': " << why;
    return;
  }
  write_synced(tmp / "tokenizer.json", text);
  // The names of BOS and EOS, for AutoTokenizer's bos_token and eos_token.
  std::map<int64_t, std::string> names;
  for (const auto& t : json::parse(text).value("added_tokens", json::array())) {
    names[t.value("id", int64_t{-1})] = t.value("content", std::string());
  }
  json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"model_max_length", record.value("max_seq_len", int64_t{8192})},
      {"bos_token", nullptr},
      {"eos_token", nullptr}};
  for (const auto& [key, id] :
       {std::pair{"bos_token", tokenizer_->bos_id()},
        std::pair{"eos_token", tokenizer_->eos_id()}}) {
    if (names.contains(id)) {
      config[key] = names[id];
    }
  }
  write_synced(tmp / "tokenizer_config.json", config.dump(2) + "\n");
}

void CheckpointManager::merge_export(
    const TrainState& state,
    const fs::path& tmp,
    const fs::path& dir,
    std::chrono::steady_clock::time_point start) const {
  // The pieces become one file sorted by name, a tensor at a time, each
  // sharded one assembled from its slices.
  std::vector<std::unique_ptr<SafetensorsReader>> pieces;
  const std::map<std::string, std::vector<ExportPiece>> by_name =
      read_pieces(tmp, pieces);
  const bool hf = config_.export_format == "hf";
  const std::optional<HfModel> model =
      hf ? std::optional(hf_model()) : std::nullopt;
  // HF's names sort otherwise than Baton's: items by the name written.
  std::map<std::string, SafetensorsItem> items_by_name;
  for (const auto& [name, list] : by_name) {
    const auto& first = list.front();
    const std::string written = hf ? model->format->name(name) : name;
    if (written.empty()) {
      fail(
          "export: tensor '" + name + "' has no Hugging Face " +
          model->format->architecture + " name");
    }
    if (hf && hf_per_expert(written)) {
      // One tensor per expert, each a row of the grouped one, which is
      // assembled once and let go after its last expert is written.
      struct Shared {
        std::vector<ExportPiece> list;
        at::Tensor whole;
        int64_t left = 0;
      };
      auto shared = std::make_shared<Shared>();
      shared->list = list;
      shared->left = first.global_shape.at(0);
      const std::vector<int64_t> shape(
          first.global_shape.begin() + 1, first.global_shape.end());
      for (int64_t e = 0; e < first.global_shape[0]; ++e) {
        const std::string one = hf_expert_name(written, e);
        items_by_name[one] = {one, first.entry.dtype, shape, [shared, e] {
                                if (!shared->whole.defined()) {
                                  shared->whole = assemble(shared->list);
                                }
                                at::Tensor row = shared->whole[e].clone();
                                if (--shared->left == 0) {
                                  shared->whole = at::Tensor();
                                }
                                return row;
                              }};
      }
      continue;
    }
    items_by_name[written] = {
        written, first.entry.dtype, first.global_shape, [list = list, model] {
          const at::Tensor whole = assemble(list);
          return model ? model->format->convert(
                             list.front().entry.name, whole, model->args, true)
                       : whole;
        }};
  }
  std::vector<SafetensorsItem> items;
  for (auto& [name, item] : items_by_name) {
    items.push_back(std::move(item));
  }
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}, {"step", std::to_string(state.step)}};
  const auto entries = write_safetensors(
      (tmp / hf_folder::kSingleFile).string(), items, options);
  for (const auto& piece : pieces) {
    fs::remove(piece->path());
  }
  pieces.clear();
  json config = json::parse(model_config_json_);
  config["torch_dtype"] = config_.export_dtype;
  config["step"] = state.step;
  config["tokens_seen"] = state.tokens_seen;
  if (hf) {
    // One file, and the index beside it that sharded HF folders have, so
    // that readers of either form find the weights.
    write_synced(
        tmp / hf_folder::kIndexFile,
        hf_folder::index_json(entries, hf_folder::kSingleFile).dump(2) + "\n");
    json hf_config = model->format->write_config(model->args);
    hf_config["torch_dtype"] = config_.export_dtype;
    // The run's tokenizer's ids, there and in generation_config.json,
    // where transformers' generate looks for them.
    json generation = {{"_from_model_config", true}};
    for (const auto& [baton, hf] :
         {std::pair{"bos_id", "bos_token_id"},
          std::pair{"eos_id", "eos_token_id"}}) {
      if (config.contains(baton)) {
        hf_config[hf] = config[baton];
        generation[hf] = config[baton];
      }
    }
    hf_config["baton"] = config;
    write_hf_tokenizer(tmp, config);
    config = hf_config;
    write_synced(
        tmp / hf_folder::kGenerationConfigFile, generation.dump(2) + "\n");
  }
  write_synced(tmp / "config.json", config.dump(2) + "\n");
  sync_directory(tmp.string());
  replace_folder(tmp, dir);
  LOG(INFO) << "checkpoint: exported " << items.size() << " weights ("
            << config_.export_dtype
            << (hf ? ", Hugging Face " + model->format->architecture : "")
            << ") to " << (dir / "model.safetensors").string() << " in "
            << seconds_since(start) << " s";
}

}  // namespace baton
