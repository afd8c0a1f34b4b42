"""General-reasoning reward (BBH-style): the math extractor, then a light normalisation.

docs/design.md §5: take the last ``\\boxed{}`` (no box scores 0), unwrap ``\\text{}``-like
commands and math delimiters, strip an ``Answer:`` prefix and enclosing parentheses,
uppercase a one-letter choice, canonicalise whitespace and lowercase everything else; then
exact match. ``(a)``, ``A`` and ``\\text{(A)}`` are one answer; ``True`` and ``true`` too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coevo_jax.rewards.math import last_boxed

if TYPE_CHECKING:  # annotation only: dispatch imports the verifiers, not the other way round
    from coevo_jax.rewards.dispatch import RewardConfig

_WRAP = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:：]?\s*", re.IGNORECASE)


def normalize(answer: str) -> str:
    """Canonical form of a reasoning answer (see the module docstring)."""
    s = answer.strip()
    for lo, hi in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(lo) + len(hi) and s.startswith(lo) and s.endswith(hi):
            s = s[len(lo) : len(s) - len(hi)].strip()
    prev = None
    while prev != s:
        prev = s
        s = _WRAP.sub(r"\1", s).strip()
    s = _PREFIX.sub("", s)
    s = s.rstrip(".").strip()
    while len(s) >= 2 and s[0] == "(" and s[-1] == ")" and _balanced(s[1:-1]):
        s = s[1:-1].strip()
    s = re.sub(r"\s+", " ", s)
    if re.fullmatch(r"[A-Za-z]", s):
        return s.upper()
    return s.lower()


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def score(completion: str, gold: str) -> float:
    """1.0 when the normalised last ``\\boxed{}`` equals the normalised gold, else 0.0."""
    pred = last_boxed(completion or "")
    if pred is None or not gold:
        return 0.0
    p = normalize(pred)
    return float(bool(p) and p == normalize(gold))


def verify(
    record: Mapping[str, Any], completion: str, *, config: RewardConfig, isolate: bool
) -> float:
    """The ``reasoning`` domain's verifier (``coevo_jax.rewards.verifiers``): :func:`score`
    against the record's ``true_answer``; it needs no clock of its own."""
    return score(completion, record.get("true_answer") or "")
