"""The quality gate: which (query, agent, response) triples enter the success store.

Two gates share one call shape (a batch of :class:`GateItem` in, :class:`GateResult` out):

- :class:`JudgeGate`, the FlyRoute paper's LLM-as-judge: a prompt asking for a score in
  [0, 1], parsed robustly by :func:`parse_score`. A judgment that yields no score in [0, 1] is
  counted in ``stats["unparseable"]`` and treated as a failure (score 0, not stored).
- :class:`VerifierGate`: a programmatic checker injected by the caller (e.g. the project's
  reward functions wrapped by :func:`verifier_from_records`), falling back to another gate
  for queries it has no verifier for.

An item passes when ``score >= theta`` (the FlyRoute paper: 0.7; docs/design.md §8).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from coevo_jax.orchestrators.flyroute.query import Query
from coevo_jax.orchestrators.scoring import task_outcome
from coevo_jax.text_llm import TextLLM, TextRequest

JUDGE_TAG = "flyroute.judge"


@dataclasses.dataclass(frozen=True)
class GateItem:
    """One response to judge: what the gate may see (no gold route)."""

    query: Query
    agent: str
    response: str


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The gate's verdict on one item.

    Attributes:
      score: in [0, 1]; 0 when the judgment could not be parsed.
      passed: ``score >= theta`` (and parsed).
      parsed: False when the judge's output held no usable score.
      source: "judge" or "verifier".
      raw: the judge's text ("" for a verifier).
    """

    score: float
    passed: bool
    parsed: bool
    source: str
    raw: str = ""


class Gate(Protocol):
    theta: float
    stats: Counter

    def __call__(self, items: Sequence[GateItem], *, step: int = 0) -> list[GateResult]: ...


def judge_prompt(query: str, response: str, *, response_chars: int = 2000) -> str:
    """The LLM-as-judge prompt: grade how well ``response`` answers ``query``, in [0, 1]."""
    if len(response) > response_chars:
        response = response[:response_chars] + " [...]"
    return (
        "You are a strict grader. Judge how well the response answers the user's query: is it "
        "correct, complete and does it follow the query's instructions?\n\n"
        f"Query:\n{query}\n\n"
        f"Response:\n{response}\n\n"
        "Give a score between 0 and 1, where 1 means fully correct and 0 means wrong or "
        "off-topic. Reply with one line of the form\nScore: <number between 0 and 1>"
    )


_NUM = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_SCALE = rf"(?:\s*(?:/|out\s+of)\s*{_NUM}|\s*(%))?"
_LABELLED = re.compile(
    rf"\b(?:score|rating|grade)\b[^0-9.\n]{{0,20}}?{_NUM}{_SCALE}", re.IGNORECASE
)
_BARE = re.compile(rf"^\s*\**\s*{_NUM}{_SCALE}\s*\**\s*\.?\s*$")


def _value(num: str, denom: str | None, pct: str | None) -> float | None:
    try:
        x = float(num)
    except ValueError:
        return None
    if denom is not None:
        d = float(denom)
        if d <= 0:
            return None
        x = x / d
    elif pct:
        x = x / 100.0
    if not math.isfinite(x) or not 0.0 <= x <= 1.0:
        return None
    return x


def parse_score(text: str) -> float | None:
    """Extracts a score in [0, 1] from a judge's output, or None.

    Accepted, in order of preference: the last labelled score ("Score: 0.8", "rating = 7/10",
    "score of 85%", "**Score:** 1"), else a reply that is only a number ("0.9", "8/10",
    "90%"). Fractions "x/y" and "x out of y" are divided, percentages divided by 100. A bare
    number above 1 with no scale is ambiguous (7 of 10? of 100?) and rejected, as is any value
    outside [0, 1].
    """
    if not isinstance(text, str):
        return None
    matches = list(_LABELLED.finditer(text))
    if matches:
        m = matches[-1]
        return _value(m.group(1), m.group(2), m.group(3))
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = _BARE.match(first)
    if m:
        return _value(m.group(1), m.group(2), m.group(3))
    return None


