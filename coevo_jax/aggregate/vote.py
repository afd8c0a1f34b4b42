"""Familiarity-weighted majority vote and most-familiar selection.

Checkable classes (math, reasoning, multiple choice) group the activated agents by their
extracted final answer and weigh each group by the sum of its members' familiarity ``f``; the
output is the *full trajectory* of the most familiar agent in the heaviest group. Open-ended
classes (code, instruction following) output the activated agent with the largest ``f``.
Which is which is the domain registry's ``votable`` flag (``coevo_jax.data.domains``).

Our reading where the papers are silent:
- ties between groups go to the group holding the single most familiar agent, then to the
  lower agent index, so the result is deterministic;
- agents with no extractable answer do not vote; when nobody has one, the most familiar
  agent's trajectory is returned (``answer=None``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from coevo_jax.data import domains


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """The outcome for one query.

    Attributes:
      index: position (in the given candidate lists) of the trajectory that is output.
      answer: the winning normalised answer, or None (open-ended class / nothing extractable).
      weights: total familiarity per answer group.
    """

    index: int
    answer: str | None
    weights: dict[str, float]


def most_familiar(f: Sequence[float]) -> int:
    """Index of the largest familiarity (lowest index on ties)."""
    if not f:
        raise ValueError("most_familiar: no candidates")
    return max(range(len(f)), key=lambda i: (f[i], -i))


def familiarity_weighted_vote(answers: Sequence[str | None], f: Sequence[float]) -> Aggregate:
    """Familiarity-weighted majority vote over extracted answers.

    Args:
      answers: one normalised answer per activated agent (None = not extractable).
      f: the same agents' familiarity values, in [0, 1].

    Returns:
      The Aggregate whose ``index`` is the most familiar member of the winning group.
    """
    if len(answers) != len(f):
        raise ValueError(f"{len(answers)} answers but {len(f)} familiarity values")
    if not answers:
        raise ValueError("familiarity_weighted_vote: no candidates")
    weights: dict[str, float] = {}
    best_member: dict[str, int] = {}
    for i, (a, fi) in enumerate(zip(answers, f, strict=True)):
        if a is None:
            continue
        weights[a] = weights.get(a, 0.0) + float(fi)
        j = best_member.get(a)
        if j is None or (fi, -i) > (f[j], -j):
            best_member[a] = i
    if not weights:
        return Aggregate(index=most_familiar(f), answer=None, weights={})
    winner = max(weights, key=lambda a: (weights[a], f[best_member[a]], -best_member[a]))
    return Aggregate(index=best_member[winner], answer=winner, weights=weights)


def aggregate(
    klass: str,
    completions: Sequence[str],
    f: Sequence[float],
    extract: Callable[[str], str | None],
) -> Aggregate:
    """Dispatches on the record class: vote where its domain is ``votable``, else most familiar.

    Args:
      klass: the record class (a registered domain; ``domains.UnknownClassError`` otherwise).
      completions: one completion per activated agent.
      f: their familiarity values.
      extract: completion -> normalised final answer or None (the verifier's extractor).
    """
    if domains.get(klass).votable:
        return familiarity_weighted_vote([extract(c) for c in completions], f)
    return Aggregate(index=most_familiar(f), answer=None, weights={})
