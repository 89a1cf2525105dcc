#include "parallel/fsdp/fully_shard.h"

#include <ATen/ATen.h>
#include <glog/logging.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

#include "common/error.h"
#include "common/torch_compat.h"
#include "config/job_config.h"
#include "models/moe.h"
#include "parallel/axes.h"
#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/mesh.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"

namespace baton::fsdp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::pair<int64_t, int64_t> Unit::rows_of_rank(const Param& p, int64_t r) {
  const int64_t first = std::min(p.rows, r * p.rows_per_rank);
  return {first, std::min(p.rows_per_rank, p.rows - first)};
}

ReshardAfterForward parse_reshard_after_forward(const std::string& text) {
  if (text == "default") {
    return ReshardAfterForward::kDefault;
  }
  if (text == "always") {
    return ReshardAfterForward::kAlways;
  }
  if (text == "never") {
    return ReshardAfterForward::kNever;
  }
  throw std::invalid_argument(
      "[fsdp] reshard_after_forward: '" + text +
      "'; allowed: default, always, never");
}

bool frees_after_forward(ReshardAfterForward policy, bool pipelined) {
  return policy == ReshardAfterForward::kAlways ||
         (policy == ReshardAfterForward::kDefault && !pipelined);
}

// --- Unit --------------------------------------------------------------------

Unit::Unit(
    std::string name,
    std::vector<std::pair<std::string, at::Tensor>> params,
    ShardGroups groups,
    MixedPrecision dtypes)
    : name_(std::move(name)), groups_(std::move(groups)), dtypes_(dtypes) {
  ranks_ = groups_.shard->size();
  rank_ = groups_.shard->rank();
  // Everything is checked before any parameter changes.
  check(name_, params);
  for (auto& [fqn, param] : params) {
    Param p;
    p.fqn = fqn;
    p.param = param;
    p.full_shape = param.sizes().vec();
    p.rows = param.size(0);
    p.row_numel = p.rows == 0 ? 0 : param.numel() / p.rows;
    p.rows_per_rank = (p.rows + ranks_ - 1) / ranks_;
    std::tie(p.first_row, p.my_rows) = rows_of_rank(p, rank_);
    p.offset = chunk_numel_;
    chunk_numel_ += p.rows_per_rank * p.row_numel;
    params_.push_back(std::move(p));
  }
  const at::Tensor& first = params_.front().param;
  torch::NoGradGuard no_grad;
  // Padding stays zero: it is gathered and reduced, never used.
  shard_flat_ = at::zeros({chunk_numel_}, first.options());
  for (auto& p : params_) {
    std::vector<int64_t> shape = p.full_shape;
    shape[0] = p.my_rows;
    p.shard =
        shard_flat_.narrow(0, p.offset, p.my_rows * p.row_numel).view(shape);
    p.shard.copy_(p.param.narrow(0, p.first_row, p.my_rows));
    p.param.set_data(p.shard);
  }
}

Unit::~Unit() = default;

void Unit::check(
    const std::string& name,
    const std::vector<std::pair<std::string, at::Tensor>>& params) {
  if (params.empty()) {
    throw std::invalid_argument("[fsdp] unit '" + name + "': no parameters");
  }
  const auto& [first_fqn, first] = params.front();
  for (const auto& [fqn, param] : params) {
    if (param.dim() == 0) {
      throw std::invalid_argument(
          "[fsdp] " + fqn +
          ": a 0-d parameter; allowed: tensors of one dimension or more "
          "(sharded on dim 0)");
    }
    if (!param.requires_grad()) {
      throw std::invalid_argument(
          "[fsdp] " + fqn +
          ": does not require gradients; allowed: parameters that require "
          "gradients (fully_shard shards no frozen ones)");
    }
    if (param.scalar_type() != first.scalar_type() ||
        param.device() != first.device()) {
      throw std::invalid_argument(
          "[fsdp] unit '" + name + "': " + fqn + " is " +
          std::string(c10::toString(param.scalar_type())) + " on " +
          param.device().str() + ", " + first_fqn + " " +
          std::string(c10::toString(first.scalar_type())) + " on " +
          first.device().str() + "; allowed: one dtype and device per unit");
    }
  }
}

