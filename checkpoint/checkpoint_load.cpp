// CheckpointManager's load: the two phases (every rank reads and checks
// what it needs, then applies it) of the step checkpoint_folder.cpp's plan
// names, and the start from a Hugging Face folder's weights
// (checkpoint.initial_load_hf).

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <glog/logging.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_detail.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/folder_plan.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/safetensors.h"
#include "common/torch_compat.h"
#include "data/dataloader.h"
#include "models/model_spec.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizer_state.h"
#include "optim/optimizers.h"
#include "parallel/dist/process_group.h"

namespace baton {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using checkpoint_detail::all_gather_strings;
using checkpoint_detail::check_fqns;
using checkpoint_detail::check_model;
using checkpoint_detail::copy_overlap;
using checkpoint_detail::cpu_rng_state;
using checkpoint_detail::fail;
using checkpoint_detail::kTag;
using checkpoint_detail::read_hf_tensors;
using checkpoint_detail::read_saved_tensors;
using checkpoint_detail::seconds_since;
using checkpoint_detail::throw_any;
using checkpoint_detail::untagged;
using checkpoint_index::kIndexFile;
using checkpoint_index::optimizer_fqn;
using checkpoint_index::step_dir_name;

at::Tensor from_hex(const std::string& s) {
  if (s.size() % 2 != 0) {
    throw std::invalid_argument("odd number of hex digits");
  }
  at::Tensor bytes = at::empty({static_cast<int64_t>(s.size() / 2)}, at::kByte);
  auto* p = bytes.data_ptr<uint8_t>();
  for (size_t i = 0; i < s.size(); i += 2) {
    p[i / 2] = static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

}  // namespace

namespace checkpoint_detail {

/// The tensor `fqn` of `reader`, checked against what index.json says of
/// it (dtype, shape, CRC-32).
at::Tensor read_checked(
    const SafetensorsReader& reader,
    const std::string& fqn,
    at::ScalarType dtype,
    const std::vector<int64_t>& shape,
    uint32_t crc32) {
  const std::string& path = reader.path();
  const SafetensorsEntry* e = reader.find(fqn);
  if (e == nullptr) {
    fail(path + ": has no tensor '" + fqn + "' (index.json says it does)");
  }
  if (e->dtype != dtype || e->shape != shape) {
    fail(
        path + ": tensor '" + fqn + "' is " + safetensors_dtype(e->dtype) +
        " " + shape_string(e->shape) + " in the file but " +
        safetensors_dtype(dtype) + " " + shape_string(shape) +
        " in index.json");
  }
  at::Tensor t = reader.read(fqn);
  const uint32_t crc = crc32_of(t.data_ptr(), e->end - e->begin);
  if (crc != crc32) {
    fail(
        path + ": tensor '" + fqn + "': checksum mismatch (CRC-32 " +
        std::to_string(crc) + ", index.json says " + std::to_string(crc32) +
        "): the file is corrupt");
  }
  return t;
}

/// Fails when a tensor every rank's model has is missing from `index`, or
/// `index` has one that none has: judged against every rank's FQNs, the
/// same way on every rank.
void check_fqns(
    const json& index,
    const std::string& index_path,
    const std::vector<std::string>& model_fqns) {
  const json& tensors = index.at("tensors");
  for (const auto& fqn : model_fqns) {
    if (!tensors.contains(fqn)) {
      fail(
          index_path + ": tensor '" + fqn +
          "' is missing (the model has it; was the checkpoint saved from "
          "another model or flavor?)");
    }
  }
  for (const auto& [fqn, entry] : tensors.items()) {
    if (std::binary_search(model_fqns.begin(), model_fqns.end(), fqn)) {
      continue;
    }
    std::string files = entry.value("file", "");
    if (entry.contains("slices") && entry["slices"].is_array()) {
      for (const auto& slice : entry["slices"]) {
        files += (files.empty() ? "" : ", ") + slice.value("file", "?");
      }
    }
    fail(
        index_path + ": tensor '" + fqn + "' (in " +
        (files.empty() ? std::string("?") : files) + ") is not in the model");
  }
}

/// Fails when `index` records the model it was saved from (checkpoints
/// since the model families) and `record` (this run's) is another family
/// or shape, naming the config key to change.
void check_model(
    const json& index, const std::string& index_path, const json& record) {
  if (!index.contains("model") || !index["model"].is_object() ||
      !record.contains("model")) {
    return;
  }
  const json& saved = index["model"];
  const auto text = [](const json& r) {
    return r.value("model", std::string("?")) + " " +
           r.value("flavor", std::string("?"));
  };
  if (saved.value("model", std::string()) != record["model"]) {
    fail(
        index_path + ": saved from model " + text(saved) +
        ", but this run's model.name is '" +
        record["model"].get<std::string>() +
        "'; allowed: the family it was saved from, or another "
        "job.dump_folder to start afresh");
  }
  for (const char* key :
       {"dim",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "head_dim",
        "ffn_hidden_dim",
        "vocab_size",
        "qk_norm",
        "tie_embeddings"}) {
    if (saved.contains(key) && record.contains(key) &&
        saved[key] != record[key]) {
      fail(
          index_path + ": saved from model " + text(saved) + " with " + key +
          " " + saved[key].dump() + ", but this run's (" + text(record) +
          ") has " + record[key].dump() +
          "; allowed: the model.flavor (and model.tokenizer) it was saved "
          "with");
    }
  }
}

void read_saved_tensors(
    const json& index,
    const fs::path& dir,
    const std::vector<WantedTensor>& wanted,
    std::map<std::string, at::Tensor>& tensors) {
  const std::string index_path = (dir / kIndexFile).string();
  // The saved slices each wanted tensor needs (a whole tensor is one
  // slice), by file, so that each file is opened once.
  struct Need {
    const WantedTensor* wanted;
    checkpoint_index::TensorSlice slice;
  };
  std::map<std::string, std::vector<Need>> by_file;
  for (const auto& w : wanted) {
    const auto entry = checkpoint_index::tensor_entry(index, w.fqn, index_path);
    if (entry.dtype != safetensors_dtype(w.dtype) ||
        entry.shape != w.global_shape) {
      const bool whole =
          entry.slices.size() == 1 && entry.slices.front().shape == entry.shape;
      fail(
          (whole ? (dir / entry.slices.front().file).string() : index_path) +
          ": tensor '" + w.fqn + "' is " + entry.dtype + " " +
          shape_string(entry.shape) + ", but the model's is " +
          safetensors_dtype(w.dtype) + " " + shape_string(w.global_shape));
    }
    tensors[w.fqn] = at::empty(w.shape, w.dtype);
    for (const auto& slice : entry.slices) {
      if (checkpoint_index::overlap(
              w.offsets, w.shape, slice.offsets, slice.shape) > 0) {
        by_file[slice.file].push_back({&w, slice});
      }
    }
  }
  // The slices tile each tensor (tensor_entry checked), so they cover the
  // wanted slice too.
  for (const auto& [file, needs] : by_file) {
    const std::string path = (dir / file).string();
    std::unique_ptr<SafetensorsReader> reader;
    try {
      reader = std::make_unique<SafetensorsReader>(path);
    } catch (const CheckpointError& e) {
      fail(
          untagged(e.what()) + " (it holds tensor '" +
          needs.front().wanted->fqn + "'" +
          (needs.size() > 1
               ? " and " + std::to_string(needs.size() - 1) + " more"
               : "") +
          ")");
    }
    for (const auto& [w, slice] : needs) {
      const at::Tensor t =
          read_checked(*reader, w->fqn, w->dtype, slice.shape, slice.crc32);
      copy_overlap(t, slice.offsets, tensors.at(w->fqn), w->offsets);
    }
  }
}

void read_hf_tensors(
    const fs::path& dir,
    const HfFormat& format,
    const ModelArgs& args,
    const std::vector<WantedTensor>& wanted,
    const std::vector<std::string>& model_fqns,
    std::map<std::string, at::Tensor>& tensors) {
  const hf_folder::WeightMap map = hf_folder::read_weight_map(dir);
  // Judged against every rank's FQNs, the same way on every rank.
  std::set<std::string> expected;
  for (const auto& fqn : model_fqns) {
    const std::string name = format.name(fqn);
    if (name.empty()) {
      fail(
          "tensor '" + fqn + "' has no Hugging Face " + format.architecture +
          " name");
    }
    // One per expert where HF stores them so.
    const int64_t copies = hf_per_expert(name) ? args.moe.num_experts : 1;
    for (int64_t e = 0; e < copies; ++e) {
      const std::string one =
          hf_per_expert(name) ? hf_expert_name(name, e) : name;
      if (!map.files.contains(one)) {
        fail(
            map.listing + ": tensor '" + one + "' (Baton's '" + fqn +
            "') is missing (the model has it; was the checkpoint saved from "
            "another model?)");
      }
      expected.insert(one);
    }
  }
  for (const auto& [name, file] : map.files) {
    if (!expected.contains(name) && !hf_folder::ignorable(name)) {
      fail(
          map.listing + ": tensor '" + name + "' (in " + file +
          ") is not in the model");
    }
  }
  // A rank reads the tensors (and, of one stored per expert, the experts)
  // its slices overlap: (the wanted tensor, the expert or -1, the HF name).
  struct Need {
    const WantedTensor* wanted;
    int64_t expert;
    std::string name;
  };
  std::map<std::string, std::vector<Need>> by_file;
  for (const auto& w : wanted) {
    const std::string name = format.name(w.fqn);
    tensors[w.fqn] = at::empty(w.shape, w.dtype);
    if (!hf_per_expert(name)) {
      by_file[map.files.at(name)].push_back({&w, -1, name});
      continue;
    }
    // Experts first: this rank's rows of dim 0 are its experts.
    for (int64_t e = w.offsets[0]; e < w.offsets[0] + w.shape[0]; ++e) {
      const std::string one = hf_expert_name(name, e);
      by_file[map.files.at(one)].push_back({&w, e, one});
    }
  }
  for (const auto& [file, needs] : by_file) {
    const SafetensorsReader reader((dir / file).string());
    for (const Need& need : needs) {
      const WantedTensor* w = need.wanted;
      const std::string& name = need.name;
      const SafetensorsEntry* e = reader.find(name);
      if (e == nullptr) {
        fail(
            reader.path() + ": has no tensor '" + name + "' (" + map.listing +
            " says it does)");
      }
      if (e->dtype != at::kFloat && e->dtype != at::kBFloat16 &&
          e->dtype != at::kHalf) {
        fail(
            reader.path() + ": tensor '" + name + "' is " +
            safetensors_dtype(e->dtype) + "; allowed: F32, BF16, F16");
      }
      const std::vector<int64_t> shape =
          need.expert < 0
              ? w->global_shape
              : std::vector<int64_t>(
                    w->global_shape.begin() + 1, w->global_shape.end());
      if (e->shape != shape) {
        fail(
            reader.path() + ": tensor '" + name + "' is " +
            shape_string(e->shape) + ", but the model's '" + w->fqn + "' " +
            (need.expert < 0 ? "is " : "has experts of ") +
            shape_string(shape));
      }
      if (need.expert >= 0) {
        // One expert: row need.expert of the whole tensor.
        at::Tensor one = reader.read(name).to(w->dtype).unsqueeze(0);
        std::vector<int64_t> at(one.dim(), 0);
        at[0] = need.expert;
        copy_overlap(one, at, tensors.at(w->fqn), w->offsets);
        continue;
      }
      const at::Tensor whole =
          format.convert(w->fqn, reader.read(name).to(w->dtype), args, false);
      copy_overlap(
          whole,
          std::vector<int64_t>(whole.dim(), 0),
          tensors.at(w->fqn),
          w->offsets);
    }
  }
}

}  // namespace checkpoint_detail

struct CheckpointManager::Staged {
  std::map<std::string, at::Tensor> tensors;
  std::optional<DataLoaderState> loader;
  int64_t lr_steps = 0;
  int64_t tokens_seen = 0;
  std::optional<at::Tensor> rng;
};

TrainState CheckpointManager::load() {
  // A run's own checkpoint wins over its starting point: a restarted run
  // that began from HF weights resumes where it stopped.
  const FolderPlan plan = config_.enable ? agree_on_plan() : FolderPlan{};
  if (plan.step < 0 && !config_.initial_load_hf.empty()) {
    load_hf();
    if (config_.enable) {
      tidy_everywhere(plan);
    }
    return {};
  }
  if (plan.step < 0) {
    if (config_.enable) {
      // Nothing to load, so no failed load to leave the folder as it was.
      tidy_everywhere(plan);
      LOG(INFO) << "checkpoint: none in " << folder_.string()
                << "; training from step 0";
    }
    return {};
  }
  const int64_t step = plan.step;
  const fs::path& dir = plan.dir;
  const std::string index_path = (dir / kIndexFile).string();

  // Phase 1: read and check everything; change nothing, the folder
  // included. Every rank takes part in the collectives, whatever failed
  // before them.
  std::string error;
  json index;
  try {
    index = checkpoint_index::read_index(dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::vector<Wanted> wanted = wanted_tensors();
  const std::vector<std::string> model_fqns = fqns_of_every_rank(wanted);
  Staged staged;
  try {
    if (!error.empty()) {
      throw CheckpointError(error);
    }
    check_model(index, index_path, json::parse(model_config_json_));
    stage_tensors(index, dir, wanted, model_fqns, staged);
    stage_state(index, index_path, staged);
  } catch (const CheckpointError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    // A field of the wrong type (nlohmann's type_error, say): name the file.
    error = kTag + index_path + ": malformed (" + e.what() + ")";
  }
  throw_any(*group_, error);

  // Every rank holds what it needs in memory: the folder may be tidied
  // (leftovers, later steps moved aside), then phase 2 applies the state.
  tidy_everywhere(plan);
  apply(staged);
  if (!config_.initial_load_hf.empty()) {
    LOG(INFO) << "checkpoint: resuming this run's own checkpoint; "
                 "checkpoint.initial_load_hf is not read";
  }
  LOG(INFO) << "checkpoint: resumed from step " << step << " ("
            << (folder_ / step_dir_name(step)).string() << ", saved under '"
            << checkpoint_index::describe_layout(index.value("layout", json()))
            << "')";
  return {step, staged.tokens_seen};
}

std::vector<CheckpointManager::Wanted> CheckpointManager::wanted_tensors(
    bool optimizer_state) const {
  std::vector<Wanted> wanted;
  size_t part_index = 0;
  for (const auto& part : parts_) {
    for (const auto& item : part->module().named_parameters()) {
      const at::Tensor& p = item.value();
      const ParamSlice* slice = part->slice(item.key());
      Wanted w{item.key(), p.scalar_type(), p.sizes().vec(), {}, {}};
      w.global_shape = slice ? slice->global_shape : w.shape;
      w.offsets =
          slice ? slice->offsets : std::vector<int64_t>(w.shape.size(), 0);
      wanted.push_back(w);
      if (!optimizer_state) {
        continue;
      }
      for (const OptimizerStateField& f : state_codec(part_index).fields) {
        Wanted fw{
            optimizer_fqn(item.key(), f.name.c_str()),
            f.dtype.value_or(p.scalar_type()),
            f.shape_of(w.shape),
            f.shape_of(w.global_shape),
            f.shape_of(w.offsets)};
        wanted.push_back(std::move(fw));
      }
    }
    if (optimizer_state) {
      // A checkpoint's buffers (an MoE's routing bias), whole; a Hugging
      // Face folder's are read by the family's own names, where it has them.
      for (const auto& item : part->module().named_buffers()) {
        const at::Tensor& b = item.value();
        Wanted w{item.key(), b.scalar_type(), b.sizes().vec(), {}, {}};
        w.global_shape = w.shape;
        w.offsets.assign(w.shape.size(), 0);
        wanted.push_back(std::move(w));
      }
    }
    ++part_index;
  }
  return wanted;
}

std::vector<std::string> CheckpointManager::fqns_of_every_rank(
    const std::vector<Wanted>& wanted) const {
  std::string names;
  for (const auto& w : wanted) {
    names += w.fqn + '\n';
  }
  std::set<std::string> fqns;
  for (const auto& list : all_gather_strings(*group_, names)) {
    std::istringstream in(list);
    for (std::string fqn; std::getline(in, fqn);) {
      fqns.insert(fqn);
    }
  }
  return {fqns.begin(), fqns.end()};
}

void CheckpointManager::stage_tensors(
    const json& index,
    const fs::path& dir,
    const std::vector<Wanted>& wanted,
    const std::vector<std::string>& model_fqns,
    Staged& staged) const {
  check_fqns(index, (dir / kIndexFile).string(), model_fqns);
  read_saved_tensors(index, dir, wanted, staged.tensors);
}

void CheckpointManager::stage_state(
    const json& index, const std::string& index_path, Staged& staged) const {
  if (dataloader_ != nullptr) {
    // Version 3: the global stream's one state, whatever layout saved it;
    // version 2: one per DP rank of the per-rank loader, of which only a
    // single rank's is a position in the global stream.
    const json& loaders = index.at("dataloader");
    std::string saved;
    if (loaders.is_object() && loaders.contains("state")) {
      saved = loaders.at("state").dump();
    } else if (
        loaders.is_object() && loaders.value("dp_size", 0) == 1 &&
        loaders.contains("states") && loaders.at("states").contains("0")) {
      saved = loaders.at("states").at("0").dump();
    }
    if (saved.empty()) {
      LOG(WARNING) << "checkpoint: " << index_path
                   << " holds no global loader state (a per-rank one of "
                      "several ranks, saved by an earlier Baton): the data "
                      "loader starts from the beginning";
    } else {
      try {
        staged.loader = DataLoaderState::from_json(saved);
        dataloader_->check_state(*staged.loader);
      } catch (const std::exception& e) {
        fail(index_path + ": " + e.what());
      }
    }
  }
  const auto count = [&](const char* key) {
    const json& v = index.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      fail(index_path + ": '" + key + "' must be an integer >= 0");
    }
    return v.get<int64_t>();
  };
  staged.lr_steps = count("lr_scheduler_steps");
  staged.tokens_seen = count("tokens_seen");
  const std::string rank_key = std::to_string(layout_.rank);
  const json saved_layout = index.value("layout", json());
  if (!checkpoint_index::same_layout(saved_layout, layout_) ||
      !index.contains("rng") || !index.at("rng").contains(rank_key)) {
    LOG(INFO) << "checkpoint: saved under '"
              << checkpoint_index::describe_layout(saved_layout)
              << "', this run is '"
              << checkpoint_index::describe_layout(
                     checkpoint_index::layout_json(layout_))
              << "': RNG states not restored";
    return;
  }
  try {
    staged.rng = from_hex(index.at("rng").at(rank_key).get<std::string>());
  } catch (const std::exception& e) {
    fail(index_path + ": RNG state of rank " + rank_key + ": " + e.what());
  }
  if (staged.rng->numel() != cpu_rng_state().numel()) {
    fail(
        index_path + ": RNG state of rank " + rank_key + " has " +
        std::to_string(staged.rng->numel()) + " bytes, expected " +
        std::to_string(cpu_rng_state().numel()));
  }
}

void CheckpointManager::apply(Staged& staged) const {
  if (staged.loader) {
    dataloader_->load_state(*staged.loader);
  }
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < parts_.size(); ++i) {
      auto& states = optimizers_[i].state();
      for (const auto& item : parts_[i].module().named_parameters()) {
        at::Tensor p = item.value();
        p.copy_(staged.tensors.at(item.key()));
        const OptimizerStateCodec& codec = state_codec(i);
        // A tied copy's state is its original's values in tensors of its
        // own (the optimizer updates each in place).
        const bool copy = parts_[i].tied_copy(item.key());
        std::vector<at::Tensor> fields;
        for (const OptimizerStateField& f : codec.fields) {
          const at::Tensor& t =
              staged.tensors.at(optimizer_fqn(item.key(), f.name.c_str()));
          fields.push_back(copy ? t.clone() : t);
        }
        auto st = codec.make(fields, p);
        states[compat::optimizer_state_key(p)] = std::move(st);
      }
      for (const auto& item : parts_[i].module().named_buffers()) {
        item.value().copy_(staged.tensors.at(item.key()));
      }
    }
  }
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    schedulers_[i].load_state(staged.lr_steps);
  }
  if (staged.rng) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*staged.rng);
  }
}

