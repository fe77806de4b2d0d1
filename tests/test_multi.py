"""Devices CPU:N, copies between them, and sharded tensors (tinygrad's multi-device API) checked against NumPy."""

import numpy as np
import pytest

from tinyhybrid import Context, Device, Tensor, TinyJit, nn
from tinyhybrid.nn.state import get_parameters
from tinyhybrid.schedule.multi import ShardingError

D2 = Device.canonicalize(("CPU:0", "CPU:1"))
D3 = Device.canonicalize(("CPU:0", "CPU:1", "CPU:2"))
D4 = Device.canonicalize(("CPU:0", "CPU:1", "CPU:2", "CPU:3"))
rng = np.random.default_rng(0)


def test_devices_are_separate():
  a = Tensor(np.arange(5, dtype=np.float32), device="CPU:1")
  assert a.device == "CPU:1" and Device["CPU:1"] is not Device["CPU:2"] and Device["CPU:0"] is Device["CPU"]
  assert Device["CPU:1"].queue is not Device["CPU:2"].queue
  before = Device["CPU:2"].allocator.used
  b = a.to("CPU:2")  # lazy: the copy's memory is allocated when it is realized
  assert b.device == "CPU:2" and Device["CPU:2"].allocator.used == before
  b.realize()
  assert Device["CPU:2"].allocator.used == before + 20
  np.testing.assert_equal((b * 2).numpy(), np.arange(5) * 2)
  c = Tensor([1.0, 2.0], device="CPU:3")
  c.to_("CPU:1")
  assert c.device == "CPU:1" and c.tolist() == [1.0, 2.0]
  assert Device.canonicalize("cpu:0") == "CPU" and Device.canonicalize("CPU:01") == "CPU:1"


@pytest.mark.parametrize("bad", ["GPU:1", "CPU:x", "CPU:-1", "TPU"])
def test_unknown_device(bad):
  with pytest.raises(ValueError, match="unknown device"): Tensor([1.0], device=bad)
  with pytest.raises(ValueError, match="unknown device"): Tensor([1.0]).to(bad)


def test_mixed_devices_raise():
  with pytest.raises(RuntimeError, match="different devices"): Tensor([1.0], device="CPU:1") + Tensor([1.0], device="CPU:2")
  with pytest.raises(RuntimeError, match="different devices"): Tensor([1.0, 2.0]).shard(D2) + Tensor([1.0, 2.0]).shard(D3)
  with pytest.raises(RuntimeError, match="different devices"): Tensor([1.0, 2.0]).shard(D2) + Tensor([1.0, 2.0])


