#!/usr/bin/env python3
"""Whole models on the CPU against PyTorch and ONNX Runtime, in the same run, JIT'd steady state, threads matched.

Each case builds the model once for both sides with the same weights, checks that the outputs agree, then times a
step of each (best of BENCH_REPEATS after warm-up) and prints one JSON line:

  {"bench": "models", "case": "resnet50_b1", "unit": "ms", "ours": 61.2, "torch": 48.0, "ratio": 0.78, "target": 1.2}

ratio = anchor time / our time (above 1: we are faster). Cases (`python bench/models.py [case ...]`):
  resnet50_b1, resnet50_b8     ResNet-50 inference (eval mode) at batch 1 and 8, against torch
  resnet50_train_b8            a training step at batch 8 (forward, backward, SGD), against torch
  decoder_fwd_bwd              a GPT-2-small-sized decoder block stack (d 768, 12 heads, DECODER_LAYERS layers, default
                               4), forward and backward at B 4, T 256, against torch
  bert_b1                      BERT-base inference (12 layers, d 768) at T 128, against torch
  onnx_resnet50, onnx_bert     the ResNet-50 and a BERT-style encoder exported with torch.onnx.export, run through
                               tinyhybrid.nn.onnx against ONNX Runtime
The anchors come with the bench extra (torch, onnxruntime, onnxscript)."""
from __future__ import annotations

import io
import os
import sys
from typing import Any, Callable

import numpy as np

from common import best_of, emit, import_tinyhybrid

import_tinyhybrid()
from tinyhybrid import Device, Tensor, TinyJit, nn  # noqa: E402
from tinyhybrid.nn.state import get_parameters, get_state_dict  # noqa: E402

import torch  # noqa: E402

THREADS = len(os.sched_getaffinity(0))
torch.set_num_threads(THREADS)
REPEATS = int(os.getenv("BENCH_REPEATS", "5"))
DECODER_LAYERS = int(os.getenv("DECODER_LAYERS", "4"))


# ** the models, each defined twice with the same parameter names (torch's state-dict keys) **
def resnet50_layers() -> list[tuple[str, list[tuple[int, int, int]]]]:
  """ResNet-50's four layers: each one's name and its bottleneck blocks' (input channels, planes, stride)."""
  layers, cin = [], 64
  for li, (planes, n, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))):
    layers.append((f"layer{li + 1}", [(cin if i == 0 else planes * 4, planes, stride if i == 0 else 1) for i in range(n)]))
    cin = planes * 4
  return layers


def torch_resnet50() -> torch.nn.Module:
  tnn = torch.nn

  class Bottleneck(tnn.Module):
    def __init__(self, cin: int, planes: int, stride: int):
      super().__init__()
      self.conv1, self.bn1 = tnn.Conv2d(cin, planes, 1, bias=False), tnn.BatchNorm2d(planes)
      self.conv2, self.bn2 = tnn.Conv2d(planes, planes, 3, stride, 1, bias=False), tnn.BatchNorm2d(planes)
      self.conv3, self.bn3 = tnn.Conv2d(planes, planes * 4, 1, bias=False), tnn.BatchNorm2d(planes * 4)
      self.downsample = tnn.Sequential(tnn.Conv2d(cin, planes * 4, 1, stride, bias=False), tnn.BatchNorm2d(planes * 4)) \
        if stride != 1 or cin != planes * 4 else None

    def forward(self, x):
      out = self.bn1(self.conv1(x)).relu()
      out = self.bn2(self.conv2(out)).relu()
      out = self.bn3(self.conv3(out))
      return (out + (self.downsample(x) if self.downsample is not None else x)).relu()

  class ResNet50(tnn.Module):
    def __init__(self):
      super().__init__()
      self.conv1, self.bn1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64)
      for name, blocks in resnet50_layers(): setattr(self, name, tnn.Sequential(*[Bottleneck(*b) for b in blocks]))
      self.fc = tnn.Linear(2048, 1000)

    def forward(self, x):
      x = torch.nn.functional.max_pool2d(self.bn1(self.conv1(x)).relu(), 3, 2, 1)
      for li in range(4): x = getattr(self, f"layer{li + 1}")(x)
      return self.fc(x.mean((2, 3)))

  return ResNet50()


class Bottleneck:
  def __init__(self, cin: int, planes: int, stride: int):
    self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv3, self.bn3 = nn.Conv2d(planes, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4)
    self.downsample = [nn.Conv2d(cin, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4)] \
      if stride != 1 or cin != planes * 4 else None

  def __call__(self, x: Tensor) -> Tensor:
    out = self.bn1(self.conv1(x)).relu()
    out = self.bn2(self.conv2(out)).relu()
    out = self.bn3(self.conv3(out))
    return (out + (x.sequential(self.downsample) if self.downsample else x)).relu()


