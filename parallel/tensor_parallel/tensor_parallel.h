#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/loss.h"
#include "models/model_args.h"
#include "models/model_spec.h"
#include "parallel/applier.h"

namespace baton::dist {
class ParallelMesh;
}

namespace baton {
struct Parallelism;
}

namespace baton::tensor_parallel {

/// Tensor parallel's mesh axis: innermost, its degree
/// parallelism.tensor_parallel_degree.
inline constexpr const char* kAxis = "tp";
/// Its degree's config key, which it registers into the parallelism section.
inline constexpr const char* kDegreeKey = "parallelism.tensor_parallel_degree";

/// Whether a model shaped `args`, trained on sequences of `seq_len`,
/// splits over `tp` ranks: query and key/value heads, the feed-forward's
/// hidden size and the sequence (sequence parallel) must each divide, and
/// the vocabulary must give every rank a row. The problem names
/// parallelism.tensor_parallel_degree.
std::optional<ConfigProblem> tensor_parallel_problem(
    const ModelArgs& args, int64_t seq_len, int64_t tp);

/// The piece of a whole parameter one tp rank holds: `size` entries from
/// `begin` along `dim`.
struct TensorSlice {
  int64_t dim = 0;
  int64_t begin = 0;
  int64_t size = 0;
};

/// Where the tensor_parallel step cuts the parameter `fqn` (whole shape
/// `whole`) for tp rank `rank` of `tp`, by the family's plan `plan` (the
/// applier cuts by it and a dry run counts by it); nullopt for a parameter
/// every tp rank holds whole (the norms).
std::optional<TensorSlice> tensor_parallel_slice(
    const std::vector<TensorParallelRule>& plan,
    const std::string& fqn,
    const std::vector<int64_t>& whole,
    int64_t rank,
    int64_t tp);

/// The tensor-parallel plan of the run's model family (model.name).
const std::vector<TensorParallelRule>& tensor_parallel_plan(
    const JobConfig& config);

/// The loss of a run whose output projection is split over `mesh`'s tp
/// group by vocabulary (`vocab` tokens in all): the vocabulary-parallel
/// cross-entropy sum; with tp 1, cross_entropy_sum.
LossFn tensor_parallel_loss(const dist::ParallelMesh& mesh, int64_t vocab);

/// The tensor_parallel step (parallelism.tensor_parallel_degree > 1),
/// Megatron's layout with sequence parallel over the mesh's tp group, on a
/// decoder part (models/common) whose parameters are still whole, cut by
/// its family's plan (ModelSpec::tensor_parallel_plan):
/// - wq, wk, wv, w1, w3 column-parallel (this rank's query heads, key/value
///   heads and hidden rows), wo and w2 row-parallel (the matching input
///   columns);
/// - the token embedding and the output projection split by vocabulary (the
///   same rows on both), the loss vocabulary-parallel
///   (tensor_parallel_loss), so the logits are never gathered;
/// - the blocks' activations sequence-sharded: attention and feed-forward
///   all-gather the sequence on entry and reduce-scatter on leaving, the
///   embedding reduce-scatters, the output gathers; norms and residual adds
///   run on this rank's T / tp positions, and the norms' weight gradients
///   are summed over tp as each backward produces them.
/// Every communication is an autograd function (regions.h). Each sliced
/// parameter keeps its FQN, records its slice of the whole tensor for the
/// checkpoint and is marked split along tp for the grad norm. Initialise
/// before: the slices are cut from the whole weights, so a tp run starts
/// from one process's.
class TensorParallelApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

/// Tensor parallel as registered: the tp axis, the tensor_parallel step
/// (before activation checkpointing), tensor_parallel_problem as its check,
/// the vocabulary-parallel loss, the MFU probe's hidden and vocabulary
/// sizes divided by tp, and the pipeline's messages sequence-sharded tp
/// ways.
Parallelism tensor_parallel_parallelism();

}  // namespace baton::tensor_parallel
