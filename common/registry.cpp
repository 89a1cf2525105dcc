#include "common/registry.h"

namespace baton {

namespace {

struct Entry {
  const void* owner = nullptr;
  std::function<std::vector<std::string>()> names;
};

struct Index {
  std::mutex mutex;
  std::map<std::string, Entry> kinds;
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
  i.kinds[kind] = Entry{owner, std::move(names)};
}

void RegistryIndex::remove(const std::string& kind, const void* owner) {
  auto& i = index();
  std::lock_guard<std::mutex> lock(i.mutex);
  const auto it = i.kinds.find(kind);
  if (it != i.kinds.end() && it->second.owner == owner) {
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
    names = it->second.names;
  }
  return names();
}

}  // namespace baton
