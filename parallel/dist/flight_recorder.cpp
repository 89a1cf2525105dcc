#include "parallel/dist/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace baton::dist {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

template <size_t N>
void copy_text(char (&to)[N], const char* from) {
  std::strncpy(to, from, N - 1);
  to[N - 1] = '\0';
}

const char* kind_name(FlightKind kind) {
  switch (kind) {
    case FlightKind::kCollective:
      return "collective";
    case FlightKind::kP2P:
      return "p2p";
    case FlightKind::kAction:
      return "action";
  }
  return "";
}

const char* state_name(FlightState state) {
  switch (state) {
    case FlightState::kStarted:
      return "started";
    case FlightState::kCompleted:
      return "completed";
    case FlightState::kFailed:
      return "failed";
  }
  return "";
}

json entry_json(const FlightEntry& e) {
  auto or_null = [](int64_t v, bool set) { return set ? json(v) : json(); };
  json j;
  j["id"] = e.id;
  j["kind"] = kind_name(e.kind);
  j["name"] = e.name;
  j["label"] = e.label;
  j["group"] = e.group;
  j["group_seq"] = e.group_seq;
  j["peer"] = or_null(e.peer, e.peer >= 0);
  j["tag"] = or_null(e.tag, e.tag >= 0);
  j["bytes"] = e.bytes;
  j["dtype"] = e.dtype;
  j["start_us"] = e.start_us;
  j["end_us"] = or_null(e.end_us, e.end_us != 0);
  j["state"] = state_name(e.state);
  return j;
}

thread_local const char* current_label = nullptr;

}  // namespace

FlightRecorder::FlightRecorder(int64_t capacity) {
  set_capacity(capacity);
}

FlightRecorder& FlightRecorder::process() {
  static FlightRecorder recorder(0);
  return recorder;
}

void FlightRecorder::set_capacity(int64_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = std::max<int64_t>(capacity, 0);
  ring_.assign(static_cast<size_t>(capacity_), FlightEntry{});
  next_id_ = 1;
}

int64_t FlightRecorder::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

uint64_t FlightRecorder::record(FlightEntry entry, const char* label) {
  if (capacity_ == 0) {
    return 0;
  }
  if (label == nullptr && entry.label[0] == '\0') {
    label = current_label;
  }
  if (label != nullptr) {
    copy_text(entry.label, label);
  }
  entry.state = FlightState::kStarted;
  entry.start_us = now_us();
  entry.end_us = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  if (ring_.empty()) {
    return 0;  // set_capacity(0) ran since the check above
  }
  entry.id = next_id_++;
  ring_[entry.id % ring_.size()] = entry;
  return entry.id;
}

void FlightRecorder::finish(uint64_t id, FlightState state) {
  if (id == 0 || capacity_ == 0) {
    return;
  }
  const int64_t end = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (ring_.empty()) {
    return;
  }
  FlightEntry& e = ring_[id % ring_.size()];
  if (e.id == id) {
    e.state = state;
    e.end_us = end;
  }
}

void FlightRecorder::add_group(
    const std::string& name, const std::vector<int64_t>& ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [n, r] : groups_) {
    if (n == name) {
      r = ranks;
      return;
    }
  }
  groups_.emplace_back(name, ranks);
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<FlightEntry> out;
  if (capacity_ == 0) {
    return out;
  }
  const uint64_t last = next_id_ - 1;
  const uint64_t cap = ring_.size();
  const uint64_t first = last >= cap ? last - cap + 1 : 1;
  for (uint64_t id = first; id <= last; ++id) {
    out.push_back(ring_[id % cap]);
  }
  return out;
}

uint64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_id_ - 1;
}

std::string FlightRecorder::to_json(
    int64_t rank, int64_t world_size, const std::string& reason) const {
  json j;
  j["rank"] = rank;
  j["world_size"] = world_size;
  j["reason"] = reason;
  j["dumped_at_us"] = now_us();
  j["capacity"] = capacity();
  j["recorded"] = recorded();
  json groups = json::object();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [name, ranks] : groups_) {
      groups[name] = ranks;
    }
  }
  j["groups"] = groups;
  json entries = json::array();
  for (const auto& e : this->entries()) {
    entries.push_back(entry_json(e));
  }
  j["entries"] = std::move(entries);
  return j.dump(1);
}

