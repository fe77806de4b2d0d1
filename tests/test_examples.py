"""The example scripts run and give the results they claim; the CNN's gradients match torch."""
import importlib.util
import os

import numpy as np
import pytest
import torch

HERE = os.path.join(os.path.dirname(__file__), "..", "examples")


def _load(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_mlp_sgd_learns_spirals():
  assert _load("mlp_sgd").main(steps=100) > 0.9


def test_cnn_forward_backward_matches_torch():
  from tinyhybrid import Tensor
  mod = _load("cnn")
  out = mod.main()
  Tensor.manual_seed(1)
  imgs = torch.tensor(Tensor.rand(8, 1, 16, 16).numpy())
  weights = [torch.tensor(Tensor.kaiming_uniform(*s).numpy(), requires_grad=True) for s in ((8, 1, 3, 3), (16, 8, 3, 3), (256, 10))]
  x = torch.nn.functional.avg_pool2d(torch.nn.functional.conv2d(torch.nn.functional.max_pool2d(
    torch.nn.functional.conv2d(imgs, weights[0], padding=1).relu(), 2), weights[1], padding=1).relu(), 2)
  logits = x.flatten(1) @ weights[2]
  labels = torch.tensor([i % 10 for i in range(8)])
  loss = torch.nn.functional.cross_entropy(logits, labels)
  loss.backward()
  np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-4)
  for ours, w in zip(out["grads"], weights): np.testing.assert_allclose(ours, w.grad.numpy(), rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(out["picked"], logits.detach().numpy()[np.arange(8), labels.numpy()], rtol=1e-4, atol=1e-5)
  want = np.zeros((4, 4), np.float32)
  want[1:3, ::2] = 7.0
  np.testing.assert_array_equal(out["buf"], want)


def test_compile_error_names_compiler_message_and_source():
  from tinyhybrid.runtime.compiler import compile_shared
  from tinyhybrid.device import CompileError
  with pytest.raises(RuntimeError) as e:
    compile_shared([("broken", "void broken(const unsigned long long* args) { this is not C; }")])
  assert isinstance(e.value, CompileError)
  assert "broken" in str(e.value) and "this is not C" in str(e.value) and "error" in str(e.value)


def test_a_batch_with_a_broken_kernel_names_that_kernel(tmp_path, monkeypatch):
  from tinyhybrid.runtime.compiler import compile_shared
  from tinyhybrid.device import CompileError
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  good = ("fine", "void fine(const unsigned long long* args) { (void)args; }")
  with pytest.raises(CompileError, match="kernel broken") as e:
    compile_shared([good, ("broken", "void broken(const unsigned long long* args) { this is not C; }")])
  assert "this is not C" in str(e.value)


def test_kernels_compiled_together_share_a_library_and_load_alone(tmp_path, monkeypatch):
  import ctypes
  from tinyhybrid.runtime.compiler import compile_shared, load_kernel
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  # two kernels of one name (different sources) in one file: each gets a symbol of its own
  srcs = [("k", f"void k(unsigned long long* args) {{ args[0] = {v}; }}") for v in (11, 22)] + [("j", "void j(unsigned long long* args) { args[0] = 33; }")]
  built = compile_shared(srcs)
  assert len({p.resolve() for p, _ in built}) == 1 and len({s for _, s in built}) == 3
  assert compile_shared(srcs[1:2]) == built[1:2]  # found in the cache alone, under its own name
  for (path, sym), (name, src), want in zip(built, srcs, (11, 22, 33)):
    out = (ctypes.c_uint64 * 1)()
    keep, addr = load_kernel(path, name, src)
    ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64))(addr)(out)
    assert out[0] == want


def test_main_job_trains_digits():
  # a shortened run of the README's main job: it trains, saves, reloads and scores the same (main checks that)
  out = _load("train_digits").main(steps=120, batch=64)
  assert out["test_accuracy"] > 0.9
