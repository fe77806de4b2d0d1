// Facts about a node that are derived from it and its sources, computed once and kept on the node.
// They are filled in by th::facts_of (tinyhybrid/symbolic.h); read them through it, not through UOp::facts().
#pragma once
#include <atomic>

#include "tinyhybrid/arg.h"

namespace th {

class UOp;

struct NodeFacts {
  NodeFacts() = default;
  NodeFacts(Arg lo, Arg hi) : vmin(std::move(lo)), vmax(std::move(hi)) {}
  // A copy is of the range only: the simplified result belongs to the node whose facts these are.
  NodeFacts(const NodeFacts& o) : vmin(o.vmin), vmax(o.vmax) {}
  NodeFacts& operator=(const NodeFacts& o) {
    vmin = o.vmin, vmax = o.vmax;
    return *this;
  }
  ~NodeFacts();

  // The smallest and largest value the node can take (numbers of the node's scalar kind; None for void nodes).
  // For floats: bounds of the non-NaN values, and the full range [-inf, inf] whenever the node may be NaN.
  Arg vmin;
  Arg vmax;
  // What simplify() made of the node, when that is another node: the native rules read only the node, so the answer
  // never changes, and an expression held and simplified again costs a load. That result is a fixed point of the
  // rules and never holds the node, so the reference (owned, set once by th::simplify) makes no cycle.
  mutable std::atomic<const UOp*> simplified{nullptr};
};

}  // namespace th
