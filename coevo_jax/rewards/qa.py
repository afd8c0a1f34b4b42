"""Token-level F1 and exact match for extractive QA (SQuAD v1.1's official definition).

Both sides are normalised the same way: lowercase, drop ASCII punctuation, drop the articles
"a", "an", "the" (whole words), collapse whitespace. F1 compares the two token *multisets*:
with ``c`` tokens in common (counted with multiplicity), precision ``c / |pred|``, recall
``c / |gold|`` and F1 their harmonic mean; no common token gives 0. With several gold answers
the best score over them counts. EvoChamber's QA domains (HotpotQA, DROP) are scored this way.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(gold: str | Iterable[str]) -> list[str]:
    golds = [gold] if isinstance(gold, str) else list(gold)
    if not golds:
        raise ValueError("token F1 needs at least one gold answer")
    return golds


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        # SQuAD v2's convention for empty answers: both empty is a match.
        return float(pred == ref)
    common = sum((collections.Counter(pred) & collections.Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2.0 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold: str | Iterable[str]) -> float:
    """Token-level F1 in [0, 1] of ``prediction`` against ``gold`` (best over several)."""
    return max(_f1(prediction, g) for g in _golds(gold))


def exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in _golds(gold)))
