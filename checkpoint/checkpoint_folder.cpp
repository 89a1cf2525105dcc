// CheckpointManager's folder at start-up: rank 0 finds the leftovers of
// saves that did not finish and the step to resume (with a load_step older
// than the latest, the later steps are moved aside), every rank learns the
// plan, and rank 0 carries it out once the load has been read and checked.

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_detail.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/folder_plan.h"
#include "checkpoint/safetensors.h"

namespace baton {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using checkpoint_detail::all_gather_strings;
using checkpoint_detail::fail;
using checkpoint_detail::kTag;
using checkpoint_detail::throw_any;
using checkpoint_index::kIndexFile;
using checkpoint_index::parse_step_dir;
using checkpoint_index::step_dir_name;

/// The folders saves that did not finish left in `folder` (`.partial`,
/// `.old`), sorted; a complete .partial is newer than an .old of the same
/// step: first.
std::vector<fs::path> leftover_folders(const fs::path& folder) {
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".partial") || name.ends_with(".old")) {
      leftovers.push_back(entry.path());
    }
  }
  std::sort(leftovers.begin(), leftovers.end());
  std::stable_partition(leftovers.begin(), leftovers.end(), [](const auto& p) {
    return p.extension() == ".partial";
  });
  return leftovers;
}

/// Where a later step's folder `from` is moved aside: `from`.superseded,
/// numbered past every name on disk or in `taken` (which it joins).
fs::path superseded_path(const fs::path& from, std::set<fs::path>& taken) {
  std::error_code ec;
  fs::path to = from.string() + ".superseded";
  for (int n = 2; fs::exists(to, ec) || taken.contains(to); ++n) {
    to = from.string() + ".superseded." + std::to_string(n);
  }
  taken.insert(to);
  return to;
}

}  // namespace

CheckpointManager::FolderPlan CheckpointManager::plan_folder() const {
  FolderPlan plan;
  std::error_code ec;
  const std::vector<fs::path> leftovers = leftover_folders(folder_);
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
    const fs::path to = superseded_path(from, taken);
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

}  // namespace baton