void FlightRecorder::dump(
    const fs::path& path,
    int64_t rank,
    int64_t world_size,
    const std::string& reason) const {
  const std::string text = to_json(rank, world_size, reason);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  // Two threads of a process may dump at once (its own failure, a peer's
  // request): each writes a temporary of its own.
  static std::atomic<int64_t> dumps{0};
  const fs::path tmp = path.string() + ".tmp." +
                       std::to_string(static_cast<long>(::getpid())) + "." +
                       std::to_string(++dumps);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text << '\n';
    if (!out.flush()) {
      throw std::runtime_error(
          "[flight_recorder] cannot write " + tmp.string());
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    throw std::runtime_error(
        "[flight_recorder] cannot rename " + tmp.string() + " to " +
        path.string() + ": " + ec.message());
  }
}

FlightLabel::FlightLabel(const std::string& label) : previous_(current_label) {
  current_label = label.c_str();
}

FlightLabel::~FlightLabel() {
  current_label = previous_;
}

const char* FlightLabel::current() {
  return current_label;
}

fs::path flight_recorder_file(const fs::path& folder, int64_t rank) {
  return folder / ("rank" + std::to_string(rank) + ".json");
}

// ------------------------------------------------------------ hang report

namespace {

/// "all_reduce on group 'pp' (#12)" or "recv from rank 1 (tag 3)", plus the
/// label when there is one.
std::string describe_entry(const json& e) {
  const std::string kind = e.value("kind", "");
  if (kind == "action") {
    return "pipeline action " + e.value("label", "");
  }
  std::string text = e.value("name", "");
  if (kind == "p2p" && e["peer"].is_number()) {
    text += std::string(text == "send" ? " to" : " from") + " rank " +
            std::to_string(e["peer"].get<int64_t>());
    if (e["tag"].is_number()) {
      text += " (tag " + std::to_string(e["tag"].get<int64_t>()) + ")";
    }
  }
  text += " on group '" + e.value("group", "") + "' (#" +
          std::to_string(e.value("group_seq", int64_t{0})) + ")";
  const std::string label = e.value("label", "");
  if (!label.empty() && label != text) {
    text += " [" + label + "]";
  }
  return text;
}

/// The operation a rank's file says failed (timed out): its last entry
/// in state failed, or null.
const json* failed_entry(const json& file) {
  const json* found = nullptr;
  for (const auto& e : file["entries"]) {
    if (e.value("state", "") == "failed") {
      found = &e;
    }
  }
  return found;
}

/// The highest group_seq of the collectives `file` reached on `group`; 0
/// when none.
int64_t last_seq(const json& file, const std::string& group) {
  int64_t seq = 0;
  for (const auto& e : file["entries"]) {
    if (e.value("kind", "") == "collective" && e.value("group", "") == group) {
      seq = std::max(seq, e.value("group_seq", int64_t{0}));
    }
  }
  return seq;
}

/// What a rank was doing when it dumped: its latest entry still in flight,
/// else its latest entry.
std::string last_action(const json& file) {
  const auto& entries = file["entries"];
  if (entries.empty()) {
    return "nothing recorded";
  }
  const json* pick = &entries.back();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->value("state", "") == "started") {
      pick = &*it;
      break;
    }
  }
  std::string text = describe_entry(*pick) + ", " + pick->value("state", "");
  if ((*pick)["end_us"].is_null() && file["dumped_at_us"].is_number()) {
    const double s = static_cast<double>(
                         file["dumped_at_us"].get<int64_t>() -
                         pick->value("start_us", int64_t{0})) /
                     1e6;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", s);
    text += std::string(" for ") + buf + " s when dumped";
  }
  return text;
}