class JudgeGate:
    """LLM-as-judge quality gate.

    Args:
      llm: serves the judge prompts (greedy).
      theta: pass threshold.
      judge_agent: the ``TextRequest.agent`` the judge runs as (-1: the bare backbone).
      max_tokens: judge generation budget.
      response_chars: the response is cut to this length in the prompt.
    """

    def __init__(
        self,
        llm: TextLLM,
        *,
        theta: float = 0.7,
        judge_agent: str | int = -1,
        max_tokens: int = 32,
        response_chars: int = 2000,
        seed: int = 0,
    ):
        self.llm = llm
        self.theta = theta
        self.judge_agent = judge_agent
        self.max_tokens = max_tokens
        self.response_chars = response_chars
        self.seed = seed
        self.stats: Counter = Counter()

    def __call__(self, items: Sequence[GateItem], *, step: int = 0) -> list[GateResult]:
        if not items:
            return []
        reqs = [
            TextRequest(
                prompt=judge_prompt(it.query.text, it.response, response_chars=self.response_chars),
                agent=self.judge_agent,
                max_tokens=self.max_tokens,
                temperature=0.0,
                seed=self.seed + step,
                tag=JUDGE_TAG,
            )
            for it in items
        ]
        outs = self.llm.complete(reqs)
        if len(outs) != len(reqs):
            raise RuntimeError(
                f"judge LLM returned {len(outs)} completions for {len(reqs)} requests"
            )
        results = []
        for out in outs:
            s = parse_score(out)
            self.stats["judged"] += 1
            if s is None:
                self.stats["unparseable"] += 1
                results.append(GateResult(0.0, False, False, "judge", out))
            else:
                passed = s >= self.theta
                self.stats["passed"] += int(passed)
                results.append(GateResult(s, passed, True, "judge", out))
        return results


Verifier = Callable[[Query, str], "float | None"]


class VerifierGate:
    """A gate backed by a programmatic verifier, with an optional fallback gate.

    Args:
      verifier: ``(query, response) -> score in [0, 1]``, or None when it has no check for
        that query (then ``fallback`` judges it; without a fallback the item fails and is
        counted in ``stats["no_verifier"]``).
      theta: pass threshold.
      fallback: e.g. a :class:`JudgeGate`.
    """

    def __init__(self, verifier: Verifier, *, theta: float = 0.7, fallback: Gate | None = None):
        self.verifier = verifier
        self.theta = theta
        self.fallback = fallback
        self.stats: Counter = Counter()

    def __call__(self, items: Sequence[GateItem], *, step: int = 0) -> list[GateResult]:
        results: list[GateResult | None] = [None] * len(items)
        rest: list[int] = []
        for i, it in enumerate(items):
            s = self.verifier(it.query, it.response)
            if s is None:
                rest.append(i)
                continue
            s = float(s)
            if not 0.0 <= s <= 1.0:
                raise ValueError(f"verifier returned {s} for query {it.query.id}; expected [0, 1]")
            self.stats["verified"] += 1
            passed = s >= self.theta
            self.stats["passed"] += int(passed)
            results[i] = GateResult(s, passed, True, "verifier")
        if rest:
            if self.fallback is None:
                self.stats["no_verifier"] += len(rest)
                for i in rest:
                    results[i] = GateResult(0.0, False, False, "verifier")
            else:
                for i, r in zip(
                    rest, self.fallback([items[i] for i in rest], step=step), strict=True
                ):
                    results[i] = r
        return [r for r in results if r is not None]


def verifier_from_records(
    records: Mapping[str, Any],
    score_fn: Callable[[Any, str], float] | None = None,
) -> Verifier:
    """Wraps a record-level scorer as a :data:`Verifier` keyed by query id.

    The replay harness, not the pipeline, holds ``records`` (id -> record with its verifier
    metadata). The verifier reveals whether a response is *correct*; it never hands the
    record's class (the gold route) to the pipeline.

    Args:
      records: query id -> record (whatever ``score_fn`` takes).
      score_fn: ``(record, completion) -> float in [0, 1]``; default: the paper metric of
        :func:`coevo_jax.orchestrators.scoring.task_outcome` (pass@1 on all tests for code,
        exact match for math and reasoning, token F1 for QA, IFEval strict), not the training
        reward's partial credit: a program passing half its tests is not a success.
    """
    if score_fn is None:

        def score_fn(rec: Any, completion: str) -> float:
            return task_outcome(rec, completion).score

    def verify(query: Query, response: str) -> float | None:
        rec = records.get(query.id)
        if rec is None:
            return None
        return float(score_fn(rec, response))

    return verify
