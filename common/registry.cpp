#include "common/registry.h"

#include <algorithm>

namespace baton {

namespace {

struct Entry {
  const void* owner = nullptr;
  std::function<std::vector<std::string>()> names;
};

struct Index {
  std::mutex mutex;
  /// Per kind, every live registry, the latest last.
  std::map<std::string, std::vector<Entry>> kinds;
};

Index& index() {
  static Index i;
  return i;
}

}  // namespace

void RegistryIndex::add(
    const std::string& kind,
    const void* owner,
    std::function<std::vector<std::string>()> names) {
  auto& i = index();
  std::lock_guard<std::mutex> lock(i.mutex);
  i.kinds[kind].push_back(Entry{owner, std::move(names)});
}

void RegistryIndex::remove(const std::string& kind, const void* owner) {
  auto& i = index();
  std::lock_guard<std::mutex> lock(i.mutex);
  const auto it = i.kinds.find(kind);
  if (it == i.kinds.end()) {
    return;
  }
  auto& live = it->second;
  live.erase(
      std::remove_if(
          live.begin(),
          live.end(),
          [owner](const Entry& e) { return e.owner == owner; }),
      live.end());
  if (live.empty()) {
    i.kinds.erase(it);
  }
}

std::optional<std::vector<std::string>> RegistryIndex::names(
    const std::string& kind) {
  std::function<std::vector<std::string>()> names;
  {
    auto& i = index();
    std::lock_guard<std::mutex> lock(i.mutex);
    const auto it = i.kinds.find(kind);
    if (it == i.kinds.end()) {
      return std::nullopt;
    }
    names = it->second.back().names;
  }
  return names();
}

}  // namespace baton
