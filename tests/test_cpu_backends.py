"""The CPU device's backends without a compiler process: LLVM (DEV=CPU:LLVM: LLVM IR rendered by renderer/llvmir.py,
compiled in this process by llvmlite, runtime/llvm.py) and x86 (DEV=CPU:X86: machine code selected, register-allocated
and encoded here, renderer/isa/x86.py, runtime/x86.py). Their values against the C backend's for the same kernels,
bit for bit; the paths their renderers have of their own (masked and gated loads, grouped reduces, variables,
bfloat16 and half, spills); how the device is chosen; and the suite's torch comparisons with no C compiler at all."""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyhybrid import Tensor, Variable, dtypes
from tinyhybrid.device import CompileError, Device
from tinyhybrid.helpers import Context

LLVM, X86, CLANG = "CPU:LLVM", "CPU:X86", "CPU:CLANG"
BACKENDS = pytest.mark.parametrize("dev", [LLVM, X86])
ROOT = Path(__file__).resolve().parent.parent

F32 = np.array([0.0, -0.0, 1.5, -2.25, 3e38, -3e38, 1e-40, np.inf, -np.inf, np.nan, 7.0, -7.5, 0.1, 100.0, -0.5, 2.0], np.float32)
I32 = np.array([0, 1, -1, 7, -7, 2**31 - 1, -2**31, 100, -100, 3, -3, 5, 65536, -65537, 12, 13], np.int32)


def _both(dev: str, fn, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """fn's result on backend dev and on the C backend, from the same inputs."""
  out = []
  for d in (dev, CLANG):
    out.append(fn(*(Tensor(a, device=d) for a in arrays)).numpy())
  return out[0], out[1]


def _same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
  assert a.dtype == b.dtype and a.shape == b.shape, what
  if a.dtype.kind == "f":  # every NaN is the same NaN
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    np.testing.assert_array_equal(nan_a, nan_b, err_msg=what)
    a, b = np.where(nan_a, 0, a), np.where(nan_b, 0, b)
  np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=what)


FLOAT_OPS = {
  "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "sub": lambda a, b: a - b,
  "max": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b, "ne": lambda a, b: a != b, "eq": lambda a, b: a == b,
  "sqrt": lambda a, b: a.abs().sqrt(), "exp2": lambda a, b: a.exp2(), "log2": lambda a, b: a.abs().log2(),
  "sin": lambda a, b: (a * 0.001).sin(), "trunc": lambda a, b: a.trunc(), "recip": lambda a, b: a.reciprocal(),
  "neg": lambda a, b: -a, "where": lambda a, b: (a < b).where(a, b * 2), "to_bool": lambda a, b: a.cast(dtypes.bool),
  "to_half": lambda a, b: a.cast(dtypes.half), "to_bf16": lambda a, b: a.cast(dtypes.bfloat16).cast(dtypes.float),
  "to_double": lambda a, b: a.cast(dtypes.float64), "bits": lambda a, b: a.bitcast(dtypes.uint32),
}


@BACKENDS
@pytest.mark.parametrize("name", sorted(FLOAT_OPS))
def test_float_ops_match_c_bit_for_bit(dev, name):
  a, b = F32, np.roll(F32, 3)
  _same_bits(*_both(dev, FLOAT_OPS[name], a, b), name)


INT_OPS = {
  "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "idiv": lambda a, b: a.idiv(b), "shl": lambda a, b: a << 3,
  "shr": lambda a, b: a >> 2, "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
  "max": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b, "mul": lambda a, b: a * b, "add": lambda a, b: a + b,
  "neg": lambda a, b: -a, "to_float": lambda a, b: a.cast(dtypes.float), "to_int8": lambda a, b: a.cast(dtypes.int8),
  "to_uint16": lambda a, b: a.cast(dtypes.uint16), "to_int64": lambda a, b: a.cast(dtypes.int64),
  "u_div": lambda a, b: a.cast(dtypes.uint32) // b.cast(dtypes.uint32), "u_shr": lambda a, b: a.cast(dtypes.uint32) >> 3,
  "u_lt": lambda a, b: a.cast(dtypes.uint32) < b.cast(dtypes.uint32), "u_to_float": lambda a, b: a.cast(dtypes.uint32).cast(dtypes.float),
  "i8_wrap": lambda a, b: a.cast(dtypes.int8) * b.cast(dtypes.int8) + 100, "u8_max": lambda a, b: a.cast(dtypes.uint8).maximum(b.cast(dtypes.uint8)),
}


