#include "checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <glog/logging.h>
#include <signal.h>
#include <torch/optim/optimizer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/safetensors.h"
#include "common/torch_compat.h"
#include "data/dataloader.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizer_state.h"
#include "optim/optimizers.h"
#include "parallel/dist/process_group.h"
#include "trainer/fault_injection.h"

namespace baton {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using checkpoint_index::kIndexFile;
using checkpoint_index::optimizer_fqn;
using checkpoint_index::parse_step_dir;
using checkpoint_index::rank_file_name;
using checkpoint_index::step_dir_name;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// Every member's `s`, in group-rank order.
std::vector<std::string> all_gather_strings(
    dist::ProcessGroup& group, const std::string& s) {
  const at::Tensor sizes = group.all_gather(
      at::full({1}, static_cast<int64_t>(s.size()), at::kLong));
  const int64_t longest = std::max<int64_t>(1, sizes.max().item<int64_t>());
  at::Tensor mine = at::zeros({longest}, at::kByte);
  std::memcpy(mine.data_ptr(), s.data(), s.size());
  const at::Tensor all =
      group.all_gather(mine).contiguous();  // (size, longest)
  std::vector<std::string> out;
  for (int64_t r = 0; r < group.size(); ++r) {
    out.emplace_back(
        static_cast<const char*>(all[r].data_ptr()),
        static_cast<size_t>(sizes[r][0].item<int64_t>()));
  }
  return out;
}

const std::string kTag = "[checkpoint] ";
/// The export pieces' metadata key of a slice's place: "slice:<fqn>".
const std::string kSlicePrefix = "slice:";

[[noreturn]] void fail(const std::string& what) {
  throw CheckpointError(kTag + what);
}

/// `message` without a leading "[checkpoint] ".
std::string untagged(const std::string& message) {
  return message.rfind(kTag, 0) == 0 ? message.substr(kTag.size()) : message;
}

/// The first non-empty error of any rank, thrown on every rank (so that no
/// rank goes on alone and nobody waits for a rank that stopped).
void throw_any(dist::ProcessGroup& group, const std::string& error) {
  const auto errors = all_gather_strings(group, error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) {
      continue;
    }
    if (errors.size() == 1 || errors[r] == error) {
      throw CheckpointError(errors[r]);
    }
    throw CheckpointError(
        kTag + "rank " + std::to_string(r) + ": " + untagged(errors[r]));
  }
}

/// The state of `p` in `optimizer`, or null before its first step.
const torch::optim::OptimizerParamState* state_of(
    torch::optim::Optimizer& optimizer, const at::Tensor& p) {
  auto& states = optimizer.state();
  const auto it = states.find(compat::optimizer_state_key(p));
  return it == states.end() ? nullptr : it->second.get();
}

/// `slice` of a parameter as the state field `f` keeps it: the kept
/// dimensions' offsets and whole sizes; nothing for a scalar or a whole
/// parameter.
std::optional<ParamSlice> field_slice(
    const OptimizerStateField& f, const ParamSlice* slice) {
  if (slice == nullptr || f.scalar()) {
    return std::nullopt;
  }
  ParamSlice out;
  out.global_shape = f.shape_of(slice->global_shape);
  out.offsets = f.shape_of(slice->offsets);
  return out;
}

