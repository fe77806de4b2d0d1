"""The documentation site (docs/, mkdocs.yml): it builds with `mkdocs build --strict` (a broken link, a missing page or
an API reference that does not resolve is an error), the code on its pages runs, and the pipeline page names only
stages that exist where it says."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PKG = ROOT / "python" / "tinyhybrid"


def _text(html: str) -> str: return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_site_builds_strict(tmp_path):
  r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)],
                     capture_output=True, text=True, cwd=ROOT)
  assert r.returncode == 0, r.stdout + r.stderr
  pages = {p.parent.name for p in tmp_path.rglob("index.html")}
  assert {"quickstart", "architecture", "pipeline", "extending", "hcq_driver", "tensor", "nn", "uop"} <= pages
  # the API reference is read from the docstrings: the Tensor page has the mixins' methods with their signatures
  tensor = _text((tmp_path / "api" / "tensor" / "index.html").read_text())
  for name in ("matmul", "conv2d", "sparse_categorical_crossentropy", "realize"): assert f"{name} (" in tensor, name
  assert "A lazy n-dimensional array" in tensor


@pytest.mark.parametrize("page", ["index.md", "quickstart.md", "extending.md"])
def test_page_code_runs(page):
  blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
  assert blocks
  scope: dict = {"__name__": f"docs.{page}"}
  for b in blocks: exec(compile(b, str(DOCS / page), "exec"), scope)  # in order: a page's blocks share their names


def _defined(path: Path) -> set[str]:
  names: set[str] = set()
  for n in ast.parse(path.read_text()).body:
    if isinstance(n, (ast.FunctionDef, ast.ClassDef)): names.add(n.name)
    elif isinstance(n, ast.Assign): names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
  return names


def test_pipeline_page_names_what_exists():
  rows = [r for r in (DOCS / "pipeline.md").read_text().splitlines() if r.startswith("| ") and "`" in r]
  checked = 0
  for r in rows:
    for file, name in re.findall(r"`([\w/]+\.py)`, `(\w+)`", r):
      assert name in _defined(PKG / file), f"pipeline.md: {file} has no {name}"
      checked += 1
  assert checked >= 10
  # every source path any page names is there
  for page in DOCS.rglob("*.md"):
    for ref in re.findall(r"`((?:src|drivers|tests|examples|bench)/[\w/.-]+|[\w/]+\.py)`", page.read_text()):
      assert (ROOT / ref).exists() or (PKG / ref).exists(), f"{page.name}: {ref} does not exist"