@BACKENDS
@pytest.mark.parametrize("name", sorted(INT_OPS))
def test_int_ops_match_c_bit_for_bit(dev, name):
  # the divisors include 0 and -1 (0 gives 0; the most negative value by -1 wraps)
  a, b = I32, np.roll(I32, 5)
  _same_bits(*_both(dev, INT_OPS[name], a, b), name)


@BACKENDS
def test_bool_ops_and_bitcast(dev):
  a = np.array([True, False, True, False, True, True, False, False])
  b = np.roll(a, 1)
  for name, fn in {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y,
                   "to_int": lambda x, y: x.cast(dtypes.int32) + y.cast(dtypes.int32), "to_float": lambda x, y: x.cast(dtypes.float) * 2.5,
                   "bits": lambda x, y: x.bitcast(dtypes.uint8), "where": lambda x, y: x.where(1.0, y.cast(dtypes.float))}.items():
    ours, c = _both(dev, fn, a, b)
    _same_bits(ours, c, name)
  np.testing.assert_array_equal(Tensor(a, device=dev).bitcast(dtypes.uint8).numpy(), a.view(np.uint8))


@BACKENDS
def test_half_and_bfloat16_round_as_c(dev):
  x = np.linspace(-3, 3, 37).astype(np.float32) + np.float32(1 / 3)
  for name, fn in {"half_arith": lambda a: (a.cast(dtypes.half) * 1.7 + 0.3).cast(dtypes.float),
                   "half_exp2": lambda a: a.cast(dtypes.half).exp2(),
                   "bf16_arith": lambda a: (a.cast(dtypes.bfloat16) * 1.7 + 0.3).cast(dtypes.float),
                   "bf16_bits": lambda a: a.cast(dtypes.bfloat16).bitcast(dtypes.uint16),
                   "double_to_half": lambda a: (a.cast(dtypes.float64) / 3).cast(dtypes.half)}.items():
    _same_bits(*_both(dev, fn, x), name)
  # a double rounds to half once: 1 + 2^-11 + 2^-40 is just above the tie between 1 and the next half, 1 + 2^-10
  d = np.array([1 + 2.0 ** -11 + 2.0 ** -40, -(1 + 2.0 ** -11 + 2.0 ** -40)], np.float64)
  np.testing.assert_array_equal(Tensor(d, device=dev).cast(dtypes.half).numpy(), d.astype(np.float16))


@BACKENDS
def test_gated_and_masked_loads(dev):
  # padding gates the loads at the border; 17 and 23 leave vectors hanging over the end of a row (masked lanes)
  x = np.random.default_rng(0).standard_normal((2, 3, 17, 23)).astype(np.float32)
  w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
  import torch
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
  np.testing.assert_allclose(Tensor(x, device=dev).conv2d(Tensor(w, device=dev), padding=1).numpy(), ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(Tensor(x, device=dev).pad(((0, 0), (0, 0), (2, 1), (3, 0))).numpy(), np.pad(x, ((0, 0), (0, 0), (2, 1), (3, 0))))
  h = x.astype(np.float16)
  np.testing.assert_array_equal(Tensor(h, device=dev)[:, :, 1:, 2:].pad(((0, 0), (0, 0), (1, 0), (2, 0))).numpy(), np.pad(h[:, :, 1:, 2:], ((0, 0), (0, 0), (1, 0), (2, 0))))


@BACKENDS
def test_reduces_split_across_cores(dev):
  x = np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32)
  np.testing.assert_allclose(Tensor(x, device=dev).sum().numpy(), x.astype(np.float64).sum(), rtol=1e-4)
  x[12345] = np.nan
  assert np.isnan(Tensor(x, device=dev).max().numpy())
  i = np.arange(1 << 20, dtype=np.int32) % 1000 - 500
  assert Tensor(i, device=dev).max().item() == 499 and Tensor(i, device=dev).sum().item() == int(i.sum())
  m = np.random.default_rng(3).standard_normal((300, 700)).astype(np.float32)
  np.testing.assert_allclose(Tensor(m, device=dev).max(axis=1).numpy(), m.max(1))
  np.testing.assert_allclose((Tensor(m, device=dev) @ Tensor(m.T.copy(), device=dev)).numpy(), m @ m.T, rtol=1e-4, atol=1e-3)