/// The files of this run's ranks (written at or after `since`), by rank.
std::map<int64_t, json> read_rank_files(
    const fs::path& folder, int64_t world_size, fs::file_time_type since) {
  std::map<int64_t, json> files;
  for (int64_t r = 0; r < world_size; ++r) {
    const fs::path path = flight_recorder_file(folder, r);
    std::error_code ec;
    if (!fs::exists(path, ec) || fs::last_write_time(path, ec) < since || ec) {
      continue;
    }
    try {
      std::ifstream in(path);
      files[r] = json::parse(in);
    } catch (const std::exception&) {
      continue;  // half a file from a rank killed while writing
    }
  }
  return files;
}

/// The ranks the failed operations waited on: how many blame each, and the
/// first sentence saying who waited on it in what.
struct Blame {
  std::map<int64_t, int64_t> votes;
  std::map<int64_t, std::string> waiter;
};

/// Each rank whose operation failed blames who it waited on: the peer of a
/// P2P, the members of a collective's group that had not reached it.
Blame blame_waited_on(const std::map<int64_t, json>& files) {
  Blame out;
  for (const auto& [r, file] : files) {
    const json* failed = failed_entry(file);
    if (failed == nullptr) {
      continue;
    }
    const std::string what = describe_entry(*failed);
    auto blame = [&](int64_t peer) {
      ++out.votes[peer];
      out.waiter.emplace(
          peer, "rank " + std::to_string(r) + " waited on it in " + what);
    };
    if (failed->value("kind", "") == "p2p" && (*failed)["peer"].is_number()) {
      blame((*failed)["peer"].get<int64_t>());
      continue;
    }
    const std::string group = failed->value("group", "");
    const int64_t seq = failed->value("group_seq", int64_t{0});
    if (!file["groups"].contains(group)) {
      continue;
    }
    for (const auto& m : file["groups"][group]) {
      const int64_t peer = m.get<int64_t>();
      if (peer == r) {
        continue;
      }
      const auto other = files.find(peer);
      if (other == files.end() || last_seq(other->second, group) < seq) {
        blame(peer);
      }
    }
  }
  return out;
}

/// `r`'s file holds a failed operation of its own.
bool waits_itself(const std::map<int64_t, json>& files, int64_t r) {
  const auto f = files.find(r);
  return f != files.end() && failed_entry(f->second) != nullptr;
}

/// In a chain (0 waits on 1, which timed out waiting on 2) the end of it: a
/// rank blamed that had no failed operation of its own; else the most
/// blamed.
int64_t hung_rank(
    const std::map<int64_t, json>& files,
    const std::map<int64_t, int64_t>& votes) {
  int64_t hung = votes.begin()->first;
  for (const auto& [r, n] : votes) {
    const bool better = waits_itself(files, hung) && !waits_itself(files, r);
    const bool as_good = waits_itself(files, hung) == waits_itself(files, r);
    if (better || (as_good && n > votes.at(hung))) {
      hung = r;
    }
  }
  return hung;
}

}  // namespace

std::string hang_report(
    const fs::path& folder, int64_t world_size, fs::file_time_type since) {
  const std::map<int64_t, json> files =
      read_rank_files(folder, world_size, since);
  Blame blame = blame_waited_on(files);
  if (blame.votes.empty()) {
    return "";
  }
  const int64_t hung = hung_rank(files, blame.votes);
  const auto own = files.find(hung);
  // A rank that wrote its file on its own failure, not on request, did not
  // hang: it failed outside any operation (main() reports that failure).
  const std::string reason =
      own == files.end() ? "" : own->second.value("reason", "");
  const bool failed_alone = !reason.empty() && !waits_itself(files, hung) &&
                            reason.rfind("asked by ", 0) != 0;
  std::string text = "hang report: rank " + std::to_string(hung) +
                     (failed_alone ? " failed first (" + reason + ")"
                                   : " stopped answering first") +
                     " (" + blame.waiter[hung] + "); ";
  if (own == files.end()) {
    text += "it wrote no flight-recorder file";
  } else {
    text += "its last action: " + last_action(own->second);
  }
  return text + "; files: " + (folder / "rank<N>.json").string();
}

}  // namespace baton::dist
