"""The package's layering, read from the source with ast (nothing is imported): the engine, runtime, codegen, renderer
and schedule never import the Tensor API (tinyhybrid.tensor) or nn (a realize hands buffers back; Tensor applies
them), codegen, renderer and the engine never import a runtime device module (runtime/ops_*.py), nothing below the
engine imports it, and the IR (uop/) imports none of them."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import tinyhybrid
from tinyhybrid import Tensor
from tinyhybrid.engine import realize as engine
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp

PKG = Path(tinyhybrid.__file__).parent
LOWER = ("engine", "runtime", "codegen", "renderer", "schedule")

# modules that still import the Tensor API, each with why; the list only shrinks
TENSOR_ALLOWED = {
  # TinyJit is Tensor API itself: its inputs and return values are Tensors it checks, realizes and refills (tinygrad's
  # engine/jit.py imports Tensor too)
  "engine/jit.py",
}


def _imports(path: Path, type_checking: bool = True, source: str | None = None) -> set[str]:
  """Every module path imports (a relative import resolved; `from a import b` counts as a and a.b), at any depth (in a
  function too), with or without what sits under `if TYPE_CHECKING:` (annotations only: nothing is loaded)."""
  tree = ast.parse(path.read_text() if source is None else source, str(path))
  pkg = ["tinyhybrid", *path.relative_to(PKG).parent.parts]
  skip: set[int] = set()
  if not type_checking:
    for n in ast.walk(tree):
      if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test): skip |= {id(s) for b in n.body for s in ast.walk(b)}
  out: set[str] = set()
  for n in ast.walk(tree):
    if id(n) in skip: continue
    if isinstance(n, ast.Import): out |= {a.name for a in n.names}
    elif isinstance(n, ast.ImportFrom):
      base = ".".join([*pkg[:len(pkg) - n.level + 1], *([n.module] if n.module else [])]) if n.level else n.module or ""
      out |= {base, *(f"{base}.{a.name}" for a in n.names)}
  return out


def _modules(*dirs: str) -> list[Path]: return sorted(p for d in dirs for p in (PKG / d).rglob("*.py"))
def _name(p: Path) -> str: return p.relative_to(PKG).as_posix()
def _under(mod: str, *prefixes: str) -> bool: return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_the_scan_sees_imports():
  """The walker itself: relative, aliased, from-package, function-local and TYPE_CHECKING imports all count."""
  src = ("from typing import TYPE_CHECKING\nimport tinyhybrid.nn.optim as o\nfrom .. import tensor\nfrom ..runtime.ops_cpu import X\n"
         "def f():\n  from tinyhybrid import nn\nif TYPE_CHECKING:\n  from tinyhybrid.runtime import ops_cl\n")
  got = _imports(PKG / "engine" / "x.py", source=src)
  assert {"tinyhybrid.nn.optim", "tinyhybrid.tensor", "tinyhybrid.runtime.ops_cpu", "tinyhybrid.nn", "tinyhybrid.runtime.ops_cl"} <= got
  assert "tinyhybrid.runtime.ops_cl" not in _imports(PKG / "engine" / "x.py", type_checking=False, source=src)
  assert "tinyhybrid.tensor" in _imports(PKG / "engine" / "jit.py")
  assert len(_modules(*LOWER)) > 20


@pytest.mark.parametrize("path", _modules(*LOWER), ids=_name)
def test_no_tensor_or_nn_below_the_api(path: Path):
  if _name(path) in TENSOR_ALLOWED: pytest.skip(f"{_name(path)} is allow-listed (see TENSOR_ALLOWED)")
  bad = sorted(m for m in _imports(path) if _under(m, "tinyhybrid.tensor", "tinyhybrid.nn"))
  assert not bad, f"{_name(path)} imports {bad}: realize hands buffers back, and Tensor applies them"


def test_allow_list_is_current():
  """An allow-listed module that no longer imports the Tensor API leaves the list."""
  for name in TENSOR_ALLOWED:
    assert any(_under(m, "tinyhybrid.tensor", "tinyhybrid.nn") for m in _imports(PKG / name)), f"{name}: drop it from TENSOR_ALLOWED"


@pytest.mark.parametrize("path", _modules("codegen", "renderer", "engine"), ids=_name)
def test_codegen_renderers_and_engine_load_no_device(path: Path):
  # not even for a type (a renderer's device properties, CLProperties, live with the renderer); the engine asks a
  # device for what it can do (Compiled.runner, chain_runner), never for its class
  bad = sorted(m for m in _imports(path) if _under(m, "tinyhybrid.runtime") and m.rpartition(".")[2].startswith("ops_"))
  assert not bad, f"{_name(path)} imports the runtime device modules {bad}"


# the code generator's search, whose BEAM compiles and times candidates on a device: the one module of codegen and the
# renderers that needs one (the pass list takes its choice as a function, codegen.Chooser)
DEVICE_ALLOWED = {"codegen/search.py"}


@pytest.mark.parametrize("path", _modules("codegen", "renderer"), ids=_name)
def test_passes_and_renderers_need_no_device(path: Path):
  if _name(path) in DEVICE_ALLOWED: assert "tinyhybrid.device" in _imports(path), f"{_name(path)}: drop it from DEVICE_ALLOWED"
  else: assert "tinyhybrid.device" not in _imports(path), f"{_name(path)} imports the device layer: rendering needs no device"


@pytest.mark.parametrize("path", _modules("runtime", "codegen", "renderer", "schedule"), ids=_name)
def test_nothing_below_the_engine_imports_it(path: Path):
  bad = sorted(m for m in _imports(path) if _under(m, "tinyhybrid.engine"))
  assert not bad, f"{_name(path)} imports {bad}"


@pytest.mark.parametrize("path", _modules("uop"), ids=_name)
def test_the_ir_imports_nothing_above_it(path: Path):
  # (device.py is below: it holds Buffer, the arg of a BUFFER node)
  above = ("tinyhybrid.schedule", "tinyhybrid.engine", "tinyhybrid.runtime", "tinyhybrid.codegen", "tinyhybrid.renderer",
           "tinyhybrid.tensor", "tinyhybrid.nn", "tinyhybrid.mixin")
  bad = sorted(m for m in _imports(path) if _under(m, *above))
  assert not bad, f"{_name(path)} imports {bad}: the IR's rules live in uop/, and the layers above use them"


@pytest.mark.parametrize("path", [PKG / "tensor.py", PKG / "distributed.py", *_modules("mixin", "nn")], ids=_name)
def test_the_api_takes_buffer_views_from_the_ir(path: Path):
  """Which node is memory, and which bytes of it, are facts of the IR (uop/buffers.py), not the scheduler's."""
  bad = sorted(m for m in _imports(path) if _under(m, "tinyhybrid.schedule.kernelize"))
  assert not bad, f"{_name(path)} imports {bad}: buffer views live in uop/buffers.py"