def test_shard_uneven_raises():
  with pytest.raises(RuntimeError, match="uneven"): Tensor.ones(5, 3).shard(D2, axis=0)
  with pytest.raises(RuntimeError, match="already sharded"): Tensor.ones(4).shard(D2).shard(D2)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_shard_roundtrip_and_elementwise(axis):
  x = rng.standard_normal((6, 9)).astype(np.float32)
  y = rng.standard_normal((6, 9)).astype(np.float32)
  t = Tensor(x).shard(D3, axis=axis)
  assert t.device == D3 and t.shape == (6, 9)
  np.testing.assert_allclose(t.numpy(), x)
  u = Tensor(y).shard(D3, axis=axis)
  np.testing.assert_allclose(((t * u + 1).exp2() - t).numpy(), np.exp2(x * y + 1) - x, rtol=1e-5)
  # a replica meets a sharded tensor: sliced to each shard; a differently sharded one is resharded
  np.testing.assert_allclose((t + Tensor(y).shard(D3)).numpy(), x + y, rtol=1e-6)
  np.testing.assert_allclose((t + Tensor(y).shard(D3, axis=1 if axis == 0 else 0)).numpy(), x + y, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_movement_on_sharded(axis):
  x = rng.standard_normal((3, 6, 4)).astype(np.float32) if axis != 0 else rng.standard_normal((6, 3, 4)).astype(np.float32)
  t = Tensor(x).shard(D2 if axis != 2 else D2, axis=axis)
  np.testing.assert_allclose(t.permute(2, 0, 1).numpy(), x.transpose(2, 0, 1))
  np.testing.assert_allclose(t.reshape(-1).numpy(), x.reshape(-1))
  np.testing.assert_allclose(t.reshape(x.shape[0] * x.shape[1], 4).numpy(), x.reshape(-1, 4))
  np.testing.assert_allclose(t[1:, ::-1].numpy(), x[1:, ::-1])
  np.testing.assert_allclose(t.pad(((1, 0), (0, 2), (0, 0))).numpy(), np.pad(x, ((1, 0), (0, 2), (0, 0))))
  np.testing.assert_allclose(t.unsqueeze(0).expand(2, *x.shape).numpy(), np.broadcast_to(x[None], (2, *x.shape)))


# odd sizes: 3 and 4 devices over values whose element counts do not divide into the chunks evenly
@pytest.mark.parametrize("devices,shape", [(D3, (3, 37)), (D4, (4, 4, 13)), (D2, (2, 7))])
@pytest.mark.parametrize("algo", [{"RING": 0, "ALL2ALL": 0}, {"RING": 2}, {"ALL2ALL": 2}])
def test_allreduce_values(devices, shape, algo):
  x = rng.standard_normal(shape).astype(np.float32)
  t = Tensor(x).shard(devices, axis=0)
  with Context(**algo):
    s, m, mean, mn = t.sum(0), t.max(0), t.mean(0), t.min(0)
    Tensor.realize(s, m, mean, mn)
  assert s.device == devices and s.uop.arg == (devices, None)
  np.testing.assert_allclose(s.numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(m.numpy(), x.max(0))
  np.testing.assert_allclose(mn.numpy(), x.min(0))
  np.testing.assert_allclose(mean.numpy(), x.mean(0), rtol=1e-5, atol=1e-6)
  # every device holds the same bits
  shards = [Tensor(u, device=d).numpy() for u, d in zip(s.uop.src, devices)]
  for sh in shards[1:]: np.testing.assert_array_equal(sh, shards[0])


def test_allreduce_default_rule_uses_ring_for_big(capsys):
  x = rng.standard_normal((3, 256_007)).astype(np.float32)
  with Context(DEBUG=2):
    out = Tensor(x).shard(D3, axis=0).sum(0).numpy()
  assert "RING ALLREDUCE 3x256007" in capsys.readouterr().out
  np.testing.assert_allclose(out, x.sum(0), rtol=1e-5, atol=1e-5)


def test_matmul_sharded():
  x = rng.standard_normal((6, 5)).astype(np.float32)
  w = rng.standard_normal((5, 7)).astype(np.float32)
  t, W = Tensor(x).shard(D3, axis=0), Tensor(w).shard(D3)
  np.testing.assert_allclose((t @ W).numpy(), x @ w, rtol=1e-5, atol=1e-5)
  # the contraction over the sharded axis is an allreduce
  np.testing.assert_allclose((t.T @ (t @ W)).numpy(), x.T @ (x @ w), rtol=1e-4, atol=1e-4)
  Wk = Tensor(w).shard(D3, axis=1) if w.shape[1] % 3 == 0 else Tensor(w[:, :6]).shard(D3, axis=1)
  np.testing.assert_allclose((Tensor(x).shard(D3) @ Wk).numpy(), x @ w[:, :6], rtol=1e-5, atol=1e-5)


def test_assign_and_setitem_on_sharded():
  x = rng.standard_normal((4, 6)).astype(np.float32)
  t = Tensor(x).shard(D2, axis=0).realize()
  bufs = [u.base.arg for u in t.uop.src]
  t.assign(t * 2 + 1).realize()
  np.testing.assert_allclose(t.numpy(), x * 2 + 1)
  assert [u.base.arg for u in t.uop.src] == bufs  # written in place
  t += 1
  t.realize()
  np.testing.assert_allclose(t.numpy(), x * 2 + 2, rtol=1e-6)
  t.assign(t.flip(1)).realize()  # reads the target through a view: computed apart first
  np.testing.assert_allclose(t.numpy(), (x * 2 + 2)[:, ::-1], rtol=1e-6)
  # tinygrad's rules: the value is sharded as the target is, of its dtype, on its devices
  with pytest.raises(RuntimeError, match="multi axis mismatch 0 != None"): t.assign(Tensor(x).shard(D2))
  with pytest.raises(RuntimeError, match="assign dtype mismatch"): t.assign(Tensor(x).shard(D2, axis=0).half())
  with pytest.raises(RuntimeError, match="assign device mismatch"): t.assign(Tensor(x))


def test_training_matches_single_device():
  def run(devices):
    Tensor.manual_seed(3)
    l1, l2 = nn.Linear(5, 8), nn.Linear(8, 3)
    if devices:
      for p in get_parameters([l1, l2]): p.shard_(devices)
    opt = nn.optim.Adam(get_parameters([l1, l2]), lr=0.05)
    xr = np.random.default_rng(1).standard_normal((12, 5)).astype(np.float32)
    yr = np.random.default_rng(2).integers(0, 3, 12).astype(np.int32)
    X, Y = Tensor(xr), Tensor(yr)
    if devices: X, Y = X.shard(devices, axis=0), Y.shard(devices, axis=0)
    with Tensor.train():
      for _ in range(4):
        opt.zero_grad()
        loss = l2(l1(X).relu()).sparse_categorical_crossentropy(Y)
        loss.backward()
        opt.step()
    return [p.numpy() for p in get_parameters([l1, l2])], loss.item()
  single, lsingle = run(None)
  multi, lmulti = run(D3)
  assert abs(lsingle - lmulti) < 1e-5
  for a, b in zip(single, multi): np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("zerocopy", [0, 1])
def test_jit_sharded_step(zerocopy):
  w = Tensor(rng.standard_normal((4, 4)).astype(np.float32)).shard(D2).realize()

  @TinyJit
  def f(x: Tensor) -> Tensor: return (x @ w).sum(0).realize()

  with Context(ZEROCOPY=zerocopy):
    for i in range(5):
      xn = rng.standard_normal((6, 4)).astype(np.float32)
      out = f(Tensor(xn).shard(D2, axis=0))
      np.testing.assert_allclose(out.numpy(), (xn @ w.numpy()).sum(0), rtol=1e-5, atol=1e-5)
  assert f.captured is not None
  # the partial sums meet by copies, or (CPU:N share the host's memory) each device's kernel reads the other's in place
  assert any(ei.prg.name.startswith("copy") for ei in f.captured.jit_cache) == (not zerocopy)
  assert set(f.captured.devices) == set(D2)


def test_creation_on_devices():
  z = Tensor.zeros(4, 2, device=D2)
  assert z.device == D2 and z.numpy().tolist() == [[0, 0]] * 4
  e = Tensor([1.0, 2.0], device=D2)
  assert e.device == D2 and e.uop.arg == (D2, None) and e.tolist() == [1.0, 2.0]
  s = Tensor.ones(4, 2).shard(D2, axis=0)
  zl = s.zeros_like()
  assert zl.uop.arg == (D2, 0) and zl.numpy().tolist() == [[0, 0]] * 4
  assert Tensor([3.0, 4.0]).shard_like(s).device == D2


def test_to_gathers_and_replicates():
  x = rng.standard_normal((4, 3)).astype(np.float32)
  t = Tensor(x).shard(D2, axis=0)
  g = t.to("CPU:3")
  assert g.device == "CPU:3"
  np.testing.assert_allclose(g.numpy(), x)
  r = Tensor(x).to(D2)
  assert r.device == D2 and r.uop.arg[1] is None
  np.testing.assert_allclose(r.numpy(), x)


def test_sharding_error_is_runtime_error():
  assert issubclass(ShardingError, RuntimeError)


def test_data_parallel_example_matches_single_device():
  import importlib.util
  from pathlib import Path
  path = Path(__file__).resolve().parent.parent / "examples" / "train_digits_multi.py"
  spec = importlib.util.spec_from_file_location("train_digits_multi", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  multi, _ = mod.train(D2, 4)
  single, _ = mod.train(None, 4)
  from tinyhybrid.nn.state import get_state_dict
  a, b = get_state_dict(multi), get_state_dict(single)
  assert a["fc.weight"].device == D2
  for k in a:
    if a[k].requires_grad and k not in ("c1.bias", "c2.bias"):  # BatchNorm cancels those biases: Adam walks on rounding noise
      np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), atol=1e-5, err_msg=k)


def test_copy_command_with_patched_offset():
  from tinyhybrid._core import hcq
  src, dst = np.arange(16, dtype=np.uint8), np.zeros(4, np.uint8)
  cb = hcq.CommandBuffer()
  d, s = cb.add_slot(0), cb.add_slot(0)
  cb.copy(hcq.Patch(d), hcq.Patch(s, 8), 4)  # one slot per buffer; the offset is the field's addend
  assert repr(hcq.Patch(s, 8)) == f"Patch({s}, 8)"
  q = Device["CPU:1"].queue
  q.submit(cb, [dst.ctypes.data, src.ctypes.data])
  q.synchronize()
  assert dst.tolist() == [8, 9, 10, 11]
  q.submit(cb, [dst.ctypes.data, src.ctypes.data + 4])
  q.synchronize()
  assert dst.tolist() == [12, 13, 14, 15]


@pytest.mark.parametrize("algo,zerocopy,copies,kernels", [
  # ZEROCOPY=0 (every COPY a copy, as in tinygrad). all2all over 4 devices: each device's chunk of every other device
  # copied to it straight from the shard (12), the 4 partial sums (one kernel per device, each written straight into
  # its place in that device's result), the 3 other reduced chunks copied into place on each device (12), and the mul
  # (4). tinygrad's 24 copies match; its 22 kernels are 12 kernels making each chunk contiguous before its copy, 4
  # extra contiguous, one reassembly kernel and the mul counted once across devices: here a copy takes a range of a
  # buffer and writes into a range of one, and a kernel is counted per device
  ({"ALL2ALL": 2}, 0, 24, 8),
  # ring: 3 hops for each of 4 chunks (12 copies, each followed by the add on the receiving device), the same
  # gather (12) and mul (4)
  ({"RING": 2}, 0, 24, 16),
  # naive: each device copies the 3 others' shards and adds them (one kernel with the mul fused in)
  ({"RING": 0, "ALL2ALL": 0}, 0, 12, 4),
  # CPU:N share the host's memory: a kernel reads other devices' chunks in place and stores each reduced chunk into
  # its place on every device (one kernel with 4 stores per chunk), so no copy remains; a ring's hops fuse into that
  # kernel (the adds in ring order)
  ({"ALL2ALL": 2}, 1, 0, 8),
  ({"RING": 2}, 1, 0, 8),
  ({"RING": 0, "ALL2ALL": 0}, 1, 0, 4),
])
def test_allreduce_schedule_counts(algo, zerocopy, copies, kernels):
  N, M = 4, 400
  x = np.arange(N * M, dtype=np.float32).reshape(N, M)
  t = Tensor(x * x).shard(D4, axis=0).realize()

  @TinyJit
  def f(t: Tensor) -> Tensor: return t.sum(0).mul(2.0).contiguous().realize()

  with Context(ZEROCOPY=zerocopy, **algo):
    for _ in range(4): out = f(t)
  names = [ei.prg.name for ei in f.captured.jit_cache]
  assert (sum(n.startswith("copy") for n in names), sum(not n.startswith("copy") for n in names)) == (copies, kernels)
  expected = 2 * (x * x).sum(0)
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
  for u, d in zip(out.uop.src, D4): np.testing.assert_allclose(Tensor(u, device=d).numpy(), expected, rtol=1e-6)


def test_setitem_with_symbolic_offset_under_jit():
  from tinyhybrid import Variable
  t = Tensor.zeros(6, 4).contiguous().shard(D2, axis=1).realize()
  v = Variable("i", 0, 5)

  @TinyJit
  def f(x: Tensor, i) -> Tensor:
    t[i:i + 1] = x
    return t.realize()

  ref = np.zeros((6, 4), np.float32)
  for k in (0, 3, 1, 5, 2):
    x = np.full((1, 4), k + 1.0, np.float32)
    f(Tensor(x).shard(D2, axis=1), v.bind(k))
    ref[k:k + 1] = x
    np.testing.assert_array_equal(t.numpy(), ref)
  assert f.captured is not None


@pytest.mark.parametrize("zerocopy", [0, 1])
@pytest.mark.parametrize("algo", [{"RING": 0, "ALL2ALL": 0}, {"RING": 2}, {"ALL2ALL": 2}])
def test_allreduce_into_its_own_input(zerocopy, algo):
  # each device's result overwrites its shard, which the other devices' kernels read: those reads are copies taken
  # before any write, never reads in place
  x = rng.standard_normal((4, 37)).astype(np.float32)
  t = Tensor(x).shard(D4, axis=0).realize()
  with Context(ZEROCOPY=zerocopy, **algo):
    t.assign(t - t.sum(0, keepdim=True)).realize()
  np.testing.assert_allclose(t.numpy(), x - x.sum(0, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("zerocopy", [0, 1])
def test_copies_kept_are_their_own_memory(zerocopy):
  # a copy whose value is kept (a result, a shard) has memory of its own even where kernels could read in place
  x = rng.standard_normal((3, 5)).astype(np.float32)
  with Context(ZEROCOPY=zerocopy):
    a = Tensor(x, device="CPU:1").realize()
    r = a.to(D3)
    s = (r + 1).realize()
  bufs = {id(u.base.arg) for u in r.uop.src} | {id(a.uop.base.arg)}
  assert len(bufs) == 4
  r.assign(Tensor.zeros(3, 5, device=D3)).realize()
  np.testing.assert_array_equal(a.numpy(), x)
  np.testing.assert_allclose(s.numpy(), x + 1)


def test_jit_sharded_replay_chains_devices():
  # a replay of kernels and copies on several CPU devices is one runner (a submit per device, ordered by signals),
  # and its values follow the inputs on every replay
  w = rng.standard_normal((5, 3)).astype(np.float32)
  W = Tensor(w).shard(D3).realize()

  @TinyJit
  def f(x: Tensor) -> Tensor: return ((x @ W).relu().sum(0) * 2).realize()

  for _ in range(6):
    xn = rng.standard_normal((6, 5)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(xn).shard(D3, axis=0)).numpy(), (np.maximum(xn @ w, 0).sum(0)) * 2, rtol=1e-5, atol=1e-5)
  assert f.captured is not None and len(f.captured.runners) == 1 and len(set(f.captured.devices)) == 3


def test_a_chained_replay_waits_between_devices_only_where_their_buffers_meet():
  from tinyhybrid.device import CopySpec
  from tinyhybrid.engine.multi import _copy_program
  from tinyhybrid.runtime.hcq import ChainRunner
  A, B, C = "CPU", "CPU:1", "CPU:2"
  # (device, dst slot, src slot), in order: B's copy reads what A's first wrote (RAW); C's first is independent; A's
  # second overwrites what B read (WAR); C's second reads B's result (RAW) and overwrites what A's second read (WAR)
  plan = [(A, 1, 0), (B, 2, 1), (C, 4, 3), (A, 1, 5), (C, 5, 2)]
  items = [(Device[d].queue, (_copy_program(d, CopySpec(16)), [dst, src], 1)) for d, dst, src in plan]
  runner = ChainRunner(items, 6)
  assert runner.waits == [{}, {A: 1}, {}, {B: 1}, {B: 1, A: 2}]
  for _ in range(3):  # replays: each call's signal values are new
    bufs = [np.full(4, k, np.float32) for k in range(6)]
    x, y, z = bufs[0].copy(), bufs[3].copy(), bufs[5].copy()
    runner([b.ctypes.data for b in bufs])
    for d in (A, B, C): Device[d].synchronize()
    for got, want in zip([bufs[1], bufs[2], bufs[4], bufs[5]], [z, x, y, x]): np.testing.assert_array_equal(got, want)


# ** gradients across devices: to() is a COPY node (its gradient is copied back), shard() an MSTACK (each source gets
# its device's shard of the gradient; a replica's gradient is taken once) **

def _torch_grad(f, *arrays):
  """f's value and its gradients at the arrays, by torch (the test is skipped without it)."""
  torch = pytest.importorskip("torch")
  ts = [torch.tensor(a, requires_grad=True) for a in arrays]
  out = f(*ts)
  out.backward()
  return out.item(), [None if t.grad is None else t.grad.numpy() for t in ts]


@pytest.mark.parametrize("devices", [D2, D4], ids=["2dev", "4dev"])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("fn", ["sumsq", "matmul", "mean"])
def test_grad_through_shard(devices, axis, fn):
  w = rng.standard_normal((4, 8)).astype(np.float32)
  inp = rng.standard_normal((3, 4)).astype(np.float32)
  fns = {"sumsq": lambda W, I: (W ** 2).sum(), "matmul": lambda W, I: (I @ W).sin().sum(), "mean": lambda W, I: (W * 3 + 1).mean()}
  f = fns[fn]
  t = Tensor(w, requires_grad=True)
  loss = f(t.shard(devices, axis=axis), Tensor(inp).shard(devices))
  loss.backward()
  ref_loss, (ref_grad, _) = _torch_grad(f, w, inp)
  assert t.grad.device == "CPU" and t.grad.shape == w.shape
  np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(t.grad.numpy(), ref_grad, rtol=1e-5, atol=1e-5)


def test_grad_through_shard_from_another_device():
  # the source lives on CPU:2, sharded over devices that do not include it: every part of the gradient goes back there
  x = rng.standard_normal((6, 3)).astype(np.float32)
  t = Tensor(x, device="CPU:2", requires_grad=True)
  (t.shard(D3, axis=0).exp() * 2).sum().backward()
  assert t.grad.device == "CPU:2"
  np.testing.assert_allclose(t.grad.numpy(), 2 * np.exp(x), rtol=1e-6)


def test_grad_through_to_and_back():
  x = rng.standard_normal((5, 4)).astype(np.float32)
  c = rng.standard_normal((5, 4)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  y = t.to("CPU:1")
  assert y.device == "CPU:1" and y.requires_grad
  loss = ((y.exp() * 2).to("CPU") * Tensor(c)).sum()
  loss.backward()
  ref_loss, (ref, _) = _torch_grad(lambda a, b: ((a.exp() * 2) * b).sum(), x, c)
  assert t.grad.device == "CPU" and y.grad.device == "CPU:1"
  np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-5)
  np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-5)
  np.testing.assert_allclose(y.grad.numpy(), ref, rtol=1e-5)
  # a leaf on another device, the loss on the default one
  x2 = Tensor(np.arange(8, dtype=np.float32), device="CPU:3", requires_grad=True)
  (x2.to("CPU") * 3).sum().backward()
  assert x2.grad.device == "CPU:3" and x2.grad.tolist() == [3.0] * 8


def test_grad_after_reading_a_copy():
  # reading a copied value does not cut its graph: backward still reaches the source
  x = np.arange(6, dtype=np.float32)
  t = Tensor(x, requires_grad=True)
  y = t.to("CPU:1") * 3
  np.testing.assert_allclose(y.numpy(), x * 3)
  (y * y).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), 18 * x)


