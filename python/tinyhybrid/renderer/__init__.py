"""Renderers turn a lowered kernel into source for one device family. `Renderer` is what every renderer shares: its
name (`device`), which dtypes it can render, and the shape of the machine its kernels run on, which the code
generator plans for (codegen/opt.py, codegen/gpu.py)."""
from __future__ import annotations

from tinyhybrid.dtype import DType, dtypes


class Renderer:
  device: str = ""
  vec: int = 1                       # the widest vector (lanes) its kernels compute in; 1: scalar code only
  # kernels of a GPU-style device run as a grid of work-groups: output loops become GLOBAL (the group's position)
  # and LOCAL (the work-item's place in its group) ranges, and work-items of a group share local memory and barriers
  has_local: bool = False
  max_global: tuple[int, ...] = ()   # work-groups per grid dimension
  max_local: tuple[int, ...] = ()    # work-items per local dimension
  max_work_group: int = 1            # work-items per work-group
  local_mem: int = 0                 # bytes of local memory per work-group

  def supported_dtypes(self) -> set[DType]:
    """The dtypes this renderer's kernels can read, write and compute in (tinygrad's Renderer.supported_dtypes)."""
    return set(dtypes.all)
