#pragma once

namespace baton {

class ModelParts;
namespace dist {
class ParallelMesh;
}

/// The L2 norm of the whole model's gradient, over every rank's slice of
/// it: each pipeline rank holds other parameters, and a parameter marked
/// split along a dimension (ModelPart::mark_grad_split: dp_shard, tp) has
/// its squares summed over that group too; replicated gradients count
/// once. Every rank gets the same value. Collective over the groups it
/// sums over, so every rank calls it (with parts parallelized alike within
/// each pipeline stage).
double grad_norm(const ModelParts& parts, const dist::ParallelMesh& mesh);

/// Scales every gradient so that grad_norm is at most `max_norm` (0: no
/// clipping; nor when the norm is not finite) and returns the norm before.
double clip_grad_norm(
    const ModelParts& parts, const dist::ParallelMesh& mesh, double max_norm);

}  // namespace baton
