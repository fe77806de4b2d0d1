"""tinygrad's Buffer API, which its tests and scripts call directly: the constructor's arguments (opaque, options,
initial_value, base and offset, preallocate), allocate and deallocate, copyin and copyout, as_memoryview, views."""
import numpy as np
import pytest

from tinyhybrid import GlobalCounters, dtypes
from tinyhybrid.device import Buffer, BufferSpec, Device


def _floats(mv: memoryview) -> np.ndarray: return np.frombuffer(mv, dtype=np.float32)


def test_allocate_copyin_copyout():
  b = Buffer(Device.DEFAULT, 4, dtypes.float32).allocate()
  assert b.is_allocated() and b.is_initialized()
  b.copyin(memoryview(np.arange(4, dtype=np.float32).tobytes()))
  np.testing.assert_array_equal(_floats(b.copyout(memoryview(bytearray(16)))), [0, 1, 2, 3])
  np.testing.assert_array_equal(_floats(b.as_memoryview()), [0, 1, 2, 3])
  with pytest.raises(AssertionError, match="already allocated"): b.allocate()
  with pytest.raises(ValueError): b.copyout(memoryview(bytearray(8)))


def test_as_memoryview_copies_unless_zero_copy_is_allowed():
  b = Buffer("CPU", 2, dtypes.float32, initial_value=np.ones(2, np.float32).tobytes())
  copy, same = b.as_memoryview(), b.as_memoryview(allow_zero_copy=True)
  b.copyin(np.full(2, 5, np.float32))
  np.testing.assert_array_equal(_floats(copy), [1, 1])
  np.testing.assert_array_equal(_floats(same), [5, 5])


def test_deallocate_frees_and_allocate_again():
  before = GlobalCounters.mem_used
  b = Buffer("CPU", 256, dtypes.float32, preallocate=True)
  assert b.is_allocated() and GlobalCounters.mem_used == before + 1024
  b.deallocate()
  assert not b.is_allocated() and GlobalCounters.mem_used == before
  with pytest.raises(AssertionError): b.deallocate()
  b.allocate()
  assert GlobalCounters.mem_used == before + 1024


def test_views_by_base_and_offset():
  b = Buffer("CPU", 8, dtypes.float32, initial_value=np.arange(8, dtype=np.float32).tobytes())
  v = Buffer("CPU", 2, dtypes.float32, base=b, offset=8)
  w = v.view(1, dtypes.int32, 4)  # offsets add up: byte 12 of b
  assert v.base is b and w.offset == 12
  np.testing.assert_array_equal(v.numpy(), [2, 3])
  assert w.numpy()[0] == np.float32(3).view(np.int32)
  v.copyin(np.array([20, 30], np.float32))
  np.testing.assert_array_equal(b.numpy(), [0, 1, 20, 30, 4, 5, 6, 7])
  with pytest.raises(ValueError, match="runs past"): b.view(4, dtypes.float32, 24)


def test_external_ptr_is_host_memory_its_owner_keeps():
  arr = np.full(4, 7, np.float32)
  before = GlobalCounters.mem_used
  b = Buffer("CPU", 4, dtypes.float32, options=BufferSpec(external_ptr=arr.ctypes.data))
  assert GlobalCounters.mem_used == before  # not the allocator's memory
  np.testing.assert_array_equal(b.numpy(), arr)
  b.copyin(np.zeros(4, np.float32))
  np.testing.assert_array_equal(arr, 0)


def test_nolru_memory_is_released_not_kept_for_reuse():
  alloc = Device["CPU"].allocator
  kept = Buffer("CPU", 1000, dtypes.float32).allocate()
  cached = alloc._cached
  del kept
  assert alloc._cached == cached + 4000  # the next alloc of 4000 bytes takes it
  b = Buffer("CPU", 1000, dtypes.float32, options=BufferSpec(nolru=True)).allocate()
  assert alloc._cached == cached  # that alloc was it
  used = alloc.used
  del b
  assert alloc._cached == cached and alloc.used == used - 4000


def test_free_cache_lets_go_of_freed_memory():
  # freed memory is kept for the next buffer of its size, until free_cache (tinygrad's LRUAllocator.free_cache), which
  # an LLM's warm-up calls so that the first runs' buffers do not stay in the process
  from tinyhybrid import Device
  a = Device["CPU"].allocator
  m = a.alloc(3 << 20)
  a.free(m)
  n = a.alloc(3 << 20)
  assert n is m  # from the cache
  a.free(n)
  a.free_cache()
  assert a.alloc(3 << 20) is not m


def test_lru_0_gives_freed_memory_back_at_once():
  # tinygrad's LRU=0: no freed memory is kept for reuse (a BufferSpec(nolru=True) buffer's is never kept)
  from tinyhybrid.helpers import Context
  a = Device["CPU"].allocator
  cached = a._cached
  with Context(LRU=0):
    m = a.alloc(3 << 20)
    a.free(m)
    assert a._cached == cached and a.alloc(3 << 20) is not m
  b = Buffer("CPU", 1000, dtypes.float32).allocate()
  mem = b._mem
  del b
  assert a._cached == cached + 4000 and a.alloc(4000) is mem  # kept again with LRU=1
