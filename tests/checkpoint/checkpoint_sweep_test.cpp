// The bad-input sweep of checkpoints: a real save of the debug model (made
// by `baton train`), its rank file and index.json truncated, with seeded bit
// flips, fields of the wrong type and headers claiming negative or huge
// sizes. The safetensors reader and `baton checkpoint inspect`'s report
// either accept a case or throw CheckpointError naming the file; a load
// through CheckpointManager fails naming the file and leaves the model,
// optimizer and LR as they were (docs/ARCHITECTURE.md section 4: exit 1).

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/inspect.h"
#include "checkpoint/safetensors.h"
#include "common/error.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "models/model_spec.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizers.h"
#include "parallel/dist/process_group.h"
#include "tests/baton_binary.h"
#include "tests/common/bad_input_sweep.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Mutation;
using testing::Sweep;

const std::string kRankFile = "rank-00000.safetensors";

/// A run folder holding the debug model's checkpoint of step 2, made once
/// per process (ctest runs each test in a process of its own, in parallel:
/// one folder per process).
const fs::path& good_run() {
  static const fs::path dump = [] {
    const auto dir =
        testing::fresh_dir("ck_sweep_good_" + std::to_string(getpid()));
    const auto r = testing::run_command(
        "timeout 300 " + testing::baton_bin() + " train --config " +
        testing::source_path("configs/debug_model.yaml") +
        " --job.dump_folder=" + dir.string() +
        " --training.mixed_precision_param=float32 --training.seq_len=32"
        " --training.local_batch_size=4 --training.steps=2"
        " --lr_scheduler.warmup_steps=1 --metrics.peak_tflops=1"
        " --checkpoint.enable=true --checkpoint.interval=2");
    EXPECT_EQ(r.code, 0) << r.output;
    return dir;
  }();
  return dump;
}

fs::path step_dir(const fs::path& dump) {
  return dump / "checkpoint" / "step-2";
}

/// The header's JSON and the offset of the data section of a safetensors
/// file's bytes.
std::pair<json, size_t> header_of(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {json::parse(bytes.substr(8, n)), 8 + n};
}

/// `bytes` with its header replaced by `header` (padded to 8 bytes).
std::string with_header(const std::string& bytes, const json& header) {
  const size_t data = header_of(bytes).second;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + text + bytes.substr(data);
}

/// Wrong types and sizes for an entry's fields.
const std::vector<std::pair<std::string, json>> kBadFields = {
    {"dtype", 5},
    {"dtype", "F99"},
    {"dtype", nullptr},
    {"shape", "x"},
    {"shape", json::array({-1})},
    {"shape", json::array({1ll << 40, 1ll << 40})},
    {"shape", json::array({1e30})},
    {"shape", json::array({"a"})},
    {"shape", json::object()},
    {"data_offsets", json::array({5, 3})},
    {"data_offsets", json::array({0})},
    {"data_offsets", "x"},
    {"data_offsets", json::array({-1, 2})},
    {"data_offsets", json::array({0, 18446744073709551615ull})},
    {"data_offsets", json::array({18446744073709551615ull, 3})},
    {"data_offsets", json::array({0.5, 4})},
};

/// Header damage of a safetensors file: entries with fields of the wrong
/// type, removed fields, a header length of wrong sizes.
std::vector<Mutation> safetensors_mutations(const std::string& good) {
  std::vector<Mutation> out;
  const json header = header_of(good).first;
  std::vector<std::string> names;
  for (const auto& [name, value] : header.items()) {
    names.push_back(name);
  }
  for (size_t i = 0; i < names.size(); i += 1 + names.size() / 8) {
    const std::string& name = names[i];
    for (const auto& [field, value] : kBadFields) {
      json h = header;
      h[name][field] = value;
      out.push_back(
          {"tensor '" + name + "' " + field + " = " + value.dump(),
           with_header(good, h)});
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      json h = header;
      h[name].erase(field);
      out.push_back(
          {"tensor '" + name + "' without " + field, with_header(good, h)});
    }
    json h = header;
    h[name] = json::array({1, 2});
    out.push_back({"tensor '" + name + "' a list", with_header(good, h)});
  }
  for (const json& h :
       {json::array(), json(5), json("x"), json(nullptr), json::object()}) {
    out.push_back({"header " + h.dump(), with_header(good, h)});
  }
  const uint64_t size = good.size();
  const std::vector<uint64_t> lengths = {
      0, 1, 7, size, size - 8, size + 1, 1ull << 32, 1ull << 63, ~0ull};
  for (const uint64_t n : lengths) {
    Mutation m{"header length " + std::to_string(n), good};
    std::memcpy(m.bytes.data(), &n, 8);
    out.push_back(std::move(m));
  }
  return out;
}

