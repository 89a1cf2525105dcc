#include "parallel/tensor_parallel/tensor_parallel.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "config/job_config.h"
#include "models/llama/transformer.h"
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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Sums the gradient of the replicated `weight` over tp as each backward
/// produces it: under sequence parallel each rank's is from its positions.
void sum_gradient_over_tp(
    at::Tensor& weight, const std::shared_ptr<Region>& region) {
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
    const llama::ModelArgs& args, int64_t seq_len, int64_t tp) {
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
    const llama::ModelArgs& args,
    const std::string& fqn,
    int64_t rank,
    int64_t tp) {
  // Even blocks of `total` along `dim` (heads and hidden rows divide: the
  // config checks tensor_parallel_problem).
  const auto even = [&](int64_t dim, int64_t total) {
    return TensorSlice{dim, rank * (total / tp), total / tp};
  };
  const int64_t q = args.n_heads * args.head_dim();
  const int64_t kv = args.kv_heads() * args.head_dim();
  const int64_t hidden = args.ffn_hidden_dim();
  if (ends_with(fqn, ".attention.wq.weight")) {
    return even(0, q);
  }
  if (ends_with(fqn, ".attention.wk.weight") ||
      ends_with(fqn, ".attention.wv.weight")) {
    return even(0, kv);
  }
  if (ends_with(fqn, ".attention.wo.weight")) {
    return even(1, q);
  }
  if (ends_with(fqn, ".feed_forward.w1.weight") ||
      ends_with(fqn, ".feed_forward.w3.weight")) {
    return even(0, hidden);
  }
  if (ends_with(fqn, ".feed_forward.w2.weight")) {
    return even(1, hidden);
  }
  if (fqn == "tok_embeddings.weight" || fqn == "output.weight") {
    const VocabRange vocab = VocabRange::of(args.vocab_size, rank, tp);
    return TensorSlice{0, vocab.begin, vocab.size()};
  }
  return std::nullopt;
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
    const llama::TransformerImpl& model,
    const dist::ProcessGroup& group,
    const VocabRange& vocab,
    int64_t sharded_bytes,
    const ParallelContext& context) {
  const llama::ModelArgs& args = model.args();
  const int64_t n = group.size();
  LOG(INFO) << "tensor_parallel: stage " << part.stage() << ": tp rank "
            << group.rank() << " of " << n << " holds " << args.n_heads / n
            << " of " << args.n_heads << " query heads, " << args.kv_heads() / n
            << " of " << args.kv_heads() << " key/value heads, "
            << args.ffn_hidden_dim() / n << " of " << args.ffn_hidden_dim()
            << " hidden rows"
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
  auto* model = dynamic_cast<llama::TransformerImpl*>(&part.module());
  if (model == nullptr) {
    throw std::invalid_argument(
        "[tensor_parallel] stage " + std::to_string(part.stage()) +
        ": the module is not a llama3 Transformer; allowed: llama3, the "
        "model with a tensor-parallel plan");
  }
  const auto& group = context.mesh.group(kAxis);
  const int64_t n = group->size();
  if (n == 1) {
    return;
  }
  const llama::ModelArgs& args = model->args();
  if (const auto problem =
          tensor_parallel_problem(args, context.config.training.seq_len, n)) {
    throw_config_error(context.config.origin(problem->key), problem->message);
  }
  int64_t sharded_bytes = 0;
  const auto params = part.module().named_parameters();
  // Every parameter the plan cuts (tensor_parallel_slice), in place.
  for (const auto& item : params) {
    const auto slice =
        tensor_parallel_slice(args, item.key(), group->rank(), n);
    if (slice) {
      sharded_bytes += item.value().nbytes();
      shard(
          part,
          item.key(),
          item.value(),
          slice->dim,
          slice->begin,
          slice->size);
    }
  }
  for (const auto& item : model->layers->items()) {
    const std::string prefix = "layers." + item.first + ".";
    auto& block = *item.second->as<llama::TransformerBlockImpl>();
    add_sequence_parallel_hooks(
        block.attention->hooks, region(context, prefix + "attention"));
    add_sequence_parallel_hooks(
        block.feed_forward->hooks, region(context, prefix + "feed_forward"));
    sum_gradient_over_tp(
        block.attention_norm->weight,
        region(context, prefix + "attention_norm"));
    sum_gradient_over_tp(
        block.ffn_norm->weight, region(context, prefix + "ffn_norm"));
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
    sum_gradient_over_tp(model->norm->weight, region(context, "norm"));
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
               const llama::ModelArgs& args) {
    return tensor_parallel_problem(
        args, config.training.seq_len, dims.degree(kAxis));
  };
  p.loss = [](const dist::ParallelMesh& mesh, const llama::ModelArgs& args) {
    return tensor_parallel_loss(mesh, args.vocab_size);
  };
  // Each rank multiplies its columns of the feed-forward and its rows of
  // the vocabulary.
  p.step_shape =
      [](const JobConfig&, const ParallelDims& dims, StepShape& shape) {
        shape.hidden /= dims.degree(kAxis);
        shape.vocab /= dims.degree(kAxis);
      };
  p.stored_shape = [](const llama::ModelArgs& args,
                      const std::string& fqn,
                      const dist::MeshCoord& coord,
                      const ParallelDims& dims,
                      std::vector<int64_t>& shape) {
    if (const auto slice = tensor_parallel_slice(
            args, fqn, coord.at(kAxis), dims.degree(kAxis))) {
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
  p.plan = PlanSearch{8, 2, 2};
  return p;
}

}  // namespace baton::tensor_parallel
