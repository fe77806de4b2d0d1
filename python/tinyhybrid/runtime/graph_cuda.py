"""TinyJit replay through a CUDA graph (tinygrad's CUDAGraph): the jitted kernels become the kernel nodes of one graph,
each depending on the one before (the order the eager run had), instantiated once; a replay patches the nodes whose
arguments changed (new input buffers, new variable values) in the instantiated graph and launches it with one
cuGraphLaunch, instead of one cuLaunchKernel per kernel. The graph is built at the first replay, from that call's
addresses. A batch that is not all CUDA kernels (a copy), or a run under PROFILE (per-kernel events), launches the
kernels one by one as the plain Runner does. JIT=2 (as in tinygrad: the JIT without graphs) turns graphs off."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinyhybrid.device import CompiledProgram, Runner
from tinyhybrid.helpers import PROFILE

if TYPE_CHECKING:
  from tinyhybrid.runtime.ops_cuda import CUDADevice


class CUDAGraphRunner(Runner):
  def __init__(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int, dev: CUDADevice):
    super().__init__(items, nslots, dev.name)
    from tinyhybrid.runtime.ops_cuda import CUDAProgram
    self.dev = dev
    self.graphable = all(isinstance(prg.keepalive, CUDAProgram) for prg, _, _ in items)
    self.graph: Any = None
    self.exec: Any = None
    self.nodes: list[Any] = []
    self.params: list[tuple[Any, Any, Any]] = []  # per node: its CUDA_KERNEL_NODE_PARAMS, words and pointers (kept alive)
    self.last: list[list[int]] = []               # per node: the argument words it was last given

  def _node_params(self, prg: CompiledProgram, words: list[int], launch: Any) -> tuple[Any, Any, Any]:
    from tinyhybrid.runtime.ops_cuda import _api
    ffi = _api()[0]
    (gx, gy, gz), (lx, ly, lz) = launch
    w = ffi.new("unsigned long long[]", max(len(words), 1))
    for i, a in enumerate(words): w[i] = a & 0xFFFFFFFFFFFFFFFF
    ptrs = ffi.new("void*[]", [w + i for i in range(len(words))] or [ffi.NULL])
    p = ffi.new("CUDA_KERNEL_NODE_PARAMS*")
    p.func = prg.keepalive.fn
    p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ = gx, gy, gz, lx, ly, lz
    p.sharedMemBytes, p.kernelParams, p.extra = 0, ptrs, ffi.NULL
    return p, w, ptrs

  def _build(self, words: list[list[int]]) -> None:
    from tinyhybrid.runtime.ops_cuda import _api, check
    ffi, lib = _api()
    g = ffi.new("CUgraph*")
    check(lib.cuGraphCreate(g, 0), f"cuGraphCreate on {self.dev.name}")
    self.graph = g[0]
    prev: Any = None
    for (prg, _, launch), ws in zip(self.items, words):
      node = ffi.new("CUgraphNode*")
      params = self._node_params(prg, ws, launch)
      deps = ffi.new("CUgraphNode[1]", [prev]) if prev is not None else ffi.NULL
      check(lib.cuGraphAddKernelNode(node, self.graph, deps, 1 if prev is not None else 0, params[0]), f"graph node for kernel {prg.name}")
      prev = node[0]
      self.nodes.append(prev)
      self.params.append(params)
    ex = ffi.new("CUgraphExec*")
    check(lib.cuGraphInstantiateWithFlags(ex, self.graph, 0), f"cuGraphInstantiate of {len(self.nodes)} kernels on {self.dev.name}")
    self.exec = ex[0]
    self.last = words

  def __call__(self, addresses: list[int]) -> None:
    if not self.graphable or PROFILE: return super().__call__(addresses)
    from tinyhybrid.runtime.ops_cuda import _api, check
    ffi, lib = _api()
    words = [[addresses[s] for s in slots] for _, slots, _ in self.items]
    if self.exec is None: self._build(words)
    else:
      for i, ((prg, _, launch), ws) in enumerate(zip(self.items, words)):
        if ws == self.last[i]: continue
        self.params[i] = self._node_params(prg, ws, launch)
        check(lib.cuGraphExecKernelNodeSetParams(self.exec, self.nodes[i], self.params[i][0]), f"updating kernel {prg.name} in the graph")
        self.last[i] = ws
    check(lib.cuGraphLaunch(self.exec, ffi.NULL), f"cuGraphLaunch of {len(self.nodes)} kernels on {self.dev.name}")

  def __del__(self) -> None:
    if self.exec is None: return
    try:
      from tinyhybrid.runtime.ops_cuda import _api
      lib = _api()[1]
      lib.cuGraphExecDestroy(self.exec)
      lib.cuGraphDestroy(self.graph)
    except Exception: pass  # at interpreter exit the driver may be gone
