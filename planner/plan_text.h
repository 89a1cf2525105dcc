#pragma once

// What the search's logs and the report share (planner/ only): a
// candidate, a split and a size as text, and whether costs are a GPU's.

#include <cstdint>
#include <string>
#include <vector>

#include "planner/plan.h"

namespace baton::plan_detail {

/// "none", "full", or "full 0-2" when only the first stages checkpoint.
std::string describe_ac(const PlanCandidate& c);
/// The schedule's name; a synthesised one with its placement ("Synthesized
/// V", "Synthesized loop"), which tells apart two made for one layout.
std::string schedule_label(const PlanCandidate& c);
/// "pp 2 x dp_replicate 1 x dp_shard 2 x tp 1, 1F1B v 1, m 4 of 2, ac none".
std::string describe_layout(const PlanCandidate& c);
/// "2*2,1*2": each run of equal layer counts as count*stages.
std::string describe_split(const std::vector<int64_t>& layers);
/// Bytes as GiB with two decimals.
std::string gib(int64_t bytes);
/// Whether the costs are for CUDA (NCCL's P2P) rather than CPU (Gloo's): a
/// cost file's `device`, else this machine's.
bool on_cuda(const PlanCosts& costs);

}  // namespace baton::plan_detail
