#include "app/plugins.h"

#include <dlfcn.h>
#include <glog/logging.h>
#include <torch/version.h>

#include <cstddef>
#include <exception>
#include <filesystem>
#include <mutex>

#include "common/error.h"
#include "common/plugin.h"
#include "config/job_config.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::mutex& plugins_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<LoadedPlugin>& loaded() {
  static std::vector<LoadedPlugin> plugins;
  return plugins;
}

[[noreturn]] void fail(const std::string& path, const std::string& cause) {
  throw ConfigError("plugin " + path + ": " + cause);
}

std::string torch_version(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(patch);
}

/// What differs between the plugin's `info` and this binary, or "".
std::string mismatch(const PluginInfo& info) {
  const std::string rebuild =
      "; hint: rebuild the plugin against this Baton's install "
      "(find_package(Baton))";
  if (info.api_version != kPluginApiVersion) {
    return "built for plugin API " + std::to_string(info.api_version) +
           ", this baton loads API " + std::to_string(kPluginApiVersion) +
           rebuild;
  }
  if (std::string(info.baton_version) != kVersion) {
    return "built against Baton " + std::string(info.baton_version) +
           ", this baton is " + kVersion + rebuild;
  }
  const std::string theirs =
      torch_version(info.torch_major, info.torch_minor, info.torch_patch);
  const std::string ours = torch_version(
      TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  if (theirs != ours) {
    return "built against libtorch " + theirs + ", this baton runs libtorch " +
           ours + rebuild;
  }
  if (info.cxx11_abi != _GLIBCXX_USE_CXX11_ABI) {
    return "built with _GLIBCXX_USE_CXX11_ABI=" +
           std::to_string(info.cxx11_abi) + ", this baton with " +
           std::to_string(_GLIBCXX_USE_CXX11_ABI) + rebuild;
  }
  return "";
}

/// Opens `path`, checks its handshake and runs its registration.
LoadedPlugin load_one(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    fail(path, fs::exists(path, ec) ? "not a file" : "no such file");
  }
  // Its own symbol scope: it binds to the libraries already loaded (Baton's,
  // libtorch) by name, and nothing of its own leaks into later plugins.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    fail(path, std::string("cannot load it: ") + (why ? why : "unknown"));
  }
  using InfoFn = const PluginInfo* (*)();
  using RegisterFn = void (*)();
  auto info_fn = reinterpret_cast<InfoFn>(dlsym(handle, "baton_plugin_info"));
  auto register_fn =
      reinterpret_cast<RegisterFn>(dlsym(handle, "baton_plugin_register"));
  if (info_fn == nullptr || register_fn == nullptr) {
    dlclose(handle);
    fail(
        path,
        std::string("not a Baton plugin: no ") +
            (info_fn == nullptr ? "baton_plugin_info"
                                : "baton_plugin_register") +
            " entry point; hint: name its registration function with "
            "BATON_PLUGIN (common/plugin.h)");
  }
  const PluginInfo* info = info_fn();
  if (const std::string why = mismatch(*info); !why.empty()) {
    dlclose(handle);
    fail(path, why);
  }
  LoadedPlugin plugin{path, info->name};
  try {
    register_fn();
  } catch (const std::exception& e) {
    // Left loaded: what it registered before it threw points into it.
    fail(
        path,
        std::string("registering '") + plugin.name + "' failed: " + e.what());
  } catch (...) {
    fail(path, "registering '" + plugin.name + "' failed: unknown exception");
  }
  LOG(INFO) << "plugin: " << plugin.name << " from " << path;
  return plugin;
}

}  // namespace

std::vector<LoadedPlugin> load_plugins(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(plugins_mutex());
  std::vector<LoadedPlugin> out;
  for (const auto& given : paths) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(fs::absolute(given), ec);
    const std::string path = ec ? given : canonical.string();
    bool seen = false;
    for (const auto& p : loaded()) {
      seen = seen || p.path == path;
    }
    if (!seen) {
      loaded().push_back(load_one(path));
      out.push_back(loaded().back());
    }
  }
  return out;
}

void load_config_plugins(
    const std::vector<std::string>& cli,
    const std::vector<std::string>& config_paths,
    const std::vector<std::string>& overrides) {
  load_plugins(cli);
  load_plugins(plugin_paths(config_paths, overrides));
}

std::vector<LoadedPlugin> loaded_plugins() {
  std::lock_guard<std::mutex> lock(plugins_mutex());
  return loaded();
}

}  // namespace baton
