#include "parallel/pipeline/split.h"

#include <regex>

#include "common/error.h"
#include "common/text.h"
#include "parallel/axes.h"
#include "parallel/parallelism.h"

namespace baton::pipeline {

Parallelism pipeline_parallelism() {
  Parallelism p;
  p.name = "pipeline";
  p.axis = MeshAxisSpec{
      kPipelineAxis,
      0,
      "parallelism.pipeline_parallel_degree",
      {},
      /*splits_model=*/true};
  p.step_shape =
      [](const JobConfig& config, const ParallelDims&, StepShape& shape) {
        shape.tokens = config.parallelism.pipeline_parallel_microbatch_size *
                       config.training.seq_len;
      };
  return p;
}

namespace {

std::string key() {
  return "parallelism.pipeline_parallel_";
}

}  // namespace

std::vector<ChunkSpec> split_model(
    int64_t n_layers, int64_t num_stages, int64_t layers_per_stage) {
  if (num_stages < 1) {
    throw ConfigError(
        "[pipeline] stages: " + std::to_string(num_stages) +
        "; allowed: at least one stage");
  }
  if (num_stages > n_layers) {
    throw ConfigError(
        "[pipeline] stages: " + std::to_string(num_stages) +
        ", but the model has " + std::to_string(n_layers) +
        " layers; allowed: at most one stage per layer (lower "
        "pipeline_parallel_degree or pipeline_parallel_stages_per_rank)");
  }
  if (layers_per_stage > 0 && layers_per_stage * num_stages != n_layers) {
    throw ConfigError(
        key() + "layers_per_stage: " + std::to_string(layers_per_stage) +
        " x " + std::to_string(num_stages) + " stages is not the model's " +
        std::to_string(n_layers) +
        " layers; allowed: 0 (even split) or a "
        "value whose product with the stages is the layer count");
  }
  std::vector<ChunkSpec> chunks(num_stages);
  int64_t next = 0;
  for (int64_t s = 0; s < num_stages; ++s) {
    const int64_t count =
        layers_per_stage > 0
            ? layers_per_stage
            : n_layers / num_stages + (s < n_layers % num_stages ? 1 : 0);
    chunks[s].first_layer = next;
    chunks[s].end_layer = next + count;
    chunks[s].embedding = s == 0;
    chunks[s].output = s == num_stages - 1;
    next += count;
  }
  return chunks;
}

std::vector<ChunkSpec> split_model_by_fqns(
    int64_t n_layers, const std::vector<std::vector<std::string>>& fqns) {
  const std::string k = key() + "module_fqns_per_stage";
  if (fqns.empty()) {
    throw ConfigError(
        k + ": empty; allowed: one list of module names per stage");
  }
  static const std::regex layer(R"(layers\.(\d+))");
  std::vector<ChunkSpec> chunks(fqns.size());
  int64_t next = 0;
  for (size_t s = 0; s < fqns.size(); ++s) {
    auto& c = chunks[s];
    c.embedding = false;
    c.output = false;
    c.first_layer = next;
    bool norm = false;
    for (const auto& name : fqns[s]) {
      std::smatch m;
      auto fail = [&](const std::string& why) {
        throw ConfigError(
            k + "[" + std::to_string(s) + "]: '" + name + "' " + why +
            "; allowed: tok_embeddings, layers.<i> (contiguous, in order, "
            "each once), norm, output");
      };
      if (name == "tok_embeddings") {
        if (s != 0) {
          fail("must be on the first stage");
        }
        c.embedding = true;
      } else if (name == "norm" || name == "output") {
        if (s + 1 != fqns.size()) {
          fail("must be on the last stage");
        }
        (name == "norm" ? norm : c.output) = true;
      } else if (std::regex_match(name, m, layer)) {
        const int64_t i = std::stoll(m[1]);
        if (i != next) {
          fail(
              i >= n_layers ? "is past the model's " +
                                  std::to_string(n_layers) + " layers"
                            : "is out of order (expected layers." +
                                  std::to_string(next) + ")");
        }
        ++next;
      } else {
        fail("is not a module of the model");
      }
    }
    c.end_layer = next;
    if (c.end_layer == c.first_layer && !c.embedding && !c.output) {
      throw ConfigError(k + "[" + std::to_string(s) + "]: the stage is empty");
    }
    if (s + 1 == fqns.size() && norm != c.output) {
      throw ConfigError(
          k + ": norm and output must be on the last stage together");
    }
  }
  if (!chunks.front().embedding || !chunks.back().output || next != n_layers) {
    throw ConfigError(
        k + ": must name tok_embeddings, layers.0 to layers." +
        std::to_string(n_layers - 1) + ", norm and output once each");
  }
  return chunks;
}

std::string describe_chunk(const ChunkSpec& chunk) {
  std::vector<std::string> parts;
  if (chunk.embedding) {
    parts.push_back("tok_embeddings");
  }
  if (chunk.end_layer > chunk.first_layer) {
    parts.push_back(
        chunk.end_layer - chunk.first_layer == 1
            ? "layers." + std::to_string(chunk.first_layer)
            : "layers." + std::to_string(chunk.first_layer) + "-" +
                  std::to_string(chunk.end_layer - 1));
  }
  if (chunk.output) {
    parts.push_back("norm, output");
  }
  return join(parts, ", ");
}

}  // namespace baton::pipeline
