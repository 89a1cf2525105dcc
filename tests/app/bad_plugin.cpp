// Plugins that must not load, one per way of failing, each built from this
// file with one of these defined (tests/app/plugin_test.cpp loads them):
//   BAD_API      a plugin API this binary does not have
//   BAD_BATON    another Baton version
//   BAD_TORCH    another libtorch
//   CLASH        registers an optimizer under a built-in's name
//   THROWS       its registration throws

#include <ATen/ATen.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "common/plugin.h"
#include "optim/optimizers.h"

namespace {

void register_clash() {
  baton::optimizer_registry().add(
      "AdamW",
      [](std::vector<at::Tensor>, const baton::JobConfig&)
          -> std::unique_ptr<torch::optim::Optimizer> { return nullptr; },
      "a second AdamW");
}

[[noreturn]] void register_throws() {
  throw std::runtime_error("this plugin needs a GPU and found none");
}

}  // namespace

#if defined(CLASH)
BATON_PLUGIN("clash", register_clash)
#elif defined(THROWS)
BATON_PLUGIN("throws", register_throws)
#else
extern "C" __attribute__((visibility("default"))) const baton::PluginInfo*
baton_plugin_info() {
#if defined(BAD_API)
  static const baton::PluginInfo info{
      baton::kPluginApiVersion + 98, "bad", BATON_VERSION, 0, 0, 0, 1};
#elif defined(BAD_BATON)
  static const baton::PluginInfo info{
      baton::kPluginApiVersion,
      "bad",
      "0.0.1",
      TORCH_VERSION_MAJOR,
      TORCH_VERSION_MINOR,
      TORCH_VERSION_PATCH,
      _GLIBCXX_USE_CXX11_ABI};
#elif defined(BAD_TORCH)
  static const baton::PluginInfo info{
      baton::kPluginApiVersion,
      "bad",
      BATON_VERSION,
      1,
      13,
      1,
      _GLIBCXX_USE_CXX11_ABI};
#endif
  return &info;
}
extern "C" __attribute__((visibility("default"))) void baton_plugin_register() {
  register_clash();
}
#endif