const std::vector<Unit::Param>& Unit::params() const {
  return params_;
}

void Unit::unshard() {
  if (state_ != State::kSharded && state_ != State::kFreed) {
    return;
  }
  const auto cast = dtypes_.param_cast();
  gather_send_ = cast ? shard_flat_.to(*cast) : shard_flat_;
  gathered_ = at::empty({ranks_ * chunk_numel_}, gather_send_.options());
  const dist::FlightLabel label(name_);
  gather_ = groups_.shard->all_gather_into_async(gathered_, gather_send_);
  gathering_from_ = state_;
  state_ = State::kGathering;
}

void Unit::wait_for_unshard() {
  if (state_ == State::kUnsharded) {
    return;
  }
  unshard();
  const auto start = Clock::now();
  gather_.wait();
  gather_wait_s_ += seconds_since(start);
  gather_ = dist::Work();  // it holds views of the gather buffer
  gather_send_ = at::Tensor();
  torch::NoGradGuard no_grad;
  const at::Tensor chunks = gathered_.view({ranks_, chunk_numel_});
  for (auto& p : params_) {
    at::Tensor whole;
    if (gathering_from_ == State::kSharded) {
      // First gather of the step: the shard's gradient is set aside, and
      // the parameter becomes whole (autograd accumulates whole
      // gradients into it).
      p.shard_grad = p.param.grad();
      p.param.mutable_grad() = at::Tensor();
      p.param.set_data(at::empty(p.full_shape, gathered_.options()));
      whole = p.param.variable_data();
    } else {
      // Refilled in place, without a version bump: autograd saved this
      // parameter in the forward and checks its version in backward.
      compat::refill_storage(
          p.param,
          static_cast<size_t>(p.param.numel()) * p.param.element_size());
      whole = p.param.variable_data();
    }
    // Rank r's rows, straight from its chunk.
    const at::Tensor rows = whole.view({p.rows, p.row_numel});
    for (int64_t r = 0; r < ranks_; ++r) {
      const auto [first, n] = rows_of_rank(p, r);
      if (n > 0) {
        rows.narrow(0, first, n)
            .copy_(chunks[r]
                       .narrow(0, p.offset, n * p.row_numel)
                       .view({n, p.row_numel}));
      }
    }
  }
  gathered_ = at::Tensor();
  state_ = State::kUnsharded;
}

void Unit::reshard() {
  if (state_ == State::kGathering) {
    wait_for_unshard();
  }
  if (state_ != State::kUnsharded) {
    return;
  }
  for (auto& p : params_) {
    compat::free_storage(p.param);
  }
  state_ = State::kFreed;
}

void Unit::reduce_grads() {
  if (state_ == State::kSharded || reducing_) {
    return;
  }
  torch::NoGradGuard no_grad;
  const auto options = shard_flat_.options().dtype(
      dtypes_.reduce_cast().value_or(shard_flat_.scalar_type()));
  // Rank-major chunks, padded as the shards are: chunk r holds rank r's
  // rows of every parameter's gradient, in the reduce dtype.
  reduce_input_ = at::zeros({ranks_ * chunk_numel_}, options);
  const at::Tensor chunks = reduce_input_.view({ranks_, chunk_numel_});
  for (auto& p : params_) {
    const at::Tensor& grad = p.param.grad();
    if (!grad.defined()) {
      continue;
    }
    const at::Tensor rows = grad.reshape({p.rows, p.row_numel});
    for (int64_t r = 0; r < ranks_; ++r) {
      const auto [first, n] = rows_of_rank(p, r);
      if (n > 0) {
        chunks[r]
            .narrow(0, p.offset, n * p.row_numel)
            .copy_(rows.narrow(0, first, n).reshape({-1}));
      }
    }
    // The whole gradient is in the reduce buffer now.
    p.param.mutable_grad() = at::Tensor();
  }
  reduced_ = at::empty({chunk_numel_}, options);
  const dist::FlightLabel label(name_);
  reduce_scatter_ =
      groups_.shard->reduce_scatter_async(reduced_, reduce_input_);
  reducing_ = true;
}

