"""The package stays lint-clean (ruff with pyproject.toml's [tool.ruff] over python/) and ships py.typed."""
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
