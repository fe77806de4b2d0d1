"""tinyhybrid: tinygrad's design with a compiled C++ core."""
from tinyhybrid import _core  # noqa: F401
from tinyhybrid.dtype import dtypes, DType  # noqa: F401
from tinyhybrid.helpers import getenv, Context, DEBUG, GlobalCounters, fetch  # noqa: F401
from tinyhybrid.uop import Ops, GroupOp, AxisType, AddrSpace  # noqa: F401
from tinyhybrid.uop.ops import UOp, Variable  # noqa: F401
from tinyhybrid.device import Device  # noqa: F401
from tinyhybrid.tensor import Tensor  # noqa: F401
from tinyhybrid.engine.jit import TinyJit  # noqa: F401
from tinyhybrid.function import function  # noqa: F401
from tinyhybrid import viz as _viz

_viz._setup()

__version__ = "0.1.0"
