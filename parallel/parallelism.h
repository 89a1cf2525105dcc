#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/sequence_split.h"
#include "config/job_config.h"
#include "config/parallel_dims.h"
#include "models/loss.h"
#include "models/model_args.h"
#include "parallel/applier.h"

namespace baton {

namespace dist {
class MeshCoord;
class ParallelMesh;
}  // namespace dist

/// The matmul sizes of one rank's step, which the MFU probe measures: the
/// tokens of one forward, the model width, the feed-forward's hidden size
/// and the vocabulary, as this rank multiplies them.
struct StepShape {
  int64_t tokens = 0;
  int64_t dim = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
};

/// Where a parallelism's appliers go in the builder's chain (its base:
/// to_device, the model steps, activation_checkpoint, mixed_precision,
/// parallelism.appliers, the data steps).
enum class ChainPlace {
  /// After to_device, before activation checkpointing: steps that change
  /// what the part computes (tensor parallel).
  kModel,
  /// Last, after the user's appliers: steps that synchronise gradients
  /// across replicas and shards (data parallel).
  kData,
};

/// How `baton plan` searches a parallelism whose axis splits every
/// transformer block's work across its ranks, with collectives inside the
/// blocks (tensor parallel's heads, context parallel's positions). The
/// planner tries each degree from 2 to `max_degree` that divides the world
/// and that the parallelism's `check` accepts for the model; such axes lie
/// inside the data axes (their order is above dp_shard's).
struct PlanSearch {
  int64_t max_degree = 8;
  /// Where the cost file holds no costs measured at a degree (the list
  /// named after the parallelism, which the profile writes), a
  /// block's passes take the whole block's over the degree plus, in its
  /// forward and as many again in its backward, these collectives of the
  /// block's (rows, seq_len, dim) activations along the axis.
  int64_t block_all_gathers = 0;
  int64_t block_reduce_scatters = 0;
  /// The share of those activations each collective moves, given the
  /// model and the candidate's degrees by axis; empty: the rank's
  /// sequence shard's (1 / the split where a parallelism splits the
  /// sequence, context parallel).
  std::function<double(
      const ModelArgs&, const std::map<std::string, int64_t>& splits)>
      collective_share;
};

/// How `baton plan` searches a parallelism whose derived axis re-slices the
/// ranks of others (DerivedAxisSpec: expert parallel's ep of dp_shard x
/// cp): each degree from 2 to `max_degree` that divides the product of
/// the candidate's degrees of its sources and that its check accepts for
/// the model. It moves work between ranks without dividing it (the
/// blocks' costs stay as they are); in each block's forward, and as many
/// again in its backward, it adds `block_all_to_alls` all-to-alls along
/// the axis, each of `all_to_all_share(args)` of the rank's (rows,
/// positions, dim) activations. The parameters its stored_shape splits
/// are sharded by fully_shard over the rest of the sources (the planner
/// costs those as the dry run's expert_parameters).
struct PlanBorrowSearch {
  int64_t max_degree = 64;
  int64_t block_all_to_alls = 0;
  std::function<double(const ModelArgs&)> all_to_all_share;
};

/// One parallelism, registered once (register_parallelism): its mesh axis,
/// its own config section, its checks, its appliers and their place, and
/// what it changes for the rest of the run. The builders ask the enabled
/// parallelisms (enabled_parallelisms) and name none; a hook left empty
/// changes nothing.
struct Parallelism {
  /// "tensor_parallel".
  std::string name;
  /// Its mesh axis, declared when it is registered; none for a parallelism
  /// that only borrows others' axes.
  std::optional<MeshAxisSpec> axis;
  /// Its derived axis, for a parallelism that re-slices others' ranks
  /// (expert parallel's ep of dp_shard), declared when it is registered.
  std::optional<DerivedAxisSpec> derived_axis;
  /// Its own config section and keys (register_config_section), when it has
  /// some: decoded, checked, printed by --print-config like the built-ins.
  std::string section;
  std::vector<SectionField> fields;

