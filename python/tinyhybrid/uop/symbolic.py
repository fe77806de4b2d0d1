"""The symbolic rule set. `sym` is the native C++ set as a PatternMatcher, so Python passes can extend it with
`sym + PatternMatcher([...])`; UOp.simplify() runs the native set directly and never enters Python."""
from __future__ import annotations

from tinyhybrid import _core
from tinyhybrid.uop.upat import PatternMatcher

sym = PatternMatcher(native=_core.symbolic_matcher())
