"""A tour of tinyhybrid's graph core: the UOp, the node every later pass builds, walks and rewrites.

  python examples/graph_demo.py

The nodes live in a compiled C++ core; Python sees one object per live node."""
import pickle

import numpy as np

from tinyhybrid import Ops, Tensor, UOp, dtypes, _core


def main() -> None:
  baseline = _core.live_uop_count()

  # 1. An index expression over two symbolic variables, as a kernel would compute an address.
  row = UOp.variable("row", 0, 31)
  col = UOp.variable("col", 0, 63)
  idx = (row * 64 + col) % 1024
  print(f"expression    : {idx.render()}")
  print(f"its dtype     : {idx.dtype}, op {idx.op.name}, {len(idx.src)} sources")

  # 2. Toposort: sources before their users, each node once. The walk runs in C++.
  order = idx.toposort()
  print(f"toposort      : {len(order)} nodes: {' '.join(u.op.name for u in order)}")
  assert order[-1] is idx

  # 3. Interning: the same (op, dtype, src, arg) is the same node, and the same Python object.
  again = (UOp.variable("row", 0, 31) * 64 + UOp.variable("col", 0, 63)) % 1024
  print(f"interned      : rebuilt expression is the same object: {again is idx}")
  print(f"              : 0, 0.0, -0.0 and False are different constants: "
        f"{len({UOp(Ops.NOOP, arg=v) for v in (0, 0.0, -0.0, False)}) == 4}")

  # 4. dtypes: sizes, vector and pointer forms, and constants committed to their dtype.
  f4 = dtypes.float.vec(4)
  print(f"dtypes        : {dtypes.half!r} is {dtypes.half.itemsize} bytes; {f4!r} is '{f4.name}', "
        f"{f4.itemsize} bytes; {dtypes.float.ptr(16)!r} is '{dtypes.float.ptr(16).name}'")
  print(f"constants     : uint(-4) = {UOp.const(dtypes.uint, -4).arg}, half(65519.0) = "
        f"{UOp.const(dtypes.half, 65519.0).arg}, int8(200) = {UOp.const(dtypes.int8, 200).arg}")

  # 5. Rewriting by substitution: fix the row, every user of it is rebuilt.
  fixed = idx.substitute({row: UOp.const(dtypes.int, 3)})
  print(f"row := 3      : {fixed.render()}  simplifies to {fixed.simplify().render()}")
  print(f"simplify      : {((row * 4 + col * 8 + 3) // 4).render()} -> {((row * 4 + col * 8 + 3) // 4).simplify().render()}")

  # 6. Pickling: a live node comes back as the very same object; a dead one is rebuilt by structure.
  print(f"pickle        : round trip gives the same object: {pickle.loads(pickle.dumps(idx)) is idx}")
  data = pickle.dumps(fixed)

  # 7. Freeing: nodes die as soon as nothing refers to them.
  live = _core.live_uop_count() - baseline
  del idx, again, order, fixed, row, col
  after = _core.live_uop_count() - baseline
  print(f"live nodes    : {live} while in use, {after} after del")
  back = pickle.loads(data)
  print(f"unpickled     : {back.render()} ({_core.live_uop_count() - baseline} nodes alive again)")
  del back
  assert _core.live_uop_count() == baseline

  # 8. The same graph IR drives Tensors: a lazy expression becomes C kernels that run on the CPU.
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
  loss = (a @ a.T).relu().sum()
  loss.backward()
  print(f"tensors       : sum(relu(a @ a.T)) = {loss.item():.1f} (numpy: {float(np.maximum(a.numpy() @ a.numpy().T, 0).sum()):.1f}), "
        f"d/da has shape {a.grad.shape}")


if __name__ == "__main__":
  main()