void Unit::to_sharded() {
  if (state_ == State::kGathering) {
    wait_for_unshard();
  }
  if (reducing_) {
    const auto start = Clock::now();
    reduce_scatter_.wait();
    reduce_scatter_ = dist::Work();  // it holds the exchange's buffers
    reduce_input_ = at::Tensor();
    if (groups_.replicate->size() > 1) {
      groups_.replicate->all_reduce(reduced_);
    }
    reduce_wait_s_ += seconds_since(start);
  }
  if (state_ == State::kSharded) {
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    p.param.set_data(p.shard);
    at::Tensor grad = p.shard_grad;
    if (reducing_) {
      // A tensor of its own, not a view (zero_grad detaches it in place),
      // in the master's dtype.
      const at::Tensor mine =
          reduced_.narrow(0, p.offset, p.my_rows * p.row_numel)
              .view(p.shard.sizes())
              .to(p.shard.scalar_type(),
                  /*non_blocking=*/false,
                  /*copy=*/true);
      grad = grad.defined() ? grad + mine : mine;
    }
    p.param.mutable_grad() = grad;
    p.shard_grad = at::Tensor();
  }
  reduced_ = at::Tensor();
  reducing_ = false;
  state_ = State::kSharded;
}

// --- FullyShardedPart --------------------------------------------------------

/// The units of one wrapped module, which gather, free and reduce
/// together: its parameters' unit, and where some of them are sharded over
/// another group (expert parallel's experts, over dp_shard_mod_ep) theirs.
struct UnitSet {
  std::vector<Unit*> units;

  void unshard() {
    for (auto* u : units) {
      u->unshard();
    }
  }
  void wait_for_unshard() {
    for (auto* u : units) {
      u->wait_for_unshard();
    }
  }
  void reshard() {
    for (auto* u : units) {
      u->reshard();
    }
  }
  void reduce_grads() {
    for (auto* u : units) {
      u->reduce_grads();
    }
  }
  void to_sharded() {
    for (auto* u : units) {
      u->to_sharded();
    }
  }
};

/// What the unit wrappers and the gradient hooks share; they hold it weakly
/// or by shared pointer, so it outlives the part's modules' use of it.
/// Autograd runs one device's hooks on one thread, so the units' states
/// change on one thread at a time; the mutex guards the counters the
/// gradient hooks and finish() share.
struct FullyShardedPart::State {
  /// Units in the order the forward runs them: the root (whose forward
  /// encloses the blocks') first, then the blocks.
  std::vector<UnitSet> order;
  /// Whether order[0] is the root (a part without embedding and output,
  /// a middle pipeline stage, has none).
  bool has_root = false;
  std::vector<bool> reshard_after_forward;
  /// Without pipelining: gradients are reduced as each unit's backward
  /// ends (the last of its parameters' gradients accumulated).
  std::mutex mutex;
  bool sync = false;
  std::vector<int64_t> pending;   // gradients still to come, per unit
  std::vector<int64_t> expected;  // parameters that get gradients
  std::vector<bool> done;         // post-backward ran this backward

  void before_forward(int64_t i) {
    order[i].wait_for_unshard();
    if (i + 1 < static_cast<int64_t>(order.size())) {
      order[i + 1].unshard();  // forward prefetch
    }
  }

  void after_forward(int64_t i) {
    if (reshard_after_forward[i]) {
      order[i].reshard();
    }
  }

