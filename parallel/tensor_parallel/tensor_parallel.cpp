#include "parallel/tensor_parallel/tensor_parallel.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "config/job_config.h"
#include "models/common/transformer.h"
#include "models/model_spec.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
#include "parallel/tensor_parallel/regions.h"
#include "parallel/tensor_parallel/vocab_parallel.h"

namespace baton::tensor_parallel {

namespace {

/// Cuts `p`, the parameter `fqn` of `part`, to the `size` entries from
/// `begin` along `dim` (in place: the module, and later the optimizer, keep
/// the same tensor), records the slice and marks its gradient split along
/// tp.
void shard(
    ModelPart& part,
    const std::string& fqn,
    at::Tensor p,
    int64_t dim,
    int64_t begin,
    int64_t size) {
  ParamSlice slice;
  slice.global_shape = p.sizes().vec();
  slice.offsets.assign(p.dim(), 0);
  slice.offsets[dim] = begin;
  {
    torch::NoGradGuard no_grad;
    p.set_data(p.narrow(dim, begin, size).clone());
  }
  part.set_slice(fqn, std::move(slice));
  part.mark_grad_split(fqn, kAxis);
}

/// Sums the gradient of the replicated `weight` over tp as each backward
/// produces it: under sequence parallel each rank's is from its positions.
void sum_gradient_over_tp(
    at::Tensor weight, const std::shared_ptr<Region>& region) {
  weight.register_hook([region](const at::Tensor& grad) {
    return all_reduce_gradient(grad, *region);
  });
}

std::shared_ptr<Region> region(
    const ParallelContext& context, std::string name) {
  return std::make_shared<Region>(
      Region{context.mesh.group(kAxis), std::move(name)});
}

/// Adds sequence parallel's gather before `hooks`' module and its
/// reduce-scatter after.
void add_sequence_parallel_hooks(
    RegionHooks& hooks, const std::shared_ptr<Region>& r) {
  hooks.add(
      [r](const at::Tensor& x) { return gather_sequence(x, *r); },
      [r](const at::Tensor& x) { return reduce_scatter_sequence(x, *r); });
}

}  // namespace

std::optional<ConfigProblem> tensor_parallel_problem(
    const ModelArgs& args, int64_t seq_len, int64_t tp) {
  const auto problem = [tp](const std::string& what, int64_t value) {
    return ConfigProblem{
        kDegreeKey,
        std::string(kDegreeKey) + ": " + std::to_string(tp) +
            " does not divide the " + what + " (" + std::to_string(value) +
            "); allowed: a divisor of n_heads, n_kv_heads, the feed-forward "
            "hidden size and training.seq_len"};
  };
  if (args.n_heads % tp != 0) {
    return problem("model's n_heads", args.n_heads);
  }
  if (args.kv_heads() % tp != 0) {
    return problem("model's n_kv_heads", args.kv_heads());
  }
  if (args.ffn_hidden_dim() % tp != 0) {
    return problem("model's feed-forward hidden size", args.ffn_hidden_dim());
  }
  if (seq_len % tp != 0) {
    return problem(
        "sequence length training.seq_len (sequence parallel splits it)",
        seq_len);
  }
  if (args.vocab_size < tp) {
    return ConfigProblem{
        kDegreeKey,
        std::string(kDegreeKey) + ": " + std::to_string(tp) +
            " ranks for a vocabulary of " + std::to_string(args.vocab_size) +
            "; allowed: at most the vocabulary size"};
  }
  return std::nullopt;
}

std::optional<TensorSlice> tensor_parallel_slice(
    const std::vector<TensorParallelRule>& plan,
    const std::string& fqn,
    const std::vector<int64_t>& whole,
    int64_t rank,
    int64_t tp) {
  const TensorParallelRule* rule = tensor_parallel_rule(plan, fqn);
  if (rule == nullptr) {
    return std::nullopt;
  }
  // Even blocks along `dim` (heads and hidden rows divide: the config
  // checks tensor_parallel_problem).
  const auto even = [&](int64_t dim) {
    const int64_t size = whole.at(dim) / tp;
    return TensorSlice{dim, rank * size, size};
  };
  switch (rule->split) {
    case TensorSplit::kColumn:
      return even(0);
    case TensorSplit::kRow:
      return even(1);
    case TensorSplit::kVocab: {
      const VocabRange vocab = VocabRange::of(whole.at(0), rank, tp);
      return TensorSlice{0, vocab.begin, vocab.size()};
    }
  }
  return std::nullopt;
}

const std::vector<TensorParallelRule>& tensor_parallel_plan(
    const JobConfig& config) {
  register_builtin_models();
  return model_registry()
      .get(config.model.name, config.origin("model.name"))
      .tensor_parallel_plan;
}

LossFn tensor_parallel_loss(const dist::ParallelMesh& mesh, int64_t vocab) {
  const auto& group = mesh.group(kAxis);
  if (group->size() == 1) {
    return cross_entropy_sum;
  }
  auto r = std::make_shared<Region>(Region{group, "loss"});
  const VocabRange range = VocabRange::of(vocab, group->rank(), group->size());
  return [r, range](const at::Tensor& logits, const at::Tensor& labels) {
    return vocab_parallel_cross_entropy_sum(logits, labels, range, *r);
  };
}

namespace {

/// What a tp rank of stage `part` holds after the cut, in one line.
void log_layout(
    const ModelPart& part,
    const models::TransformerImpl& model,
    const dist::ProcessGroup& group,
    const VocabRange& vocab,
    int64_t sharded_bytes,
    const ParallelContext& context) {
  const ModelArgs& args = model.args();
  const int64_t n = group.size();
  // Once per tp slice of each stage (data-parallel copies hold the same).
  LOG_IF(INFO, context.mesh.leads({kPipelineAxis, kAxis}))
      << "tensor_parallel: stage " << part.stage() << ": tp rank "
      << group.rank() << " of " << n << " holds " << args.n_heads / n << " of "
      << args.n_heads << " query heads, " << args.kv_heads() / n << " of "
      << args.kv_heads() << " key/value heads, " << args.ffn_hidden_dim() / n
      << " of " << args.ffn_hidden_dim() << " hidden rows"
      << (model.spec().embedding || model.spec().output
              ? ", vocabulary [" + std::to_string(vocab.begin) + ", " +
                    std::to_string(vocab.end) + ") of " +
                    std::to_string(args.vocab_size)
              : std::string())
      << " (" << sharded_bytes / 1024
      << " KiB of sliced weights); sequence parallel: activations "
         "between blocks hold "
      << context.config.training.seq_len / n << " of "
      << context.config.training.seq_len << " positions";
}

}  // namespace

void TensorParallelApplier::apply(
    ModelPart& part, const ParallelContext& context) {
  auto* model = dynamic_cast<models::TransformerImpl*>(&part.module());
  const auto& plan = tensor_parallel_plan(context.config);
  if (model == nullptr || plan.empty()) {
    throw std::invalid_argument(
        "[tensor_parallel] stage " + std::to_string(part.stage()) +
        ": model '" + context.config.model.name +
        "' has no tensor-parallel plan; allowed: a family built on "
        "models/common's decoder with one");
  }
  const auto& group = context.mesh.group(kAxis);
  const int64_t n = group->size();
  if (n == 1) {
    return;
  }
  const ModelArgs& args = model->args();
  if (const auto problem =
          tensor_parallel_problem(args, context.config.training.seq_len, n)) {
    throw_config_error(context.config.origin(problem->key), problem->message);
  }
  int64_t sharded_bytes = 0;
  // Every parameter the plan cuts, in place; every other one is whole on
  // each rank and computed from this rank's positions (the norms between
  // the regions) or heads (q_norm, k_norm): its gradient is summed over tp.
  for (const auto& item : part.module().named_parameters()) {
    const auto slice = tensor_parallel_slice(
        plan, item.key(), item.value().sizes().vec(), group->rank(), n);
    if (slice) {
      sharded_bytes += item.value().nbytes();
      shard(
          part,
          item.key(),
          item.value(),
          slice->dim,
          slice->begin,
          slice->size);
    } else {
      // The region is named after the module ("layers.0.ffn_norm").
      std::string name = item.key();
      name = name.substr(0, name.rfind('.'));
      sum_gradient_over_tp(item.value(), region(context, name));
    }
  }
  for (const auto& item : model->layers->items()) {
    const std::string prefix = "layers." + item.first + ".";
    auto& block = *item.second->as<models::TransformerBlockImpl>();
    add_sequence_parallel_hooks(
        block.attention->hooks, region(context, prefix + "attention"));
    if (block.feed_forward) {
      add_sequence_parallel_hooks(
          block.feed_forward->hooks, region(context, prefix + "feed_forward"));
    } else if (block.moe) {
      // The experts route this rank's positions of each sequence, with
      // whole weights (their gradients summed over tp, above; expert
      // parallel splits them, not tp): no gather on entry. The auxiliary
      // loss and the routing counts add up the sequences' other shards.
      const auto r = region(context, prefix + "moe");
      block.moe->sequence_shards = n;
      block.moe->sum_over_sequence = [r](const at::Tensor& x) {
        return sum_over_ranks(x, *r);
      };
    }
  }
  const VocabRange vocab = VocabRange::of(args.vocab_size, group->rank(), n);
  if (model->spec().embedding) {
    const auto r = region(context, "tok_embeddings");
    model->embedding_lookup =
        [r, vocab](const at::Tensor& ids, const at::Tensor& weight) {
          return vocab_parallel_embedding(ids, weight, vocab, *r);
        };
  }
  if (model->spec().output) {
    const auto r = region(context, "output");
    model->output_hooks.add(
        [r](const at::Tensor& x) { return gather_sequence(x, *r); }, {});
  }
  model->sequence_shards = n;
  log_layout(part, *model, *group, vocab, sharded_bytes, context);
}

Parallelism tensor_parallel_parallelism() {
  Parallelism p;
  p.name = "tensor_parallel";
  p.axis = MeshAxisSpec{kAxis, 1000, kDegreeKey, {}};
  // Its degree joins the built-in parallelism section.
  p.section = "parallelism";
  p.fields = {
      {"tensor_parallel_degree",
       int64_t{1},
       FieldSpec("tensor parallel ranks").mesh_degree()}};
  p.owned_appliers = {
      {"tensor_parallel",
       [] { return std::make_unique<TensorParallelApplier>(); },
       "Megatron's tensor parallel with sequence parallel over tp "
       "(parallelism.tensor_parallel_degree): column- and row-parallel "
       "linears, vocabulary-parallel embedding and output"}};
  p.steps = {"tensor_parallel"};
  p.appliers = [](const JobConfig&, const ParallelDims&) {
    return std::vector<std::string>{"tensor_parallel"};
  };
  p.check = [](const JobConfig& config,
               const ParallelDims& dims,
               const ModelArgs& args) {
    return tensor_parallel_problem(
        args, config.training.seq_len, dims.degree(kAxis));
  };
  p.loss = [](const dist::ParallelMesh& mesh, const ModelArgs& args) {
    return tensor_parallel_loss(mesh, args.vocab_size);
  };
  // Each rank multiplies its columns of the feed-forward and its rows of
  // the vocabulary.
  p.step_shape =
      [](const JobConfig&, const ParallelDims& dims, StepShape& shape) {
        shape.hidden /= dims.degree(kAxis);
        shape.vocab /= dims.degree(kAxis);
      };
  p.stored_shape = [](const JobConfig& config,
                      const ModelArgs&,
                      const std::string& fqn,
                      const dist::MeshCoord& coord,
                      const ParallelDims& dims,
                      std::vector<int64_t>& shape) {
    if (const auto slice = tensor_parallel_slice(
            tensor_parallel_plan(config),
            fqn,
            shape,
            coord.at(kAxis),
            dims.degree(kAxis))) {
      shape[slice->dim] = slice->size;
    }
  };
  // Sequence parallel: stages hand over 1 / tp of the positions.
  p.sequence_shards = [](const ParallelDims& dims) {
    return dims.degree(kAxis);
  };
  // Heads, feed-forward columns and sequence-parallel regions: 1 / tp each.
  p.hidden_shards = [](const ParallelDims& dims) { return dims.degree(kAxis); };
  // Searched up to 8 (one machine's GPUs); unmeasured, each block's
  // forward all-gathers its input twice (before attention and before the
  // feed-forward) and reduce-scatters twice (after wo and after w2), and
  // its backward does the same.
  p.plan = PlanSearch{8, 2, 2, {}};
  return p;
}

}  // namespace baton::tensor_parallel
