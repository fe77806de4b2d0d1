"""Running a kernel written in tinygrad's kernel DSL (Tensor.custom_kernel) on buffers: lowered by
codegen/custom.py, optimized (unless its KernelInfo says opts_to_apply=(): as written), rendered and compiled once
per kernel and device, then run as a step of its own, so TinyJit captures it as it captures any kernel."""
from __future__ import annotations

from tinyhybrid.codegen.custom import lower_custom
from tinyhybrid.codegen import finalize, optimize
from tinyhybrid.codegen.search import on_device
from tinyhybrid.device import Buffer, Device
from tinyhybrid.engine.realize import CompiledSchedule, ExecItem, Step, kernel_program, run_step
from tinyhybrid.helpers import DEBUG
from tinyhybrid.uop.ops import KernelInfo, UOp

# (sink, device, the buffers' dtypes and sizes) -> each of its kernels, ready to run, with the argument of each slot
_compiled: dict[tuple, list[tuple[CompiledSchedule, list[int]]]] = {}


def run_custom_kernel(sink: UOp, bufs: list[Buffer]) -> None:
  """Runs the kernel `sink` (its placeholder i is bufs[i]) on the buffers' device."""
  device = bufs[0].device
  if any(b.device != device for b in bufs): raise RuntimeError(f"custom kernel: its tensors are on {sorted({b.device for b in bufs})}, not one device")
  key = (sink, device, tuple((b.dtype, b.size) for b in bufs))
  if key not in _compiled: _compiled[key] = _compile(sink, device, bufs)
  for b in bufs: b.ensure_allocated()
  for cs, order in _compiled[key]: run_step(Step(device, cs, [bufs[s] for s in order], {}, [], []))


def _compile(sink: UOp, device: str, bufs: list[Buffer]) -> list[tuple[CompiledSchedule, list[int]]]:
  dev = Device[device]
  as_written = isinstance(sink.arg, KernelInfo) and sink.arg.opts_to_apply == ()
  out = []
  for k, order in lower_custom(sink, [(b.dtype, b.size) for b in bufs]):
    k = finalize(k, [], dev.renderer) if as_written else optimize(k, dev.renderer, on_device(dev))
    src = dev.renderer.render(k)
    if DEBUG >= 4: print(src)
    prg, slots, threads = kernel_program(dev.compile_many([(k.name, src)])[0], k), list(range(len(order))), k.launch or 1
    out.append((CompiledSchedule([ExecItem(prg, slots, threads, device)], [], [], [], dev.runner([(prg, slots, threads)], len(order))), order))
  return out