@BACKENDS
def test_variables(dev):
  x = np.arange(40, dtype=np.float32).reshape(10, 4)
  v = Variable("n", 1, 10)
  for n in (3, 7):
    np.testing.assert_allclose(Tensor(x, device=dev)[:v.bind(n)].sum(axis=0).numpy(), x[:n].sum(0))


@pytest.mark.parametrize("dt", [dtypes.fp8e4m3, dtypes.fp8e5m2], ids=str)
def test_fp8_matches_c_bit_for_bit(dt):
  # every byte decoded; values between, past the largest finite, tiny (subnormal), NaN and inf encoded
  every = np.arange(256, dtype=np.uint8)
  _same_bits(*_both(LLVM, lambda b: b.bitcast(dt).cast(dtypes.float), every), "decode")
  x = np.concatenate([F32, np.linspace(-600, 600, 97, dtype=np.float32), np.float32(2.0 ** -np.arange(1, 24))])
  for name, fn in {"encode": lambda a: a.cast(dt).bitcast(dtypes.uint8), "arith": lambda a: (a.cast(dt) * 1.3 + 0.1).cast(dtypes.float),
                   "from_double": lambda a: (a.cast(dtypes.float64) / 3).cast(dt).bitcast(dtypes.uint8),
                   "sum": lambda a: a.reshape(-1, 2).cast(dt).sum(axis=1).cast(dtypes.float)}.items():
    _same_bits(*_both(LLVM, fn, x[:len(x) // 2 * 2]), name)


def test_bad_ir_is_a_compile_error_naming_the_kernel(tmp_path):
  tc = Device[LLVM].toolchain
  with pytest.raises(CompileError, match="kernel broken: LLVM rejects its IR"):
    tc.build([("broken", "broken_1", "define void @broken() { ret i32 0 }")], tmp_path / "k.o", "broken")


def test_debug_prints_the_ir(capfd):
  with Context(DEBUG=4):
    (Tensor([1.0, 2.0, 3.0], device=LLVM) * 7 + 1).realize()
  out = capfd.readouterr().out
  assert re.search(r"define void @E_\w+\(ptr %args, i32 %core_id, i32 %num_cores\)", out), out[-2000:]


def test_device_selection(monkeypatch):
  from tinyhybrid.runtime import compiler, ops_cpu
  assert ops_cpu.renderer_name("CPU:LLVM") == "LLVM" and ops_cpu.renderer_name("CPU:1:CLANG") == "CLANG"
  assert ops_cpu.renderer_name("CPU:X86") == "X86" and Device.canonicalize("cpu:2:x86") == "CPU:2:X86"
  monkeypatch.setenv("CPU_LLVM", "1")
  assert ops_cpu.renderer_name("CPU") == "LLVM"
  monkeypatch.delenv("CPU_LLVM")
  monkeypatch.setenv("CPU_CC", "llvm")
  assert ops_cpu.renderer_name("CPU:3") == "LLVM"
  monkeypatch.setenv("CPU_CC", "GCC")
  with pytest.raises(ValueError, match="the CPU device has no renderer 'GCC'"): ops_cpu.renderer_name("CPU")
  monkeypatch.delenv("CPU_CC")
  with pytest.raises(ValueError, match="unknown device"): Device.canonicalize("CPU:NOPE")

  # gcc renders scalar code: with llvmlite installed LLVM is the default, without it C all the same
  monkeypatch.setattr(ops_cpu, "is_clang", lambda: False)
  assert ops_cpu.renderer_name("CPU") == "LLVM"
  real_find_spec = ops_cpu.importlib.util.find_spec
  monkeypatch.setattr(ops_cpu.importlib.util, "find_spec", lambda n, *a: None if n == "llvmlite" else real_find_spec(n, *a))
  assert ops_cpu.renderer_name("CPU") == "CLANG"
  monkeypatch.setattr(ops_cpu, "is_clang", lambda: True)
  assert ops_cpu.renderer_name("CPU") == "CLANG"

  def none() -> str: raise RuntimeError("no C compiler found")
  monkeypatch.setattr(ops_cpu, "c_compiler", none)
  assert ops_cpu.renderer_name("CPU") == "X86"  # no C compiler and no llvmlite: machine code written here
  monkeypatch.setattr(ops_cpu.importlib.util, "find_spec", real_find_spec)
  assert ops_cpu.renderer_name("CPU") == "LLVM"  # no C compiler: LLVM in process
  assert compiler.c_compiler is not none


def test_missing_llvmlite_names_the_package(monkeypatch):
  from tinyhybrid.runtime import llvm
  llvm.llvm.cache_clear()
  monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
  try:
    with pytest.raises(RuntimeError, match=r"needs llvmlite: pip install 'tinyhybrid\[llvm\]'"): llvm.llvm()
  finally:
    llvm.llvm.cache_clear()


_COMPILERS = re.compile(r"(^|-)(cc|gcc|clang|c\+\+|g\+\+|clang\+\+|tcc|icx|icc)(-[0-9.]+)?$")


def _path_without_compilers(bindir: Path) -> str:
  """A PATH of one folder holding links to every program on this PATH but the C and C++ compilers."""
  bindir.mkdir()
  for d in os.environ.get("PATH", "").split(os.pathsep):
    if not d or not Path(d).is_dir(): continue
    for f in Path(d).iterdir():
      if _COMPILERS.search(f.name) or (bindir / f.name).exists() or not os.access(f, os.X_OK) or f.is_dir(): continue
      (bindir / f.name).symlink_to(f)
  return str(bindir)


# run in the child: tinyhybrid may start no process (a test's other libraries may); the default CPU device is LLVM's
_NO_COMPILER = """
import os, subprocess, sys, traceback
import tinyhybrid
ours, start = os.path.dirname(tinyhybrid.__file__), subprocess.Popen.__init__
def guarded(self, args, *a, **k):
  if any(f.filename.startswith(ours) for f in traceback.extract_stack()): raise AssertionError(f"tinyhybrid started a process: {args!r}")
  start(self, args, *a, **k)
subprocess.Popen.__init__ = guarded
from tinyhybrid import Device
from tinyhybrid.renderer.llvmir import LLVMRenderer
assert isinstance(Device["CPU"].renderer, LLVMRenderer), Device["CPU"].renderer
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "-p", "no:benchmark", *sys.argv[1:]]))
"""


def test_torch_comparisons_with_no_c_compiler(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("CC", "DEV", "CPU_LLVM", "CPU_CC", "PYTEST_XDIST_WORKER")}
  env.update(PATH=_path_without_compilers(tmp_path / "bin"), TINYHYBRID_CACHE=str(tmp_path / "cache"))
  mods = [str(ROOT / "tests" / m) for m in ("test_tensor_ops.py", "test_int_division.py")]
  res = subprocess.run([sys.executable, "-c", _NO_COMPILER, *mods], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=900)
  tail = (res.stdout + res.stderr)[-3000:]
  assert res.returncode == 0, tail
  assert re.search(r"\d+ passed", tail) and "failed" not in tail, tail


def test_repaired_wheel_runs_the_main_job_with_no_compiler(tmp_path):
  # the wheel users install: built, repaired to a manylinux tag by auditwheel (its libraries grafted in), installed
  # into a fresh virtual environment, and the main job run there with no C compiler on PATH, on the CPU's default
  # in-process backend. The environment reads the job's other packages (numpy, scikit-learn) from this one's
  # site-packages, listed after its own, so that nothing is downloaded and this checkout's tinyhybrid stays out.
  wheels, fixed, venv = tmp_path / "wheels", tmp_path / "fixed", tmp_path / "venv"
  run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=1200)
  res = run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(wheels), f"-Cbuild-dir={ROOT / 'build' / 'wheel-test'}"])
  assert res.returncode == 0, res.stderr[-3000:]
  res = run([sys.executable, "-m", "auditwheel", "repair", str(next(wheels.glob("tinyhybrid-*.whl"))), "-w", str(fixed)])
  assert res.returncode == 0, res.stderr[-3000:]
  wheel = next(fixed.glob("tinyhybrid-*.whl"))
  assert re.search(r"-manylinux_2_\d+_x86_64\.whl$", wheel.name), wheel.name
  assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
  python = venv / "bin" / "python"
  site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
  res = run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)])
  assert res.returncode == 0, res.stderr[-3000:]
  (site / "outer.pth").write_text("\n".join(p for p in sys.path if p.endswith("-packages")) + "\n")
  env = {k: v for k, v in os.environ.items() if k not in ("CC", "DEV", "CPU_LLVM", "CPU_CC", "PYTEST_XDIST_WORKER", "PYTHONPATH")}
  env.update(PATH=_path_without_compilers(tmp_path / "bin"), TINYHYBRID_CACHE=str(tmp_path / "cache"))
  where = run([str(python), "-c", "import tinyhybrid; from tinyhybrid import Device; print(tinyhybrid.__file__, Device['CPU'].renderer.__class__.__name__)"],
              env=env, cwd=tmp_path)
  assert where.stdout.startswith(str(site)) and where.stdout.split()[-1] in ("LLVMRenderer", "X86Renderer"), where.stdout + where.stderr[-2000:]
  job = run([str(python), str(ROOT / "examples" / "train_digits.py")], env=env, cwd=tmp_path)
  assert job.returncode == 0 and re.search(r"test accuracy: 9\d\.\d%", job.stdout), (job.stdout + job.stderr)[-3000:]


