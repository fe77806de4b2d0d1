// Evaluation of an expression with its variables set: fold() applied bottom-up over a toposort.
#include <string>
#include <vector>

#include "symbolic/numeric.h"
#include "tinyhybrid/graph.h"
#include "tinyhybrid/symbolic.h"

namespace th {

namespace {

std::string var_name(const UOp* v) {
  const Arg& a = v->arg();
  if (a.kind() == Arg::Kind::Tuple && !a.as_tuple().empty() && a.as_tuple()[0].kind() == Arg::Kind::Str)
    return a.as_tuple()[0].as_str();
  throw UOpValueError("evaluate: DEFINE_VAR without a name: " + a.repr());
}

[[noreturn]] void cannot_fold(const UOp* n, const std::vector<Arg>& vals) {
  std::string args;
  for (size_t i = 0; i < vals.size(); ++i) args += (i ? ", " : "") + vals[i].repr();
  const Ops op = n->op();
  std::string why = "the result is undefined for " + n->dtype().repr();
  if ((op == Ops::CDIV || op == Ops::CMOD || op == Ops::FLOORDIV || op == Ops::FLOORMOD) && vals.size() == 2 &&
      vals[1].to_double() == 0.0)
    why = "division by zero";
  else if (op == Ops::CAST)
    why = vals[0].repr() + " is not representable in " + n->dtype().repr();
  throw UOpValueError("evaluate: cannot compute " + std::string(op_name(op)) + "(" + args + "): " + why);
}

}  // namespace

Arg evaluate(const UOpRef& u, const std::unordered_map<std::string, Arg>& vars) {
  const auto var_value = [&](const UOp* v) -> Arg {
    const std::string name = var_name(v);
    const auto it = vars.find(name);
    if (it == vars.end()) throw UOpValueError("evaluate: DEFINE_VAR '" + name + "' has no value");
    const auto c = num::cast_value(v->dtype(), it->second);
    if (!c) throw UOpValueError("evaluate: value " + it->second.repr() + " of '" + name + "' is not a " + v->dtype().repr());
    return *c;
  };
  if (u->op() == Ops::DEFINE_VAR) return var_value(u.get());
  // Variables are read where they are used, so a variable under a BIND needs no value of its own.
  const auto order = toposort(u.get(), [](const UOp* n) { return n->op() != Ops::DEFINE_VAR; });
  std::unordered_map<const UOp*, Arg> values;
  values.reserve(order.size());
  const auto value_of = [&](const UOp* s) -> Arg { return s->op() == Ops::DEFINE_VAR ? var_value(s) : values.at(s); };
  std::vector<Arg> vals;
  for (const UOp* n : order) {
    const Ops op = n->op();
    Arg v;
    if (op == Ops::CONST) {
      const auto c = num::cast_value(n->dtype(), n->arg());
      if (!c) throw UOpValueError("evaluate: CONST " + n->arg().repr() + " has no value of " + n->dtype().repr());
      v = *c;
    } else if (op == Ops::BIND) {
      const UOp* var = n->src(0).get();
      v = vars.contains(var_name(var)) ? var_value(var) : value_of(n->src(1).get());
    } else if (group::ALU.contains(op) || op == Ops::CAST || op == Ops::BITCAST) {
      vals.clear();
      for (const UOpRef& s : n->src()) vals.push_back(value_of(s.get()));
      const auto r = fold(op, n->dtype(), vals, n->nsrc() ? n->src(0)->dtype() : DType());
      if (!r) cannot_fold(n, vals);
      v = *r;
    } else {
      throw UOpValueError("evaluate: cannot evaluate " + std::string(op_name(op)) + " of " + n->dtype().repr() +
                          " (only constants, variables and ALU ops have values)");
    }
    values.emplace(n, std::move(v));
  }
  return values.at(u.get());
}

}  // namespace th
