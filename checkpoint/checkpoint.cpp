// CheckpointManager: its construction and the save (the snapshot, the
// files, the index and pruning), and the helpers its files share
// (checkpoint_detail.h). The folder at start-up is in checkpoint_folder.cpp,
// the load in checkpoint_load.cpp, the model export in
// checkpoint_export.cpp, the layout in checkpoint_layout.cpp.

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
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint/checkpoint_detail.h"
#include "checkpoint/checkpoint_index.h"
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

double checkpoint_detail::seconds_since(
    std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<std::string> checkpoint_detail::all_gather_strings(
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

void checkpoint_detail::fail(const std::string& what) {
  throw CheckpointError(kTag + what);
}

std::string checkpoint_detail::untagged(const std::string& message) {
  return message.rfind(kTag, 0) == 0 ? message.substr(kTag.size()) : message;
}

void checkpoint_detail::throw_any(
    dist::ProcessGroup& group, const std::string& error) {
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

at::Tensor checkpoint_detail::cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void checkpoint_detail::write_synced(
    const fs::path& path, const std::string& text) {
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

void checkpoint_detail::replace_folder(
    const fs::path& from, const fs::path& to) {
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

int64_t checkpoint_detail::copy_overlap(
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

namespace {

using checkpoint_detail::all_gather_strings;
using checkpoint_detail::cpu_rng_state;
using checkpoint_detail::replace_folder;
using checkpoint_detail::seconds_since;
using checkpoint_detail::throw_any;
using checkpoint_detail::untagged;
using checkpoint_detail::write_synced;
using checkpoint_index::kIndexFile;
using checkpoint_index::optimizer_fqn;
using checkpoint_index::parse_step_dir;
using checkpoint_index::rank_file_name;
using checkpoint_index::step_dir_name;

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
  // A tied copy is its original, which its own stage writes.
  return layout_.writes(part.grad_split(fqn)) && !part.tied_copy(fqn) &&
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
      if (parts_[i].tied_copy(fqn)) {
        continue;  // its original is written, with its optimizer state
      }
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
    // Buffers saved with the weights (an MoE's routing bias): whole and the
    // same on every rank of a stage, written by its first.
    if (layout_.writes({})) {
      for (const auto& item : parts_[i].module().named_buffers()) {
        s.items.push_back(safetensors_item(item.key(), keep(item.value())));
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
  json index = checkpoint_index::make_index(
      step,
      s.state.tokens_seen,
      s.meta["lr_steps"],
      layout_,
      metas,
      state_codec(0).name);
  // The model it was saved from, so that a resume into another family or
  // shape says so (check_model) rather than which tensor is missing.
  const json record = json::parse(model_config_json_);
  if (record.contains("model")) {
    index["model"] = record;
  }
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

}  // namespace baton
