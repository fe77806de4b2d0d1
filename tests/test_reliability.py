"""Small failures an ordinary user runs into, each checked for its exact error or its bound: deep expressions rendered
in linear memory, bad rule lists, NumPy arrays of dtypes a Tensor cannot hold, a Context decorating a recursive
function, and two builds of one checkout at once."""
import re
import subprocess
import sys

import numpy as np
import pytest

from tinyhybrid import Tensor, _core
from tinyhybrid.helpers import DEBUG, Context
from tinyhybrid.uop.upat import PatternMatcher, UPat


def test_render_of_a_deep_expression_takes_linear_memory():
  code = """
import resource
from tinyhybrid import Variable
e = Variable("x", 0, 10)
for i in range(20000): e = e + (i % 7)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
s = e.render(simplify=False)
print(len(s), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout.split()
  assert int(out[0]) == 80001  # 20000 levels of "(" ... "+k)" around "x"
  assert int(out[1]) < 200, f"render grew the process by {out[1]} MB"  # every level's text kept: about 800 MB


@pytest.mark.parametrize("rules", [[1, 2], [(1, 2)], [(UPat(), 3)], [("x", lambda: None)], [(UPat(), lambda: None, 1)]])
def test_pattern_matcher_rejects_what_is_not_a_rule(rules):
  with pytest.raises(TypeError, match="rule 0"): PatternMatcher(rules)


def test_native_pattern_matcher_rejects_what_is_not_a_compiled_rule():
  with pytest.raises(TypeError, match="rule 0 is a int"): _core.PatternMatcher([1, 2])  # was a SystemError


@pytest.mark.parametrize("arr", [np.array(["a", "b"]), np.array([1 + 2j]), np.array([object()], dtype=object), np.array([b"x"]),
                                 np.array(["2020-01-01"], dtype="datetime64[D]")], ids=lambda a: str(a.dtype))
def test_numpy_arrays_without_a_tensor_dtype_are_a_type_error(arr):
  with pytest.raises(TypeError, match=re.escape(f"dtype {arr.dtype} have no Tensor dtype")): Tensor(arr)


def test_numpy_dtypes_of_every_spelling_are_read():
  for t in (np.longlong, np.intc, np.uint, np.half, np.single, np.double, np.bool_):
    a = np.arange(3).astype(t)
    np.testing.assert_array_equal(Tensor(a).numpy(), a)
    assert Tensor(a).numpy().dtype == a.dtype


def test_context_decorating_a_recursive_function_restores_its_values():
  seen = []

  @Context(DEBUG=3)
  def walk(n: int) -> None:
    seen.append(DEBUG.value)
    if n: walk(n - 1)
  before = DEBUG.value
  walk(3)
  assert seen == [3, 3, 3, 3] and DEBUG.value == before
  with Context(DEBUG=1):
    walk(1)
    assert DEBUG.value == 1
  assert DEBUG.value == before


def test_pip_builds_do_not_share_a_build_folder():
  import tomllib
  from pathlib import Path
  cfg = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["scikit-build"]
  assert "build-dir" not in cfg  # scikit-build-core then makes a temporary folder for each build
