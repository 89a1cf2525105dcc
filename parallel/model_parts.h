#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "parallel/dist/mesh.h"
#include "parallel/grad_sync.h"

namespace baton {

/// Where a parameter of which this rank holds a slice sits in the whole
/// tensor (the parameter's own shape is the slice's).
struct ParamSlice {
  std::vector<int64_t> global_shape;
  /// The slice's first index along each dimension.
  std::vector<int64_t> offsets;
};

/// One model part a rank holds: the module that computes it, the pipeline
/// stage it is, and what parallelizing it left on it. Appliers (see
/// parallel/applier.h) change the module in place (wrap submodules, replace
/// parameters, keeping their FQNs), attach gradient synchronisers and mark
/// the gradients they split across ranks; the train steps, the grad norm
/// and the checkpoint read it all from here.
class ModelPart {
 public:
  explicit ModelPart(std::shared_ptr<ModelChunk> module, int64_t stage = 0);

  /// The module; its parameters keep the whole model's FQNs.
  ModelChunk& module() const {
    return *module_;
  }
  const std::shared_ptr<ModelChunk>& module_ptr() const {
    return module_;
  }
  /// The pipeline stage this part is (0 without pipelining).
  int64_t stage() const {
    return stage_;
  }
  /// What synchronises this part's gradients across ranks (empty: nothing
  /// does); appliers add to it.
  GradientSyncChain& grad_sync() {
    return grad_sync_;
  }
  /// Declares that this rank holds only a slice of the gradient of the
  /// parameter `fqn`, the rest being on the other ranks of its group along
  /// the mesh axis (or group) `axis` (a sharded data-parallel or
  /// tensor-parallel split). The grad norm sums that parameter's squares
  /// over the group.
  void mark_grad_split(const std::string& fqn, const std::string& axis);
  /// The axes `fqn`'s gradient is split along, in the order marked (empty:
  /// this rank holds all of it).
  const std::vector<std::string>& grad_split(const std::string& fqn) const;
  /// Records that the parameter `fqn` is the slice `slice` of its whole
  /// tensor (an applier that shards it says so; the checkpoint saves and
  /// loads slices by it).
  void set_slice(const std::string& fqn, ParamSlice slice);
  /// The slice `fqn` is, or null when this rank holds the whole tensor.
  const ParamSlice* slice(const std::string& fqn) const;
  /// Declares that the ranks holding copies of the parameter `fqn` are the
  /// data-parallel group `group` of the mesh rather than dp_shard: an
  /// applier before data parallelism that splits it across some of the
  /// data ranks (expert parallel's experts, split over ep, copies over
  /// dp_shard_mod_ep) says so, and fully_shard shards and reduces it over
  /// that group (with the replicas). check_replicas leaves it to that
  /// applier, which checks the whole tensors before it splits them.
  void set_shard_group(const std::string& fqn, std::string group);
  /// The group set_shard_group named, or null (dp_shard's).
  const std::string* shard_group(const std::string& fqn) const;
  /// Declares the parameter `fqn` a copy of one that another stage holds
  /// (a tied embedding's on the last stage), kept equal to it: the grad
  /// norm and the checkpoint count the other one only.
  void mark_tied_copy(const std::string& fqn);
  bool tied_copy(const std::string& fqn) const {
    return tied_copies_.contains(fqn);
  }

 private:
  std::shared_ptr<ModelChunk> module_;
  int64_t stage_;
  GradientSyncChain grad_sync_;
  std::map<std::string, std::vector<std::string>> grad_split_;
  std::map<std::string, ParamSlice> slices_;
  std::map<std::string, std::string> shard_groups_;
  std::set<std::string> tied_copies_;
};

/// The model parts this rank holds, in increasing stage order: one without
/// pipelining, several with multi-chunk pipeline schedules. Callers loop with
/// `for_each` and never special-case one part. Copies share the parts.
class ModelParts {
 public:
  ModelParts() = default;

  /// Appends a part (the next stage this rank holds).
  void push_back(std::shared_ptr<ModelPart> part);
  size_t size() const {
    return parts_.size();
  }
  bool empty() const {
    return parts_.empty();
  }
  ModelPart& operator[](size_t i) const {
    return *parts_.at(i);
  }
  /// The part that is pipeline stage `stage`; throws std::out_of_range
  /// when this rank holds none.
  ModelPart& at_stage(int64_t stage) const;
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
  /// Number of parameter elements over all parts (this rank's).
  int64_t num_params() const;

  /// Adds `hook`, which the train steps run once per step after every
  /// part's gradients are synchronised, before the grad norm and the
  /// optimizer: what sums the gradients of weights two stages hold. Copies
  /// of this ModelParts share the hooks.
  void add_gradient_hook(std::function<void()> hook);
  void run_gradient_hooks() const;

 private:
  std::vector<std::shared_ptr<ModelPart>> parts_;
  std::shared_ptr<std::vector<std::function<void()>>> gradient_hooks_ =
      std::make_shared<std::vector<std::function<void()>>>();
};

}  // namespace baton
