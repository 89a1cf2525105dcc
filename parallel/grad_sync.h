#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace baton {

/// Keeps one model part's gradients consistent across the ranks that share
/// its parameters: the replicate reducer all-reduces them, a sharded data
/// parallel would reduce-scatter them. Appliers attach one to a part
/// (ModelPart::grad_sync()); train steps drive it through the part:
/// prepare(sync) before each backward (sync only on the last micro-step of
/// gradient accumulation) and finish() after the last one, or reduce_now()
/// after backwards that ran unsynced (the pipeline's REDUCE_GRAD). The
/// trainer calls after_step(step) once the optimizers have stepped, for a
/// synchroniser of weights rather than gradients (replicas that average
/// their weights every k steps).
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Before a backward: whether its gradients are to be synchronised.
  virtual void prepare(bool sync) = 0;
  /// After the last backward of the step: completes what the synced
  /// backward started. Throws dist::CommError.
  virtual void finish() = 0;
  /// prepare(true) and finish() at once, after backwards that ran unsynced.
  virtual void reduce_now() {
    prepare(/*sync=*/true);
    finish();
  }
  /// After forwards without gradients (a validation between steps):
  /// returns the part to the state a step starts from (a sharded part's
  /// parameters to their shards, gradients untouched). Default: nothing.
  virtual void after_eval() {}
  /// After the optimizers' step of `step` (1-based; also when a
  /// non-finite loss skipped it). Collective when it communicates: every
  /// rank of its group calls it at the same step. Default: nothing.
  virtual void after_step(int64_t step) {}
};

/// A part's synchronisers, run in the order they were attached; empty (a
/// part whose gradients are its own) does nothing.
class GradientSyncChain final : public GradientSync {
 public:
  /// Appends `sync`; it runs after the ones attached before it.
  void add(std::shared_ptr<GradientSync> sync) {
    syncs_.push_back(std::move(sync));
  }
  bool empty() const {
    return syncs_.empty();
  }
  size_t size() const {
    return syncs_.size();
  }
  void prepare(bool sync) override {
    for (auto& s : syncs_) {
      s->prepare(sync);
    }
  }
  void finish() override {
    for (auto& s : syncs_) {
      s->finish();
    }
  }
  void reduce_now() override {
    for (auto& s : syncs_) {
      s->reduce_now();
    }
  }
  void after_eval() override {
    for (auto& s : syncs_) {
      s->after_eval();
    }
  }
  void after_step(int64_t step) override {
    for (auto& s : syncs_) {
      s->after_step(step);
    }
  }

 private:
  std::vector<std::shared_ptr<GradientSync>> syncs_;
};

}  // namespace baton
