"""How the test-time orchestrators score a task: the papers' own metrics, not training rewards.

The EvoChamber paper reports "exact match for math, pass@1 for code, and F1 for QA". The
training rewards in :mod:`coevo_jax.rewards` give partial credit (a program passing half its
tests scores 0.5) because RL needs a graded signal; here a task is *solved* only when:

- code: the program passes every test (pass@1 on all tests, one sample);
- math / reasoning: the final answer matches the gold answer (``rewards.math`` checks
  mathematical equivalence of the last ``\\boxed{}``; ``rewards.reasoning`` normalised
  string equality);
- QA (HotpotQA, DROP, SQuAD-like records): the metric is token-level F1
  (:func:`coevo_jax.rewards.qa.token_f1`) of the last ``\\boxed{}`` (else the last line);
  solved means F1 = 1;
- instruction following: every instruction holds (IFEval strict).

The partial credit stays available as its own number (:attr:`Outcome.partial`). Each outcome
also carries a *key*, what "the same outcome" means when members are compared for
disagreement: the per-test pass/fail vector for code, the normalised final answer otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from coevo_jax.orchestrators.answers import last_boxed
from coevo_jax.rewards import code, ifeval, score
from coevo_jax.rewards.qa import normalize_answer, token_f1
from coevo_jax.rewards.reasoning import normalize

METRICS = ("pass@1", "exact_match", "f1", "if_strict", "reward")
METRIC_LABELS = {
    "pass@1": "pass@1 (all tests)",
    "exact_match": "exact match",
    "f1": "token F1",
    "if_strict": "IFEval strict",
    "reward": "reward",
}
QA_SOURCES = frozenset({"hotpotqa", "drop", "squad"})


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One completion's score under the paper metric.

    Attributes:
      metric: one of :data:`METRICS` ("reward": a plain float from a custom reward function).
      score: the metric's value in [0, 1] (0/1 except for F1 and custom rewards).
      partial: partial credit in [0, 1] (code: fraction of tests passed; IFEval: fraction of
        instructions followed; otherwise equal to ``score``).
      key: what two completions must share to count as agreeing (None: nothing extractable).
    """

    metric: str
    score: float
    partial: float
    key: Hashable | None = None

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; known: {METRICS}")
        for name in ("score", "partial"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"Outcome.{name} must be in [0, 1], got {v}")

    @property
    def solved(self) -> bool:
        """Full marks under the metric (all tests, exact answer, F1 = 1)."""
        return self.score >= 1.0


def _get(record: Mapping[str, Any], key: str) -> Any:
    v = record.get(key)
    if v is None and key == "class":
        v = record.get("cls")
    return v


def is_qa(record: Mapping[str, Any]) -> bool:
    """A QA record: its source or niche is a QA dataset, or its metadata asks for F1."""
    meta = _get(record, "metadata") or {}
    if isinstance(meta, Mapping) and meta.get("metric") == "f1":
        return True
    return (
        str(_get(record, "source") or "") in QA_SOURCES
        or str(_get(record, "niche") or "") in QA_SOURCES
    )


def metric_of(record: Mapping[str, Any]) -> str:
    """The paper metric a record is scored with."""
    if is_qa(record):
        return "f1"
    cls = _get(record, "class")
    if cls == "code":
        return "pass@1"
    if cls in ("math", "reasoning"):
        return "exact_match"
    if cls == "if":
        return "if_strict"
    raise ValueError(
        f"record {_get(record, 'id')!r}: field 'class' must be math, code, if or reasoning "
        f"(or the record a QA source), got {cls!r}"
    )


def _final_answer(text: str) -> str:
    boxed = last_boxed(text or "")
    if boxed is not None:
        return boxed
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def task_outcome(
    record: Mapping[str, Any], completion: str, *, code_timeout_s: float = 10.0
) -> Outcome:
    """Scores ``completion`` for ``record`` under the paper metric (see the module docstring).

    Raises:
      ValueError: the record's class is unknown, or a QA record has no ``true_answer``.
    """
    metric = metric_of(record)
    text = completion or ""
    if metric == "f1":
        gold = _get(record, "true_answer")
        if gold is None or gold == "" or gold == []:
            raise ValueError(f"QA record {_get(record, 'id')!r}: field 'true_answer' is missing")
        pred = _final_answer(text)
        f1 = token_f1(pred, gold)
        return Outcome("f1", f1, f1, normalize_answer(pred) or None)
    if metric == "pass@1":
        tests = _get(record, "test_cases") or {}
        try:
            verdicts, _ = code.score_detailed(
                text, tests, fn_name=_get(record, "fn_name"), timeout_s=code_timeout_s
            )
        except Exception:  # a sandbox failure costs this completion, not the run
            verdicts = []
        passed = sum(verdicts)
        frac = passed / len(verdicts) if verdicts else 0.0
        solved = bool(verdicts) and all(verdicts)
        has_code = bool(text.strip())
        return Outcome("pass@1", float(solved), frac, tuple(verdicts) if has_code else None)
    if metric == "if_strict":
        ids = list(_get(record, "instruction_id_list") or [])
        kwargs = [dict(k or {}) for k in (_get(record, "kwargs") or [])]
        frac = float(ifeval.score(text, ids, kwargs, strict=False))
        strict = float(ifeval.score(text, ids, kwargs, strict=True))
        return Outcome("if_strict", strict, frac, None)
    em = float(score(record, text))
    boxed = _final_answer(text) if "\\boxed" in text else ""
    return Outcome("exact_match", em, em, normalize(boxed) or None)


OutcomeFn = Callable[[Mapping[str, Any], str], "Outcome | float"]


def as_outcome(value: Outcome | float, record: Mapping[str, Any]) -> Outcome:
    """An :class:`Outcome` from a reward function's return: an Outcome passes through; a float
    in [0, 1] becomes metric "reward" (solved only at 1.0). A value outside [0, 1] is an error
    naming the record."""
    if isinstance(value, Outcome):
        return value
    r = float(value)
    if not 0.0 <= r <= 1.0 or r != r:
        raise ValueError(
            f"reward function returned {r} for record {_get(record, 'id')}; expected [0, 1]"
        )
    return Outcome("reward", r, r, None)
