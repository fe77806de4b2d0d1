// The native symbolic rule set and simplify(): index arithmetic simplified without entering Python.
#pragma once
#include "tinyhybrid/rewrite.h"

namespace th {

// The rules, in order: constant folding, identities, sums in canonical linear form, range-decided comparisons and
// div/mod folding. Built once; combine with other matchers through operator+.
const PatternMatcher& symbolic_matcher();
// graph_rewrite with symbolic_matcher().
UOpRef simplify(const UOpRef& u);

}  // namespace th