/// "" when `path` reads whole or throws CheckpointError naming it.
std::string check_reader(const std::string& path) {
  try {
    const SafetensorsReader reader(path);
    for (const auto& e : reader.entries()) {
      reader.read(e.name);
    }
    return "";
  } catch (const CheckpointError& e) {
    return testing::missing_from(e.what(), {path});
  } catch (const std::exception& e) {
    return std::string("not a CheckpointError: ") + e.what();
  }
}

/// A small safetensors file of several dtypes and shapes (a scalar, an
/// empty tensor), with metadata: a real checkpoint's rank file is 60 MB,
/// too big to copy for every case.
std::string small_safetensors(const fs::path& path) {
  std::vector<SafetensorsItem> items;
  for (int i = 0; i < 12; ++i) {
    items.push_back(safetensors_item(
        "layers." + std::to_string(i) + ".attention.wq.weight",
        torch::randn({4 + i, 3})));
  }
  items.push_back(safetensors_item("step", torch::tensor(5.0)));
  items.push_back(safetensors_item("empty", torch::zeros({0, 4})));
  items.push_back(
      safetensors_item("half", torch::ones({3, 2}, torch::kBFloat16)));
  items.push_back(safetensors_item("ids", torch::arange(10)));
  items.push_back(safetensors_item("mask", torch::ones({5}, torch::kBool)));
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}};
  options.sync = false;
  write_safetensors(path.string(), items, options);
  return testing::read_bytes(path);
}

TEST(CheckpointSweep, SafetensorsFilesReadOrNameTheFile) {
  Sweep sweep("safetensors");
  const auto dir = testing::fresh_dir("ck_sweep_safetensors");
  fs::create_directories(dir);
  const std::string good = small_safetensors(dir / "good.safetensors");
  const size_t data_start = header_of(good).second;
  const std::string path = (dir / kRankFile).string();
  std::vector<Mutation> cases;
  // Every length of the file (the header is most of it).
  for (const size_t n : testing::truncation_lengths(good.size(), 4000)) {
    cases.push_back({"truncated to " + std::to_string(n), good.substr(0, n)});
  }
  for (auto& m : testing::bit_flips(good, 11, 1500, 0, data_start)) {
    cases.push_back(std::move(m));
  }
  for (auto& m : testing::bit_flips(good, 12, 100, data_start)) {
    cases.push_back(std::move(m));
  }
  for (auto& m : safetensors_mutations(good)) {
    cases.push_back(std::move(m));
  }
  for (const auto& c : cases) {
    sweep.run(c.what, [&] {
      testing::write_bytes(path, c.bytes);
      return check_reader(path);
    });
  }
  EXPECT_GT(sweep.cases(), 3000);
}

/// The debug model, its optimizer, LR scheduler and loader, and a
/// CheckpointManager over `dump`: what a run's load changes.
struct Trainee {
  explicit Trainee(const fs::path& dump) {
    register_builtin_models();
    register_builtin_tokenizers();
    register_builtin_datasets();
    register_builtin_optimizers();
    register_builtin_lr_schedules();
    config = load_job_config(
        testing::source_path("configs/debug_model.yaml"),
        {"job.dump_folder=" + dump.string(),
         "training.seq_len=32",
         "training.local_batch_size=4",
         "training.steps=2",
         "lr_scheduler.warmup_steps=1",
         "checkpoint.enable=true"});
    std::shared_ptr<const Tokenizer> tokenizer =
        tokenizer_registry().get(config.model.tokenizer)("");
    const auto& spec = model_registry().get(config.model.name);
    ModelArgs args = model_flavor(spec, config.model.flavor);
    args.vocab_size = tokenizer->vocab_size();
    parts.push_back(std::make_shared<ModelPart>(
        spec.build(args, ChunkSpec{}, config.training.seed)));
    std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizer_list;
    optimizer_list.push_back(optimizer_registry().get(config.optimizer.name)(
        parts[0].module().parameters(), config));
    optimizers =
        std::make_unique<OptimizersContainer>(std::move(optimizer_list));
    std::vector<std::unique_ptr<LRScheduler>> scheduler_list;
    scheduler_list.push_back(std::make_unique<LRScheduler>(
        (*optimizers)[0],
        lr_schedule_registry().get(config.lr_scheduler.name)(
            config.lr_scheduler, config.training.steps)));
    schedulers =
        std::make_unique<LRSchedulersContainer>(std::move(scheduler_list));
    dataloader = std::make_unique<DataLoader>(
        dataset_registry().get(config.training.dataset)({}),
        tokenizer,
        DataLoaderOptions(
            config.training.local_batch_size, config.training.seq_len));
    checkpointer = std::make_unique<CheckpointManager>(
        config.checkpoint,
        config.job.dump_folder,
        parts,
        *optimizers,
        *schedulers,
        dataloader.get(),
        CheckpointLayout{},
        dist::ProcessGroup::single("checkpoint"),
        "{}");
    for (const auto& p : parts.parameters()) {
      initial.push_back(p.detach().clone());
    }
  }

