#pragma once

// Loading plugins into the binary (common/plugin.h says how one is
// written; docs/extending.md walks through one).

#include <string>
#include <vector>

namespace baton {

/// A plugin loaded into this process.
struct LoadedPlugin {
  /// The file, absolute.
  std::string path;
  /// The name its BATON_PLUGIN gave.
  std::string name;
};

/// Loads each of `paths` not loaded before (by canonical path), in order:
/// opens the library, checks its handshake against this binary (plugin
/// API, Baton version, libtorch version, C++ ABI) and runs its
/// registration. Every failure is a ConfigError (exit 2) naming the file
/// and the cause: no such file, not a loadable library, no entry point, a
/// mismatch (saying what the plugin and the binary have), or what its
/// registration threw (a name already registered). A loaded plugin stays
/// loaded for the life of the process (the registries hold its code).
std::vector<LoadedPlugin> load_plugins(const std::vector<std::string>& paths);

/// load_plugins(`cli`), then the `plugins:` the config files and
/// overrides name (plugin_paths): what `baton train` and `baton plan` load
/// before they load the config.
void load_config_plugins(
    const std::vector<std::string>& cli,
    const std::vector<std::string>& config_paths,
    const std::vector<std::string>& overrides);

/// The plugins loaded so far, in load order.
std::vector<LoadedPlugin> loaded_plugins();

}  // namespace baton
