"""Runs tinygrad's own test files against tinyhybrid, with only the import changed, and prints one JSON line per file.

  python tests/compat/tinygrad_suite.py /path/to/tinygrad [test/unit/test_x.py ...]

The path is a checkout of tinygrad (its `test/`, `extra/` and `examples/` are used; tinygrad itself is not imported).
`import tinygrad` and `from tinygrad.x import y` resolve to tinyhybrid's modules of the same names. With no files
given, it runs tinygrad's `test/unit`, `test/null` and the Tensor-level files of `test/backend`. Each file runs in a
pytest process of its own (a failing import stops only that file), on DEV=CPU unless DEV is set.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

# `tinygrad.*` served by `tinyhybrid.*`: the module objects are shared, so a patch through one name is seen by both
ALIAS = '''
import importlib, importlib.abc, importlib.util, sys
class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  def find_spec(self, name, path=None, target=None):
    return importlib.util.spec_from_loader(name, self) if name == "tinygrad" or name.startswith("tinygrad.") else None
  def create_module(self, spec):
    mod = importlib.import_module("tinyhybrid" + spec.name[len("tinygrad"):])
    # every tinyhybrid module loaded so far under its tinygrad name too: importing one then finds it, where loading it
    # would set the shared package's attribute to the submodule (tinygrad.function, the module, over the decorator)
    for name, m in list(sys.modules.items()):
      if name.startswith("tinyhybrid"): sys.modules.setdefault("tinygrad" + name[len("tinyhybrid"):], m)
    return mod
  def exec_module(self, module): pass
sys.meta_path.insert(0, _Alias())
'''

BACKEND = ["test_ops", "test_tensor", "test_nn", "test_dtype", "test_dtype_alu", "test_transcendental", "test_jit", "test_setitem",
           "test_optim", "test_symbolic_ops", "test_symbolic_jit", "test_randomness", "test_edgecases", "test_to_numpy",
           "test_tensor_variable", "test_subbuffer", "test_zero_copy", "test_softmax_fusion"]


def default_files(root: pathlib.Path) -> list[str]:
  files = sorted(str(p.relative_to(root)) for d in ("test/unit", "test/null") for p in (root / d).glob("test_*.py"))
  return files + [f"test/backend/{n}.py" for n in BACKEND if (root / "test/backend" / f"{n}.py").exists()]


def counts(summary: str) -> dict[str, int]:
  return {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary)}


def main() -> None:
  if len(sys.argv) < 2: sys.exit(__doc__)
  root = pathlib.Path(sys.argv[1]).resolve()
  files = sys.argv[2:] or default_files(root)
  with tempfile.TemporaryDirectory() as shim:
    pathlib.Path(shim, "sitecustomize.py").write_text(ALIAS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([shim, str(root)]), "DEV": os.environ.get("DEV", "CPU")}
    total: dict[str, int] = {}
    for f in files:
      out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark", f], cwd=root, env=env,
                           capture_output=True, text=True, timeout=1800).stdout.strip().splitlines()
      c = counts(out[-1] if out else "")
      for k, v in c.items(): total[k] = total.get(k, 0) + v
      print(json.dumps({"file": f, **c}), flush=True)
    print(json.dumps({"file": "total", **total}))


if __name__ == "__main__":
  main()
