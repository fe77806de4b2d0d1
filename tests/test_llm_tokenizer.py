"""tinyhybrid.llm.tokenizer, rebuilt from gguf metadata, against the `tokenizers` tokenizer it was written from: the
same ids on a multilingual corpus with emoji and whitespace runs, for byte-level BPE under each pre-tokenizer preset
and for a SentencePiece vocabulary; special tokens, streaming decode, and chat templates against transformers'."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("tokenizers")
from llm_models import (CHATML_TEMPLATE, finish_gguf, CORPUS, LLAMA3_SPECIALS, LLAMA3_TEMPLATE, QWEN_SPECIALS, spm_tokenizer_kv, tokenizer_kv,  # noqa: E402
                        train_bpe, train_spm)

from tinyhybrid.llm.template import ChatTemplate  # noqa: E402
from tinyhybrid.llm.tokenizer import PRESETS, Tokenizer  # noqa: E402

EXTRA = ["", " ", "  leading", "trailing   ", "\n\n\n", "a\tb\t\tc", "x  \n  y\r\n", "123456789 3.14159", "I'M it's DON'T we'd",
         "中文English混合テキスト", "🎉🎉🎉 👩‍💻", "<|eot_id|>hi<|start_header_id|>user<|end_header_id|>", "ẞ ǅ ﬁ", "tab\tend\t",
         "\u00a0nbsp\u2003em space\u3000ideographic"]


def ggml_kv(kv: dict) -> dict: return {f"tokenizer.ggml.{k}" if k != "chat_template" else "tokenizer.chat_template": v for k, v in kv.items()}


@pytest.fixture(scope="module", params=["llama-bpe", "qwen2", "gpt-4o", "tekken", "gpt2"])
def bpe(request):
  hf = train_bpe(request.param, 500)
  return hf, Tokenizer.from_gguf_kv(ggml_kv(tokenizer_kv(hf, request.param, "<|begin_of_text|>", "<|eot_id|>", None)))


def test_bpe_ids_match_tokenizers(bpe):
  hf, tok = bpe
  for text in CORPUS + EXTRA:
    assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
    assert tok.decode(tok.encode(text)) == text


def test_spm_ids_match_tokenizers():
  hf = train_spm(800)
  tok = Tokenizer.from_gguf_kv(ggml_kv(spm_tokenizer_kv(hf)))
  extra = [t.replace("<|eot_id|>", "</s>").replace("<|start_header_id|>", "<s>") for t in EXTRA]
  for text in CORPUS + extra:
    if not text: continue
    assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
  assert tok.decode(tok.encode("Hello world")) == "Hello world"
  assert tok.prompt("hi")[0] == tok.bos_id  # SentencePiece vocabularies ask for BOS
  crab = tok.encode("🦀")  # not in the vocabulary: its four UTF-8 bytes
  assert [tok.tokens[i] for i in crab[-4:]] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x80>"] and tok.decode(crab) == "🦀"


def test_gguf_roundtrip(tmp_path):
  # the metadata as the gguf writer stores it and the reader gives it back (lists, ints, strings) builds the same tokenizer
  import gguf
  from tinyhybrid.llm.gguf import gguf_read
  hf = train_bpe("qwen2", 500, QWEN_SPECIALS)
  kv = tokenizer_kv(hf, "qwen2", None, "<|im_end|>", CHATML_TEMPLATE, add_bos=False)
  w = gguf.GGUFWriter(str(path := tmp_path / "tok.gguf"), "qwen2")
  w.add_tokenizer_model(kv["model"])
  w.add_tokenizer_pre(kv["pre"])
  w.add_token_list(kv["tokens"])
  w.add_token_types(kv["token_type"])
  w.add_token_merges(kv["merges"])
  w.add_eos_token_id(kv["eos_token_id"])
  w.add_add_bos_token(False)
  w.add_chat_template(kv["chat_template"])
  finish_gguf(w)
  fkv, _ = gguf_read(path)
  tok = Tokenizer.from_gguf_kv(fkv)
  for text in CORPUS: assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids
  assert tok.prompt("hi") == tok.encode("hi") and tok.bos_id is None
  assert tok.is_end(hf.token_to_id("<|im_end|>")) and not tok.is_end(hf.token_to_id("<|im_start|>"))


def test_special_tokens_and_streaming():
  hf = train_bpe("llama-bpe", 500)
  tok = Tokenizer.from_gguf_kv(ggml_kv(tokenizer_kv(hf, "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", None)))
  ids = tok.encode("<|start_header_id|>user<|end_header_id|>")
  assert ids[0] == hf.token_to_id("<|start_header_id|>") and ids[-1] == hf.token_to_id("<|end_header_id|>")
  assert tok.encode("<|start_header_id") != [hf.token_to_id("<|start_header_id|>")]  # only the whole text is the token
  assert tok.prompt("hi")[0] == tok.bos_id and tok.prompt("hi")[1:] == tok.encode("hi")
  assert tok.is_end(tok.eos_id) and tok.is_end(hf.token_to_id("<|end_of_text|>")) and not tok.is_end(tok.encode("a")[0])
  assert tok.decode(ids, skip_special=True) == "user"
  # a character split over tokens comes out whole, once its last byte arrives
  text = "ok 🎉👩‍💻 né"
  ids = tok.encode(text)
  dec = tok.stream_decoder()
  pieces = [dec(i) for i in ids] + [dec()]
  assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)
  assert any(p == "" for p in pieces)  # the emoji took several tokens, and nothing was emitted before it was complete


SPLITS = {  # the seed's (tinygrad's test_llm_tokenizer) words for the tekken and gpt-4o splits
  "shared": {"HelloWorld": ["Hello", "World"], " ÜNICODE": [" ÜNICODE"], "é café": ["é", " café"], "เพื่อน วิ": ["เพื่อน", " วิ"],
             "a/b\r\n x": ["a", "/b", "\r\n", " x"]},
  "tekken": {"12345": list("12345"), "it's I'M don'T": ["it", "'s", " I", "'M", " don", "'T"]},
  "gpt-4o": {"12345": ["123", "45"], "it's I'M don'T": ["it's", " I'M", " don'T"]},
}


@pytest.mark.parametrize("preset", ["tekken", "gpt-4o"])
def test_preset_word_splits(preset):
  from tokenizers import Regex, pre_tokenizers
  split = pre_tokenizers.Split(Regex(PRESETS[preset][0]), behavior="isolated")
  for text, words in {**SPLITS["shared"], **SPLITS[preset]}.items():
    assert [w for w, _ in split.pre_tokenize_str(text)] == words, (preset, text)
  # llama 3 groups digits by three, qwen2 splits them
  assert [w for w, _ in pre_tokenizers.Split(Regex(PRESETS["llama3"][0]), behavior="isolated").pre_tokenize_str("12345")] == ["123", "45"]
  assert [w for w, _ in pre_tokenizers.Split(Regex(PRESETS["qwen2"][0]), behavior="isolated").pre_tokenize_str("12345")] == list("12345")


def test_unsupported_vocabularies():
  with pytest.raises(ValueError, match="superbpe"): Tokenizer(["a"], [1], "gpt2", [], pre="superbpe")
  with pytest.raises(ValueError, match="'bert'"): Tokenizer(["a"], [1], "bert")
  with pytest.raises(ValueError, match="tokenizer.ggml.tokens"): Tokenizer.from_gguf_kv({})


# ** chat templates **

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there  "},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]
TOOLS_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}{% endif %}"
                  "[{{ m['role'] | upper }}] {{ m['content'] if m['content'] is string else m['content'] | tojson }}\n{% endfor %}"
                  "{% if tools %}tools: {{ tools | tojson }}{% endif %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}")


@pytest.mark.parametrize("template", [LLAMA3_TEMPLATE, CHATML_TEMPLATE, TOOLS_TEMPLATE], ids=["llama3", "chatml", "loopcontrols"])
def test_chat_template_matches_transformers(template):
  transformers = pytest.importorskip("transformers")
  hf = train_bpe("llama-bpe", 500, LLAMA3_SPECIALS + QWEN_SPECIALS)
  tok = Tokenizer.from_gguf_kv(ggml_kv(tokenizer_kv(hf, "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", template)))
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=hf, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
  tools = [{"type": "function", "function": {"name": "add", "parameters": {"a": "ünïcode"}}}]
  for kw in ({}, {"tools": tools}):
    ours = ChatTemplate(template, tok).render(MESSAGES, add_generation_prompt=True, **kw)
    ref = fast.apply_chat_template(MESSAGES, chat_template=template, tokenize=False, add_generation_prompt=True, **kw)
    assert ours == ref


def test_chat_template_errors_and_fallbacks():
  hf = train_bpe("llama-bpe", 500, LLAMA3_SPECIALS)
  tok = Tokenizer.from_gguf_kv(ggml_kv(tokenizer_kv(hf, "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", None)))
  strict = ChatTemplate("{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}ok", tok)
  with pytest.raises(ValueError, match="user first"): strict.render(MESSAGES)
  with pytest.raises(ValueError, match="role"): strict.render([{"content": "x"}])
  # no template in the file: llama 3's format, from its special tokens
  out = ChatTemplate(None, tok).render(MESSAGES[:2])
  assert out == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                 "Hi there  <|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
  hfq = train_bpe("qwen2", 500, QWEN_SPECIALS)
  tq = Tokenizer.from_gguf_kv(ggml_kv(tokenizer_kv(hfq, "qwen2", None, "<|im_end|>", None, add_bos=False)))
  assert ChatTemplate(None, tq).render(MESSAGES[1:2]) == "<|im_start|>user\nHi there  <|im_end|>\n<|im_start|>assistant\n"


def test_encode_speed_is_reasonable():
  # the BPE runs in the tokenizers package: a long prompt tokenizes in a blink
  import time
  hf = train_bpe("llama-bpe", 500)
  tok = Tokenizer.from_gguf_kv(ggml_kv(tokenizer_kv(hf, "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", None)))
  text = " ".join(CORPUS) * 50
  st = time.perf_counter()
  ids = tok.encode(text)
  assert time.perf_counter() - st < 2.0 and len(ids) > 1000
  assert np.array_equal(ids, hf.encode(text, add_special_tokens=False).ids)
