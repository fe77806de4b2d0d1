"""What the GPU devices driven through HCQ share (runtime/ops_nv.py, runtime/ops_amd.py): a compute queue and a copy
queue, schedules and TinyJit replays as pre-encoded submits (QueueRunner, ChainRunner), and, on a mock GPU
(MOCKGPU=1), the kernels run on the host: the mock decodes each launch from the command stream and hands it back,
and the device runs the kernel's lowering as the PYTHON device would (runtime/ops_python.py) with the grid, the
work-group and the argument words the mock read. The mock's GPU memory is host memory."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyhybrid._core import hcq
from tinyhybrid.device import Allocator, Compiled, CompiledProgram, Runner
from tinyhybrid.helpers import getenv
from tinyhybrid.runtime.hcq import HCQProgram, QueueRunner, accesses, chain_runner_of, fits, host_wait, register, submit, synchronize
from tinyhybrid.runtime.ops_python import PythonProgram

MOCKGPU = getenv("MOCKGPU", 0)


class MockMemoryAllocator(Allocator):
  """A mock GPU's memory is host memory: the host waits (through the tracker) before it touches what a submit uses."""
  def idle(self, mem: np.ndarray, write: bool) -> None: host_wait(mem.ctypes.data, write)


@dataclass
class MockKernel:
  """What the mock runs for a launch of the program at an address: the kernel's PYTHON program, and how many argument
  words it takes (buffer addresses, then variables' values)."""
  program: PythonProgram
  nargs: int


class HCQGPUDevice(Compiled):
  def __init__(self, name: str, renderer: Any, queue: hcq.Queue, copy_queue: hcq.Queue):
    super().__init__(name, MockMemoryAllocator(), renderer, self._build)
    self.hcq_queue, self.copy_queue = queue, copy_queue
    for q in (queue, copy_queue): register(q)
    self.mock_kernels: dict[int, MockKernel] = {}
    self._code: list[np.ndarray] = []  # the programs' code in GPU memory, kept while the device lives

  def _build(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]: raise NotImplementedError

  @property
  def hcq_copy_queue(self) -> hcq.Queue: return self.copy_queue

  def upload(self, code: bytes, align: int = 256) -> int:
    """The GPU address of a copy of code, aligned as the device's program counter needs."""
    raw = np.zeros(max(len(code), 16) + align, np.uint8)
    at = (-raw.ctypes.data) % align
    raw[at:at + len(code)] = np.frombuffer(code, np.uint8)
    self._code.append(raw)
    return raw.ctypes.data + at

  def run_mock(self, program: int, launch: tuple[tuple[int, ...], tuple[int, ...]], args_at: int) -> None:
    """A launch the mock decoded: the kernel runs here, on its argument words at args_at. A kernel that fails is the
    fault of the submit the compute queue is running, raised by the wait that covers it."""
    k = self.mock_kernels[program]
    words = np.ctypeslib.as_array((ctypes.c_uint64 * max(k.nargs, 1)).from_address(args_at))[:k.nargs]
    try: k.program([int(w) for w in words], launch)
    except Exception as e:  # noqa: BLE001 (any error of the kernel is the device's fault, reported to the waiter)
      timeline = self.hcq_queue.timeline
      timeline.fault(timeline.value + 1, f"{self.name}: kernel '{k.program.name}' failed: {type(e).__name__}: {e}")

  def program(self, name: str, src: str, hp: HCQProgram, address: int) -> CompiledProgram:
    """The compiled program of an hcq program: a direct call submits it alone and waits (BEAM and DEBUG=2 time it so;
    a schedule runs through a QueueRunner)."""
    def call(args: list[int], launch: Any) -> None:
      glob, local = launch
      if 0 in glob: return  # over no elements: no work-group to launch
      cb = hcq.CommandBuffer()
      cb.exec(hp.program, args, global_size=glob, local_size=local)
      for a, written in accesses(compiled, args): cb.access(a, write=written)
      self.hcq_queue.wait(submit(self.hcq_queue, cb))
    compiled = CompiledProgram(name, src, address, call, keepalive=hp)
    return compiled

  def runner(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner:
    return QueueRunner(items, nslots, self.hcq_queue, self.name) if fits(items) else Runner(items, nslots, self.name)

  def chain_runner(self, devices: list[str], items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner | None:
    return chain_runner_of(type(self), devices, items, nslots)

  def synchronize(self) -> None:
    synchronize(self.hcq_queue)
    synchronize(self.copy_queue)