def test_grad_chain_to_shard_reduce():
  x = rng.standard_normal((8, 6)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  s = t.to("CPU:1").shard(D4, axis=0)
  loss = (s.sum(1) ** 2).sum() + s.max()
  loss.backward()
  ref_loss, (ref,) = _torch_grad(lambda a: (a.sum(1) ** 2).sum() + a.max(), x)
  assert t.grad.device == "CPU"
  np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-5)
  np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_to_is_lazy():
  from tinyhybrid.helpers import GlobalCounters
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  a = Tensor(x).realize()
  b = a * 2 + 1
  before = GlobalCounters.kernel_count
  c = b.to("CPU:1")
  assert c.device == "CPU:1" and c.shape == (3, 4) and GlobalCounters.kernel_count == before
  np.testing.assert_allclose(c.numpy(), x * 2 + 1)
  assert GlobalCounters.kernel_count > before
  # the copy is memory of its own: writing the source afterwards leaves it alone, and a copy still lazy when its
  # source is overwritten reads the values from before the write
  d = a.to("CPU:2")
  a.assign(Tensor.zeros(3, 4)).realize()
  np.testing.assert_allclose(c.numpy(), x * 2 + 1)
  np.testing.assert_allclose(d.numpy(), x)
  np.testing.assert_allclose(a.numpy(), 0)
  # constants and chains of copies
  assert Tensor(3.0).to("CPU:1").device == "CPU:1" and Tensor(3.0).to("CPU:1").item() == 3.0
  np.testing.assert_allclose(Tensor(x).to("CPU:1").to("CPU:2").to("CPU").numpy(), x)
  np.testing.assert_allclose((Tensor(x).to("CPU:1") + Tensor(x, device="CPU:1")).numpy(), 2 * x)