  /// Whether it is on in a run laid out as `dims`; empty: when its axis's
  /// (or derived axis's) degree is above 1.
  std::function<bool(const JobConfig&, const ParallelDims&)> enabled;
  /// What makes `config` unusable for it on a model shaped `args` over
  /// `dims`, naming the config key to change; run by the builders before
  /// the model is built and by the dry run.
  std::function<std::optional<ConfigProblem>(
      const JobConfig&, const ParallelDims&, const ModelArgs&)>
      check;
  /// An applier it registers with the parallelism (in applier_registry()).
  struct OwnedApplier {
    std::string name;
    ApplierCreator create;
    std::string help;
  };
  std::vector<OwnedApplier> owned_appliers;
  /// Where its appliers go in the chain.
  ChainPlace place = ChainPlace::kModel;
  /// Every registered applier it may place: `parallelism.appliers` may not
  /// name them (set the axis's degree instead).
  std::vector<std::string> steps;
  /// The registered appliers it adds, in order, for a run laid out as
  /// `dims` (empty: none).
  std::function<std::vector<std::string>(const JobConfig&, const ParallelDims&)>
      appliers;
  /// The token loss when the parallelism changes it (as tensor parallel's
  /// vocabulary-parallel loss); at most one enabled parallelism may.
  std::function<LossFn(const dist::ParallelMesh&, const ModelArgs&)> loss;
  /// How it changes one rank's matmul sizes (the MFU probe's shapes).
  std::function<void(const JobConfig&, const ParallelDims&, StepShape&)>
      step_shape;
  /// How many ways it splits the sequence of the activations between
  /// pipeline stages (1: not at all); the shards of all enabled
  /// parallelisms multiply.
  std::function<int64_t(const ParallelDims&)> sequence_shards;
  /// How it splits every sequence across ranks for the whole model
  /// (context parallel): the SequenceSplit of the rank at `coord`, which
  /// the data loader cuts its rows by and the dry run counts; at most one
  /// enabled parallelism may.
  std::function<SequenceSplit(const ParallelDims&, const dist::MeshCoord&)>
      sequence_split;
  /// How many ways it splits each block's activations the way Megatron's
  /// tensor and sequence parallel do (the attention heads, the
  /// feed-forward's hidden units, the sequence between the blocks'
  /// regions): the dry run's activation rule divides those by the product
  /// of the enabled parallelisms' (1: not at all).
  std::function<int64_t(const ParallelDims&)> hidden_shards;
  /// How the planner searches its degree; none: the planner leaves it at 1.
  std::optional<PlanSearch> plan;
  /// How the planner searches its derived axis's degree; none: the planner
  /// leaves it at 1.
  std::optional<PlanBorrowSearch> borrow_plan;
  /// The dry run's memory rule: what a rank at `coord` stores of the
  /// parameter `fqn` of a model shaped `args` (of config's model.name),
  /// `shape` in (what the steps before left it) and out; empty: what it is
  /// given.
  std::function<void(
      const JobConfig& config,
      const ModelArgs& args,
      const std::string& fqn,
      const dist::MeshCoord& coord,
      const ParallelDims& dims,
      std::vector<int64_t>& shape)>
      stored_shape;
};

/// Registers `parallelism` (and declares its axis and config section). A
/// name registered twice is a programming error (std::logic_error).
void register_parallelism(Parallelism parallelism);
/// The registered parallelisms, in registration order.
const std::vector<Parallelism>& registered_parallelisms();
/// Registers the built-in parallelisms: pipeline (pp), replicate
/// (dp_replicate), fully_shard (dp_shard, HSDP with replicas),
/// tensor_parallel (tp), context_parallel (cp) and expert_parallel (ep of
/// dp_shard x cp). Safe to call more than once.
void register_builtin_parallelisms();

/// The registered parallelisms on in a run laid out as `dims`, in
/// registration order.
std::vector<const Parallelism*> enabled_parallelisms(
    const JobConfig& config, const ParallelDims& dims);
/// The first problem any enabled parallelism finds (Parallelism::check).
std::optional<ConfigProblem> parallelism_problem(
    const JobConfig& config, const ParallelDims& dims, const ModelArgs& args);
/// The token loss of the run: the one enabled parallelism that changes it,
/// else cross_entropy_sum. Throws std::logic_error naming them when two do.
LossFn parallel_loss(
    const JobConfig& config,
    const dist::ParallelMesh& mesh,
    const ModelArgs& args);
/// `shape` as every enabled parallelism changes it.
StepShape parallel_step_shape(
    const JobConfig& config, const ParallelDims& dims, StepShape shape);
/// A parameter's shapes on a rank: after the model steps' cuts (what a
/// data step such as fully_shard gathers back) and as stored, after the
/// data steps' too.
struct ParallelShapes {
  std::vector<int64_t> model;
  std::vector<int64_t> stored;
};
/// The shapes a rank at `coord` holds of the parameter `fqn` (whole:
/// `shape`), as the `enabled` parallelisms (enabled_parallelisms(config,
/// dims), asked once by a caller counting many parameters) cut it in chain
/// order.
ParallelShapes parallel_stored_shapes(
    const std::vector<const Parallelism*>& enabled,
    const JobConfig& config,
    const ParallelDims& dims,
    const ModelArgs& args,
    const std::string& fqn,
    std::vector<int64_t> shape,
    const dist::MeshCoord& coord);
/// The product of the enabled parallelisms' sequence_shards.
int64_t parallel_sequence_shards(
    const JobConfig& config, const ParallelDims& dims);
/// The split of each sequence of the rank at `coord`: the one enabled
/// parallelism's sequence_split, else the whole sequence. Throws
/// std::logic_error naming them when two split it.
SequenceSplit parallel_sequence_split(
    const JobConfig& config,
    const ParallelDims& dims,
    const dist::MeshCoord& coord);
/// The same for this rank of `mesh`.
SequenceSplit parallel_sequence_split(
    const JobConfig& config, const dist::ParallelMesh& mesh);
/// The product of the enabled parallelisms' hidden_shards.
int64_t parallel_hidden_shards(
    const JobConfig& config, const ParallelDims& dims);
/// The registered parallelisms the planner searches (Parallelism::plan,
/// each with an axis), by their axes' order.
std::vector<const Parallelism*> searched_parallelisms();
/// The registered parallelisms whose derived axis the planner searches
/// (Parallelism::borrow_plan, each with a derived axis), by name.
std::vector<const Parallelism*> borrowing_parallelisms();

}  // namespace baton
