#include "parallel/parallelism.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "common/text.h"
#include "parallel/applier.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/data_parallel/replicate.h"
#include "parallel/dist/mesh.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/pipeline/split.h"
#include "parallel/tensor_parallel/tensor_parallel.h"

namespace baton {

namespace {

std::vector<Parallelism>& parallelisms() {
  static std::vector<Parallelism> registered;
  return registered;
}

bool is_enabled(
    const Parallelism& p, const JobConfig& config, const ParallelDims& dims) {
  if (p.enabled) {
    return p.enabled(config, dims);
  }
  return (p.axis && dims.degree(p.axis->name) > 1) ||
         (p.derived_axis && dims.degree(p.derived_axis->name) > 1);
}

}  // namespace

void register_parallelism(Parallelism parallelism) {
  auto& registered = parallelisms();
  for (const auto& p : registered) {
    if (to_lower(p.name) == to_lower(parallelism.name)) {
      throw std::logic_error(
          "[parallelism] '" + parallelism.name + "' is registered already");
    }
  }
  if (!parallelism.section.empty()) {
    register_config_section(parallelism.section, parallelism.fields);
  } else if (!parallelism.fields.empty()) {
    throw std::logic_error(
        "[parallelism] '" + parallelism.name +
        "': config keys without a section name");
  }
  if (parallelism.axis) {
    declare_mesh_axis(*parallelism.axis);
  }
  if (parallelism.derived_axis) {
    declare_derived_axis(*parallelism.derived_axis);
  }
  for (const auto& applier : parallelism.owned_appliers) {
    applier_registry().add(applier.name, applier.create, applier.help);
  }
  registered.push_back(std::move(parallelism));
}

const std::vector<Parallelism>& registered_parallelisms() {
  return parallelisms();
}

void register_builtin_parallelisms() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_parallelism(pipeline::pipeline_parallelism());
    register_parallelism(replicate_parallelism());
    register_parallelism(fsdp::fully_shard_parallelism());
    register_parallelism(tensor_parallel::tensor_parallel_parallelism());
    register_parallelism(context_parallel::context_parallel_parallelism());
    register_parallelism(expert_parallel::expert_parallel_parallelism());
  });
}

std::vector<const Parallelism*> enabled_parallelisms(
    const JobConfig& config, const ParallelDims& dims) {
  std::vector<const Parallelism*> out;
  for (const auto& p : parallelisms()) {
    if (is_enabled(p, config, dims)) {
      out.push_back(&p);
    }
  }
  return out;
}

std::optional<ConfigProblem> parallelism_problem(
    const JobConfig& config, const ParallelDims& dims, const ModelArgs& args) {
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (p->check) {
      if (auto problem = p->check(config, dims, args)) {
        return problem;
      }
    }
  }
  return std::nullopt;
}

LossFn parallel_loss(
    const JobConfig& config,
    const dist::ParallelMesh& mesh,
    const ModelArgs& args) {
  const Parallelism* owner = nullptr;
  for (const Parallelism* p : enabled_parallelisms(config, mesh.dims())) {
    if (!p->loss) {
      continue;
    }
    if (owner != nullptr) {
      throw std::logic_error(
          "[parallelism] both '" + owner->name + "' and '" + p->name +
          "' change the loss; at most one enabled parallelism may");
    }
    owner = p;
  }
  return owner ? owner->loss(mesh, args) : LossFn(cross_entropy_sum);
}

StepShape parallel_step_shape(
    const JobConfig& config, const ParallelDims& dims, StepShape shape) {
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (p->step_shape) {
      p->step_shape(config, dims, shape);
    }
  }
  return shape;
}

ParallelShapes parallel_stored_shapes(
    const std::vector<const Parallelism*>& enabled,
    const JobConfig& config,
    const ParallelDims& dims,
    const ModelArgs& args,
    const std::string& fqn,
    std::vector<int64_t> shape,
    const dist::MeshCoord& coord) {
  ParallelShapes shapes;
  for (const ChainPlace place : {ChainPlace::kModel, ChainPlace::kData}) {
    for (const Parallelism* p : enabled) {
      if (p->place == place && p->stored_shape) {
        p->stored_shape(config, args, fqn, coord, dims, shape);
      }
    }
    (place == ChainPlace::kModel ? shapes.model : shapes.stored) = shape;
  }
  return shapes;
}

int64_t parallel_sequence_shards(
    const JobConfig& config, const ParallelDims& dims) {
  int64_t shards = 1;
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (p->sequence_shards) {
      shards *= p->sequence_shards(dims);
    }
  }
  return shards;
}

SequenceSplit parallel_sequence_split(
    const JobConfig& config, const dist::ParallelMesh& mesh) {
  return parallel_sequence_split(config, mesh.dims(), mesh.coord());
}

SequenceSplit parallel_sequence_split(
    const JobConfig& config,
    const ParallelDims& dims,
    const dist::MeshCoord& coord) {
  const Parallelism* owner = nullptr;
  SequenceSplit split;
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (!p->sequence_split) {
      continue;
    }
    if (owner != nullptr) {
      throw std::logic_error(
          "[parallelism] both '" + owner->name + "' and '" + p->name +
          "' split the sequence; at most one enabled parallelism may");
    }
    owner = p;
    split = p->sequence_split(dims, coord);
  }
  return split;
}

int64_t parallel_hidden_shards(
    const JobConfig& config, const ParallelDims& dims) {
  int64_t shards = 1;
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (p->hidden_shards) {
      shards *= p->hidden_shards(dims);
    }
  }
  return shards;
}

std::vector<const Parallelism*> searched_parallelisms() {
  std::vector<const Parallelism*> out;
  for (const auto& p : parallelisms()) {
    if (p.plan && p.axis) {
      out.push_back(&p);
    }
  }
  std::stable_sort(
      out.begin(), out.end(), [](const Parallelism* a, const Parallelism* b) {
        return a->axis->order < b->axis->order;
      });
  return out;
}

std::vector<const Parallelism*> borrowing_parallelisms() {
  std::vector<const Parallelism*> out;
  for (const auto& p : parallelisms()) {
    if (p.borrow_plan && p.derived_axis) {
      out.push_back(&p);
    }
  }
  std::stable_sort(
      out.begin(), out.end(), [](const Parallelism* a, const Parallelism* b) {
        return a->name < b->name;
      });
  return out;
}

}  // namespace baton
