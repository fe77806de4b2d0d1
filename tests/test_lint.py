"""The package stays lint-clean (ruff and mypy with pyproject.toml's [tool.ruff] and [tool.mypy] over python/) and ships
py.typed and the compiled core's stub."""
import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_clean():
  r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"], cwd=ROOT,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_installed_package_ships_py_typed():
  # the installed package (a wheel in CI), so type checkers of programs that import it read its annotations
  import tinyhybrid
  assert os.path.isfile(os.path.join(os.path.dirname(tinyhybrid.__file__), "py.typed"))
  assert os.path.isfile(os.path.join(os.path.dirname(tinyhybrid.__file__), "_core.pyi"))


def test_mypy_clean():
  # pyproject.toml's [tool.mypy] over python/tinyhybrid, with the _core.pyi stub for the compiled core. The cache under
  # build/ makes a second run incremental (CI's DEV=CL pass, a developer's reruns); a cold run takes a minute or two
  cache = os.path.join(ROOT, "build", "mypy_cache")
  r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache, "--no-error-summary", "--hide-error-context"], cwd=ROOT,
                     capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_enum_members_for_type_checkers():
  # uop/__init__.py spells out Ops, AxisType and AddrSpace for type checkers (at run time they are made from the C++
  # enums): the names and values must be the C++ core's
  import tinyhybrid._core as core
  from tinyhybrid import uop
  tree = ast.parse(open(uop.__file__).read())
  block = next(n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
  classes = {c.name: c for c in block.body if isinstance(c, ast.ClassDef)}
  for kind, name in enumerate(("Ops", "AxisType", "AddrSpace")):
    spelled = [(a.targets[0].id, a.value.value) for a in classes[name].body if isinstance(a, ast.Assign)]
    assert spelled == [(n, i) for i, n in enumerate(core.enum_names(kind))], f"uop/__init__.py's {name} differs from the core's"
    assert [(m.name, m.value) for m in getattr(uop, name)] == spelled