  void before_backward(int64_t i) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      pending[i] = expected[i];
      done[i] = false;
    }
    order[i].wait_for_unshard();
    // Backward runs the units in reverse: the root's output first (it is
    // still whole), then the last block, ..., the first block, and the
    // root's embedding last.
    const int64_t last = static_cast<int64_t>(order.size()) - 1;
    const int64_t next = is_root(i) ? last : i - 1;
    if (next >= 0 && next != i && !is_root(next)) {
      order[next].unshard();  // backward prefetch
    }
  }

  bool is_root(int64_t i) const {
    return has_root && i == 0;
  }

  /// After the unit's backward (all its gradients accumulated).
  void post_backward(int64_t i) {
    done[i] = true;
    order[i].reshard();
    if (sync) {
      reduce(i);
    }
  }

  /// Starts unit i's reduce-scatter, first finishing the oldest in flight
  /// when kReducing are: each holds buffers of twice the unit's size.
  void reduce(int64_t i) {
    while (static_cast<int64_t>(reducing.size()) >= kReducing) {
      order[reducing.front()].to_sharded();
      reducing.pop_front();
    }
    order[i].reduce_grads();
    reducing.push_back(i);
  }

  /// Finishes every reduce-scatter and returns every unit to its shards.
  void finish_all() {
    reducing.clear();
    for (auto& unit : order) {
      unit.to_sharded();
    }
  }

  /// Reduce-scatters in flight at once: one overlaps the next unit's
  /// backward.
  static constexpr int64_t kReducing = 2;
  std::deque<int64_t> reducing;

  void on_gradient(int64_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!done[i] && pending[i] > 0 && --pending[i] == 0) {
      post_backward(i);
    }
  }
};

namespace {

/// Gathers a unit's parameters around its forward, frees them after when
/// the policy says so, and gathers them again when backward reaches the
/// unit's output.
class GatherAround final : public UnitWrapper {
 public:
  GatherAround(std::weak_ptr<FullyShardedPart::State> state, int64_t index)
      : state_(std::move(state)), index_(index) {}

  at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) override {
    auto state = state_.lock();
    if (!state) {
      return run(input);
    }
    state->before_forward(index_);
    at::Tensor out = run(input);
    state->after_forward(index_);
    if (out.requires_grad()) {
      out.register_hook([weak = state_, i = index_](const at::Tensor& grad) {
        if (auto s = weak.lock()) {
          s->before_backward(i);
        }
        return grad;
      });
    }
    return out;
  }

 private:
  std::weak_ptr<FullyShardedPart::State> state_;
  int64_t index_;
};

/// The unit's parameters: those under `prefix` ("layers.3."), or with an
/// empty prefix those under no block prefix of `blocks`.
std::vector<std::pair<std::string, at::Tensor>> unit_params(
    torch::nn::Module& module,
    const std::string& prefix,
    const std::vector<std::string>& blocks) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : module.named_parameters()) {
    const std::string& fqn = item.key();
    bool in_block = false;
    for (const auto& b : blocks) {
      in_block = in_block || fqn.rfind(b + ".", 0) == 0;
    }
    const bool mine =
        prefix.empty() ? !in_block : fqn.rfind(prefix + ".", 0) == 0;
    if (mine) {
      out.emplace_back(fqn, item.value());
    }
  }
  return out;
}

}  // namespace