def test_x86_spills_values_past_its_registers(monkeypatch, capfd):
  # a register tile planned for 60 registers: far more accumulators live at once than x86 has
  monkeypatch.setattr(Device[X86].renderer, "registers", 60)
  a = np.random.default_rng(4).standard_normal((37, 53)).astype(np.float32)
  b = np.random.default_rng(5).standard_normal((53, 41)).astype(np.float32)
  with Context(DEBUG=4): out = (Tensor(a, device=X86) @ Tensor(b, device=X86)).numpy()
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
  spilled = [int(n) for n in re.findall(r"\((\d+) values spilled to \d+ bytes\)", capfd.readouterr().out)]
  assert spilled and max(spilled) > 0


def test_x86_vector_code_matches_c(capfd):
  # 8 lanes a ymm register (AVX2): float32, int32 and uint32 vectors, lane masks from comparisons, per-lane shift
  # amounts, conversions between uint32 and float across 2^31, constants read from the pool; bit for bit with C
  if not Device[X86].renderer.vec > 1: pytest.skip("this CPU has no AVX2")
  u = np.array([0, 1, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**24 + 1, 3_000_000_001, 77, 2**31 + 2**8 + 1, 5, 6, 7, 8, 9, 10], np.uint32)
  f = np.array([0.0, 1.5, 2.0**31 - 128, 2.0**31, 2.0**31 + 256, 4.0e9, 2.0**32 - 256, 3.7, 1e5, 0.9, 16777216.0, 7.5, 8.25, 9.0, 10.0, 11.0], np.float32)
  s = (np.arange(16) % 31).astype(np.int32)
  cases = {"u32_to_float": (lambda a: a.cast(dtypes.float) * 1.0, u), "float_to_u32": (lambda a: a.cast(dtypes.uint32) + 1, f),
           "u32_order": (lambda a: (a < a.flip(0)).where(a, a.flip(0) ^ 0xFFFF), u), "u32_max": (lambda a: a.maximum(a.flip(0)) >> 1, u),
           "per_lane_shift": (lambda a: (a << a) ^ (a >> (a & 7)), s), "i32_max_neg": (lambda a: (-a).maximum(a - 20) * 3, s)}
  for name, (fn, x) in cases.items(): _same_bits(*_both(X86, fn, x), name)
  with Context(DEBUG=4): Tensor(f, device=X86).exp2().sqrt().realize()
  out = capfd.readouterr().out
  assert re.search(r"vsqrtps ymm\d+", out) and re.search(r"\[\.Lpool\d+\]", out), out[-3000:]