class ResNet50:
  def __init__(self):
    self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
    for name, blocks in resnet50_layers(): setattr(self, name, [Bottleneck(*b) for b in blocks])
    self.fc = nn.Linear(2048, 1000)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.conv1(x)).relu().max_pool2d(kernel_size=(3, 3), stride=2, padding=1)
    for li in range(4): x = x.sequential(getattr(self, f"layer{li + 1}"))
    return self.fc(x.mean((2, 3)))


class TorchBlock(torch.nn.Module):
  """A pre-norm transformer block (GPT-2's with causal=True, BERT's layout of weights with causal=False)."""
  def __init__(self, d: int, heads: int, causal: bool):
    super().__init__()
    self.heads, self.causal = heads, causal
    self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
    self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
    self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

  def forward(self, x):
    B, T, D = x.shape
    q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, -1))
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
    x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
    return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Block:
  def __init__(self, d: int, heads: int, causal: bool):
    self.heads, self.causal = heads, causal
    self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
    self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
    self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

  def __call__(self, x: Tensor) -> Tensor:
    B, T, D = x.shape
    q, k, v = (t.reshape(B, T, self.heads, D // self.heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, -1))
    a = q.scaled_dot_product_attention(k, v, is_causal=self.causal)
    x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
    return x + self.fc2(self.fc1(self.ln2(x)).gelu())


class TorchStack(torch.nn.Module):
  def __init__(self, layers: int, causal: bool):
    super().__init__()
    self.h = torch.nn.ModuleList([TorchBlock(768, 12, causal) for _ in range(layers)])

  def forward(self, x):
    for b in self.h: x = b(x)
    return x


class Stack:
  def __init__(self, layers: int, causal: bool): self.h = [Block(768, 12, causal) for _ in range(layers)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.h)


def load_from_torch(ours: Any, ref: torch.nn.Module) -> None:
  """ref's parameters and buffers into ours, by state-dict name; every one of ours must be set."""
  theirs = ref.state_dict()
  for k, t in get_state_dict(ours).items():
    t.assign(Tensor(theirs[k].detach().numpy(), dtype=t.dtype, device=t.device))
  Tensor.realize(*get_state_dict(ours).values())


# ** timing **
def report(name: str, ours: Callable[[], Any], anchor: Callable[[], Any], target: float, anchor_name: str = "torch") -> None:
  # alternate rounds, so a burst of other work on a shared machine slows both sides
  o, a = float("inf"), float("inf")
  for _ in range(2): o, a = min(o, best_of(ours, REPEATS) * 1e3), min(a, best_of(anchor, REPEATS) * 1e3)
  emit({"bench": "models", "case": name, "unit": "ms", "ours": round(o, 2), anchor_name: round(a, 2), "ratio": round(a / o, 3),
        "target": target, "threads": THREADS, "device": Device.DEFAULT})


def check(name: str, ours: np.ndarray, theirs: np.ndarray, atol: float = 2e-3, rtol: float = 2e-3) -> None:
  try: np.testing.assert_allclose(ours, theirs, atol=atol, rtol=rtol)
  except AssertionError as e: sys.exit(f"{name}: outputs differ from the anchor's\n{e}")


# ** the cases **
def resnet_pair(train: bool) -> tuple[ResNet50, torch.nn.Module]:
  torch.manual_seed(0)
  ref = torch_resnet50()
  ours = ResNet50()
  load_from_torch(ours, ref)
  ref.train(train)
  return ours, ref


def resnet_inference(batch: int) -> None:
  ours, ref = resnet_pair(False)
  x_np = np.random.default_rng(0).standard_normal((batch, 3, 224, 224), dtype=np.float32)
  x, tx = Tensor(x_np).realize(), torch.from_numpy(x_np)
  step = TinyJit(lambda x: ours(x).realize())
  with torch.no_grad():
    check(f"resnet50_b{batch}", step(x).numpy(), ref(tx).numpy())
    report(f"resnet50_b{batch}", lambda: step(x).numpy(), lambda: ref(tx), 1.2)


def resnet_train() -> None:
  ours, ref = resnet_pair(True)
  rng = np.random.default_rng(0)
  x_np, y_np = rng.standard_normal((8, 3, 224, 224), dtype=np.float32), rng.integers(0, 1000, 8).astype(np.int32)
  x, y, tx, ty = Tensor(x_np).realize(), Tensor(y_np).realize(), torch.from_numpy(x_np), torch.from_numpy(y_np).long()
  # every tensor of the model, as tinygrad's examples pass it: the BatchNorm running statistics are the optimizer's
  # buffers, which its step realizes with the update (torch's step moves them too)
  params = get_parameters(ours)
  opt, topt = nn.optim.SGD(params, lr=1e-3, momentum=0.9), torch.optim.SGD(ref.parameters(), lr=1e-3, momentum=0.9)

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = ours(x).sparse_categorical_crossentropy(y).backward()
      opt.step()
      return loss.realize()

  def tstep():
    topt.zero_grad()
    loss = torch.nn.functional.cross_entropy(ref(tx), ty)
    loss.backward()
    topt.step()
    return loss

  check("resnet50_train_b8", step(x, y).numpy(), tstep().detach().numpy(), atol=1e-2, rtol=1e-2)
  report("resnet50_train_b8", lambda: step(x, y).numpy(), tstep, 1.0)


def stack_pair(layers: int, causal: bool) -> tuple[Stack, torch.nn.Module]:
  torch.manual_seed(0)
  ref, ours = TorchStack(layers, causal), Stack(layers, causal)
  load_from_torch(ours, ref)
  return ours, ref


def decoder_fwd_bwd() -> None:
  ours, ref = stack_pair(DECODER_LAYERS, True)
  rng = np.random.default_rng(0)
  x_np, g_np = rng.standard_normal((4, 256, 768), dtype=np.float32), rng.standard_normal((4, 256, 768), dtype=np.float32)
  x, g, tx, tg = Tensor(x_np).realize(), Tensor(g_np).realize(), torch.from_numpy(x_np).requires_grad_(), torch.from_numpy(g_np)
  params = get_parameters(ours)
  for p in params: p.requires_grad = True

  @TinyJit
  def step(x: Tensor, g: Tensor) -> list[Tensor]:
    for p in params: p.grad = None
    (ours(x) * g).sum().backward()
    grads = [p.grad for p in params]
    Tensor.realize(*grads)
    return grads

  def tstep():
    ref.zero_grad()
    (ref(tx) * tg).sum().backward()

  step(x, g)
  tstep()
  for name in ("h.0.ln1.weight", "h.0.fc1.weight", f"h.{DECODER_LAYERS - 1}.qkv.bias"):
    check(f"decoder_fwd_bwd {name}'s gradient", get_state_dict(ours)[name].grad.numpy(), ref.get_parameter(name).grad.numpy(), atol=5e-2, rtol=1e-2)
  report(f"decoder{DECODER_LAYERS}_fwd_bwd", lambda: step(x, g)[0].numpy(), tstep, 1.2)


def bert() -> None:
  ours, ref = stack_pair(12, False)
  x_np = np.random.default_rng(0).standard_normal((1, 128, 768), dtype=np.float32)
  x, tx = Tensor(x_np).realize(), torch.from_numpy(x_np)
  step = TinyJit(lambda x: ours(x).realize())
  with torch.no_grad():
    check("bert_b1", step(x).numpy(), ref(tx).numpy(), atol=5e-3, rtol=5e-3)
    report("bert_b1", lambda: step(x).numpy(), lambda: ref(tx), 1.0)


def onnx_case(name: str, ref: torch.nn.Module, x_np: np.ndarray) -> None:
  import onnxruntime as ort
  from tinyhybrid.nn.onnx import OnnxRunner
  buf = io.BytesIO()
  torch.onnx.export(ref.eval(), (torch.from_numpy(x_np),), buf, input_names=["x"], output_names=["y"], dynamo=False)
  opts = ort.SessionOptions()
  opts.intra_op_num_threads, opts.inter_op_num_threads = THREADS, 1
  sess = ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])
  runner = OnnxRunner(buf.getvalue())
  x = Tensor(x_np).realize()
  step = TinyJit(lambda x: runner({"x": x})["y"].realize())
  check(name, step(x).numpy(), sess.run(None, {"x": x_np})[0], atol=5e-3, rtol=5e-3)
  report(name, lambda: step(x).numpy(), lambda: sess.run(None, {"x": x_np}), 1.0, anchor_name="onnxruntime")


CASES: dict[str, Callable[[], None]] = {
  "resnet50_b1": lambda: resnet_inference(1),
  "resnet50_b8": lambda: resnet_inference(8),
  "resnet50_train_b8": resnet_train,
  "decoder_fwd_bwd": decoder_fwd_bwd,
  "bert_b1": bert,
  "onnx_resnet50": lambda: onnx_case("onnx_resnet50", torch_resnet50(),
                                     np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)),
  "onnx_bert": lambda: onnx_case("onnx_bert", TorchStack(12, False),
                                 np.random.default_rng(0).standard_normal((1, 128, 768), dtype=np.float32)),
}

if __name__ == "__main__":
  names = sys.argv[1:] or list(CASES)
  if unknown := [n for n in names if n not in CASES]: sys.exit(f"unknown case(s) {unknown}; the cases are {list(CASES)}")
  for n in names: CASES[n]()