FullyShardedPart::FullyShardedPart(
    ModelPart& part,
    ShardGroups groups,
    ReshardAfterForward policy,
    bool pipelined,
    MixedPrecision dtypes,
    const std::map<std::string, ShardGroups>& other_groups)
    : state_(std::make_shared<State>()) {
  auto& module = part.module();
  auto names = module.unit_names();
  std::vector<std::string> blocks(names.begin(), names.end());
  blocks.erase(std::remove(blocks.begin(), blocks.end(), ""), blocks.end());
  // The root first: its forward starts before the blocks' and ends after.
  std::vector<std::string> order{""};
  order.insert(order.end(), blocks.begin(), blocks.end());
  auto& s = *state_;
  const bool free_after_forward = frees_after_forward(policy, pipelined);
  // Every unit is checked before any is changed.
  std::vector<
      std::pair<std::string, std::vector<std::pair<std::string, at::Tensor>>>>
      units;
  for (const auto& name : order) {
    auto params = unit_params(module, name, blocks);
    if (!params.empty()) {
      Unit::check(name, params);
      units.emplace_back(name, std::move(params));
    }
  }
  for (auto& [name, params] : units) {
    const auto index = static_cast<int64_t>(s.order.size());
    // Each gradient accumulator is made (and held) while its parameter is
    // whole: it checks incoming gradients against the shape it was made
    // with, and gradients arrive whole.
    for (const auto& [fqn, p] : params) {
      auto acc = torch::autograd::impl::grad_accumulator(p);
      if (!acc) {
        throw std::invalid_argument(
            "[fsdp] " + fqn +
            ": not a leaf that accumulates gradients; allowed: the module's "
            "own parameters");
      }
      if (!pipelined) {
        std::weak_ptr<State> weak = state_;
        acc->add_post_hook(
            std::make_unique<torch::autograd::utils::LambdaPostHook>(
                [weak, index](
                    const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list&) {
                  if (auto st = weak.lock()) {
                    st->on_gradient(index);
                  }
                  return outputs;
                }));
      }
      accumulators_.push_back(std::move(acc));
      // Split over dp_shard: a parameter an earlier applier split over part
      // of it (experts over ep) is sharded over the rest, so that each
      // dp_shard rank still holds a piece of its own (the applier adds cp
      // where the shard group spans it).
      part.mark_grad_split(fqn, kShardAxis);
    }
    const auto expected = static_cast<int64_t>(params.size());
    // By the group that shards them: dp_shard's first, then each other.
    std::map<std::string, std::vector<std::pair<std::string, at::Tensor>>>
        by_group;
    for (auto& [fqn, p] : params) {
      const std::string* group = part.shard_group(fqn);
      by_group[group ? *group : std::string()].emplace_back(fqn, p);
    }
    UnitSet set;
    for (auto& [group, members] : by_group) {
      ShardGroups shard_groups = groups;
      if (!group.empty()) {
        const auto it = other_groups.find(group);
        if (it == other_groups.end()) {
          throw std::invalid_argument(
              "[fsdp] " + members.front().first + ": sharded over '" + group +
              "', a group fully_shard was not given");
        }
        shard_groups = it->second;
      }
      units_.push_back(std::make_unique<Unit>(
          group.empty() ? name : name + " (" + group + ")",
          std::move(members),
          shard_groups,
          dtypes));
      set.units.push_back(units_.back().get());
    }
    s.order.push_back(std::move(set));
    s.has_root = s.has_root || name.empty();
    // The root's parameters would be gathered again at once for backward.
    s.reshard_after_forward.push_back(free_after_forward && !name.empty());
    s.expected.push_back(expected);
    s.pending.push_back(0);
    s.done.push_back(false);
    module.wrap_unit(name, std::make_shared<GatherAround>(state_, index));
  }
}

FullyShardedPart::~FullyShardedPart() {
  double gathers = 0.0;
  double reduces = 0.0;
  for (const auto& unit : units_) {
    gathers += unit->gather_wait_s();
    reduces += unit->reduce_wait_s();
  }
  // What communication the computation did not hide, for the benchmarks.
  VLOG(1) << "fully_shard: waited " << gathers << " s for gathers and "
          << reduces << " s for reduce-scatters in all";
}

void FullyShardedPart::prepare(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sync = sync;
}

void FullyShardedPart::finish() {
  auto& s = *state_;
  for (size_t i = 0; i < s.order.size(); ++i) {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.done[i]) {
      // No hook ended it: a parameter got no gradient this backward.
      s.post_backward(static_cast<int64_t>(i));
    }
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.finish_all();
  s.sync = false;
  std::fill(s.done.begin(), s.done.end(), false);
}

void FullyShardedPart::reduce_now() {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  // The last units first, as a backward would have finished them.
  for (int64_t i = static_cast<int64_t>(s.order.size()) - 1; i >= 0; --i) {
    s.reduce(i);
  }
  s.finish_all();
}

void FullyShardedPart::after_eval() {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.finish_all();
}

// --- the applier -------------------------------------------------------------

