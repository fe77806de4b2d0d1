"""tinygrad's Mesa NIR renderer has no tinyhybrid counterpart. The class is here so that tinygrad programs that
test `isinstance(Device[d].renderer, NIRRenderer)` to skip NIR-only cases run unchanged: no device of ours is one."""
from __future__ import annotations

from tinyhybrid.renderer import Renderer


class NIRRenderer(Renderer):
  device = "NIR"

  def __init__(self, *args: object, **kwargs: object):
    raise NotImplementedError("tinyhybrid has no NIR (Mesa) backend")
