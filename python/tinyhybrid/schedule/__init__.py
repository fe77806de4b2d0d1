"""The scheduler: kernelize (a graph into kernels), memory (their buffers' slots), multi (sharded graphs).

schedule_cache is tinygrad's name for the compiled schedules by graph: (normalized sink, device, the planning
switches' values) -> the engine's compiled schedule. The key keeps its graph alive, and so its identity; the engine
drops the least recently used past its limit, so programs that build ever-new graphs do not grow it without bound."""
from collections import OrderedDict
from typing import Any

schedule_cache: OrderedDict[tuple, Any] = OrderedDict()