@pytest.mark.parametrize("name, below", [
  ("dtype.py", ("tinyhybrid.device", "tinyhybrid.runtime")),  # dtype owns its NumPy table (np_storage)
  ("device.py", ("tinyhybrid.runtime",)),  # device owns CompileError; runtime modules build on device, not the reverse
])
def test_the_base_modules_import_nothing_above_them(name: str, below: tuple[str, ...]):
  bad = sorted(m for m in _imports(PKG / name) if _under(m, *below))
  assert not bad, f"{name} imports {bad}"


def test_the_kernel_passes_share_types_without_cycles():
  """The kernel's shared types live in codegen/kernel.py, so no two codegen modules import each other."""
  mods = {_name(p): {m for m in _imports(p) if _under(m, "tinyhybrid.codegen")} for p in _modules("codegen")}
  def names(m: str) -> str: return m.removeprefix("tinyhybrid.").replace(".", "/") + ".py"
  pairs = sorted((a, b) for a, deps in mods.items() for b in {names(m) for m in deps} if b in mods and a < b
                 and any(names(m) == a for m in mods[b]))
  assert not pairs, f"codegen modules that import each other: {pairs}"
  assert not any(_under(m, "tinyhybrid.codegen.opt") for m in _imports(PKG / "codegen" / "kernel.py"))


def test_realize_uops_hands_back_the_becomes_map():
  """The engine realizes UOp graphs without any Tensor: it returns what each root became, and nothing else changes."""
  a_np, b_np = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  s, m = (a + b).sum(1), a * b
  roots = [s.uop, m.uop]
  becomes = engine.realize_uops(a.device, roots)
  assert set(becomes) >= set(roots) and s.uop is roots[0] and m.uop is roots[1]  # the tensors are left alone
  for r, want in zip(roots, [(a_np + b_np).sum(1), a_np * b_np]):
    v = becomes[r]
    assert v.op is Ops.BUFFER or v.op is Ops.RESHAPE, v.op
    np.testing.assert_allclose(Tensor(v, device=a.device).numpy(), want, rtol=1e-6)
  # an assign becomes its target, whose buffer now holds the value
  t = Tensor.zeros(3).contiguous().realize()
  st = UOp(Ops.STORE, t.dtype, (t.uop, (t + 2).uop))
  assert engine.realize_uops(t.device, [st])[st] is t.uop
  np.testing.assert_equal(t.numpy(), [2.0, 2.0, 2.0])

