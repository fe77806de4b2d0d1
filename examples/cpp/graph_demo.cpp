// Builds a small UOp graph with the C++ API alone (no Python), walks it, rewrites a variable away and prints it.
//   g++ -std=c++20 -I src/cpp/include examples/cpp/graph_demo.cpp build/<dir>/libtinyhybrid_core.a -lpthread
// or, against an installed package, with examples/cpp/CMakeLists.txt (find_package(tinyhybrid)).
#include <iostream>
#include <vector>

#include <tinyhybrid/core.h>

int main() {
  const size_t before = th::live_uop_count();
  {
    // idx = a*4 + b, with a in [0, 10] and b in [0, 3]
    th::UOpRef a = th::UOp::variable("a", 0, 10);
    th::UOpRef b = th::UOp::variable("b", 0, 3, th::DType::int32());
    th::UOpRef four = th::UOp::const_int(th::DType::int32(), 4);
    th::UOpRef idx = th::alu(th::Ops::ADD, {th::alu(th::Ops::MUL, {a, four}), b});
    std::cout << "idx          = " << th::render(idx) << "\n";

    // Interning: building the same expression again gives the same node.
    th::UOpRef again = th::alu(th::Ops::ADD, {th::alu(th::Ops::MUL, {a, four}), b});
    if (again != idx) {
      std::cerr << "interning failed\n";
      return 1;
    }
    std::cout << "interned     : rebuilding idx gives the same node\n";

    // Sources come before their users, in order of first visit; the root is last.
    std::vector<const th::UOp*> order = th::toposort(idx.get());
    std::cout << "toposort     :";
    for (const th::UOp* u : order) std::cout << " " << th::op_name(u->op());
    std::cout << "\n";
    if (order.empty() || order.back() != idx.get()) return 1;

    // Replace b by the constant 2: every user of b is rebuilt, the rest is shared.
    th::UOpRef fixed = th::substitute(idx, {{b.get(), th::UOp::const_int(th::DType::int32(), 2)}});
    std::cout << "b := 2       = " << th::render(fixed) << "\n";
    std::cout << "dtype        = " << idx->dtype().repr() << " (" << idx->dtype().itemsize() << " bytes)\n";
    std::cout << "live nodes   = " << th::live_uop_count() - before << "\n";
  }
  // Every node is freed once nothing refers to it.
  std::cout << "after scope  = " << th::live_uop_count() - before << "\n";
  return th::live_uop_count() == before ? 0 : 1;
}
