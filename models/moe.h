#pragma once

// A mixture-of-experts feed-forward (torchtitan's models/common/moe.py,
// DeepSeek-V3's and Qwen3-MoE's routing): a router scores each token's
// experts, the top-k of them run on it (SwiGLU experts stored grouped: one
// tensor per weight, experts first), their outputs are summed with the
// router's weights, and shared experts (DeepSeek's), where there are any,
// run on every token. The routing statistics of a step (tokens per expert,
// the auxiliary loss) accumulate in the module for the load balancing and
// the metrics (trainer/moe_balance.h reads and resets them).

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "models/linear.h"
#include "models/model_args.h"
#include "models/region.h"

namespace baton::models {

class FeedForwardImpl;

/// Which experts each token goes to and with what weight.
struct Routing {
  /// (N, k) expert indices, int64.
  at::Tensor experts;
  /// (N, k) gate weights, float32 (renormalised and scaled as the router
  /// says).
  at::Tensor weights;
  /// (N, E) float32: the router's scores (softmax or sigmoid of the
  /// logits, without the bias): what the auxiliary loss reads.
  at::Tensor scores;
  /// (N) float32: how far each token's k-th choice is above its (k+1)-th
  /// (on what the choice is made on; +inf with k = E): below float error,
  /// two layouts of the same model may route the token differently.
  at::Tensor margin;
};

/// The router: gate logits of x (N, dim) in float32, scored by softmax or
/// sigmoid; the top-k chosen on the scores plus the routing bias (only
/// where the group-limited routing keeps a token's group); the weights are
/// the chosen scores without the bias, renormalised to sum 1 where
/// args.route_norm, times args.route_scale. Shared by the module and the
/// tests' reference.
Routing route(
    const at::Tensor& logits,
    const MoeArgs& args,
    const at::Tensor& expert_bias);

/// One step's routing statistics of one MoE layer, summed over its
/// forwards (a recomputation does not count twice).
struct MoeStats {
  /// (E) float64: tokens routed to each expert (each token counts k times).
  at::Tensor tokens_per_expert;
  /// Tokens the layer saw.
  int64_t tokens = 0;
  /// Sum over forwards of the auxiliary loss times the forward's tokens
  /// (so stats.aux_loss_sum / stats.tokens is the token-weighted mean).
  double aux_loss_sum = 0.0;
  /// take_stats() turns these into the two fields above: the forwards add
  /// on the model's device, without waiting on it.
  at::Tensor pending_counts;
  at::Tensor pending_aux;
  /// Token-expert pairs dropped past an expert's capacity.
  int64_t dropped = 0;
  /// The smallest routing margin (Routing::margin) of the forwards; +inf
  /// before any. What the layout tests assert is far above float error.
  double min_margin = std::numeric_limits<double>::infinity();
  at::Tensor pending_margin;
};

/// Sums a per-sequence statistic over the ranks that hold the other shards
/// of the same sequences (tensor parallel's sequence parallel): forward an
/// all-reduce, backward the identity (each of those ranks backpropagates
/// the same replicated loss into its own shard).
using SequenceSum = std::function<at::Tensor(const at::Tensor&)>;

/// Computes this rank's experts on `rows` (R, dim), sorted by local expert
/// with `counts` rows each (one count per local expert): (R, dim).
using LocalExperts = std::function<at::Tensor(
    const at::Tensor& rows, const std::vector<int64_t>& counts)>;

/// Where the routed rows are computed: without one, every expert is this
/// rank's; expert parallel (parallel/expert_parallel) sets one that sends
/// each row to the rank holding its expert and brings the outputs back.
class ExpertDispatcher {
 public:
  virtual ~ExpertDispatcher() = default;
  /// rows: (M, dim) token-expert rows sorted by expert, `counts` (E, int64,
  /// on the CPU) of each of the model's experts. Returns each row's output
  /// in the same order, `experts` having computed this rank's.
  virtual at::Tensor run(
      const at::Tensor& rows,
      const at::Tensor& counts,
      const LocalExperts& experts) = 0;
};

/// How a rank multiplies its experts' rows (moe.expert_products).
enum class ExpertProducts {
  /// ATen's grouped matmul (compat::grouped_mm; CUDA: sm80 and later, its
  /// CUTLASS kernel from sm90 in bfloat16) wherever it takes the tensors
  /// (grouped_mm_takes): on the CPU it ran 1.1x the loop's tokens/s in
  /// float32 and bfloat16 alike (docs/PERFORMANCE.md, BM_ExpertProducts).
  /// Elsewhere (float64, unaligned widths), the loop.
  kAuto,
  /// One product per expert with rows (on the CPU, rows padded to 64).
  kLoop,
};

/// Parses moe.expert_products ("auto", "loop"); throws
/// std::invalid_argument for another.
ExpertProducts parse_expert_products(const std::string& name);

/// Whether the grouped matmul takes rows `xs` (M, K) and an expert weight
/// tensor (E, N, K) or (E, K, N) read transposed: float32, bfloat16 or
/// float16 alike, 16-byte aligned widths, data and strides.
bool grouped_mm_takes(const at::Tensor& xs, const at::Tensor& weight);

/// The experts' SwiGLU on rows `xs` (M, dim) sorted by expert, `count`
/// each (one per expert of w1): w2 (swiglu(xs w1_e^T, xs w3_e^T)) w2_e^T
/// per expert e, w1 and w3 (E, hidden, dim), w2 (E, dim, hidden), as `how`
/// says. The grouped matmul starts each expert's group at a multiple of
/// `align_rows` rows (0: the device's, 16 bytes of rows on CUDA, none on
/// the CPU). Undefined when no expert has rows.
at::Tensor expert_products(
    const at::Tensor& xs,
    const std::vector<int64_t>& count,
    const at::Tensor& w1,
    const at::Tensor& w3,
    const at::Tensor& w2,
    ExpertProducts how,
    int64_t align_rows = 0);

/// Which of `routing`'s token-expert pairs (N, k) each expert takes under
/// a capacity of ceil(factor x N x k / E) pairs (bool (N, k)): those with
/// the highest scores of that expert (ties to the earlier token); all
/// where factor is 0.
at::Tensor capacity_keep(
    const Routing& routing, int64_t num_experts, double factor);

/// The MoE feed-forward. Names (torchtitan's): router.gate.weight (E, dim),
/// experts.w1 / experts.w3 (E, hidden, dim), experts.w2 (E, dim, hidden)
/// (under expert parallel, this rank's experts of those: the dispatcher's),
/// shared_experts.w{1,2,3}.weight (a SwiGLU of shared_experts x hidden) and
/// the buffer expert_bias (E), saved with the weights, where the routing
/// has a bias.
class MoEImpl : public torch::nn::Module {
 public:
  explicit MoEImpl(const ModelArgs& args);
  /// x: (B, T, dim) -> (B, T, dim)
  at::Tensor forward(const at::Tensor& x);

