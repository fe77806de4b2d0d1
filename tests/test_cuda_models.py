"""Compile-only mode on whole models: every kernel of a ResNet-50 training step (forward, backward, SGD with momentum;
batch 2 of 64x64 images: the same layers, so the same kernels as at full size, less work to schedule) and of a
transformer block's forward and backward is rendered and compiled for sm_90, as CUDA C++ by NVRTC and as PTX by
ptxas, with nothing run (DEV=NULL:CUDA:sm_90, DEV=NULL:PTX:sm_90). Each run is a fresh process whose default
device is the target; it fails on the first kernel that does not compile, naming it. Compiled kernels are cached on
disk (TINYHYBRID_CACHE), so a second run compiles nothing new."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import importlib.util, json, sys
from tinyhybrid import Context, Device, Tensor, dtypes, nn
from tinyhybrid.engine import realize
from tinyhybrid.runtime import cuda_compiler

compiled = set()
build = cuda_compiler.build_kernels
def counting(compiler, kernels):
  out = build(compiler, kernels)
  compiled.update(kernels)
  return out
cuda_compiler.build_kernels = counting

def resnet_step():
  spec = importlib.util.spec_from_file_location("resnet_null", sys.argv[2])
  rn = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(rn)
  model = rn.resnet50(Tensor, nn)
  params = nn.state.get_parameters(model)
  with Context(TRAINING=1):
    opt = nn.optim.SGD([p for p in params if getattr(p, "requires_grad", None) is not False], lr=0.01, momentum=0.9)
    loss = model(Tensor.empty(2, 3, 64, 64)).sparse_categorical_crossentropy(Tensor.empty(2, dtype=dtypes.int32))
    opt.zero_grad()
    loss.backward()
    opt.step()

def transformer_block():
  dim, heads, T = 128, 4, 32
  ln1, ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
  qkv, proj, up, down = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
  x = Tensor.randn(2, T, dim, requires_grad=True)
  with Context(TRAINING=1):
    q, k, v = [t.reshape(2, T, heads, dim // heads).transpose(1, 2) for t in qkv(ln1(x)).chunk(3, dim=-1)]
    h = x + proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(2, T, dim))
    out = h + down(up(ln2(h)).gelu())
    out.square().mean().backward()
    Tensor.realize(out, x.grad, *[p.grad for m in (ln1, ln2, qkv, proj, up, down) for p in nn.state.get_parameters(m) if p.grad is not None])

{"resnet": resnet_step, "transformer": transformer_block}[sys.argv[1]]()
kernels = {(prg.name, prg.src) for _, prg in realize.kernel_cache.values()}
print(json.dumps({"device": Device.DEFAULT, "kernels": len(kernels), "not_compiled": len(kernels - compiled)}))
"""


@pytest.mark.parametrize("model", ["resnet", "transformer"])
@pytest.mark.parametrize("dev", ["NULL:CUDA:sm_90", "NULL:PTX:sm_90"])
def test_model_kernels_compile_for_sm90(model, dev):
  env = {**os.environ, "DEV": dev}
  res = subprocess.run([sys.executable, "-c", SCRIPT, model, str(ROOT / "bench" / "resnet_null.py")], env=env, capture_output=True, text=True,
                       timeout=1500)
  assert res.returncode == 0, res.stderr[-6000:]
  got = json.loads(res.stdout.strip().splitlines()[-1])
  assert got["device"] == dev
  # every kernel went through the compiler (found in its disk cache, or built by it)
  assert got["kernels"] >= (300 if model == "resnet" else 25) and got["not_compiled"] == 0


@pytest.mark.parametrize("dev", ["NULL:CUDA:sm_90", "NULL:PTX:sm_90"])
def test_suite_kernels_compile_for_sm90(dev):
  """The torch-comparison tests of tests/test_tensor_ops.py (forward and gradients) with every kernel compiled for the
  target and nothing run (tests/compile_only.py): a kernel that does not compile fails its test."""
  env = {**os.environ, "DEV": dev, "PYTHONPATH": str(ROOT / "tests")}
  res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "compile_only", "-p", "no:cacheprovider", "-p", "no:xdist",
                        str(ROOT / "tests" / "test_tensor_ops.py")], env=env, capture_output=True, text=True, timeout=1500, cwd=ROOT)
  assert res.returncode == 0, res.stdout[-6000:]
  summary = res.stdout.strip().splitlines()[-1]
  passed = int(summary.split(" passed")[0].split()[-1])
  assert passed >= 90 and " failed" not in summary and " error" not in summary, summary