std::string to_hex(const at::Tensor& bytes) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = bytes.data_ptr<uint8_t>();
  std::string s;
  s.reserve(static_cast<size_t>(bytes.numel()) * 2);
  for (int64_t i = 0; i < bytes.numel(); ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

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

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

/// Writes `text` to `path` and fsyncs it.
void write_synced(const fs::path& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    fail(path.string() + ": cannot create");
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() &&
                  std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  if (std::fclose(f) != 0 || !ok) {
    fail(path.string() + ": write failed");
  }
}

/// Replaces `to` by `from` (both folders) and makes the rename durable.
void replace_folder(const fs::path& from, const fs::path& to) {
  if (fs::exists(to)) {
    const fs::path old = to.string() + ".old";
    fs::remove_all(old);
    fs::rename(to, old);
    fs::rename(from, to);
    fs::remove_all(old);
  } else {
    fs::rename(from, to);
  }
  sync_directory(to.parent_path().string());
}

at::ScalarType export_dtype(const std::string& name) {
  if (name == "bfloat16") {
    return at::kBFloat16;
  }
  if (name == "float16") {
    return at::kHalf;
  }
  return at::kFloat;
}

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

/// Copies the part of `src` (a slice at `src_offsets` of the whole tensor)
/// that falls in `dst` (a slice at `dst_offsets`); returns its elements.
int64_t copy_overlap(
    const at::Tensor& src,
    const std::vector<int64_t>& src_offsets,
    at::Tensor& dst,
    const std::vector<int64_t>& dst_offsets) {
  at::Tensor from = src;
  at::Tensor to = dst;
  for (int64_t d = 0; d < src.dim(); ++d) {
    const int64_t lo = std::max(src_offsets[d], dst_offsets[d]);
    const int64_t hi =
        std::min(src_offsets[d] + src.size(d), dst_offsets[d] + dst.size(d));
    if (hi <= lo) {
      return 0;
    }
    from = from.narrow(d, lo - src_offsets[d], hi - lo);
    to = to.narrow(d, lo - dst_offsets[d], hi - lo);
  }
  to.copy_(from);
  return from.numel();
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

}  // namespace

struct CheckpointManager::Snapshot {
  TrainState state;
  /// This rank's tensors (empty on DP replicas other than 0).
  std::vector<SafetensorsItem> items;
  /// Of those, the slices of tensors sharded across ranks, by name.
  std::map<std::string, ParamSlice> slices;
  /// This rank's loader and RNG state and the scheduler's step.
  json meta;
};

CheckpointManager::CheckpointManager(
    const CheckpointConfig& config,
    const std::string& dump_folder,
    ModelParts parts,
    const OptimizersContainer& optimizers,
    const LRSchedulersContainer& schedulers,
    DataLoader* dataloader,
    CheckpointLayout layout,
    std::shared_ptr<dist::ProcessGroup> group,
    std::string model_config_json)
    : config_(config),
      folder_(fs::path(dump_folder) / config.folder),
      parts_(std::move(parts)),
      optimizers_(optimizers),
      schedulers_(schedulers),
      dataloader_(dataloader),
      layout_(std::move(layout)),
      group_(std::move(group)),
      model_config_json_(std::move(model_config_json)) {
  if (parts_.size() != optimizers_.size() ||
      parts_.size() != schedulers_.size()) {
    throw std::logic_error(
        "[checkpoint] needs one optimizer and one LR scheduler per part");
  }
  // Every optimizer's state must have a layout the checkpoint can save and
  // reshard: fail now rather than at the first save.
  codecs_ = checked_state_codecs(parts_, optimizers_);
}

CheckpointManager::~CheckpointManager() {
  if (worker_.joinable()) {
    worker_.join();
  }
  if (worker_error_) {
    try {
      std::rethrow_exception(worker_error_);
    } catch (const std::exception& e) {
      LOG(ERROR) << "checkpoint: the last background save failed: " << e.what();
    }
  }
}

std::vector<int64_t> CheckpointManager::list_steps(const fs::path& folder) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const auto step = parse_step_dir(name);
    if (step && fs::exists(entry.path() / kIndexFile, ec)) {
      steps.push_back(*step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool CheckpointManager::writes(
    const ModelPart& part, const std::string& fqn, const at::Tensor& p) const {
  return layout_.writes(part.grad_split(fqn)) &&
         (part.slice(fqn) == nullptr || p.numel() > 0);
}

CheckpointManager::Snapshot CheckpointManager::snapshot(
    const TrainState& state, bool copy) const {
  at::NoGradGuard no_grad;
  Snapshot s;
  s.state = state;
  const auto keep = [copy](const at::Tensor& t) {
    return copy ? t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)
                : t.detach();
  };
  for (size_t i = 0; i < parts_.size(); ++i) {
    for (const auto& item : parts_[i].module().named_parameters()) {
      const std::string& fqn = item.key();
      const at::Tensor& p = item.value();
      const ParamSlice* slice = parts_[i].slice(fqn);
      // One rank writes each copy of a tensor (CheckpointLayout::writes):
      // a slice is written by every rank that holds a (non-empty) one of
      // its copy, and the step by the one at offset 0.
      const bool writer = layout_.writes(parts_[i].grad_split(fqn));
      const bool write_tensor = writes(parts_[i], fqn, p);
      const bool write_step =
          writer && (!slice || std::all_of(
                                   slice->offsets.begin(),
                                   slice->offsets.end(),
                                   [](int64_t o) { return o == 0; }));
      if (!write_tensor && !write_step) {
        continue;
      }
      const OptimizerStateCodec& codec = state_codec(i);
      const std::vector<at::Tensor> fields =
          codec.read(state_of(optimizers_[i], p), p);
      if (write_tensor) {
        s.items.push_back(safetensors_item(fqn, keep(p)));
        if (slice) {
          s.slices[fqn] = *slice;
        }
      }
      for (size_t k = 0; k < codec.fields.size(); ++k) {
        const OptimizerStateField& f = codec.fields[k];
        // A scalar (a step count) is the same on every slice: written once,
        // with the slice at offset 0.
        if (f.scalar() ? !write_step : !write_tensor) {
          continue;
        }
        const std::string name = optimizer_fqn(fqn, f.name.c_str());
        s.items.push_back(safetensors_item(name, keep(fields.at(k))));
        if (const auto field = field_slice(f, slice)) {
          s.slices[name] = *field;
        }
      }
    }
  }
  s.meta = {
      {"rank", layout_.rank},
      {"dp_rank", layout_.dp_rank},
      {"lr_steps", schedulers_[0].steps_done()},
      {"rng", to_hex(cpu_rng_state())},
      {"loader",
       dataloader_ ? json::parse(dataloader_->state().to_json()) : json()},
      {"tensors", json::object()},
      {"error", ""}};
  return s;
}

void CheckpointManager::maybe_save(const TrainState& state, bool last) {
  if (!config_.enable || state.step == last_saved_step_) {
    return;
  }
  if (last || state.step % config_.interval == 0) {
    save(state);
  }
}

void CheckpointManager::save_now(const TrainState& state) {
  if (!config_.enable) {
    return;
  }
  if (state.step != last_saved_step_) {
    save(state);
  }
  wait();
}

void CheckpointManager::wait() {
  if (worker_.joinable()) {
    worker_.join();
  }
  if (worker_error_) {
    std::exception_ptr error = worker_error_;
    worker_error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void CheckpointManager::save(const TrainState& state) {
  wait();
  last_saved_step_ = state.step;
  Snapshot s;
  try {
    s = snapshot(state, /*copy=*/config_.async);
  } catch (const std::exception& e) {
    // write() still meets the other ranks, and they all fail together.
    s = Snapshot{state, {}, {}, {{"error", e.what()}}};
  }
  if (!config_.async) {
    write(s);
    return;
  }
  // The copy is taken now; the files are written while training goes on.
  worker_ = std::thread([this, s = std::move(s)] {
    try {
      write(s);
    } catch (...) {
      worker_error_ = std::current_exception();
    }
  });
}

void CheckpointManager::write(const Snapshot& s) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t step = s.state.step;
  const fs::path tmp = folder_ / (step_dir_name(step) + ".partial");
  json meta = s.meta;
  try {
    if (!meta.value("error", "").empty()) {
      throw CheckpointError(meta["error"].get<std::string>());
    }
    fs::create_directories(tmp);
    if (!s.items.empty()) {
      const std::string file = rank_file_name(layout_.rank);
      SafetensorsWriteOptions options;
      options.metadata = {{"format", "pt"}, {"step", std::to_string(step)}};
      if (FaultInjection::get().kill_during_save(layout_.rank, step)) {
        options.on_progress = [](uint64_t written, uint64_t total) {
          if (2 * written >= total) {
            LOG(WARNING) << "injecting fault 'killsave': killed half-way "
                            "through writing the checkpoint";
            google::FlushLogFiles(google::GLOG_INFO);
            ::kill(::getpid(), SIGKILL);
          }
        };
      } else if (FaultInjection::get().stall_during_save(layout_.rank, step)) {
        options.on_progress = [stalled = false](
                                  uint64_t written, uint64_t total) mutable {
          if (2 * written >= total && !stalled) {
            stalled = true;
            LOG(WARNING) << "injecting fault 'stallsave': stalled half-way "
                            "through writing the checkpoint";
            google::FlushLogFiles(google::GLOG_INFO);
            std::this_thread::sleep_for(std::chrono::hours(1));
          }
        };
      }
      for (const auto& e :
           write_safetensors((tmp / file).string(), s.items, options)) {
        const std::string dtype = safetensors_dtype(e.dtype);
        const auto slice = s.slices.find(e.name);
        meta["tensors"][e.name] =
            slice == s.slices.end()
                ? json{{"file", file}, {"dtype", dtype}, {"shape", e.shape}, {"crc32", e.crc32}}
                : checkpoint_index::slice_json(
                      file,
                      dtype,
                      slice->second.global_shape,
                      slice->second.offsets,
                      e.shape,
                      e.crc32);
      }
    }
  } catch (const std::exception& e) {
    meta["error"] = e.what();
  }
  const auto metas = all_gather_strings(*group_, meta.dump());
  std::string error;
  for (size_t r = 0; r < metas.size() && error.empty(); ++r) {
    const std::string e = json::parse(metas[r])["error"];
    if (!e.empty()) {
      error = "checkpoint of step " + std::to_string(step) +
              " not saved: rank " + std::to_string(r) + ": " + e;
    }
  }
  if (!error.empty()) {
    throw CheckpointError("[checkpoint] " + error);
  }
  // Only rank 0 writes the index and renames; its errors reach every rank.
  error.clear();
  if (layout_.rank == 0) {
    try {
      finish_save(s, metas, tmp, start);
    } catch (const std::exception& e) {
      error = "[checkpoint] checkpoint of step " + std::to_string(step) +
              " not saved: " + untagged(e.what());
    }
  }
  throw_any(*group_, error);
}

void CheckpointManager::finish_save(
    const Snapshot& s,
    const std::vector<std::string>& metas,
    const fs::path& tmp,
    std::chrono::steady_clock::time_point start) {
  const int64_t step = s.state.step;
  const json index = checkpoint_index::make_index(
      step,
      s.state.tokens_seen,
      s.meta["lr_steps"],
      layout_,
      metas,
      state_codec(0).name);
  const uint64_t bytes = checkpoint_index::tensor_bytes(index);
  write_synced(tmp / kIndexFile, index.dump(1));
  sync_directory(tmp.string());
  replace_folder(tmp, folder_ / step_dir_name(step));
  LOG(INFO) << "checkpoint: saved step " << step << " to "
            << (folder_ / step_dir_name(step)).string() << " ("
            << bytes / (1 << 20) << " MiB in " << seconds_since(start) << " s"
            << (config_.async ? ", in the background" : "") << ")";
  prune();
}

void CheckpointManager::prune() {
  if (config_.keep_latest_k <= 0) {
    return;
  }
  const auto steps = list_steps(folder_);
  const auto excess =
      static_cast<int64_t>(steps.size()) - config_.keep_latest_k;
  for (int64_t i = 0; i < excess; ++i) {
    fs::remove_all(folder_ / step_dir_name(steps[i]));
    LOG(INFO) << "checkpoint: removed step " << steps[i] << " (keep_latest_k "
              << config_.keep_latest_k << ")";
  }
}

struct CheckpointManager::FolderPlan {
  /// A rename (`to` set) or a removal (`to` empty), and the log line that
  /// says why.
  struct Move {
    fs::path from;
    fs::path to;
    std::string why;
  };
  std::vector<Move> moves;
  /// The step to resume (-1: none) and where its files are now (a complete
  /// `.partial` is read where it lies and renamed after).
  int64_t step = -1;
  fs::path dir;
};

CheckpointManager::FolderPlan CheckpointManager::plan_folder() const {
  FolderPlan plan;
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".partial") || name.ends_with(".old")) {
      leftovers.push_back(entry.path());
    }
  }
  std::sort(leftovers.begin(), leftovers.end());
  // A complete .partial is newer than an .old of the same step: first.
  std::stable_partition(leftovers.begin(), leftovers.end(), [](const auto& p) {
    return p.extension() == ".partial";
  });
  std::map<int64_t, fs::path> where;
  for (const int64_t step : list_steps(folder_)) {
    where[step] = folder_ / step_dir_name(step);
  }
  for (const auto& path : leftovers) {
    const std::string name = path.filename().string();
    const fs::path target =
        path.parent_path() / name.substr(0, name.rfind('.'));
    // A save that died between writing its index and its rename (.partial)
    // or inside the swap of an existing folder (.old) is complete: it goes
    // back where it belongs.
    const auto step = parse_step_dir(target.filename().string());
    if (step && !where.contains(*step) && fs::exists(path / kIndexFile, ec)) {
      where[*step] = path;
      plan.moves.push_back(
          {path,
           target,
           "checkpoint: " + path.string() + " is complete; renamed to " +
               target.string()});
      continue;
    }
    plan.moves.push_back(
        {path,
         {},
         "checkpoint: removing " + path.string() +
             ", left by a save that did not finish"});
  }
  if (config_.load_step < 0) {
    if (!where.empty()) {
      plan.step = where.rbegin()->first;
      plan.dir = where.rbegin()->second;
    }
    return plan;
  }
  if (!where.contains(config_.load_step)) {
    std::string have;
    for (const auto& [s, path] : where) {
      have += (have.empty() ? "" : ", ") + std::to_string(s);
    }
    fail(
        "checkpoint.load_step " + std::to_string(config_.load_step) +
        ": no step-" + std::to_string(config_.load_step) + " in " +
        folder_.string() +
        " (complete checkpoints: " + (have.empty() ? "none" : have) + ")");
  }
  plan.step = config_.load_step;
  plan.dir = where.at(plan.step);
  // Later checkpoints belong to the run being abandoned: moved aside, so
  // that neither "latest" nor keep_latest_k picks them up again.
  std::set<fs::path> taken;
  for (const auto& [later, path] : where) {
    if (later <= config_.load_step) {
      continue;
    }
    const fs::path from = folder_ / step_dir_name(later);
    fs::path to = from.string() + ".superseded";
    for (int n = 2; fs::exists(to, ec) || taken.contains(to); ++n) {
      to = from.string() + ".superseded." + std::to_string(n);
    }
    taken.insert(to);
    plan.moves.push_back(
        {from,
         to,
         "checkpoint: resuming from step " + std::to_string(plan.step) +
             ", so the later " + from.string() + " is moved to " + to.string() +
             " (kept, never loaded or pruned)"});
  }
  return plan;
}

