#pragma once

// What `baton train` refuses before it builds anything, as one function
// that --print-config, --dry-run and train all run: a config the first two
// accept, train accepts on the same world.

#include <cstdint>
#include <string>
#include <utility>

#include "config/job_config.h"
#include "config/parallel_dims.h"
#include "models/model_args.h"
#include "models/model_spec.h"

namespace baton {

/// What check_job found: the model's shape (its vocabulary as vocab_source
/// says) and, for a known world, the layout.
struct CheckedJob {
  ModelArgs args;
  std::string vocab_source;
  /// world_size 0 (unknown): the degrees alone were checked.
  ParallelDims dims;
};

/// Checks `config` for a run on `world_size` ranks (0: not known, as for
/// --print-config with a degree of -1 and no --nproc): the builder is
/// registered; the model and its flavor are; the degrees fit the world
/// (ParallelDims::from_config, `world_source` naming where the world came
/// from); every enabled parallelism accepts the model; and
/// parallelism.appliers names only registered appliers the builder does not
/// place itself. Throws ConfigError (exit 2) naming the key. Registers the
/// built-ins first.
CheckedJob check_job(
    const JobConfig& config,
    int64_t world_size,
    const std::string& world_source = "");

/// The vocabulary a run of `config` trains with: its tokenizer's, or the
/// flavor's where the tokenizer file is not on this machine (a dry run
/// plans clusters from anywhere), with where it came from.
std::pair<int64_t, std::string> job_vocabulary(
    const JobConfig& config, const ModelArgs& flavor);

/// The check of the checkpoint's Hugging Face keys against the family
/// (check_job and the builders): an hf export or an initial_load_hf of a
/// family that registers no Hugging Face layout is a ConfigError naming
/// the key.
void check_hf_layout(const JobConfig& config, const ModelSpec& spec);

/// The check of parallelism.appliers (check_job and build_appliers): each
/// name registered and none a step the builder places itself.
void check_listed_appliers(const JobConfig& config);

}  // namespace baton
