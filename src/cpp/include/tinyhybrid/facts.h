// Facts about a node that are derived from it and its sources, computed once and kept on the node.
// They are filled in by th::facts_of (tinyhybrid/symbolic.h); read them through it, not through UOp::facts().
#pragma once
#include "tinyhybrid/arg.h"

namespace th {

struct NodeFacts {
  // The smallest and largest value the node can take (numbers of the node's scalar kind; None for void nodes).
  // For floats: bounds of the non-NaN values, and the full range [-inf, inf] whenever the node may be NaN.
  Arg vmin;
  Arg vmax;
};

}  // namespace th