def test_to_in_plan_api_and_jit():
  from tinyhybrid.engine.realize import run_linear
  t = Tensor([1.0, 2.0]).to("CPU:1")
  run_linear(t.schedule_linear())  # the copy is planned and run when the plan runs
  assert t.uop.is_realized
  np.testing.assert_allclose(t.numpy(), [1.0, 2.0])

  @TinyJit
  def f(x: Tensor) -> Tensor: return (x.to("CPU:1") * 2).to("CPU:2").realize()

  for _ in range(4):
    xn = rng.standard_normal(5).astype(np.float32)
    out = f(Tensor(xn))
    assert out.device == "CPU:2"
    np.testing.assert_allclose(out.numpy(), xn * 2)
  assert f.captured is not None


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("dest", ["CPU:1", "CPU:3"])
def test_gather_is_lazy_and_differentiable(axis, dest):
  from tinyhybrid.helpers import GlobalCounters
  x = rng.standard_normal((6, 6)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  s = (t.shard(D3, axis=axis) * 2).exp()
  before = GlobalCounters.kernel_count
  g = s.to(dest)  # dest among the devices (gathered there) or not (gathered on the first, then copied)
  assert g.device == dest and g.shape == (6, 6) and GlobalCounters.kernel_count == before
  np.testing.assert_allclose(g.numpy(), np.exp(x * 2), rtol=1e-6)
  loss = (g * Tensor(x, device=dest)).sum()
  loss.backward()
  ref_loss, (ref, _) = _torch_grad(lambda a, b: ((a * 2).exp() * b).sum(), x, x)
  assert t.grad.device == "CPU"
  np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-5)
  np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_sharded_loss_to_cpu_trains():
  # a data-parallel step whose loss is read on the default device: the weight (a replica) gets one gradient, the sum
  # over the batch's shards, and SGD on it matches a single-device run
  xr = rng.standard_normal((8, 4)).astype(np.float32)
  wr = rng.standard_normal((4, 3)).astype(np.float32)

  def run(devices):
    w = Tensor(wr, requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.1)
    with Tensor.train():
      for _ in range(3):
        opt.zero_grad()
        X, W = (Tensor(xr).shard(devices, axis=0), w.shard(devices)) if devices else (Tensor(xr), w)
        loss = (X @ W).relu().mean().to("CPU")
        loss.backward()
        opt.step()
    return w.numpy(), loss.item()
  (w1, l1), (w2, l2) = run(None), run(D4)
  np.testing.assert_allclose(l2, l1, rtol=1e-5)
  np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-6)