void CheckpointManager::tidy(const FolderPlan& plan) const {
  for (const auto& move : plan.moves) {
    LOG(WARNING) << move.why;
    if (move.to.empty()) {
      fs::remove_all(move.from);
    } else {
      fs::rename(move.from, move.to);
    }
  }
  if (!plan.moves.empty()) {
    sync_directory(folder_.string());
  }
}

struct CheckpointManager::Wanted {
  std::string fqn;
  at::ScalarType dtype;
  /// This rank's shape of it, and where that sits in the whole tensor.
  std::vector<int64_t> shape;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};

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

CheckpointManager::FolderPlan CheckpointManager::agree_on_plan() const {
  // Rank 0 looks at the folder and picks the step, so that every rank
  // loads the same one from the same place.
  FolderPlan plan;
  json choice = {{"step", -1}, {"dir", ""}, {"error", ""}};
  if (layout_.rank == 0) {
    try {
      plan = plan_folder();
      choice["step"] = plan.step;
      choice["dir"] = plan.dir.string();
    } catch (const std::exception& e) {
      choice["error"] = e.what();
    }
  }
  choice = json::parse(all_gather_strings(*group_, choice.dump()).at(0));
  if (!choice["error"].get<std::string>().empty()) {
    throw CheckpointError(choice["error"].get<std::string>());
  }
  plan.step = choice["step"].get<int64_t>();
  plan.dir = choice["dir"].get<std::string>();
  return plan;
}

