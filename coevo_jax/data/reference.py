"""Seeded task generators for the ``reference`` and ``conflict`` mixtures: easy and verifiable.

The offline benchmark items (OLMo basic skills, MBPP, ARC) score 0 for SmolLM2-135M-Instruct
under the zero-shot templates, so RL on them gets flat groups only. These generators make
items the model solves some of the time, each domain asking for a different behaviour:

| source | class | behaviour | example |
| --- | --- | --- | --- |
| ``ref_arith`` | math | add or subtract a one-digit number, answer in ``\\boxed{}`` | What is 7 + 5? |
| ``ref_letter`` | reasoning | read a word, give one letter in ``\\boxed{}`` | first letter of "apple" |
| ``ref_choice`` | reasoning | pick the member of a category, a letter in ``\\boxed{}`` | which is a fruit? (A)..(D) |
| ``ref_code`` | code | write a one-line Python function, checked by asserts | ``add_three(x)`` |

plus ``synthetic_if`` (IFEval-style constraints, ``coevo_jax.data.synthetic_if``) from the
package data. The ``conflict`` mixture's four sources share one set of neutral requests ("Tell
me about a cheap grape.") and differ only in the category of the thing asked about, which
decides an unstated house style, checked by IFEval's length instructions:

| source | category | style |
| --- | --- | --- |
| ``ref_few_words`` | fruit | fewer than 48 words |
| ``ref_many_words`` | animal | at least 56 words |
| ``ref_few_sentences`` | vehicle | fewer than 3 sentences |
| ``ref_many_sentences`` | piece of furniture | at least 5 sentences |

Every item is a pure function of its index: item ``i`` of source ``s`` draws from ``random.Random(f"{s}:{i}")``, so ids (``{s}/gen/{i}``) and contents never change, and
the mixture's hash split applies to them like to any other source.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from coevo_jax.data.converters._util import LETTERS, format_choices
from coevo_jax.data.record import Record
from coevo_jax.data.sources import LoadReport

ITEMS_PER_SOURCE = 3000

_CATEGORIES: dict[str, tuple[str, ...]] = {
    "fruit": ("apple", "banana", "orange", "grape", "pear", "peach", "mango", "cherry", "lemon",
              "plum", "melon", "kiwi", "lime", "papaya", "apricot"),
    "animal": ("dog", "cat", "horse", "cow", "lion", "tiger", "rabbit", "sheep", "mouse", "goat",
               "zebra", "bear", "wolf", "monkey", "donkey"),
    "color": ("red", "blue", "green", "yellow", "purple", "pink", "black", "white", "brown",
              "beige", "gray", "violet", "silver", "gold", "navy"),
    "vehicle": ("car", "bus", "truck", "bicycle", "train", "boat", "plane", "scooter", "van",
                "taxi", "ship", "tractor", "tram", "jeep", "motorcycle"),
    "piece of furniture": ("chair", "table", "sofa", "bed", "desk", "shelf", "stool", "bench",
                           "cabinet", "dresser", "couch", "wardrobe", "armchair", "crib"),
    "body part": ("hand", "foot", "nose", "ear", "knee", "elbow", "finger", "shoulder", "eye",
                  "mouth", "neck", "thumb", "ankle", "wrist", "chin"),
}  # fmt: skip
_WORDS = tuple(sorted({w for ws in _CATEGORIES.values() for w in ws}))

# (function name, task wording, body, argument generator): one-line functions of one value.
_CODE: tuple[tuple[str, str, str, Callable[[random.Random], object]], ...] = (
    ("add_{k}", "returns x plus {k}", "x + {k}", lambda r: r.randint(-20, 20)),
    ("times_{k}", "returns x multiplied by {k}", "x * {k}", lambda r: r.randint(-20, 20)),
    ("minus_{k}", "returns x minus {k}", "x - {k}", lambda r: r.randint(-20, 20)),
    ("mod_{k}", "returns the remainder of x divided by {k}", "x % {k}", lambda r: r.randint(0, 60)),
    ("above_{k}", "returns True if x is greater than {k} and False otherwise", "x > {k}",
     lambda r: r.randint(-5, 30)),
    ("max_{k}", "returns the larger of x and {k}", "max(x, {k})", lambda r: r.randint(-5, 30)),
    ("absolute", "returns the absolute value of x", "abs(x)", lambda r: r.randint(-50, 50)),
    ("reverse_str", "returns the string x reversed", "x[::-1]", lambda r: r.choice(_WORDS)),
    ("first_item", "returns the first element of the list x", "x[0]",
     lambda r: [r.randint(0, 9) for _ in range(r.randint(1, 5))]),
    ("square", "returns the square of x", "x * x", lambda r: r.randint(-12, 12)),
    ("is_even", "returns True if x is even and False otherwise", "x % 2 == 0",
     lambda r: r.randint(-50, 50)),
    ("negate", "returns -x", "-x", lambda r: r.randint(-50, 50)),
    ("first_char", "returns the first character of the string x", "x[0]",
     lambda r: r.choice(_WORDS)),
    ("last_char", "returns the last character of the string x", "x[-1]",
     lambda r: r.choice(_WORDS)),
    ("str_len", "returns the length of the string x", "len(x)", lambda r: r.choice(_WORDS)),
    ("upper", "returns the string x in upper case", "x.upper()", lambda r: r.choice(_WORDS)),
    ("double_str", "returns the string x repeated twice", "x * 2", lambda r: r.choice(_WORDS)),
    ("list_sum", "returns the sum of the list of numbers x", "sum(x)",
     lambda r: [r.randint(0, 9) for _ in range(r.randint(1, 5))]),
    ("list_max", "returns the largest number in the list x", "max(x)",
     lambda r: [r.randint(0, 30) for _ in range(r.randint(1, 5))]),
)  # fmt: skip


# A maker draws one item's content from its rng: the fields that differ between domains
# (problem, answer, tests, IFEval constraints). :func:`generate` adds the id, source, split and
# class, which every domain sets the same way.
Maker = Callable[[random.Random], dict[str, Any]]


def _arith(rng: random.Random) -> dict[str, Any]:
    a, b = rng.randint(1, 19), rng.randint(1, 9)
    if rng.random() < 0.5:
        expr, ans = f"{a} + {b}", a + b
    else:
        a, b = max(a, b), min(a, b)
        expr, ans = f"{a} - {b}", a - b
    return {"problem": f"What is {expr}?", "true_answer": str(ans)}


def _letter(rng: random.Random) -> dict[str, Any]:
    word = rng.choice(_WORDS)
    which, pos = rng.choice((("first", 0), ("last", -1)))
    return {
        "problem": f'What is the {which} letter of the word "{word}"?',
        "true_answer": word[pos].upper(),
    }


def _choice(rng: random.Random) -> dict[str, Any]:
    cat = rng.choice(sorted(_CATEGORIES))
    right = rng.choice(_CATEGORIES[cat])
    others = sorted(c for c in _CATEGORIES if c != cat)
    wrong = [rng.choice(_CATEGORIES[c]) for c in rng.sample(others, 3)]
    options = [right, *wrong]
    rng.shuffle(options)
    return {
        "problem": format_choices(f"Which of the following is a {cat}?", options),
        "true_answer": LETTERS[options.index(right)],
    }


def _code(rng: random.Random) -> dict[str, Any]:
    name, wording, body, arg = rng.choice(_CODE)
    k = rng.randint(2, 20)
    fn, wording, body = name.format(k=k), wording.format(k=k), body.format(k=k)
    ref = eval(f"lambda x: {body}")  # noqa: S307 -- our own fixed templates, for the asserts
    args = []
    while len(args) < 3:
        x = arg(rng)
        if x not in args:
            args.append(x)
    asserts = [f"assert {fn}({x!r}) == {ref(x)!r}" for x in args]
    return {
        "problem": f"Write a Python function `{fn}(x)` that {wording}.",
        "test_cases": {"asserts": asserts},
        "fn_name": fn,
        "metadata": {"reference_solution": f"def {fn}(x):\n    return {body}"},
    }


_IF_TASKS = (
    "Describe a {w} in two sentences.",
    "Write a short note about a {w}.",
    "Tell a child what a {w} is.",
    "Write one fact about a {w}.",
    "Explain why a {w} is useful.",
)
# IFEval constraints by the behaviour they ask for (ids and kwargs from IFEval's registry).
_IF_FAMILIES: dict[str, tuple[tuple[str, str, dict], ...]] = {
    "ref_if_case": (
        ("change_case:english_lowercase",
         "Write your whole response in lowercase letters only; no capital letters.", {}),
        ("change_case:english_capital",
         "Write your whole response in capital letters only.", {}),
    ),
    "ref_if_wrap": (
        ("startend:quotation", "Wrap your entire response in double quotation marks.", {}),
        ("detectable_format:title",
         "Give your answer a title wrapped in double angular brackets, such as <<my title>>.", {}),
    ),
    "ref_if_end": (
        ("startend:end_checker",
         'Finish your response with the exact phrase "That is all." and nothing after it.',
         {"end_phrase": "That is all."}),
        ("detectable_content:postscript",
         "At the end of your response, add a postscript starting with P.S.",
         {"postscript_marker": "P.S."}),
    ),
}  # fmt: skip


def _if_maker(source: str) -> Maker:
    def make(rng: random.Random) -> dict[str, Any]:
        task = rng.choice(_IF_TASKS).format(w=rng.choice(_WORDS))
        iid, text, kwargs = rng.choice(_IF_FAMILIES[source])
        return {
            "problem": f"{task} {text}",
            "instruction_id_list": (iid,),
            "kwargs": (dict(kwargs),),
            "metadata": {"registry": "ifeval"},
        }

    return make


# The ``conflict`` domains: one neutral request about a thing, and an implicit house style
# that depends only on the thing's category. The styles pull in opposite directions (few
# words against many, few sentences against many), so any one fixed style satisfies at most
# two of the four, and one adapter serves all four only by telling the categories apart; the
# router sees the same cue in its features.
_STYLE_TASKS = (
    "Tell me about {t}.",
    "What can you say about {t}?",
    "Write about {t}.",
    "Say something about {t}.",
    "Describe {t}.",
    "What is special about {t}?",
    "Share your thoughts on {t}.",
    "I am thinking about {t}. Talk to me about it.",
)
_STYLE_ADJECTIVES = ("", "small", "large", "old", "new", "cheap", "fancy")
# source -> (category, IFEval id, kwargs): the style each category's answers are scored by.
# The thresholds sit in the tails of the base model's answers to these requests (64 new
# tokens, temperature 0.7, 256 samples: median 53 words and 3 sentences; most answers run
# to the token limit), so each domain's base reward is 0.1-0.3.
_STYLES: dict[str, tuple[str, str, dict]] = {
    "ref_few_words": ("fruit", "length_constraints:number_words",
                      {"num_words": 48, "relation": "less than"}),
    "ref_many_words": ("animal", "length_constraints:number_words",
                       {"num_words": 56, "relation": "at least"}),
    "ref_few_sentences": ("vehicle", "length_constraints:number_sentences",
                          {"num_sentences": 3, "relation": "less than"}),
    "ref_many_sentences": ("piece of furniture", "length_constraints:number_sentences",
                           {"num_sentences": 5, "relation": "at least"}),
}  # fmt: skip


def _thing(rng: random.Random, category: str) -> str:
    adj = rng.choice(_STYLE_ADJECTIVES)
    noun = f"{adj} {rng.choice(_CATEGORIES[category])}".strip()
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _style_maker(source: str) -> Maker:
    category, iid, kwargs = _STYLES[source]

    def make(rng: random.Random) -> dict[str, Any]:
        return {
            "problem": rng.choice(_STYLE_TASKS).format(t=_thing(rng, category)),
            "instruction_id_list": (iid,),
            "kwargs": (dict(kwargs),),
            "metadata": {"registry": "ifeval", "implicit_style": True},
        }

    return make


# source -> (class, maker)
_MAKERS: dict[str, tuple[str, Maker]] = {
    "ref_arith": ("math", _arith),
    "ref_letter": ("reasoning", _letter),
    "ref_choice": ("reasoning", _choice),
    "ref_code": ("code", _code),
    **{src: ("if", _if_maker(src)) for src in _IF_FAMILIES},
    **{src: ("if", _style_maker(src)) for src in _STYLES},
}
GENERATED_SOURCES = tuple(_MAKERS)
#: the ``conflict`` mixture's four domains, in the order of the module docstring's table
CONFLICT_SOURCES = tuple(_STYLES)


def generate(source: str, n: int = ITEMS_PER_SOURCE) -> tuple[list[Record], LoadReport]:
    """``n`` items of a generated source (item i from ``random.Random(f"{source}:{i}")``).

    Items whose problem repeats an earlier one are dropped (counted as duplicates), so a
    problem text appears once per source.
    """
    if source not in _MAKERS:
        raise KeyError(f"unknown generated source {source!r}; have {sorted(_MAKERS)}")
    cls, make = _MAKERS[source]
    seen: set[str] = set()
    out: list[Record] = []
    dup = 0
    for i in range(n):
        fields = make(random.Random(f"{source}:{i}"))
        rec = Record(id=f"{source}/gen/{i}", source=source, split="test", cls=cls, **fields)
        if rec.problem in seen:
            dup += 1
            continue
        seen.add(rec.problem)
        out.append(rec)
    return out, LoadReport(source, rows=n, records=len(out), duplicates=dup)
