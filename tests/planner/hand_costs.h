#pragma once

// The cost file the planner's tests work figures out from by hand.

#include "planner/plan.h"

namespace baton::testing {

/// Per block and sequence F = I = W = 1 s and B = 2 s, the embedding and
/// output free, P2P free, every collective on `collectives` (by default
/// 1000 s a call: only pipelining pays).
inline PlanCosts hand_costs(LinkCosts collectives = LinkCosts{1000.0, 1e9}) {
  PlanCosts costs;
  costs.path = "hand";
  costs.description = "hand";
  MicrobatchCosts m;
  m.rows = 1;
  m.block = PassCosts{1.0, 2.0, 1.0, 1.0};
  costs.microbatches = {m};
  costs.p2p.inter_node = LinkCosts{0.0, 1e18};
  costs.all_reduce.inter_node = collectives;
  costs.all_gather.inter_node = collectives;
  costs.reduce_scatter.inter_node = collectives;
  return costs;
}

}  // namespace baton::testing