void CheckpointManager::tidy_everywhere(const FolderPlan& plan) const {
  std::string error;
  if (layout_.rank == 0) {
    try {
      tidy(plan);
    } catch (const std::exception& e) {
      error = kTag + folder_.string() + ": tidying failed: " + e.what();
    }
  }
  throw_any(*group_, error);
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
  const std::string index_path = (dir / kIndexFile).string();
  check_fqns(index, index_path, model_fqns);
  // The saved slices each of this rank's tensors needs (a whole tensor is
  // one slice), by file, so that each file is opened once.
  struct Need {
    const Wanted* wanted;
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
    staged.tensors[w.fqn] = at::empty(w.shape, w.dtype);
    for (const auto& slice : entry.slices) {
      if (checkpoint_index::overlap(
              w.offsets, w.shape, slice.offsets, slice.shape) > 0) {
        by_file[slice.file].push_back({&w, slice});
      }
    }
  }
  // The slices tile each tensor (tensor_entry checked), so they cover the
  // rank's own slice too.
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
      copy_overlap(t, slice.offsets, staged.tensors.at(w->fqn), w->offsets);
    }
  }
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
        std::vector<at::Tensor> fields;
        for (const OptimizerStateField& f : codec.fields) {
          fields.push_back(
              staged.tensors.at(optimizer_fqn(item.key(), f.name.c_str())));
        }
        auto st = codec.make(fields, p);
        states[compat::optimizer_state_key(p)] = std::move(st);
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
  hf_llama::check_folder(dir, hf_shape());
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
  const fs::path dir = config_.initial_load_hf;
  const hf_llama::Shape shape = hf_shape();
  const hf_llama::WeightMap map = hf_llama::read_weight_map(dir);
  // Judged against every rank's FQNs, the same way on every rank.
  std::set<std::string> expected;
  for (const auto& fqn : model_fqns) {
    const std::string name = hf_llama::hf_name(fqn);
    if (name.empty()) {
      fail(
          "tensor '" + fqn +
          "' has no Hugging Face Llama name: checkpoint.initial_load_hf "
          "needs a llama3 model");
    }
    if (!map.files.contains(name)) {
      fail(
          map.listing + ": tensor '" + name + "' (Baton's '" + fqn +
          "') is missing (the model has it; was the checkpoint saved from "
          "another model?)");
    }
    expected.insert(name);
  }
  for (const auto& [name, file] : map.files) {
    if (!expected.contains(name) && !hf_llama::ignorable(name)) {
      fail(
          map.listing + ": tensor '" + name + "' (in " + file +
          ") is not in the model");
    }
  }
  std::map<std::string, std::vector<const Wanted*>> by_file;
  for (const auto& w : wanted) {
    by_file[map.files.at(hf_llama::hf_name(w.fqn))].push_back(&w);
  }
  for (const auto& [file, needs] : by_file) {
    const SafetensorsReader reader((dir / file).string());
    for (const Wanted* w : needs) {
      const std::string name = hf_llama::hf_name(w->fqn);
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
      if (e->shape != w->global_shape) {
        fail(
            reader.path() + ": tensor '" + name + "' is " +
            shape_string(e->shape) + ", but the model's '" + w->fqn + "' is " +
            shape_string(w->global_shape));
      }
      const at::Tensor whole =
          hf_llama::from_hf(w->fqn, reader.read(name).to(w->dtype), shape);
      at::Tensor mine = at::empty(w->shape, w->dtype);
      copy_overlap(
          whole, std::vector<int64_t>(whole.dim(), 0), mine, w->offsets);
      staged.tensors[w->fqn] = std::move(mine);
    }
  }
}

