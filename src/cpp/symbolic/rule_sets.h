// The groups of native symbolic rules (assembled in order by symbolic_matcher()).
#pragma once
#include <vector>

#include "tinyhybrid/rewrite.h"

namespace th::sym {
UOpRef same_as(const UOp* n);
std::vector<Rule> folding_rules();
std::vector<Rule> identity_rules();
std::vector<Rule> where_rules();
std::vector<Rule> ordering_rules();
std::vector<Rule> sum_rules();
std::vector<Rule> range_rules();    // divmod.cpp: facts decided by value ranges
std::vector<Rule> compare_rules();  // divmod.cpp: comparisons in canonical form
std::vector<Rule> divmod_rules();   // divmod.cpp: floor division and modulo
}  // namespace th::sym
