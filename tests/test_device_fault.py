"""Kernel faults on the CPU queue (drivers/cpu/fault.cpp): a kernel that touches memory it may not, divides by zero
or overflows its stack does not kill the process. The queue abandons the rest of that submit, and the next wait that
covers it raises hcq.DeviceFault (a RuntimeError) naming the queue, the kernel and the cause; the device goes on.
A fault outside a kernel still ends the process as it would without tinyhybrid."""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from tinyhybrid import Device, Tensor
from tinyhybrid._core import hcq
from tinyhybrid.device import Buffer, dtypes
from tinyhybrid.runtime import hcq as runtime

KERNELS = r"""
#include <stdint.h>
/* args: out (uint32[cores]), faulting core, address. Every core writes out[core]; the faulting one then stores to
   the address. */
void store_at(const uint64_t* args, uint32_t core, uint32_t cores) {
  ((uint32_t*)args[0])[core] = 1 + core;
  if (core == (uint32_t)args[1]) *(volatile uint32_t*)args[2] = 7;
}
/* args: out (int32[1]), a, b: out[0] = a / b. */
void divide(const uint64_t* args, uint32_t core, uint32_t cores) {
  volatile int32_t a = (int32_t)args[1], b = (int32_t)args[2];
  ((int32_t*)args[0])[0] = a / b;
}
static uint64_t deeper(volatile uint64_t n) { volatile char pad[4096]; pad[0] = (char)n; return deeper(n + 1) + pad[0]; }
/* args: out. Recurses until the stack runs out. */
void overflow(const uint64_t* args, uint32_t core, uint32_t cores) { ((uint64_t*)args[0])[0] = deeper(0); }
"""


@pytest.fixture(scope="module")
def lib():
  cc = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
  assert cc is not None, "the tests need a C compiler (as the CPU device does)"
  with tempfile.TemporaryDirectory() as d:
    src, so = os.path.join(d, "kernels.c"), os.path.join(d, "kernels.so")
    with open(src, "w") as f: f.write(KERNELS)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", so, src], check=True)
    yield ctypes.CDLL(so)


def prog(lib, name: str) -> hcq.Program:
  return hcq.Program(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value, name)


def test_a_kernel_fault_raises_at_the_next_wait_naming_the_kernel_and_the_queue_goes_on(lib):
  q = hcq.CPUQueue(num_threads=2, name="faulty")
  out = np.zeros(2, np.uint32)
  cb = hcq.CommandBuffer()
  cb.exec(prog(lib, "store_at"), [out.ctypes.data, 0, 16], global_size=(1,))
  after = np.zeros(4, np.uint8)
  cb.copy(after.ctypes.data, np.arange(4, dtype=np.uint8).ctypes.data, 4)  # the rest of the faulted submit
  v = q.submit(cb)
  with pytest.raises(hcq.DeviceFault, match=r"faulty: kernel 'store_at' faulted: SIGSEGV \(invalid memory access at 0x10\) "
                                            r"in submit 1") as e:
    q.wait(v)
  assert isinstance(e.value, RuntimeError)
  assert out[0] == 1 and not after.any(), "the kernel ran up to its fault and the rest of its submit was skipped"
  q.wait(v)  # raised once: the next wait of the same value passes
  # the queue runs later submits as usual
  cb2 = hcq.CommandBuffer()
  cb2.exec(prog(lib, "store_at"), [out.ctypes.data, 99, 0], global_size=(2,))
  q.wait(q.submit(cb2))
  np.testing.assert_array_equal(out, [1, 2])


def test_a_fault_in_a_helper_part_of_a_split_kernel_is_reported_too(lib):
  q = hcq.CPUQueue(num_threads=2, name="split")
  out = np.zeros(2, np.uint32)
  cb = hcq.CommandBuffer()
  cb.exec(prog(lib, "store_at"), [out.ctypes.data, 1, 8], global_size=(2,))
  q.submit(cb)
  with pytest.raises(hcq.DeviceFault, match=r"kernel 'store_at' faulted: SIGSEGV \(invalid memory access at 0x8\)"): q.synchronize()
  assert out[0] == 1, "the leader's part ran"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="integer division by zero traps on x86 only")
def test_an_integer_division_by_zero_is_a_fault_of_its_kernel(lib):
  q = hcq.CPUQueue(num_threads=1, name="div")
  out = np.zeros(1, np.int32)
  ok, bad = hcq.CommandBuffer(), hcq.CommandBuffer()
  ok.exec(prog(lib, "divide"), [out.ctypes.data, 12, 4])
  bad.exec(prog(lib, "divide"), [out.ctypes.data, 12, 0])
  first, second = q.submit(ok), q.submit(bad)
  q.wait(first)  # a wait that does not reach the faulted submit does not raise
  assert out[0] == 3
  with pytest.raises(hcq.DeviceFault, match=r"kernel 'divide' faulted: SIGFPE \(integer divide by zero"): q.wait(second)


def test_a_kernel_that_overflows_its_stack_is_a_fault_not_a_crash(lib):
  q = hcq.CPUQueue(num_threads=1, name="deep")
  out = np.zeros(1, np.uint64)
  cb = hcq.CommandBuffer()
  cb.exec(prog(lib, "overflow"), [out.ctypes.data])
  v = q.submit(cb)
  with pytest.raises(hcq.DeviceFault, match=r"kernel 'overflow' faulted: SIGSEGV"): q.wait(v)
  cb2 = hcq.CommandBuffer()
  cb2.exec(prog(lib, "divide"), [out.ctypes.data, 10, 5])
  q.wait(q.submit(cb2))
  assert out.view(np.int32)[0] == 2


def test_reading_a_buffer_a_faulted_kernel_wrote_raises_at_the_read_and_the_device_stays_usable(lib):
  dev = Device["CPU"]
  buf = Buffer("CPU", 2, dtypes.uint32).ensure_allocated()
  cb = hcq.CommandBuffer()
  cb.exec(prog(lib, "store_at"), [buf.address, 0, 0], global_size=(1,))
  cb.access(buf.address, write=True)
  runtime.submit(dev.queue, cb)  # returns: the fault surfaces where the host waits for this buffer
  with pytest.raises(hcq.DeviceFault, match=r"CPU: kernel 'store_at' faulted: SIGSEGV \(invalid memory access at 0x0\)"):
    buf.numpy()
  dev.synchronize()  # reported once
  np.testing.assert_array_equal((Tensor([1.0, 2.0]) * 3).numpy(), [3.0, 6.0])


def test_a_fault_outside_a_kernel_still_ends_the_process_as_without_tinyhybrid():
  # the queue's handlers pass a fault that is not a kernel's to what handled it before: here Python's faulthandler,
  # which prints the traceback, then the default action (or a sanitizer's report, under one)
  def crash(with_queue: bool) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
      import ctypes, faulthandler
      faulthandler.enable()
      if {with_queue}:
        from tinyhybrid._core import hcq
        q = hcq.CPUQueue(num_threads=2, name="q")
        q.synchronize()
      ctypes.string_at(0)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  plain, ours = crash(False), crash(True)
  assert ours.returncode == plain.returncode != 0, (plain.returncode, ours.returncode, ours.stderr)
  if plain.returncode < 0: assert plain.returncode == -signal.SIGSEGV
  assert "Segmentation fault" in ours.stderr and "string_at" in ours.stderr