def test_realized_gather_keeps_history():
  # a gathered value read (its graph kept under its buffer for backward) and used again: the history, which holds the
  # sharded graph, is not computed again, and backward still reaches the source
  x = rng.standard_normal((4, 5)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  loss = (t.shard(D2, axis=0) ** 2).sum(1).to("CPU")
  np.testing.assert_allclose(loss.numpy(), (x ** 2).sum(1), rtol=1e-5)
  np.testing.assert_allclose((loss * 2 + 1).numpy(), (x ** 2).sum(1) * 2 + 1, rtol=1e-5)
  (loss * 2).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), 4 * x, rtol=1e-5)


def test_to_of_a_symbolic_slice():
  # a Variable-sized view moves with the memory of its largest value (its layout), and reads right on the other device
  from tinyhybrid import Variable
  x = Tensor(np.arange(10, dtype=np.float32)).realize()
  for val in (4, 7):
    z = x[:Variable("v", 1, 10).bind(val)].to("CPU:1")
    assert z.device == "CPU:1"
    assert (z * 2).sum().item() == 2 * np.arange(val).sum()


def test_uop_axis_follows_the_ops():
  t = Tensor(rng.standard_normal((4, 6)).astype(np.float32)).shard(D2, axis=1)
  cases = {"stack": (t, 1), "elementwise": (t + 1, 1), "transpose": (t.T, 0), "reshape": (t.reshape(2, 2, 6), 2),
           "reduce over it": (t.sum(1), None), "reduce another": (t.sum(0), 0), "replica": (Tensor.ones(3).shard(D2), None),
           "one device": (Tensor.ones(3), None), "gathered": (t.to("CPU:1"), None), "flip another": (t.flip(0), 1),
           "flip it": (t.flip(1), None)}
  assert {k: v.uop.axis for k, (v, _) in cases.items()} == {k: axis for k, (_, axis) in cases.items()}