hf_llama::Shape CheckpointManager::hf_shape() const {
  try {
    return hf_llama::shape_of(json::parse(model_config_json_));
  } catch (const std::exception& e) {
    throw std::logic_error(
        kTag + "the Hugging Face layout needs the model's shape: " +
        untagged(e.what()));
  }
}

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

void CheckpointManager::merge_export(
    const TrainState& state,
    const fs::path& tmp,
    const fs::path& dir,
    std::chrono::steady_clock::time_point start) const {
  // The pieces become one file sorted by name, a tensor at a time, each
  // sharded one assembled from its slices.
  std::vector<std::unique_ptr<SafetensorsReader>> pieces;
  std::map<std::string, std::vector<ExportPiece>> by_name;
  for (const auto& entry : fs::directory_iterator(tmp)) {
    if (entry.path().filename().string().rfind("piece-", 0) != 0) {
      continue;
    }
    pieces.push_back(
        std::make_unique<SafetensorsReader>(entry.path().string()));
    const auto& reader = *pieces.back();
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
  const bool hf = config_.export_format == "hf";
  const std::optional<hf_llama::Shape> shape =
      hf ? std::optional(hf_shape()) : std::nullopt;
  // HF's names sort otherwise than Baton's: items by the name written.
  std::map<std::string, SafetensorsItem> items_by_name;
  for (const auto& [name, list] : by_name) {
    const auto& first = list.front();
    const std::string written = hf ? hf_llama::hf_name(name) : name;
    if (written.empty()) {
      fail(
          "export: tensor '" + name +
          "' has no Hugging Face Llama name; export_format hf needs a "
          "llama3 model");
    }
    items_by_name[written] = {
        written, first.entry.dtype, first.global_shape, [list = list, shape] {
          const at::Tensor whole = assemble(list);
          return shape ? hf_llama::to_hf(list.front().entry.name, whole, *shape)
                       : whole;
        }};
  }
  std::vector<SafetensorsItem> items;
  for (auto& [name, item] : items_by_name) {
    items.push_back(std::move(item));
  }
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}, {"step", std::to_string(state.step)}};
  const auto entries =
      write_safetensors((tmp / hf_llama::kSingleFile).string(), items, options);
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
        tmp / hf_llama::kIndexFile,
        hf_llama::index_json(entries, hf_llama::kSingleFile).dump(2) + "\n");
    config = hf_llama::config_json(*shape, config_.export_dtype, config);
  }
  write_synced(tmp / "config.json", config.dump(2) + "\n");
  sync_directory(tmp.string());
  replace_folder(tmp, dir);
  LOG(INFO) << "checkpoint: exported " << items.size() << " weights ("
            << config_.export_dtype << (hf ? ", Hugging Face Llama" : "")
            << ") to " << (dir / "model.safetensors").string() << " in "
            << seconds_since(start) << " s";
}

}  // namespace baton
