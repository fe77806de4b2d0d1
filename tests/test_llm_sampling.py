"""tinyhybrid.llm.sampling: greedy, temperature, top-k, top-p and the repetition penalty as transformers defines them,
and a seed that reproduces the choices."""
import numpy as np
import pytest

from tinyhybrid.llm.sampling import Sampler, SamplingParams

RNG = np.random.default_rng(5)
LOGITS = RNG.standard_normal(300).astype(np.float32) * 3


def test_greedy_and_its_limits():
  assert Sampler()(LOGITS, []) == int(np.argmax(LOGITS))
  # top-k 1, or a top-p below the best token's probability, leave only the argmax to sample
  for p in (SamplingParams(temperature=1.0, top_k=1, seed=0), SamplingParams(temperature=1.0, top_p=1e-6, seed=0)):
    s = Sampler(p)
    assert all(s(LOGITS, []) == int(np.argmax(LOGITS)) for _ in range(20))


def test_seed_reproduces():
  def draw(seed: int) -> list[int]:
    s = Sampler(SamplingParams(temperature=1.0, seed=seed))
    return [s(LOGITS, []) for _ in range(30)]
  assert draw(7) == draw(7) and draw(7) != draw(8)


def test_distribution_follows_the_temperature():
  logits = np.array([2.0, 1.0, 0.0, -1.0], np.float32)
  for t in (0.5, 1.0, 2.0):
    s = Sampler(SamplingParams(temperature=t, seed=1))
    counts = np.bincount([s(logits, []) for _ in range(4000)], minlength=4) / 4000
    p = np.exp(logits / t) / np.exp(logits / t).sum()
    np.testing.assert_allclose(counts, p, atol=0.03)


def test_top_k_and_top_p_keep_the_right_tokens():
  logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))
  s = Sampler(SamplingParams(temperature=1.0, top_k=2, seed=2))
  assert set(s(logits, []) for _ in range(300)) == {0, 1}
  # top_p 0.8 keeps the smallest set reaching it: 0.5 + 0.3
  s = Sampler(SamplingParams(temperature=1.0, top_p=0.8, seed=2))
  assert set(s(logits, []) for _ in range(300)) == {0, 1}
  s = Sampler(SamplingParams(temperature=1.0, top_p=0.81, seed=2))
  assert set(s(logits, []) for _ in range(600)) == {0, 1, 2}


def test_top_k_top_p_match_transformers():
  torch = pytest.importorskip("torch")
  tf = pytest.importorskip("transformers")
  logits = torch.tensor(LOGITS)[None]
  for k, p in ((20, 1.0), (0, 0.7), (50, 0.9)):
    x = logits / 0.8
    if k: x = tf.TopKLogitsWarper(k)(None, x)
    if p < 1: x = tf.TopPLogitsWarper(p)(None, x)
    allowed = set(np.nonzero(np.isfinite(x[0].numpy()))[0].tolist())
    s = Sampler(SamplingParams(temperature=0.8, top_k=k, top_p=p, seed=3))
    seen = {s(LOGITS, []) for _ in range(3000)}
    assert seen <= allowed and len(seen) >= min(len(allowed), 5)


def test_repetition_penalty_matches_transformers():
  torch = pytest.importorskip("torch")
  tf = pytest.importorskip("transformers")
  ids = [3, 17, 17, 250, 0]
  ref = tf.RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([ids]), torch.tensor(LOGITS)[None].clone())[0].numpy()
  assert Sampler(SamplingParams(repetition_penalty=1.3))(LOGITS, ids) == int(np.argmax(ref))
  # with a penalty strong enough, the argmax moves off a repeated token
  top = int(np.argmax(LOGITS))
  assert Sampler(SamplingParams(repetition_penalty=100.0))(LOGITS, [top]) != top


def test_bad_parameters():
  for kw in ({"temperature": -1}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}, {"repetition_penalty": 0}):
    with pytest.raises(ValueError, match=next(iter(kw))): SamplingParams(**kw)