def test_x86_instructions_are_what_its_text_says():
  # the renderer hands the encoder its instructions with the text (no text is read back on a build); the text read
  # back (runtime/x86.parse, what a DEBUG=4 listing or a hand-written kernel goes through) must give the same ones
  from tinyhybrid.renderer.isa.x86 import X86Writer
  from tinyhybrid.runtime.x86 import parse
  seen = []
  write = X86Writer.write
  def capture(self):
    seen.append(src := write(self))
    return src
  X86Writer.write = capture  # type: ignore[method-assign]
  try:
    a = Tensor(np.random.default_rng(6).standard_normal((19, 37)).astype(np.float32), device=X86)
    Tensor.realize((a @ a.T).softmax(), a.pad(((1, 2), (3, 0))).max(0), (a.cast(dtypes.int32) << 2) // 3, a.cast(dtypes.half).exp2())
  finally: X86Writer.write = write  # type: ignore[method-assign]
  assert len(seen) >= 4
  for src in seen: assert parse(str(src)) == src.program, src  # type: ignore[attr-defined]


def test_x86_refuses_what_it_cannot_encode():
  from tinyhybrid.renderer.cstyle import CRenderer
  from tinyhybrid.renderer.isa.x86 import X86Renderer
  seen = []
  render = CRenderer.render
  def capture(self, k):
    seen.append(k)
    return render(self, k)
  CRenderer.render = capture  # type: ignore[method-assign]
  try:
    (Tensor(np.arange(64, dtype=np.float32), device=CLANG) * 3 + 1).realize()
    (Tensor(np.arange(64, dtype=np.float64), device=CLANG) * 3 + 1).realize()
  finally: CRenderer.render = render  # type: ignore[method-assign]
  floats, doubles = (next(k for k in seen if any(u.dtype.count > 1 and u.dtype.scalar() is dt for u in k.ast.toposort()))
                     for dt in (dtypes.float32, dtypes.float64))
  # vectors of float32 need AVX2; vectors of float64 the x86 renderer has none of (the expander does them lane by lane)
  with pytest.raises(NotImplementedError, match=rf"kernel {floats.name}: the x86 renderer can't encode Ops\.\w+ of dtypes\.float\.vec\(\d+\) \(this CPU has no AVX2\)"):
    X86Renderer(frozenset({"fma"})).render(floats)
  with pytest.raises(NotImplementedError, match=rf"kernel {doubles.name}: the x86 renderer can't encode Ops\.\w+ of dtypes\.double\.vec\(\d+\)"):
    X86Renderer(frozenset({"avx2", "fma"})).render(doubles)
  with pytest.raises(TypeError, match=r"kernel \S+: the x86 renderer has no dtypes\.fp8e4m3"):
    Tensor([1.0, 2.0], device=X86).cast(dtypes.fp8e4m3).realize()


@pytest.mark.parametrize("avx512", [False, True])
def test_x86_converts_uint64_and_floats_with_or_without_avx512(monkeypatch, avx512):
  # AVX-512 has unsigned conversions; without it (an AVX2 host) a value from 2^63 up is halved with a sticky bit,
  # converted as signed and doubled, and a float from 2^63 up converted less 2^63 with the top bit set again
  if avx512 and not Device[X86].renderer.avx512: pytest.skip("this CPU has no AVX-512")
  monkeypatch.setattr(Device[X86].renderer, "avx512", avx512)
  u = np.array([0, 1, 3, 2**24 + 1, 2**53 + 1, 2**63 - 1, 2**63, 2**63 + 2**40 + 1, 2**64 - 1, 12345678901234567, 7], dtype=np.uint64)
  for dt, ref in ((dtypes.float32, np.float32), (dtypes.float64, np.float64)):
    np.testing.assert_array_equal(Tensor(u, device=X86).cast(dt).numpy(), u.astype(ref), err_msg=str(dt))
  f = np.array([0, 1.5, 2.0**40, 2.0**63 - 2**40, 2.0**63, 2.0**63 + 2**41, 1.8e19, 3.0, 5.0, 6.0, 9.0])
  for ref in (np.float64, np.float32):
    np.testing.assert_array_equal(Tensor(f.astype(ref), device=X86).cast(dtypes.uint64).numpy(), f.astype(ref).astype(np.uint64), err_msg=ref.__name__)