  /// The statistics since the last take_stats(), and a fresh start.
  MoeStats take_stats();
  /// The statistics so far (what the forwards added, brought to the host).
  const MoeStats& stats();
  const MoeArgs& args() const {
    return args_;
  }

  Linear gate{nullptr};
  at::Tensor w1, w2, w3;
  /// Where args.shared_experts > 0.
  std::shared_ptr<FeedForwardImpl> shared_experts;
  /// Where args.expert_bias: added to the scores for choosing experts only.
  at::Tensor expert_bias;
  /// Around the whole module, as FeedForwardImpl's.
  RegionHooks hooks;
  /// The auxiliary loss's coefficient in the objective (moe.aux_loss_coeff;
  /// the builder sets it): coeff x the layer's loss, each forward weighted
  /// by its share of the step's tokens (ForwardState::loss_scale). 0: the
  /// loss is still measured, for the metrics, but adds nothing.
  double aux_loss_coeff = 0.0;
  /// How this rank multiplies its experts' rows (moe.expert_products; the
  /// builder sets it).
  ExpertProducts products = ExpertProducts::kAuto;
  /// moe.capacity_factor (the builder sets it): 0, nothing dropped.
  double capacity_factor = 0.0;
  /// Where the routed rows go (expert parallel's all-to-all); null: every
  /// expert is in w1, w2, w3.
  std::shared_ptr<ExpertDispatcher> dispatcher;
  /// Under sequence parallel (tensor parallel sets both): the input is 1 /
  /// sequence_shards of each sequence, and sum_over_sequence sums the
  /// auxiliary loss's per-sequence statistics, and the step's routing
  /// counts (balance_experts), over the other shards' ranks. The layer
  /// routes its own tokens; its weights are whole on every shard's rank.
  int64_t sequence_shards = 1;
  SequenceSum sum_over_sequence;

 private:
  /// The routed experts' sum for x (N, dim) routed by `routing`.
  at::Tensor experts_forward(const at::Tensor& x, const Routing& routing);
  /// The local experts' SwiGLU on rows sorted by local expert.
  at::Tensor local_experts(
      const at::Tensor& rows, const std::vector<int64_t>& counts) const;

  MoeArgs args_;
  MoeStats stats_;
  /// The pairs the last experts_forward dropped past the capacity.
  int64_t last_dropped_ = 0;
};
TORCH_MODULE(MoE);

/// Whether `fqn` is a routed expert's weight (an MoE's experts.w1, w2, w3):
/// what expert parallel splits by expert.
bool is_routed_expert(const std::string& fqn);

/// The switch-transformer auxiliary loss (transformers'
/// load_balancing_loss_func for one layer and one sequence), per sequence
/// and averaged over the `sequences` the routed rows are (in order): for
/// each, E x sum_e f_e P_e, f_e the share of its tokens' choices expert e
/// got (summing to k) and P_e e's mean score; k at perfect balance. Per
/// sequence (DeepSeek-V3's sequence-wise form), so that it does not
/// depend on how a step's sequences are split into batches, microbatches
/// and data-parallel ranks: every layout trains the same objective.
/// `over_shards` (with `shards`): the routed rows are one of `shards` shards
/// of each sequence, whose per-sequence sums it adds up over the ranks
/// holding the others (MoEImpl::sum_over_sequence).
at::Tensor moe_aux_loss(
    const Routing& routing,
    int64_t num_experts,
    int64_t sequences = 1,
    const SequenceSum& over_shards = nullptr,
    int64_t shards = 1);

}  // namespace baton::models
