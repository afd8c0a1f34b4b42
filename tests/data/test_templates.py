"""Prompt templates: snapshots per class, and left truncation that keeps the template."""

import os
from pathlib import Path

import pytest

from coevo_jax.data import Record, render_chat, render_prompt
from coevo_jax.data.templates import chat_messages, format_line

SNAPSHOTS = Path(__file__).parent / "snapshots"

RECORDS = {
    "math": Record(
        id="gsm8k/test/0", source="gsm8k", split="test", cls="math",
        problem="Tom has 3 apples and buys 4 more. How many apples does he have?", true_answer="7",
    ),
    "reasoning": Record(
        id="arc/test/1", source="arc_challenge", split="test", cls="reasoning",
        problem="Which gas do plants take in?\n\n(A) oxygen\n(B) carbon dioxide", true_answer="B",
    ),
    "code_fn": Record(
        id="mbpp/test/2", source="mbpp", split="test", cls="code",
        problem="Write a function to add two numbers.\nYour code should pass this test:\nassert add(1, 2) == 3",
        test_cases={"asserts": ["assert add(1, 2) == 3"]}, fn_name="add",
    ),
    "code_stdio": Record(
        id="taco/train/3", source="taco", split="train", cls="code",
        problem="Read two integers and print their sum.",
        test_cases={"inputs": ["1 2\n"], "outputs": ["3\n"]},
    ),
    "if": Record(
        id="ifeval/test/4", source="ifeval", split="test", cls="if",
        problem="Write a haiku about rain. Do not use any commas.",
        instruction_id_list=["punctuation:no_comma"], kwargs=[{}],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_prompt_snapshot(name):
    got = render_prompt(RECORDS[name])
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        path.write_text(got)
    assert got == path.read_text(), f"prompt for {name} changed; UPDATE_SNAPSHOTS=1 to accept"


def test_prompts_are_zero_shot_and_role_free():
    for r in RECORDS.values():
        p = render_prompt(r)
        assert p.startswith(r.problem.rstrip())
        assert "You are" not in p and "expert" not in p.lower()
    assert render_prompt(RECORDS["if"]) == RECORDS["if"].problem
    assert format_line(RECORDS["math"]) == format_line(RECORDS["reasoning"])
    assert "Answer: \\boxed{XX}" in format_line(RECORDS["math"])
    assert "`add`" in format_line(RECORDS["code_fn"]) and "standard input" in format_line(
        RECORDS["code_stdio"]
    )


def test_prompt_accepts_plain_dicts():
    d = RECORDS["math"].to_dict()
    assert render_prompt(d) == render_prompt(RECORDS["math"])


class WordTokenizer:
    """Stand-in tokenizer: one token per whitespace-separated word; a ChatML-like template."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text, add_special_tokens=False):
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def apply_chat_template(self, messages, add_generation_prompt=True):
        out = "".join(f"<|im_start|> {m['role']} {m['content']} <|im_end|> " for m in messages)
        return out + ("<|im_start|> assistant " if add_generation_prompt else "")


def _long_record(n_words):
    words = " ".join(f"w{i}" for i in range(n_words))
    return Record(
        id="m/1", source="gsm8k", split="test", cls="math", problem=words, true_answer="1"
    )


def test_short_prompt_is_encoded_whole():
    tok = WordTokenizer()
    ids = render_chat(RECORDS["math"], tok, max_input_tokens=800)
    text = tok.apply_chat_template([{"role": "user", "content": render_prompt(RECORDS["math"])}])
    assert ids == tok.encode(text)


def test_left_truncation_keeps_template_and_format_line():
    tok = WordTokenizer()
    ids = render_chat(_long_record(2000), tok, max_input_tokens=100)
    assert len(ids) == 100
    inv = {v: k for k, v in tok.vocab.items()}
    words = [inv[i] for i in ids]
    assert words[:2] == ["<|im_start|>", "user"]  # the header survives
    assert words[-4:] == [
        "\\boxed{XX}",
        "<|im_end|>",
        "<|im_start|>",
        "assistant",
    ]  # so does the tail
    assert "w1999" in words and "w0" not in words  # the start of the problem is cut
    assert words.index("w1999") < words.index("\\boxed{XX}")
    # deterministic
    assert render_chat(_long_record(2000), tok, max_input_tokens=100) == ids


def test_truncation_errors():
    tok = WordTokenizer()
    with pytest.raises(ValueError, match="template alone"):
        render_chat(_long_record(50), tok, max_input_tokens=3)
    with pytest.raises(ValueError, match="positive"):
        render_chat(_long_record(5), tok, max_input_tokens=0)


def test_system_turn_only_when_asked():
    assert [m["role"] for m in chat_messages(RECORDS["math"])] == ["user"]
    assert chat_messages(RECORDS["math"], system_prompt="")[0] == {"role": "system", "content": ""}
    tok = WordTokenizer()
    ids = render_chat(RECORDS["math"], tok, system_prompt="")
    assert tok.encode("<|im_start|> system")[:2] == ids[:2]


@pytest.mark.slow
def test_render_chat_with_the_smollm2_tokenizer():
    """The real tokenizer (GGUF metadata, ~1 min to build on 2 busy cores)."""
    try:
        from coevo_jax.models.default import default_model_path
        from coevo_jax.models.tokenizer import Tokenizer

        tok = Tokenizer.from_gguf(default_model_path())
    except (ImportError, FileNotFoundError) as e:
        pytest.skip(f"SmolLM2 tokenizer unavailable: {e}")
    ids = render_chat(_long_record(3000), tok, max_input_tokens=800)
    assert len(ids) == 800
    text = tok.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert "\\boxed{XX}" in text and "w2999" in text and " w0 " not in text
    short = render_chat(RECORDS["math"], tok)
    assert tok.decode(short, skip_special_tokens=False).count("<|im_start|>") == 3
