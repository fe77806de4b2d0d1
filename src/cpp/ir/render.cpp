// Text forms of a graph: the nested repr Python prints, and the infix expression of index arithmetic.
#include <string>
#include <unordered_map>

#include "tinyhybrid/graph.h"
#include "tinyhybrid/uop.h"

namespace th {

namespace {

constexpr size_t kMaxReprDepth = 256;

class ReprWriter {
 public:
  explicit ReprWriter(const UOp* root) {
    // Nodes reached along more than one path are printed once, named, and referenced after.
    std::unordered_map<const UOp*, int> uses;
    for (const UOp* n : toposort(root))
      for (const UOpRef& s : n->src()) ++uses[s.get()];
    int next = 0;
    for (const UOp* n : toposort(root))
      if (uses[n] > 1) names_[n] = next++;
  }

  void write(const UOp* n, size_t depth) {
    const std::string pad(depth * 2, ' ');
    auto named = names_.find(n);
    if (named != names_.end() && printed_.count(n)) {
      out_ += pad + "x" + std::to_string(named->second);
      return;
    }
    out_ += pad;
    if (named != names_.end()) {
      out_ += "x" + std::to_string(named->second) + ":=";
      printed_[n] = true;
    }
    out_ += "UOp(Ops." + std::string(op_name(n->op())) + ", " + n->dtype().repr() + ", arg=" + n->arg().repr();
    if (!n->tag().is_none()) out_ += ", tag=" + n->tag().repr();
    out_ += ", src=(";
    if (n->nsrc() == 0) {
      out_ += "))";
      return;
    }
    if (depth >= kMaxReprDepth) {
      out_ += "...))";
      return;
    }
    out_ += "\n";
    for (const UOpRef& s : n->src()) {
      write(s.get(), depth + 1);
      out_ += ",\n";
    }
    out_.pop_back();
    out_ += "))";
  }

  std::string take() { return std::move(out_); }

 private:
  std::unordered_map<const UOp*, int> names_;
  std::unordered_map<const UOp*, bool> printed_;
  std::string out_;
};

const char* infix(Ops op) {
  switch (op) {
    case Ops::ADD: return "+";
    case Ops::SUB: return "-";
    case Ops::MUL: return "*";
    case Ops::FDIV: return "/";
    case Ops::FLOORDIV: return "//";
    case Ops::FLOORMOD: return "%";
    case Ops::CMPLT: return "<";
    case Ops::CMPNE: return "!=";
    case Ops::CMPEQ: return "==";
    case Ops::AND: return "&";
    case Ops::OR: return "|";
    case Ops::XOR: return "^";
    case Ops::SHL: return "<<";
    case Ops::SHR: return ">>";
    default: return nullptr;
  }
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

std::string repr(const UOpRef& u) {
  if (!u) return "None";
  ReprWriter w(u.get());
  w.write(u.get(), 0);
  return w.take();
}

std::string render(const UOpRef& root) {
  if (!root) return "None";
  // Bottom-up over the toposort, so deep expressions do not recurse. A node's text is dropped once its last user has
  // read it: keeping every level's text of a deep chain would take memory quadratic in its depth.
  const auto order = toposort(root.get());
  std::unordered_map<const UOp*, size_t> readers;
  for (const UOp* n : order)
    for (const UOpRef& s : n->src()) ++readers[s.get()];
  std::unordered_map<const UOp*, std::string> text;
  for (const UOp* n : order) {
    auto s = [&](size_t i) -> const std::string& { return text[n->src(i).get()]; };
    std::string r;
    const Ops op = n->op();
    if (op == Ops::CONST) {
      r = n->arg().repr();
    } else if (op == Ops::DEFINE_VAR) {
      r = n->arg().as_tuple()[0].as_str();
    } else if (op == Ops::BIND) {
      r = s(0);
    } else if (const char* sym = infix(op); sym && n->nsrc() == 2) {
      r = "(" + s(0) + sym + s(1) + ")";
    } else if (op == Ops::CDIV || op == Ops::CMOD) {
      r = std::string(op == Ops::CDIV ? "cdiv(" : "cmod(") + s(0) + ", " + s(1) + ")";
    } else if (op == Ops::MAX && n->nsrc() == 2) {
      r = "max(" + s(0) + ", " + s(1) + ")";
    } else if (op == Ops::NEG && n->nsrc() == 1) {
      r = "(-" + s(0) + ")";
    } else if (op == Ops::WHERE && n->nsrc() == 3) {
      r = "(" + s(1) + " if " + s(0) + " else " + s(2) + ")";
    } else if (op == Ops::CAST && n->nsrc() == 1) {
      r = "(" + n->dtype().name() + ")(" + s(0) + ")";
    } else if (op == Ops::RANGE) {
      r = "r" + (n->arg().kind() == Arg::Kind::Tuple && !n->arg().as_tuple().empty() ? n->arg().as_tuple()[0].repr()
                                                                                     : n->arg().repr());
    } else {
      r = lower(op_name(op)) + "(";
      for (size_t i = 0; i < n->nsrc(); ++i) r += (i ? ", " : "") + s(i);
      r += ")";
    }
    text[n] = std::move(r);
    for (const UOpRef& src : n->src())
      if (--readers[src.get()] == 0) text.erase(src.get());
  }
  return std::move(text[root.get()]);
}

}  // namespace th
