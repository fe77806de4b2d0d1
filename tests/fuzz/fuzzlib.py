"""What every fuzzer in tests/fuzz shares: how many examples it runs.

CI runs a short, fixed slice (hypothesis derandomized: the same examples every run, so a failure is reproducible and
the suite never flakes). FUZZ_LONG=1 (or `pytest tests/fuzz --fuzz-long`) runs the long mode: random examples, as many
as each fuzzer's long count; FUZZ_EXAMPLES=N sets the count of every fuzzer. A failure is shrunk by hypothesis to a
smallest program and printed with the seed that reproduces it."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def long_mode() -> bool: return os.getenv("FUZZ_LONG", "") not in ("", "0")


def fuzz(ci: int, long: int) -> settings:
  """Hypothesis settings for a fuzzer: `ci` examples in CI, `long` in the long mode."""
  n = int(os.getenv("FUZZ_EXAMPLES", "0")) or (long if long_mode() else ci)
  return settings(max_examples=n, deadline=None, derandomize=not long_mode(), print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
