// Facts about a node that are derived from it and its sources, computed once and kept on the node.
#pragma once
#include "tinyhybrid/arg.h"

namespace th {

struct NodeFacts {
  // The smallest and largest value the node can take (numbers of the node's scalar kind).
  Arg vmin;
  Arg vmax;
};

}  // namespace th
