#include "tinyhybrid/pattern.h"

#include <algorithm>
#include <stdexcept>

namespace th {

bool arg_matches(const Arg& pattern, const Arg& node) {
  if (pattern.is_number() && node.is_number()) {
    if (pattern.kind() == Arg::Kind::Float || node.kind() == Arg::Kind::Float) return pattern.to_double() == node.to_double();
    const auto as_int = [](const Arg& a) { return a.kind() == Arg::Kind::Bool ? i128(a.as_bool()) : a.as_int(); };
    return as_int(pattern) == as_int(node);
  }
  return pattern == node;
}

std::string Pattern::repr() const {
  if (is_any) {
    std::string s = "UPat.any(";
    for (size_t i = 0; i < src.size(); ++i) s += (i ? ", " : "") + src[i].repr();
    return s + ")";
  }
  std::string s = "UPat(";
  if (!ops.empty()) {
    std::string names;
    size_t count = 0;
    for (size_t i = 0; i < kNumOps; ++i)
      if (ops.contains(static_cast<Ops>(i))) names += (count++ ? ", Ops." : "Ops.") + std::string(op_name(static_cast<Ops>(i)));
    s += count == 1 ? names : "(" + names + ")";
  } else {
    s += "None";
  }
  if (!dtypes.empty()) {
    s += ", dtype=";
    for (size_t i = 0; i < dtypes.size(); ++i) s += (i ? "|" : "") + dtypes[i].repr();
  }
  if (arg) s += ", arg=" + arg->repr();
  if (!name.empty()) s += ", name='" + name + "'";
  if (src_mode != Src::Any) {
    const char* open = src_mode == Src::Permute ? "[" : "(";
    const char* close = src_mode == Src::Permute ? "]" : src_mode == Src::Repeat ? ",)*" : ")";
    s += ", src=" + std::string(open);
    for (size_t i = 0; i < src.size(); ++i) s += (i ? ", " : "") + src[i].repr();
    s += close;
  }
  return s + ")";
}

namespace {

void collect_names(const Pattern& p, std::vector<std::string>& out) {
  if (!p.name.empty() && std::find(out.begin(), out.end(), p.name) == out.end()) out.push_back(p.name);
  for (const Pattern& s : p.src) collect_names(s, out);
}

// Expands Permute source lists into every ordering, giving patterns whose sources are all Ordered/Repeat.
std::vector<Pattern> expand(const Pattern& p) {
  if (p.is_any) {
    std::vector<Pattern> out;
    for (const Pattern& alt : p.src)
      for (Pattern& e : expand(alt)) out.push_back(std::move(e));
    return out;
  }
  std::vector<std::vector<Pattern>> per_src;
  per_src.reserve(p.src.size());
  for (const Pattern& s : p.src) per_src.push_back(expand(s));
  // every combination of the sources' alternatives
  std::vector<std::vector<Pattern>> combos{{}};
  for (const auto& alts : per_src) {
    std::vector<std::vector<Pattern>> next;
    for (const auto& c : combos)
      for (const Pattern& a : alts) {
        next.push_back(c);
        next.back().push_back(a);
      }
    combos = std::move(next);
  }
  std::vector<Pattern> out;
  for (auto& c : combos) {
    if (p.src_mode != Pattern::Src::Permute) {
      Pattern q = p;
      q.src = std::move(c);
      out.push_back(std::move(q));
      continue;
    }
    // each distinct ordering of the source positions
    std::vector<size_t> order(c.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    do {
      Pattern q = p;
      q.src_mode = Pattern::Src::Ordered;
      q.src.clear();
      for (size_t i : order) q.src.push_back(c[i]);
      out.push_back(std::move(q));
    } while (std::next_permutation(order.begin(), order.end()));
  }
  if (out.size() > 4096) throw std::invalid_argument("pattern expands to too many orderings: " + p.repr());
  return out;
}

class Compiler {
 public:
  Compiler(MatchProgram& prog, const std::vector<std::string>& names) : prog_(prog), names_(names) {}

  void emit(const Pattern& p, uint16_t reg, std::vector<MatchProgram::Instr>& code) {
    using Instr = MatchProgram::Instr;
    const bool looks_at_src = p.src_mode == Pattern::Src::Ordered || p.src_mode == Pattern::Src::Repeat;
    if (!p.ops.empty() || !p.dtypes.empty() || p.arg || looks_at_src) {
      Instr in;
      in.kind = Instr::Kind::Check;
      in.reg = reg;
      in.check_ops = !p.ops.empty();
      in.ops = p.ops;
      if (!p.dtypes.empty()) {
        in.dtypes = static_cast<int32_t>(prog_.dtype_sets.size());
        prog_.dtype_sets.push_back(p.dtypes);
      }
      if (p.arg) {
        in.arg = static_cast<int32_t>(prog_.args.size());
        prog_.args.push_back(*p.arg);
      }
      if (p.src_mode == Pattern::Src::Ordered) {
        in.exact_len = !p.allow_any_len;
        in.nsrc = static_cast<uint16_t>(p.src.size());
        in.nload = in.nsrc;
        in.first_out = alloc(in.nload);
      }
      code.push_back(in);
      if (p.src_mode == Pattern::Src::Ordered)
        for (size_t i = 0; i < p.src.size(); ++i) emit(p.src[i], static_cast<uint16_t>(in.first_out + i), code);
    }
    if (!p.name.empty()) {
      Instr cap;
      cap.kind = Instr::Kind::Capture;
      cap.reg = reg;
      cap.slot = static_cast<uint16_t>(std::find(names_.begin(), names_.end(), p.name) - names_.begin());
      code.push_back(cap);
    }
    if (p.src_mode == Pattern::Src::Repeat && !p.src.empty()) {
      MatchProgram::Sub sub{alloc(1), {}};
      emit(p.src[0], sub.root_reg, sub.code);
      Instr each;
      each.kind = Instr::Kind::ForEach;
      each.reg = reg;
      each.sub = static_cast<int32_t>(prog_.subs.size());
      prog_.subs.push_back(std::move(sub));
      code.push_back(each);
    }
  }

 private:
  uint16_t alloc(size_t n) {
    const size_t first = prog_.nregs;
    if (first + n > 0xffff) throw std::invalid_argument("pattern too large");
    prog_.nregs = static_cast<uint16_t>(first + n);
    return static_cast<uint16_t>(first);
  }
  MatchProgram& prog_;
  const std::vector<std::string>& names_;
};

bool dtype_in(DType d, const std::vector<DType>& set) {
  for (DType x : set)
    if (x == d) return true;
  return false;
}

constexpr size_t kInlineRegs = 32;

bool run_code(const MatchProgram& prog, const std::vector<MatchProgram::Instr>& code, const UOp** regs,
              const UOp** slots) {
  using Kind = MatchProgram::Instr::Kind;
  for (const auto& in : code) {
    const UOp* n = regs[in.reg];
    switch (in.kind) {
      case Kind::Check: {
        if (in.check_ops && !in.ops.contains(n->op())) return false;
        if (in.dtypes >= 0 && !dtype_in(n->dtype(), prog.dtype_sets[static_cast<size_t>(in.dtypes)])) return false;
        if (in.arg >= 0 && !arg_matches(prog.args[static_cast<size_t>(in.arg)], n->arg())) return false;
        if (in.exact_len ? n->nsrc() != in.nsrc : n->nsrc() < in.nsrc) return false;
        for (uint16_t i = 0; i < in.nload; ++i) regs[in.first_out + i] = n->src(i).get();
        break;
      }
      case Kind::Capture: {
        const UOp*& slot = slots[in.slot];
        if (slot && slot != n) return false;  // a repeated name must be the same node
        slot = n;
        break;
      }
      case Kind::ForEach: {
        const auto& sub = prog.subs[static_cast<size_t>(in.sub)];
        for (const UOpRef& s : n->src()) {
          regs[sub.root_reg] = s.get();
          if (!run_code(prog, sub.code, regs, slots)) return false;
        }
        break;
      }
    }
  }
  return true;
}

// The guard repeats checks the program makes anyway, so it never rejects a node the program would match.
MatchProgram::Guard guard_of(const MatchProgram& prog) {
  MatchProgram::Guard g;
  if (prog.code.empty()) return g;
  const MatchProgram::Instr& root = prog.code.front();
  if (root.kind != MatchProgram::Instr::Kind::Check || root.reg != 0) return g;
  g.nsrc = root.nsrc;
  g.exact_len = root.exact_len;
  for (const MatchProgram::Instr& in : prog.code) {
    if (in.kind != MatchProgram::Instr::Kind::Check || !in.check_ops || in.reg < root.first_out) continue;
    const size_t k = in.reg - root.first_out;
    if (k < std::min<size_t>(root.nload, 2) && !g.has_src_ops[k]) {
      g.has_src_ops[k] = true;
      g.src_ops[k] = in.ops;
    }
  }
  return g;
}

}  // namespace

std::vector<std::string> capture_names(const Pattern& p) {
  std::vector<std::string> names;
  collect_names(p, names);
  return names;
}

std::vector<MatchProgram> compile_pattern(const Pattern& p, const std::vector<std::string>& names) {
  std::vector<MatchProgram> out;
  for (const Pattern& alt : expand(p)) {
    MatchProgram prog;
    Compiler(prog, names).emit(alt, 0, prog.code);
    prog.guard = guard_of(prog);
    out.push_back(std::move(prog));
  }
  return out;
}

bool run_program(const MatchProgram& prog, const UOp* node, const UOp** slots) {
  const UOp* inline_regs[kInlineRegs];
  std::vector<const UOp*> big;
  const UOp** regs = inline_regs;
  if (prog.nregs > kInlineRegs) {
    big.resize(prog.nregs);
    regs = big.data();
  }
  regs[0] = node;
  return run_code(prog, prog.code, regs, slots);
}

namespace pat {
Pattern any(std::string name) {
  Pattern p;
  p.name = std::move(name);
  return p;
}
Pattern var(std::string name, std::vector<DType> dtypes) {
  Pattern p = any(std::move(name));
  p.dtypes = std::move(dtypes);
  return p;
}
Pattern cvar(std::string name, std::vector<DType> dtypes) {
  Pattern p = var(std::move(name), std::move(dtypes));
  p.ops = OpSet{Ops::CONST};
  return p;
}
Pattern cnst(Arg value, std::vector<DType> dtypes) {
  Pattern p = cvar({}, std::move(dtypes));
  p.arg = std::move(value);
  return p;
}
Pattern op(OpSet ops, std::vector<Pattern> src, std::string name, Pattern::Src mode) {
  Pattern p;
  p.ops = ops;
  p.src = std::move(src);
  p.src_mode = mode;
  p.name = std::move(name);
  return p;
}
Pattern alu(Ops o, std::vector<Pattern> src, std::string name) {
  return op(OpSet{o}, std::move(src), std::move(name),
            group::Commutative.contains(o) ? Pattern::Src::Permute : Pattern::Src::Ordered);
}
Pattern named(Pattern p, std::string name) {
  p.name = std::move(name);
  return p;
}
Pattern with_dtypes(Pattern p, std::vector<DType> dtypes) {
  p.dtypes = std::move(dtypes);
  return p;
}
Pattern one_of(std::vector<Pattern> alternatives) {
  Pattern p;
  p.is_any = true;
  p.src = std::move(alternatives);
  return p;
}
Pattern operator+(Pattern a, Pattern b) { return alu(Ops::ADD, {std::move(a), std::move(b)}); }
Pattern operator*(Pattern a, Pattern b) { return alu(Ops::MUL, {std::move(a), std::move(b)}); }
}  // namespace pat

}  // namespace th