void FullyShardApplier::apply(ModelPart& part, const ParallelContext& context) {
  const auto& p = context.config.parallelism;
  ShardGroups groups{
      context.mesh.group(kShardContextGroup),
      context.mesh.group(kReplicateAxis)};
  std::map<std::string, ShardGroups> other_groups;
  for (const auto& item : part.module().named_parameters()) {
    if (const std::string* group = part.shard_group(item.key())) {
      other_groups.emplace(
          *group,
          ShardGroups{
              context.mesh.group(*group), context.mesh.group(kReplicateAxis)});
    }
  }
  auto sharded = std::make_shared<FullyShardedPart>(
      part,
      groups,
      parse_reshard_after_forward(p.fsdp_reshard_after_forward),
      context.pipelined,
      context.mixed_precision,
      other_groups);
  int64_t shard_bytes = 0;
  int64_t whole_bytes = 0;
  for (const auto& unit : sharded->units()) {
    for (const auto& param : unit->params()) {
      shard_bytes += param.shard.numel() * param.shard.element_size();
      whole_bytes += param.rows * param.row_numel * param.shard.element_size();
    }
  }
  // Every shard of a stage holds as much: said once per stage.
  LOG_IF(INFO, context.mesh.leads({kPipelineAxis}))
      << "fully_shard: stage " << part.stage() << ": "
      << sharded->units().size() << " units over "
      << (context.mesh.dims().degree(kContextAxis) > 1 ? "dp_shard x cp "
                                                       : "dp_shard ")
      << groups.shard->size()
      << (groups.replicate->size() > 1
              ? " x " + std::to_string(groups.replicate->size()) + " replicas"
              : std::string())
      << "; this rank holds " << shard_bytes / (1 << 20)
      << " MiB of parameters (+ as much for gradients, twice that of "
         "AdamW state) of "
      << whole_bytes / (1 << 20) << " MiB; gathers "
      << c10::toString(context.mixed_precision.param) << ", reduces "
      << c10::toString(context.mixed_precision.reduce);
  // What the checkpoint saves of each: its rows of the whole tensor, within
  // any slice an earlier applier (tensor parallel) made. The gradients are
  // split over cp too where the shards span it.
  const bool over_cp = context.mesh.dims().degree(kContextAxis) > 1;
  for (const auto& unit : sharded->units()) {
    for (const auto& param : unit->params()) {
      if (over_cp) {
        part.mark_grad_split(param.fqn, kContextAxis);
      }
      ParamSlice slice;
      if (const ParamSlice* before = part.slice(param.fqn)) {
        slice = *before;
      } else {
        slice.global_shape = param.full_shape;
        slice.offsets.assign(param.full_shape.size(), 0);
      }
      slice.offsets[0] += param.first_row;
      part.set_slice(param.fqn, std::move(slice));
    }
  }
  part.grad_sync().add(std::move(sharded));
}

Parallelism fully_shard_parallelism() {
  Parallelism p;
  p.name = "fully_shard";
  p.axis = MeshAxisSpec{
      kShardAxis,
      200,
      "parallelism.data_parallel_shard_degree",
      {"dp", "loss", kShardContextGroup}};
  // Over dp_shard x cp: context parallel's ranks hold the same weights and
  // see different tokens, so they shard them too (torchtitan's choice: the
  // weights, their gradients and AdamW's state take 1 / cp as much memory
  // there, and the gradients' reduce-scatter sums over cp as it must).
  p.enabled = [](const JobConfig&, const ParallelDims& dims) {
    return dims.degree(kShardContextGroup) > 1;
  };
  p.owned_appliers = {
      {"fully_shard",
       [] { return std::make_unique<FullyShardApplier>(); },
       "fully sharded data parallel (FSDP, HSDP with replicas): parameters "
       "sharded over dp_shard (x cp), gathered per unit, gradients "
       "reduce-scattered"}};
  p.place = ChainPlace::kData;
  p.steps = {"check_replicas", "fully_shard"};
  // ceil(rows / n) rows each, the last ranks fewer or none (Unit's split);
  // expert parallel's experts over the rest of dp_shard.
  p.stored_shape = [](const JobConfig&,
                      const ModelArgs&,
                      const std::string& fqn,
                      const dist::MeshCoord& coord,
                      const ParallelDims& dims,
                      std::vector<int64_t>& shape) {
    const char* group =
        models::is_routed_expert(fqn) && dims.has(kExpertRestAxis)
            ? kExpertRestAxis
            : kShardContextGroup;
    const int64_t n = dims.degree(group);
    const int64_t per_rank = (shape[0] + n - 1) / n;
    shape[0] = std::clamp<int64_t>(
        shape[0] - dist::mesh_index(dims, coord, group) * per_rank,
        0,
        per_rank);
  };
  p.appliers = [](const JobConfig&, const ParallelDims&) {
    return std::vector<std::string>{"check_replicas", "fully_shard"};
  };
  return p;
}

}  // namespace baton::fsdp
