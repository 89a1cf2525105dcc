#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "models/model_spec.h"

namespace baton {

/// The model chunks this rank holds, in increasing stage order: one without
/// pipelining, several with multi-chunk pipeline schedules. Callers loop with
/// `for_each` and never special-case one part.
class ModelParts {
 public:
  ModelParts() = default;
  explicit ModelParts(std::vector<std::shared_ptr<ModelChunk>> parts)
      : parts_(std::move(parts)) {}

  /// Appends a part (the next stage this rank holds).
  void push_back(std::shared_ptr<ModelChunk> part) {
    parts_.push_back(std::move(part));
  }
  size_t size() const {
    return parts_.size();
  }
  bool empty() const {
    return parts_.empty();
  }
  ModelChunk& operator[](size_t i) const {
    return *parts_.at(i);
  }
  /// Calls `f(part)` for each part in stage order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& part : parts_) {
      f(*part);
    }
  }
  auto begin() const {
    return parts_.begin();
  }
  auto end() const {
    return parts_.end();
  }

  /// Parameters of every part, in stage order.
  std::vector<at::Tensor> parameters() const;
  /// Number of parameter elements over all parts.
  int64_t num_params() const;
  /// Puts every part in training (or eval) mode.
  void train(bool on = true) const;

 private:
  std::vector<std::shared_ptr<ModelChunk>> parts_;
};

}  // namespace baton
