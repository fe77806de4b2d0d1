"""The model families past the dense llama ones (llm/model.py) against transformers: mixture of experts (qwen3moe),
multi-head latent attention with routed and shared experts (deepseek2) and the gated delta net (qwen35), each a
tiny random model written to a .gguf as llama.cpp's converter writes it (tests/llm_models.py). Logits and greedy
tokens must match; so must the pieces (top-k routing, gating, the delta rule) against NumPy."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from llm_models import FAMILIES, finish_gguf, write_family_gguf  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from tinyhybrid import Tensor, dtypes, nn  # noqa: E402
from tinyhybrid.helpers import getenv  # noqa: E402
from tinyhybrid.llm.dense import DenseTransformer  # noqa: E402
from tinyhybrid.llm.model import (ExpertGating, GatedDeltaNetBlock, MLATransformerBlock, SSMConfig, Transformer,  # noqa: E402
                                  TransformerBlock, TransformerConfig, pairwise_topk)

PROMPT = [1, 5, 9, 22, 7, 3, 40, 41, 2]
# the gated delta net's projections read half inputs (llama.cpp's and tinygrad's choice), transformers' float ones
TOL = {"qwen3moe": 1e-4, "deepseek2": 1e-4, "qwen35": 2e-2}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d, built = tmp_path_factory.mktemp("families"), {}
  def get(family: str):
    if family not in built: built[family] = (str(d / f"{family}.gguf"), write_family_gguf(d / f"{family}.gguf", family))
    return built[family]
  return get


def load(path: str, monkeypatch, half: str = "0") -> Transformer:
  monkeypatch.setenv("HALF", half)  # 0: the file's float32 weights as they are, to compare with transformers
  getenv.cache_clear()  # (getenv reads the environment once, as tinygrad's does)
  model, _ = Transformer.from_gguf(path)
  getenv.cache_clear()
  assert isinstance(model, Transformer)
  return model


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(files, family, monkeypatch):
  path, hf = files(family)
  model = load(path, monkeypatch)
  with torch.no_grad(): ref = hf(torch.tensor([PROMPT])).logits[0].numpy()
  if family == "qwen35":  # a recurrent model runs a token at a time
    out = np.stack([model.logits(Tensor([[t]], dtype=dtypes.int32), i).numpy()[0] for i, t in enumerate(PROMPT)])
  else: out = model.logits(Tensor([PROMPT], dtype=dtypes.int32), 0).numpy()
  np.testing.assert_allclose(out[-1], ref[-1], atol=TOL[family] * np.abs(ref).max())
  if family == "qwen35": np.testing.assert_allclose(out, ref, atol=TOL[family] * np.abs(ref).max())


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_matches_transformers_and_reuses_the_cache(files, family, monkeypatch):
  path, hf = files(family)
  model = load(path, monkeypatch)
  def ref(ids: list[int], n: int) -> list[int]:
    with torch.no_grad(): return hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, min_new_tokens=n)[0, len(ids):].tolist()
  tokens = list(PROMPT)
  ours = list(model.generate(tokens, chunk_size=4, max_new=6))  # prompt chunks of 4, 4 and 1
  assert ours == ref(PROMPT, 6) and tokens == PROMPT + ours  # generate appends to the list, as tinygrad's does
  # the next turn extends the last: only its new tokens run, here picked on the host
  turn = PROMPT + ours[:3] + [11, 12]
  assert model.get_start_pos(turn) == (len(PROMPT) + 3 if family != "qwen35" else 0)  # a recurrent state cannot be cut back
  assert list(model.generate(list(turn), max_new=4, sample=lambda logits, ids: int(np.argmax(logits)))) == ref(turn, 4)


def test_weights_are_half_unless_half_is_0(files, monkeypatch):
  path, _ = files("qwen3moe")
  half = load(path, monkeypatch, half="1")
  assert {p.dtype for p in nn.state.get_parameters(half)} == {dtypes.float16}
  full = load(path, monkeypatch)
  ids = Tensor([PROMPT], dtype=dtypes.int32)
  np.testing.assert_allclose(half.logits(ids, 0).numpy(), full.logits(ids, 0).numpy(), atol=2e-2)


def test_dense_files_go_to_the_dense_path_and_others_are_refused(files, tmp_path):
  from llm_models import TinySpec, write_gguf
  write_gguf(tmp_path / "llama.gguf", TinySpec(layers=1))
  assert isinstance(Transformer.from_gguf(str(tmp_path / "llama.gguf"))[0], DenseTransformer)
  w = gguf.GGUFWriter(str(tmp_path / "mamba.gguf"), "mamba")
  w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
  finish_gguf(w)
  with pytest.raises(ValueError, match=r"mamba\.gguf: architecture 'mamba' is not supported \(supported: .*deepseek2"):
    Transformer.from_gguf(str(tmp_path / "mamba.gguf"))


# ** the pieces **

def config(**kw) -> TransformerConfig:
  base = dict(num_blocks=1, dim=8, hidden_dim=16, n_heads=2, n_kv_heads=2, norm_eps=1e-5, vocab_size=50, head_dim=4, rope_theta=10000.0,
              rope_dim=4, v_head_dim=4, max_context=16)
  return TransformerConfig(**{**base, **kw})


def test_pairwise_topk_matches_numpy_and_breaks_ties_by_index():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 2, 9)).astype(np.float32)
  x[0, 0, [1, 4, 6]] = 5.0  # a three-way tie at the top
  vals, sel = pairwise_topk(Tensor(x), 4)
  for b, t in np.ndindex(3, 2):
    want = sorted(range(9), key=lambda i: (x[b, t, i], -i))[-4:]  # ascending; of equals the earlier index ranks higher
    assert sel.numpy()[b, t].tolist() == want
    np.testing.assert_equal(vals.numpy()[b, t], x[b, t, want])


@pytest.mark.parametrize("gating", list(ExpertGating))
@pytest.mark.parametrize("normalize", [False, True])
def test_expert_routing_matches_numpy(gating, normalize):
  E, k, dim = 5, 2, 8
  block = TransformerBlock(config(num_experts=E, num_experts_per_tok=k, expert_gating_func=gating, norm_topk_prob=normalize,
                                  routed_scaling_factor=1.5, expert_bias=True))
  rng = np.random.default_rng(int(gating) * 2 + normalize)
  w_router, bias = rng.standard_normal((E, dim)).astype(np.float32), rng.standard_normal(E).astype(np.float32) * 0.1
  x = rng.standard_normal((2, 3, dim)).astype(np.float32)
  block.ffn_gate_inp.weight, block.exp_probs_b["bias"] = Tensor(w_router), Tensor(bias)
  sel, weights = block._route(Tensor(x))
  logits = x @ w_router.T
  def softmax(z: np.ndarray) -> np.ndarray: return np.exp(z - z.max(-1, keepdims=True)) / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)
  scores = {ExpertGating.SOFTMAX: softmax(logits), ExpertGating.SIGMOID: 1 / (1 + np.exp(-logits)), ExpertGating.SOFTMAX_WEIGHT: logits,
            ExpertGating.SQRT_SOFTPLUS: np.sqrt(np.log1p(np.exp(logits)))}[gating]
  want_sel = np.argsort(scores + bias, -1, kind="stable")[..., -k:]
  picked = np.take_along_axis(scores, want_sel, -1)
  if gating == ExpertGating.SOFTMAX_WEIGHT: picked = softmax(picked)
  if normalize: picked = picked / picked.sum(-1, keepdims=True)
  assert sel.numpy().tolist() == want_sel.tolist()
  np.testing.assert_allclose(weights.numpy(), picked * 1.5, rtol=1e-5)


def test_moe_feed_forward_is_the_weighted_sum_of_the_selected_experts():
  E, k, dim, hidden = 4, 2, 8, 6
  block = TransformerBlock(config(num_experts=E, num_experts_per_tok=k, hidden_dim=hidden, shared_expert_dim=4))
  rng = np.random.default_rng(1)
  ws = {n: rng.standard_normal(s).astype(np.float32) * 0.5 for n, s in
        (("gate", (E, hidden, dim)), ("up", (E, hidden, dim)), ("down", (E, dim, hidden)), ("router", (E, dim)),
         ("sg", (4, dim)), ("su", (4, dim)), ("sd", (dim, 4)), ("sgate", (dim,)))}
  block.ffn_gate_exps.weight, block.ffn_up_exps.weight, block.ffn_down_exps.weight = Tensor(ws["gate"]), Tensor(ws["up"]), Tensor(ws["down"])
  block.ffn_gate_inp.weight = Tensor(ws["router"])
  block.ffn_gate_shexp.weight, block.ffn_up_shexp.weight, block.ffn_down_shexp.weight = Tensor(ws["sg"]), Tensor(ws["su"]), Tensor(ws["sd"])
  block.ffn_gate_inp_shexp["weight"] = Tensor(ws["sgate"])
  x = rng.standard_normal((1, 3, dim)).astype(np.float32)
  silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
  want = np.zeros_like(x)
  for t in range(3):
    logits = ws["router"] @ x[0, t]
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    for e in np.argsort(p)[-k:]: want[0, t] += p[e] * (ws["down"][e] @ (silu(ws["gate"][e] @ x[0, t]) * (ws["up"][e] @ x[0, t])))
    shared = ws["sd"] @ (silu(ws["sg"] @ x[0, t]) * (ws["su"] @ x[0, t]))
    want[0, t] += shared / (1 + np.exp(-(x[0, t] @ ws["sgate"])))
  np.testing.assert_allclose(block._feed_forward(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_state_dict_names_are_llama_cpps():
  moe = Transformer(config(num_experts=4, num_experts_per_tok=2, shared_expert_dim=8, shared_expert_gate=False, expert_bias=True))
  names = set(nn.state.get_state_dict(moe))
  assert {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_down_exps.weight", "blk.0.ffn_gate_inp.weight", "blk.0.exp_probs_b.bias",
          "blk.0.ffn_up_shexp.weight", "token_embd.weight", "output.weight", "output_norm.weight"} <= names
  assert "blk.0.ffn_gate_inp_shexp.weight" not in names
  mla = Transformer(config(kv_lora_rank=6, n_kv_heads=1, head_dim=6, rope_dim=2, v_head_dim=3))
  assert isinstance(mla.blk[0], MLATransformerBlock)
  sd = nn.state.get_state_dict(mla)
  assert sd["blk.0.attn_k_b.weight"].shape == (2, 6, 4) and sd["blk.0.attn_v_b.weight"].shape == (2, 3, 6)


def delta_net_reference(block: GatedDeltaNetBlock, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The gated delta net one token at a time in NumPy float64 (inputs rounded to half, as the block reads them)."""
  w = {n: t.numpy().astype(np.float64) for n, t in nn.state.get_state_dict(block).items()}
  Hv, Hk, Dk, Dv, K = block.num_v_heads, block.num_k_heads, block.head_k_dim, block.head_v_dim, block.ssm_conv_kernel
  window = np.zeros((K - 1, block.conv_channels))
  S = np.zeros((Hv, Dv, Dk))
  outs = []
  for x in xs.astype(np.float16).astype(np.float64):
    window = np.concatenate([window, (w["attn_qkv.weight"] @ x)[None]])
    conv = (window * w["ssm_conv1d.weight"].T).sum(0)
    conv, window = conv / (1 + np.exp(-conv)), window[1:]
    q, k, v = conv[:block.q_dim], conv[block.q_dim:2 * block.q_dim], conv[2 * block.q_dim:]
    q, k = (np.tile(z.reshape(Hk, Dk) / np.maximum(np.linalg.norm(z.reshape(Hk, Dk), axis=-1, keepdims=True), 1e-6), (Hv // Hk, 1)) for z in (q, k))
    v = v.reshape(Hv, Dv)
    beta = 1 / (1 + np.exp(-(w["ssm_beta.weight"] @ x)))
    decay = np.exp(np.log1p(np.exp(w["ssm_alpha.weight"] @ x + w["ssm_dt.bias"])) * w["ssm_a"])
    out = np.zeros((Hv, Dv))
    for h in range(Hv):
      S[h] *= decay[h]
      S[h] += np.outer((v[h] - S[h] @ k[h]) * beta[h], k[h])
      out[h] = S[h] @ (q[h] * Dk ** -0.5)
    gate = (w["attn_gate.weight"] @ x).reshape(Hv, Dv)
    normed = out / np.sqrt((out ** 2).mean(-1, keepdims=True) + block.ssm_norm.eps) * w["ssm_norm.weight"]
    z = (normed * gate / (1 + np.exp(-gate))).reshape(-1).astype(np.float16).astype(np.float64)
    outs.append(w["ssm_out.weight"] @ z)
  return np.stack(outs), S


def test_gated_delta_net_matches_numpy_in_steps_and_chunks_and_resets_at_0():
  ssm = SSMConfig(conv_kernel=3, state_size=4, group_count=2, time_step_rank=4, inner_size=12)
  block = GatedDeltaNetBlock(config(dim=8, max_context=8, ssm=ssm, ssm_layers=(True,)), ssm)
  rng = np.random.default_rng(5)
  for p in nn.state.get_parameters(block): p.replace(Tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.4))
  block.ssm_a.replace(-Tensor(rng.uniform(0.1, 1.0, block.ssm_a.shape).astype(np.float32)))
  xs = rng.standard_normal((5, 8)).astype(np.float32)
  want, state = delta_net_reference(block, xs)
  block._init_state(Tensor(xs[None]))
  got = [block._attention(Tensor(xs[None, :3]), 0).numpy()[0], block._attention(Tensor(xs[None, 3:4]), 3).numpy()[0],
         block._attention(Tensor(xs[None, 4:]), 4).numpy()[0]]  # a chunk of 3, then single tokens
  np.testing.assert_allclose(np.concatenate(got), want, rtol=2e-3, atol=2e-3)
  np.testing.assert_allclose(block.recurrent_state.numpy()[0], state, rtol=2e-3, atol=2e-3)
  again = block._attention(Tensor(xs[None, :2]), 0).numpy()[0]  # position 0: the state starts over
  np.testing.assert_allclose(again, want[:2], rtol=2e-3, atol=2e-3)
