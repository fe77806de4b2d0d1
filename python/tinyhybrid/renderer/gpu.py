"""The frame of a GPU kernel, for every C-family GPU language (OpenCL in renderer/opencl.py; CUDA next): the kernel
takes its buffers and variables as parameters; GLOBAL and LOCAL ranges (codegen/gpu.py) are not loops but the
work-item's position, read once at the top; a GROUP_REDUCE range is the work-item's place among those that share a
reduce. After its loops each of them leaves its partial results in local memory, a barrier waits for the group, and
the first of them combines the others' and goes on to the store. A language spells the ids, the barrier, local
memory and the parameters."""
from __future__ import annotations

from tinyhybrid.codegen.gpu import grid
from tinyhybrid.renderer.cstyle import CStyleWriter, var_name
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp

_SPECIAL = (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP)


class GPUWriter(CStyleWriter):
  # ** a language's spellings **

  def special(self, kind: AxisType, dim: int) -> str:
    """The work-group's position (GLOBAL) or the work-item's in its group (LOCAL, GROUP_REDUCE) along dim."""
    raise NotImplementedError
  def barrier(self) -> str: raise NotImplementedError
  def local_array(self, t: str, name: str, n: int) -> str: raise NotImplementedError
  def buffer_param(self, i: int) -> str: raise NotImplementedError
  def var_param(self, v: UOp) -> str: return f"long {var_name(v)}"

  # ** the frame **

  def params(self) -> None:
    k = self.k
    for i, b in enumerate(k.buffers): self.names[UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)] = f"data{i}"
    for v in k.vars: self.names[v] = var_name(v)
    self.param_decls = [self.buffer_param(i) for i in range(len(k.buffers))] + [self.var_param(v) for v in k.vars]
    gl, lo = grid(self.loops, self.rloops)
    self.dims = {r: d for rs in (gl, lo) for d, r in enumerate(rs)}
    self.group = next((r for r in self.rloops if r.arg[1] is AxisType.GROUP_REDUCE), None)

  def open_loop(self, r: UOp, nm: str) -> None:
    if r.arg[1] not in _SPECIAL: return super().open_loop(r, nm)
    self.names[r] = nm
    self.emit(f"{self.IDX} {nm} = {self.special(r.arg[1], self.dims[r])};  /* {r.src[0].arg} */")

  def end_loop(self, r: UOp) -> None:
    if r.arg[1] not in _SPECIAL: self.close_loop()

  def combine(self) -> None:
    """Every work-item of the group leaves its accumulators at its place in local memory; the first (group index 0)
    combines them after the barrier, and it alone goes on to the store (closed in after_stores)."""
    assert self.group is not None
    _, lo = grid(self.loops, self.rloops)
    strides, acc = {}, 1
    for r in lo:
      strides[r] = acc
      acc *= r.src[0].arg
    place = " + ".join(f"{self.names[r]} * {strides[r]}" for r in lo)
    g, gs = self.names[self.group], strides[self.group]
    for i, a in enumerate(self.reduces):
      t = self.ctype(a)
      self.statics[f"lds{i}"] = self.local_array(t, f"th_lds{i}", acc)
      self.emit(f"th_lds{i}[{place}] = {self.names[a]};")
    self.emit(self.barrier())
    self.emit(f"if ({g} == 0) {{")
    self.depth += 1
    self.emit(f"for (int th_j = 1; th_j < {self.group.src[0].arg}; th_j++) {{")
    self.depth += 1
    for i, a in enumerate(self.reduces):
      part = UOp(Ops.NOOP, a.dtype, (), i)
      self.names[part] = f"th_lds{i}[{place} + th_j * {gs}]"
      self.emit(self.update(a, part))
    self.close_loop()

  def after_stores(self) -> None:
    if self.group is None: return
    self.close_loop()
    # inside a loop of every work-item, the next step's partial results must wait until these are read
    if any(r.arg[1] not in _SPECIAL for r in self.loops): self.emit(self.barrier())