void CheckpointManager::load_hf() const {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = config_.initial_load_hf;
  // Every rank reads the same config.json, so a folder that does not fit
  // the model fails on every rank alike, before any collective.
  const HfModel model = hf_model();
  hf_folder::check_folder(dir, *model.format, model.args, model.name);
  const std::vector<Wanted> wanted = wanted_tensors(/*optimizer_state=*/false);
  const std::vector<std::string> model_fqns = fqns_of_every_rank(wanted);
  Staged staged;
  std::string error;
  try {
    stage_hf_tensors(wanted, model_fqns, staged);
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_any(*group_, error);
  // Phase 2: the weights only; the optimizer, the LR schedule and the
  // loader start afresh, as at step 0.
  at::NoGradGuard no_grad;
  for (const auto& part : parts_) {
    for (const auto& item : part->module().named_parameters()) {
      item.value().copy_(staged.tensors.at(item.key()));
    }
  }
  LOG(INFO) << "checkpoint: loaded " << model_fqns.size()
            << " weights from the Hugging Face folder " << dir.string()
            << " in " << seconds_since(start) << " s; training from step 0";
}

void CheckpointManager::stage_hf_tensors(
    const std::vector<Wanted>& wanted,
    const std::vector<std::string>& model_fqns,
    Staged& staged) const {
  const HfModel model = hf_model();
  read_hf_tensors(
      config_.initial_load_hf,
      *model.format,
      model.args,
      wanted,
      model_fqns,
      staged.tensors);
}

CheckpointManager::HfModel CheckpointManager::hf_model() const {
  HfModel model;
  try {
    const json record = json::parse(model_config_json_);
    model.args = model_args_from_json(record);
    const std::string family = record.value("model", std::string("llama3"));
    model.name = family + " " + record.value("flavor", std::string());
    register_builtin_models();
    model.format = &model_registry().get(family).hf;
  } catch (const std::exception& e) {
    throw std::logic_error(
        kTag + "the Hugging Face layout needs the model's record: " +
        untagged(e.what()));
  }
  if (!model.format->defined()) {
    throw ConfigError(
        "checkpoint: model '" + model.name +
        "' has no Hugging Face layout (its family registers none)");
  }
  return model;
}

}  // namespace baton
