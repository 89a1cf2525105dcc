#pragma once

// The "toy" parallelism of the toy-axis tests, registered from the tests
// alone: a mesh axis (its degree under a config section of its own,
// toy.degree) and an applier that splits the token embedding by rows over
// that axis. tests/builders/toy_axis_test.cpp trains and checkpoints it;
// tests/planner/toy_axis_dry_run_test.cpp counts it in the dry run.

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "builders/builder_registry.h"
#include "models/common/transformer.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/parallelism.h"
#include "parallel/tensor_parallel/regions.h"
#include "parallel/tensor_parallel/vocab_parallel.h"

namespace baton::testing {

namespace fs = std::filesystem;
using tensor_parallel::VocabRange;

inline constexpr const char* kToy = "toy";
inline constexpr const char* kEmbedding = "tok_embeddings.weight";

/// Splits the token embedding's rows over the toy group: each rank keeps
/// its VocabRange of the table, looks the ids up in it (zeros elsewhere),
/// and the ranks' partial embeddings are summed and gathered whole, so
/// every toy rank runs the rest of the model on the same batch. Each rank's
/// rows get their gradient on that rank alone.
class ToyApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override {
    auto* model = dynamic_cast<models::TransformerImpl*>(&part.module());
    if (model == nullptr) {
      throw std::invalid_argument("toy: not a llama3 part");
    }
    const auto& group = context.mesh.group(kToy);
    const int64_t n = group->size();
    if (n == 1 || !model->spec().embedding) {
      return;
    }
    at::Tensor w = part.module().named_parameters()[kEmbedding];
    const VocabRange range = VocabRange::of(w.size(0), group->rank(), n);
    ParamSlice slice;
    slice.global_shape = w.sizes().vec();
    slice.offsets = {range.begin, 0};
    {
      torch::NoGradGuard no_grad;
      w.set_data(w.narrow(0, range.begin, range.size()).clone());
    }
    part.set_slice(kEmbedding, std::move(slice));
    part.mark_grad_split(kEmbedding, kToy);
    auto region = std::make_shared<tensor_parallel::Region>(
        tensor_parallel::Region{group, "toy_embedding"});
    model->embedding_lookup =
        [region, range, n](const at::Tensor& ids, const at::Tensor& weight) {
          at::Tensor whole = tensor_parallel::gather_sequence(
              tensor_parallel::vocab_parallel_embedding(
                  ids, weight, range, *region),
              *region);
          // Every toy rank computes the same loss from the whole
          // embedding, so the gather's backward sums n equal gradients.
          whole.register_hook(
              [n](const at::Tensor& g) { return g / static_cast<double>(n); });
          return whole;
        };
  }
};

/// Registers the toy parallelism (and the built-ins), once.
inline void register_toy() {
  register_builtin_builders();
  static std::once_flag once;
  std::call_once(once, [] {
    Parallelism p;
    p.name = "toy";
    // Between the data axes and tp; its ranks share their batch, so it
    // joins neither the dp nor the loss group.
    p.axis = MeshAxisSpec{kToy, 500, "toy.degree", {}};
    p.section = "toy";
    p.fields = {
        {"degree",
         int64_t{1},
         FieldSpec("toy ranks (-1: the rest of the world)").mesh_degree()}};
    p.owned_appliers = {
        {"toy",
         [] { return std::make_unique<ToyApplier>(); },
         "test: the token embedding split by rows over toy"}};
    p.steps = {"toy"};
    p.appliers = [](const JobConfig&, const ParallelDims&) {
      return std::vector<std::string>{"toy"};
    };
    p.check = [](const JobConfig& config,
                 const ParallelDims& dims,
                 const ModelArgs&) -> std::optional<ConfigProblem> {
      const int64_t n = dims.degree(kToy);
      if (config.training.seq_len % n != 0) {
        return ConfigProblem{
            "toy.degree",
            "toy.degree: " + std::to_string(n) +
                " does not divide training.seq_len " +
                std::to_string(config.training.seq_len) +
                "; allowed: a divisor of the sequence length"};
      }
      return std::nullopt;
    };
    p.stored_shape = [](const JobConfig&,
                        const ModelArgs&,
                        const std::string& fqn,
                        const dist::MeshCoord& coord,
                        const ParallelDims& dims,
                        std::vector<int64_t>& shape) {
      if (fqn == kEmbedding) {
        shape[0] =
            VocabRange::of(shape[0], coord.at(kToy), dims.degree(kToy)).size();
      }
    };
    register_parallelism(std::move(p));
  });
}

/// The debug model's config in `name`.yaml: 4 steps of short sequences in
/// float32, toy.degree `toy`, checkpoints every 2 steps when `checkpoint`;
/// `extra` appended.
inline std::string write_config(
    const std::string& name, int64_t toy, const std::string& extra = "") {
  const auto dir = fs::path(::testing::TempDir());
  const auto dump = dir / (name + ".out");
  fs::remove_all(dump);
  const auto path = dir / (name + ".yaml");
  std::ofstream(path) << "job:\n  dump_folder: " << dump.string() << "\n"
                      << "model:\n  flavor: debugmodel\n"
                      << "lr_scheduler:\n  warmup_steps: 1\n"
                      << "training:\n  steps: 4\n  seq_len: 32\n"
                      << "  local_batch_size: 2\n  num_threads: 1\n"
                      << "  mixed_precision_param: float32\n"
                      << "metrics:\n  peak_tflops: 1\n  log_freq: 1\n"
                      << "toy:\n  degree: " << toy << "\n"
                      << extra;
  return path.string();
}

}  // namespace baton::testing