def test_load_state_dict_keeps_the_model_sharding():
  from tinyhybrid.nn.state import load_state_dict
  layer = nn.Linear(4, 6)
  layer.weight.shard_(D2, axis=0)
  layer.bias.shard_(D2)
  w, b = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
  load_state_dict(layer, {"weight": Tensor(w), "bias": Tensor(b)}, verbose=False)
  assert (layer.weight.device, layer.weight.uop.axis, layer.bias.uop.axis) == (D2, 0, None)
  assert [s.shape for s in layer.weight.uop.src] == [(3, 4), (3, 4)]
  np.testing.assert_allclose(layer.weight.numpy(), w)
  x = rng.standard_normal((5, 4)).astype(np.float32)
  np.testing.assert_allclose(layer(Tensor(x).shard(D2)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_rand_like_of_a_sharded_tensor_is_sharded_as_it(axis):
  t = Tensor.empty(4, 6).shard(D2, axis)
  r = Tensor.rand_like(t)
  assert (r.shape, r.device, r.dtype, r.uop.axis) == (t.shape, D2, t.dtype, axis)
  shards = [Tensor(s).numpy() for s in r.realize().uop.src]
  v = r.numpy()
  assert ((v >= 0) & (v < 1)).all() and len(np.unique(v)) == v.size
  if axis is None: np.testing.assert_equal(shards[0], shards[1])  # a replica: the same values on every device
  with pytest.raises(RuntimeError, match="takes no device"): Tensor.rand_like(t, device=("CPU:2", "CPU:3"))


def test_rand_on_a_tuple_of_devices_raises():
  with pytest.raises(ValueError, match="one device"): Tensor.rand(8, device=D2)


@pytest.mark.parametrize("axis", [None, 0])
def test_dropout_on_sharded(axis):
  with Tensor.train():
    out = Tensor.ones(512).shard(D2, axis).dropout(0.5).numpy()
  values, counts = np.unique(out, return_counts=True)
  assert values.tolist() == [0.0, 2.0] and 180 < counts[0] < 332


def test_a_sharded_value_moves_with_its_graph():
  x = rng.integers(0, 9, (4, 6)).astype(np.int32)
  t = Tensor(x).shard(D2, axis=0)
  assert Tensor(t.uop).device == D2 and Tensor(Tensor([1.0], device="CPU:3").uop).device == "CPU:3"
  np.testing.assert_equal(Tensor(t.uop).numpy(), x)
  # replace takes the value's devices: an embedding whose table is replaced by a sharded one looks up on them
  table, idx = rng.standard_normal((28, 20)).astype(np.float32), rng.integers(0, 28, (4, 10)).astype(np.int32)
  emb = nn.Embedding(28, 20)
  emb.weight.replace(Tensor(table).shard(D2, axis=1)).realize()
  assert emb.weight.device == D2 and emb.weight.uop.axis == 1
  np.testing.assert_allclose(emb(Tensor(idx).shard(D2)).numpy(), table[idx], rtol=1e-6)


def test_bounds_and_allreduce_of_a_sharded_graph():
  from tinyhybrid.uop import Ops
  x = rng.standard_normal((8, 5)).astype(np.float32)
  t = Tensor(x).shard(D4, axis=0).realize()
  assert t.uop.bounds == ((0, 2), (2, 4), (4, 6), (6, 8)) and (t * 2).uop.bounds == t.uop.bounds
  with pytest.raises(RuntimeError, match="axis is None"): Tensor(x).shard(D4).uop.bounds
  # tinygrad's shard_shape: one device's shard, the whole shape when not split
  assert t.uop.shard_shape == (2, 5) and Tensor(x).shard(D4).uop.shard_shape == (8, 5) and Tensor(x).uop.shard_shape == (8, 5)
  assert Tensor(x.T).shard(D4, axis=1).uop.shard_shape == (5, 2)
  # the allreduce a reduce over the sharded axis is made of: every shard becomes the sum of the shards
  for algo in ({"RING": 0, "ALL2ALL": 0}, {"RING": 2}, {"ALL2ALL": 2}):
    with Context(**algo):
      s = Tensor(t.uop.allreduce(Ops.ADD, D4))
      assert s.device == D4 and s.uop.axis == 0
      np.testing.assert_allclose(s.numpy(), np.tile(x.reshape(4, 2, 5).sum(0), (4, 1)), rtol=1e-5, atol=1e-6)


def test_a_deviceless_constant_meets_a_sharded_tensor():
  from tinyhybrid.dtype import dtypes
  from tinyhybrid.uop.ops import UOp
  s = Tensor([1.0, 2, 3, 4]).shard(D2, axis=0)
  one = Tensor(UOp.const(dtypes.float, 1.0))
  np.testing.assert_equal((s + one).numpy(), [2, 3, 4, 5])
  np.testing.assert_equal((s + one.reshape((1,)).expand((4,))).numpy(), [2, 3, 4, 5])


def test_kv_cache_assign_under_jit_on_sharded():
  from tinyhybrid import Variable
  bsz, ctx = 2, 8
  cache = Tensor.zeros(bsz, ctx, 1, 1).shard(D2).contiguous().realize()

  @TinyJit
  def step(xk: Tensor, start_pos):
    # the pad is negative for some values of start_pos, never for the ones bound
    keys = cache.shrink((None, (0, start_pos), None, None)).cat(xk, dim=1).contiguous()
    cache.assign(keys.pad((None, (0, ctx - start_pos - xk.shape[1]), None, None)).contiguous()).realize()

  cache.assign(Tensor.ones(bsz, 3, 1, 1).shard(D2).pad((None, (0, ctx - 3), None, None)).contiguous()).realize()
  for i in range(3, 6): step(Tensor.full((bsz, 1, 1, 1), float(i)).shard(D2).contiguous(), Variable("start_pos", 1, ctx).bind(i))
  np.testing.assert_equal(cache.numpy()[:, :, 0, 0], [[1, 1, 1, 3, 4, 5, 0, 0]] * 2)


@pytest.mark.parametrize("realized", [True, False])
def test_assign_through_a_view_of_a_sharded_tensor(realized):
  out = Tensor.zeros(4, 4).contiguous().realize().shard(D2, 0)
  if realized: out.realize()
  out[:, 2:3].assign(Tensor.ones(4, 1).shard(D2, 0).contiguous().realize()).realize()
  assert out.tolist() == [[0, 0, 1, 0]] * 4
  t = Tensor.arange(16).contiguous().realize().shard(D4, axis=0)
  t[2:6] = Tensor([90, 91, 92, 93]).shard(D4)
  t[::4] = Tensor([70, 71, 72, 73]).shard(D4, axis=0)
  assert t.tolist() == [70, 1, 90, 91, 71, 93, 6, 7, 72, 9, 10, 11, 73, 13, 14, 15]


def test_runs_on_several_cpu_queues_are_one_chained_runner():
  from tinyhybrid.device import CopySpec
  from tinyhybrid.engine.multi import _copy_program, batch_runners
  from tinyhybrid.runtime.hcq import ChainRunner
  items = [(_copy_program("CPU:0", CopySpec(8)), [0, 1], 1), (_copy_program("CPU:1", CopySpec(8)), [2, 3], 1)]
  runners = batch_runners(["CPU:0", "CPU:1"], items, 4)
  assert len(runners) == 1 and isinstance(runners[0], ChainRunner)  # the devices' capability, asked of them
  a, b, c = (np.arange(2, dtype=np.float32) + k for k in range(3))
  d = np.zeros(2, dtype=np.float32)
  runners[0]([c.ctypes.data, a.ctypes.data, d.ctypes.data, b.ctypes.data])
  for dev in ("CPU:0", "CPU:1"): Device[dev].synchronize()  # the call returns once submitted
  np.testing.assert_array_equal(c, a)
  np.testing.assert_array_equal(d, b)
  assert len(batch_runners(["CPU:0"], items[:1], 4)) == 1 and not isinstance(batch_runners(["CPU:0"], items[:1], 4)[0], ChainRunner)


def test_linear_with_vars_of_sharded_tensors_runs_when_the_plan_runs():
  from tinyhybrid.engine.realize import run_linear
  x_np = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(x_np).shard(("CPU:0", "CPU:1"), axis=0).realize()
  part, whole = x[2:4].contiguous(), (x * 2).sum(0)  # one shard's rows; a reduce over the sharded axis (an allreduce)
  moved = Tensor(x_np[0], device="CPU:1").to("CPU") + 1  # a single-device graph that copies between devices
  linear, var_vals = Tensor.linear_with_vars(part, whole, moved)
  assert var_vals == {} and len(linear.across) == 1
  assert not part.uop.is_realized and not moved.uop.is_realized  # planned, nothing run yet
  run_linear(linear, var_vals)
  np.testing.assert_equal(part.numpy(), x_np[2:4])
  np.testing.assert_equal(whole.numpy(), (x_np * 2).sum(0))
  np.testing.assert_equal(moved.numpy(), x_np[0] + 1)


def test_assigning_a_constant_to_a_sharded_tensor():
  out = Tensor.ones(4).shard(D2, 0).contiguous().realize()
  assert out.assign(0).realize().tolist() == [0.0] * 4
  c = out.const_like(7)
  assert c.uop.axis == 0 and c.device == out.device
  assert out.assign(c).realize().tolist() == [7.0] * 4
  t = Tensor.ones(8, 4).shard(D2, axis=0)
  s = t + t.const_like(5)
  assert s.uop.axis == 0 and s.tolist() == [[6.0] * 4] * 8
