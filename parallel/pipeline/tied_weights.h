#pragma once

// A weight two pipeline stages hold. A model that ties its output
// projection to its token embedding (ModelArgs::tie_embeddings) needs that
// one weight on the first stage, which looks tokens up in it, and on the
// last, which multiplies by it: the last stage holds a copy, named
// `tok_embeddings.weight` too and initialised alike. Megatron's embedding
// group: after every stage's gradients are synchronised, the two copies'
// gradients are summed, so both take the same optimizer step and stay
// equal; the grad norm and the checkpoint count the first stage's only.

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/model_parts.h"

namespace baton::dist {
class ParallelMesh;
class Runtime;
}  // namespace baton::dist

namespace baton::pipeline {

/// The tied weight's name on both stages.
inline constexpr const char* kTiedWeight = "tok_embeddings.weight";

/// Ties the token embedding of a model whose output uses it (`tied`) over a
/// pipeline whose stages live on the pp ranks `stage_to_rank`: marks the
/// last stage's copy (ModelPart::mark_tied_copy) and adds to `parts` the
/// gradient hook that sums the two gradients, in place where this rank
/// holds both stages (a V schedule), else over a group of the two ranks
/// (with this rank's coordinates off pp), which this creates: every rank
/// calls it, in the same order relative to its other groups. Does nothing
/// for an untied model or one stage.
void tie_embeddings(
    ModelParts& parts,
    bool tied,
    const std::vector<int64_t>& stage_to_rank,
    const dist::ParallelMesh& mesh,
    const std::shared_ptr<dist::Runtime>& runtime);

}  // namespace baton::pipeline
