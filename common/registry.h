#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/text.h"

namespace baton {

/// The names in every registry of the process, by kind ("optimizer"), so
/// that the config check can match a name against its registry without
/// depending on the folder that owns it. Each Registry adds itself.
class RegistryIndex {
 public:
  /// Registers `owner`, the registry of `kind`; `names` lists its entries.
  /// A later registry of the same kind shadows it until that one goes.
  static void add(
      const std::string& kind,
      const void* owner,
      std::function<std::vector<std::string>()> names);
  /// Forgets `owner` (a registry being destroyed); the one it shadowed, if
  /// any, is the kind's again.
  static void remove(const std::string& kind, const void* owner);
  /// The names registered under `kind`, or nothing when no registry of that
  /// kind exists in this process (its folder is not linked or not used).
  static std::optional<std::vector<std::string>> names(const std::string& kind);
};

/// Name -> creator, with a help line per entry (the shape of c10's Registry).
/// Names match case-insensitively. Each area registers its built-ins
/// explicitly in one `register_builtin_*()` function; registering a name twice
/// is a programming error, looking up an unknown name is a config error that
/// lists the known names.
template <class Creator>
class Registry {
 public:
  /// `kind` names the entries in messages: "model", "builder", ...
  explicit Registry(std::string kind) : kind_(std::move(kind)) {
    RegistryIndex::add(kind_, this, [this] { return names(); });
  }
  ~Registry() {
    RegistryIndex::remove(kind_, this);
  }
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// Adds `name`; throws std::logic_error when it is already registered.
  void add(const std::string& name, Creator creator, std::string help) {
    const auto [it, inserted] = entries_.try_emplace(
        to_lower(name), Entry{name, std::move(creator), std::move(help)});
    if (!inserted) {
      throw std::logic_error(
          "[registry] " + kind_ + " '" + name + "' is already registered");
    }
  }

  /// Runs `add_builtins(*this)` the first time it is called, however many
  /// threads call it (ranks may run as threads, each building a trainer).
  template <class F>
  void add_builtins_once(F&& add_builtins) {
    std::call_once(builtins_once_, [&] { add_builtins(*this); });
  }

  /// True when `name` is registered.
  bool contains(const std::string& name) const {
    return entries_.count(to_lower(name)) > 0;
  }

  /// The creator registered as `name`; throws ConfigError naming the known
  /// entries (and the closest one) when there is none. `where` prefixes the
  /// message (a config key's origin, or empty).
  const Creator& get(
      const std::string& name, const std::string& where = "") const {
    const auto it = entries_.find(to_lower(name));
    if (it == entries_.end()) {
      std::string message =
          "unknown " + kind_ + " '" + name + "'; known: " + join(names(), ", ");
      const std::string hint = closest_match(name, names());
      if (!hint.empty()) {
        message += "; did you mean '" + hint + "'?";
      }
      throw_config_error(where, message);
    }
    return it->second.creator;
  }

  /// Registered names, as spelled when registered, in sorted order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [key, entry] : entries_) {
      out.push_back(entry.name);
    }
    return out;
  }

  /// The help line of `name` (which must be registered).
  const std::string& help(const std::string& name) const {
    return entries_.at(to_lower(name)).help;
  }

 private:
  struct Entry {
    std::string name;
    Creator creator;
    std::string help;
  };
  std::string kind_;
  std::map<std::string, Entry> entries_;
  std::once_flag builtins_once_;
};

}  // namespace baton