  /// "" when the parameters, optimizer state and LR are the initial ones.
  std::string unchanged() const {
    const auto now = parts.parameters();
    for (size_t i = 0; i < now.size(); ++i) {
      if (!torch::equal(now[i], initial[i])) {
        return "parameter " + std::to_string(i) + " changed";
      }
    }
    if (!(*optimizers)[0].state().empty()) {
      return "the optimizer state changed";
    }
    if (schedulers->lr() != initial_lr) {
      return "the LR changed";
    }
    return "";
  }

  /// Back to the initial state after a load that succeeded.
  void reset() {
    torch::NoGradGuard no_grad;
    const auto now = parts.parameters();
    for (size_t i = 0; i < now.size(); ++i) {
      now[i].copy_(initial[i]);
    }
    (*optimizers)[0].state().clear();
  }

  JobConfig config;
  ModelParts parts;
  std::unique_ptr<OptimizersContainer> optimizers;
  std::unique_ptr<LRSchedulersContainer> schedulers;
  std::unique_ptr<DataLoader> dataloader;
  std::unique_ptr<CheckpointManager> checkpointer;
  std::vector<at::Tensor> initial;
  double initial_lr = 0;
};

/// Index damage: top-level fields and tensor entries of the wrong type.
std::vector<Mutation> index_mutations(const std::string& good) {
  const json index = json::parse(good);
  std::vector<Mutation> out;
  const std::vector<json> wrong = {
      5,
      -1,
      "x",
      nullptr,
      json::array(),
      json::object(),
      json::array({1, 2}),
      1e300,
      18446744073709551615ull};
  for (const auto& [key, value] : index.items()) {
    for (const auto& w : wrong) {
      json i = index;
      i[key] = w;
      out.push_back({"'" + key + "' = " + w.dump(), i.dump(1)});
    }
    json i = index;
    i.erase(key);
    out.push_back({"without '" + key + "'", i.dump(1)});
  }
  for (const char* sub : {"layout", "dataloader", "rng"}) {
    if (!index.contains(sub) || !index[sub].is_object()) {
      continue;
    }
    for (const auto& [key, value] : index[sub].items()) {
      for (const auto& w : wrong) {
        json i = index;
        i[sub][key] = w;
        out.push_back(
            {std::string(sub) + "." + key + " = " + w.dump(), i.dump(1)});
      }
    }
  }
  std::vector<std::string> names;
  for (const auto& [name, value] : index["tensors"].items()) {
    names.push_back(name);
  }
  const std::vector<std::pair<std::string, json>> fields = {
      {"file", 5},
      {"file", "missing.safetensors"},
      {"file", "../../../etc/passwd"},
      {"file", "/dev/zero"},
      {"file", "."},
      {"dtype", 1},
      {"dtype", "F99"},
      {"dtype", "BF16"},
      {"shape", "x"},
      {"shape", json::array({-1})},
      {"shape", json::array({1ll << 40, 1ll << 40})},
      {"shape", json::array()},
      {"crc32", "x"},
      {"crc32", -1},
      {"crc32", 1ll << 40},
      {"slices", "x"},
      {"slices", json::array()},
      {"slices", json::array({json::object()})},
      {"slices",
       json::array(
           {{{"file", kRankFile},
             {"offsets", json::array({-5})},
             {"shape", json::array({1})},
             {"crc32", 0}}})},
  };
  for (size_t n = 0; n < names.size(); n += 1 + names.size() / 6) {
    for (const auto& [field, value] : fields) {
      json i = index;
      i["tensors"][names[n]][field] = value;
      out.push_back(
          {"tensor '" + names[n] + "' " + field + " = " + value.dump(),
           i.dump(1)});
    }
    json i = index;
    i["tensors"][names[n]] = "x";
    out.push_back({"tensor '" + names[n] + "' = \"x\"", i.dump(1)});
  }
  return out;
}

