// Graph algorithms over UOps. All iterative: a 10^6-node chain is fine.
#pragma once
#include <functional>
#include <unordered_map>
#include <vector>

#include "tinyhybrid/uop.h"

namespace th {

// A set of node pointers tuned for graph walks (open addressing, pointer keys).
class NodeSet {
 public:
  explicit NodeSet(size_t expected = 16);
  // Returns true when p was not yet in the set.
  bool insert(const UOp* p);
  bool contains(const UOp* p) const;
  size_t size() const { return size_; }

 private:
  void grow();
  std::vector<const UOp*> slots_;
  size_t size_ = 0;
  size_t mask_;
};

// Returns true to visit a node; a node it rejects is neither listed nor descended into (as in tinygrad).
using Gate = std::function<bool(const UOp*)>;

// Sources before users, in order of first visit (depth-first, sources left to right).
std::vector<const UOp*> toposort(const UOp* root, const Gate& gate = nullptr);
// Toposort over several roots (the union, each node once).
std::vector<const UOp*> toposort(std::span<const UOpRef> roots, const Gate& gate = nullptr);
// The toposort without the root itself.
std::vector<const UOp*> backward_slice(const UOp* root);

// Replace nodes by the map, rebuilding every user of a replaced node. Nodes not reached are untouched.
using SubstituteMap = std::unordered_map<const UOp*, UOpRef>;
UOpRef substitute(const UOpRef& root, const SubstituteMap& map);

}  // namespace th
