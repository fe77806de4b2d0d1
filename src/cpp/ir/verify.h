// Structural checks every new node passes: arity, dtypes and args that an op cannot do without.
#pragma once
#include <span>

#include "tinyhybrid/uop.h"

namespace th {
// Throws UOpTypeError (wrong kind of input) or UOpValueError (bad value), naming the op.
void verify_node(Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg);
}  // namespace th