/// "" when a load of the damaged checkpoint succeeds (the model is put
/// back), or fails naming a file of `dir` and changing nothing.
std::string check_load(Trainee& trainee, const fs::path& dir) {
  // A load that succeeded moved the LR on; each case compares with its own
  // start.
  trainee.initial_lr = trainee.schedulers->lr();
  try {
    trainee.checkpointer->load();
    trainee.reset();
    return "";
  } catch (const CheckpointError& e) {
    const std::string problem = testing::missing_from(e.what(), {dir.string()});
    return problem.empty() ? trainee.unchanged() : problem;
  } catch (const std::exception& e) {
    return std::string("not a CheckpointError: ") + e.what();
  }
}

TEST(CheckpointSweep, DamagedCheckpointsFailToLoadAndChangeNothing) {
  Sweep sweep("checkpoint_load");
  const auto dump = testing::fresh_dir("ck_sweep_load");
  fs::create_directories(dump / "checkpoint");
  fs::copy(step_dir(good_run()), step_dir(dump));
  const fs::path dir = step_dir(dump);
  Trainee trainee(dump);
  const std::string good_index = testing::read_bytes(dir / "index.json");
  const std::string good_file = testing::read_bytes(dir / kRankFile);
  std::vector<Mutation> index_cases;
  for (const size_t n : testing::truncation_lengths(good_index.size(), 60)) {
    index_cases.push_back(
        {"index.json truncated to " + std::to_string(n),
         good_index.substr(0, n)});
  }
  for (auto& m : testing::bit_flips(good_index, 21, 60)) {
    index_cases.push_back(std::move(m));
  }
  for (auto& m : index_mutations(good_index)) {
    index_cases.push_back(std::move(m));
  }
  for (const auto& c : index_cases) {
    sweep.run("index.json: " + c.what, [&] {
      testing::write_bytes(dir / "index.json", c.bytes);
      return check_load(trainee, dir);
    });
  }
  testing::write_bytes(dir / "index.json", good_index);
  // The rank file is 60 MB: each case made when it runs, one at a time.
  for (const size_t n : testing::truncation_lengths(good_file.size(), 16)) {
    sweep.run(kRankFile + ": truncated to " + std::to_string(n), [&] {
      testing::write_bytes(dir / kRankFile, good_file.substr(0, n));
      return check_load(trainee, dir);
    });
  }
  std::mt19937_64 rng(22);
  for (int i = 0; i < 16; ++i) {
    std::string bytes = good_file;
    const size_t at = rng() % bytes.size();
    bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
    sweep.run(kRankFile + ": bit flip at byte " + std::to_string(at), [&] {
      testing::write_bytes(dir / kRankFile, bytes);
      return check_load(trainee, dir);
    });
  }
  EXPECT_GT(sweep.cases(), 150);
}

TEST(CheckpointSweep, InspectReportsOrNamesTheFile) {
  Sweep sweep("checkpoint_inspect");
  const auto dump = testing::fresh_dir("ck_sweep_inspect");
  fs::create_directories(dump / "checkpoint");
  fs::copy(step_dir(good_run()), step_dir(dump));
  const fs::path dir = step_dir(dump);
  const std::string good_index = testing::read_bytes(dir / "index.json");
  std::vector<Mutation> cases;
  for (const size_t n : testing::truncation_lengths(good_index.size(), 40)) {
    cases.push_back(
        {"truncated to " + std::to_string(n), good_index.substr(0, n)});
  }
  for (auto& m : testing::bit_flips(good_index, 31, 40)) {
    cases.push_back(std::move(m));
  }
  // inspect reads and checks all 60 MB each time: every other damage of
  // the load's sweep (which it shares) is enough here.
  auto damage = index_mutations(good_index);
  for (size_t k = 0; k < damage.size(); k += 2) {
    cases.push_back(std::move(damage[k]));
  }
  for (const auto& c : cases) {
    sweep.run("index.json: " + c.what, [&]() -> std::string {
      testing::write_bytes(dir / "index.json", c.bytes);
      std::ostringstream out;
      try {
        inspect_checkpoint(dir, out);
        return "";
      } catch (const CheckpointError& e) {
        return testing::missing_from(e.what(), {"index.json"});
      } catch (const std::exception& e) {
        return std::string("not a CheckpointError: ") + e.what();
      }
    });
  }
  EXPECT_GT(sweep.cases(), 150);
}

