#include "optim/optimizer_state.h"

#include <torch/optim/optimizer.h>

#include <map>
#include <mutex>
#include <stdexcept>

namespace baton {

namespace {

std::mutex& codecs_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::type_index, OptimizerStateCodec>& codecs() {
  static std::map<std::type_index, OptimizerStateCodec> registered;
  return registered;
}

}  // namespace

std::vector<int64_t> OptimizerStateField::shape_of(
    const std::vector<int64_t>& param) const {
  if (!kept_dims) {
    return param;
  }
  std::vector<int64_t> shape;
  for (const int64_t d : *kept_dims) {
    shape.push_back(param.at(static_cast<size_t>(d)));
  }
  return shape;
}

void register_optimizer_state(std::type_index type, OptimizerStateCodec codec) {
  if (!codec.read || !codec.make || codec.fields.empty()) {
    throw std::logic_error(
        "[optimizer] register_optimizer_state '" + codec.name +
        "': needs fields, read and make");
  }
  std::lock_guard lock(codecs_mutex());
  if (!codecs().emplace(type, std::move(codec)).second) {
    throw std::logic_error(
        "[optimizer] register_optimizer_state: the type is registered "
        "already");
  }
}

const OptimizerStateCodec* optimizer_state_codec(
    const torch::optim::Optimizer& optimizer) {
  std::lock_guard lock(codecs_mutex());
  const auto it = codecs().find(std::type_index(typeid(optimizer)));
  return it == codecs().end() ? nullptr : &it->second;
}

}  // namespace baton
