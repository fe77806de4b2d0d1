// Builds a small UOp graph with the C++ API alone (no Python), walks it and prints it.
#include <iostream>
#include <vector>

#include <tinyhybrid/core.h>

int main() {
  th::UOpRef a = th::UOp::variable("a", 0, 10, th::DType::int32());
  th::UOpRef c = th::UOp::const_int(th::DType::int32(), 3);
  th::UOpRef s = th::alu(th::Ops::ADD, {a, c});

  // Interning: building the same node again gives the same node.
  if (th::alu(th::Ops::ADD, {a, c}) != s) {
    std::cerr << "interning failed\n";
    return 1;
  }

  std::vector<const th::UOp*> order = th::toposort(s.get());
  std::cout << th::render(s) << "\n";
  for (const th::UOp* u : order) std::cout << "  " << th::op_name(u->op()) << " " << u->dtype().name() << "\n";
  // Sources come before their users, so the root is last.
  return !order.empty() && order.back() == s.get() ? 0 : 1;
}
