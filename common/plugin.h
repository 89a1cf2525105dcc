#pragma once

// How a shared library joins the stock binary (docs/extending.md). A
// plugin defines one function that registers its pieces (parallelisms,
// appliers, builders, optimizers, LR schedules, datasets, tokenizers,
// model families, their config sections) and names it once:
//
//   void register_mine() {
//     baton::optimizer_registry().add("lion", make_lion, "Lion (sign
//     updates)");
//   }
//   BATON_PLUGIN("mine", register_mine)
//
// `baton train --plugin libmine.so` or `plugins: [libmine.so]` in the YAML
// loads it before the config is checked (app/plugins.h). The macro exports
// what the binary checks first, the handshake: the plugin API, Baton and
// libtorch versions and the C++ ABI the plugin was compiled with; a
// mismatch, a missing entry point, a name already registered or an
// exception from the function is an error naming the file (exit 2).

#include <torch/version.h>

#include <cstddef>  // defines _GLIBCXX_USE_CXX11_ABI

#include "common/version.h"

namespace baton {

/// Bumped whenever what a plugin registers into, or the handshake itself,
/// changes incompatibly.
inline constexpr int kPluginApiVersion = 1;

/// What a plugin was built against. `api_version` stays the first member in
/// every version, so the binary can read it from any plugin; the rest is
/// read only when it matches.
struct PluginInfo {
  int api_version;
  /// The plugin's name, for the log.
  const char* name;
  /// BATON_VERSION of the headers it was compiled with.
  const char* baton_version;
  int torch_major;
  int torch_minor;
  int torch_patch;
  /// _GLIBCXX_USE_CXX11_ABI.
  int cxx11_abi;
};

}  // namespace baton

/// The plugin's entry points: `baton_plugin_info` (the handshake) and
/// `baton_plugin_register`, which calls `register_fn` (a void function).
#define BATON_PLUGIN(plugin_name, register_fn)                                 \
  extern "C" __attribute__((visibility("default"))) const ::baton::PluginInfo* \
  baton_plugin_info() {                                                        \
    static const ::baton::PluginInfo info{                                     \
        ::baton::kPluginApiVersion,                                            \
        plugin_name,                                                           \
        BATON_VERSION,                                                         \
        TORCH_VERSION_MAJOR,                                                   \
        TORCH_VERSION_MINOR,                                                   \
        TORCH_VERSION_PATCH,                                                   \
        _GLIBCXX_USE_CXX11_ABI};                                               \
    return &info;                                                              \
  }                                                                            \
  extern "C" __attribute__((visibility("default"))) void                       \
  baton_plugin_register() {                                                    \
    register_fn();                                                             \
  }