/// Every top-level field of `good` (a JSON object) set to wrong types and
/// sizes, and removed.
std::vector<Mutation> json_field_mutations(const std::string& good) {
  const json j = json::parse(good);
  const std::vector<json> wrong = {
      "x",
      -1,
      0,
      1e300,
      nullptr,
      json::array(),
      json::object(),
      true,
      18446744073709551615ull};
  std::vector<Mutation> out;
  for (const auto& [key, value] : j.items()) {
    for (const auto& w : wrong) {
      json changed = j;
      changed[key] = w;
      out.push_back({"'" + key + "' = " + w.dump(), changed.dump(1)});
    }
    json removed = j;
    removed.erase(key);
    out.push_back({"without '" + key + "'", removed.dump(1)});
  }
  return out;
}

/// Truncations, bit flips and `extra` of `good`.
std::vector<Mutation> file_mutations(
    const std::string& good, uint64_t seed, std::vector<Mutation> extra) {
  std::vector<Mutation> out;
  for (const size_t n : testing::truncation_lengths(good.size(), 600)) {
    out.push_back({"truncated to " + std::to_string(n), good.substr(0, n)});
  }
  for (auto& m : testing::bit_flips(good, seed, 300)) {
    out.push_back(std::move(m));
  }
  for (auto& m : extra) {
    out.push_back(std::move(m));
  }
  return out;
}

TEST(CheckpointSweep, HuggingFaceFoldersCheckOrNameTheFile) {
  Sweep sweep("hf_llama");
  const auto dir = testing::fresh_dir("ck_sweep_hf");
  fs::create_directories(dir);
  register_builtin_models();
  const HfFormat& format = model_registry().get("llama3").hf;
  const ModelArgs shape = model_args_from_json(
      {{"dim", 256},
       {"n_layers", 6},
       {"n_heads", 16},
       {"n_kv_heads", 16},
       {"vocab_size", 258},
       {"ffn_hidden_dim", 768},
       {"norm_eps", 1e-5},
       {"rope_theta", 500000.0}});
  json config = format.write_config(shape);
  config["torch_dtype"] = "float32";
  const std::string good_config = config.dump(1);
  testing::write_bytes(dir / "model.safetensors", "");
  std::vector<SafetensorsEntry> entries;
  for (const char* name :
       {"model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
        "model.layers.0.mlp.up_proj.weight"}) {
    SafetensorsEntry e;
    e.name = name;
    entries.push_back(e);
  }
  const std::string good_index =
      hf_folder::index_json(entries, "model.safetensors").dump(1);
  const std::string config_path = (dir / "config.json").string();
  const std::string index_path =
      (dir / "model.safetensors.index.json").string();
  testing::write_bytes(index_path, good_index);
  for (const auto& c :
       file_mutations(good_config, 41, json_field_mutations(good_config))) {
    sweep.run("config.json: " + c.what, [&]() -> std::string {
      testing::write_bytes(config_path, c.bytes);
      try {
        hf_folder::check_folder(dir, format, shape, "llama3 debugmodel");
        return "";
      } catch (const ConfigError& e) {
        return testing::missing_from(e.what(), {config_path});
      } catch (const std::exception& e) {
        return std::string("not a ConfigError: ") + e.what();
      }
    });
  }
  testing::write_bytes(config_path, good_config);
  std::vector<Mutation> map_damage;
  for (const json& file :
       {json(5), json(""), json("../x.safetensors"), json(nullptr)}) {
    json j = json::parse(good_index);
    j["weight_map"]["model.norm.weight"] = file;
    map_damage.push_back({"a file " + file.dump(), j.dump(1)});
  }
  for (auto& m : json_field_mutations(good_index)) {
    map_damage.push_back(std::move(m));
  }
  for (const auto& c : file_mutations(good_index, 42, std::move(map_damage))) {
    sweep.run("index: " + c.what, [&]() -> std::string {
      testing::write_bytes(index_path, c.bytes);
      try {
        hf_folder::read_weight_map(dir);
        return "";
      } catch (const CheckpointError& e) {
        return testing::missing_from(e.what(), {index_path});
      } catch (const std::exception& e) {
        return std::string("not a CheckpointError: ") + e.what();
      }
    });
  }
  EXPECT_GT(sweep.cases(), 1000);
}

}  // namespace
}  // namespace baton
