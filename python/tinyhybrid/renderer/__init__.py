"""Renderers turn a lowered kernel into source for one device family. `Renderer` is what every renderer shares:
its name (`device`) and which dtypes it can render."""
from __future__ import annotations

from tinyhybrid.dtype import DType, dtypes


class Renderer:
  device: str = ""

  def supported_dtypes(self) -> set[DType]:
    """The dtypes this renderer's kernels can read, write and compute in (tinygrad's Renderer.supported_dtypes)."""
    return set(dtypes.all)
