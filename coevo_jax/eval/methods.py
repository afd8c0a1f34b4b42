"""Routing methods and baselines computed from one :class:`Collected` generation pass.

Each method picks, per query, a set of activated agents and one output completion among
theirs; its accuracy is that completion's verifier score and its cost is the tokens the
activated agents generated. Methods:

| name | activated | output |
| --- | --- | --- |
| ``cera`` (at each tau) | the run's rule: cumulative threshold (or top-k) | familiarity-weighted vote / argmax-f |
| ``base`` | the base model | its completion |
| ``single:i`` | agent i | its completion |
| ``uniform_vote`` | all agents | unweighted vote / agent 0 for open-ended |
| ``random`` | random agents, as many as ``cera`` activates | vote by familiarity |
| ``top:k`` | the k most familiar | vote by familiarity |
| ``oracle`` | the best agent for the query (upper bound) | its completion |
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from coevo_jax.aggregate import aggregate
from coevo_jax.eval.collect import Collected
from coevo_jax.router.routing import select_agents, select_top_k


def _klass(r: Any) -> str:
    return r.cls if hasattr(r, "cls") else r["class"]


def _source(r: Any) -> str:
    return r.source if hasattr(r, "source") else r.get("source", "unknown")


def _choose(c: Collected, active: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Output agent per query: vote / argmax over the activated agents with ``weights``."""
    return np.array(
        [
            _aggregate_indices(c, q, np.flatnonzero(active[q]), weights[q])
            for q in range(len(c.records))
        ],
        np.int64,
    )


def _aggregate_indices(c: Collected, q: int, agents: np.ndarray, w: np.ndarray) -> int:
    answers = {int(a): c.answers[q][a] for a in agents}
    res = aggregate(
        _klass(c.records[q]),
        [str(int(a)) for a in agents],  # completions are looked up through their index
        [float(w[a]) for a in agents],
        extract=lambda key: answers[int(key)],
    )
    return int(agents[res.index])


def _summary(
    c: Collected, active: np.ndarray | None, chosen: np.ndarray | None, *, base: bool = False
) -> dict[str, Any]:
    if base:
        scores, tokens, n_act = c.base_scores, c.base_tokens.astype(float), np.ones(len(c.records))
    else:
        scores = c.scores[np.arange(len(c.records)), chosen]
        tokens = (c.tokens * active).sum(axis=1).astype(float)
        n_act = active.sum(axis=1)
    by: dict[str, list[float]] = defaultdict(list)
    for r, s in zip(c.records, scores, strict=True):
        by[_source(r)].append(float(s))
    return {
        "accuracy": float(np.mean(scores)) if len(scores) else 0.0,
        "by_dataset": {k: float(np.mean(v)) for k, v in sorted(by.items())},
        "tokens_per_query": float(np.mean(tokens)) if len(tokens) else 0.0,
        "agents_per_query": float(np.mean(n_act)) if len(n_act) else 0.0,
    }


def threshold_active(f: np.ndarray, tau: float) -> np.ndarray:
    """Inference routing: exploration off, so the ranking score is ``f`` itself."""
    return np.asarray(select_agents(f, f, tau=tau))


def run_active(f: np.ndarray, *, tau: float, routing: str = "threshold", top_k: int = 1):
    """The activation rule a run was trained with, at inference (exploration off).

    ``routing="threshold"`` is the cumulative-familiarity rule at ``tau``; ``"top_k"`` (the
    fixed top-k router ablation) activates the ``top_k`` highest-scoring agents.
    """
    if routing == "top_k":
        return np.asarray(select_top_k(f, top_k))
    if routing != "threshold":
        raise ValueError(f"routing must be 'threshold' or 'top_k', got {routing!r}")
    return threshold_active(f, tau)


def evaluate_methods(
    c: Collected,
    *,
    tau: float,
    taus: Sequence[float] = (),
    baselines: Sequence[str] = ("base", "single", "uniform_vote", "random", "top", "oracle"),
    seed: int = 0,
    routing: str = "threshold",
    top_k: int = 1,
) -> dict[str, dict[str, Any]]:
    """Accuracy, tokens and activations of CERA-MoA and the requested baselines.

    ``routing``/``top_k`` are the run's routing rule (:func:`run_active`); a fixed top-k
    router has no tau, so its runs get no sweep.

    Returns:
      ``{method name: summary}``; the routed run's entry is ``"cera"`` and, for the
      threshold sweep, ``"cera@{t}"`` for each t in ``taus``.
    """
    q, n = c.f.shape
    out: dict[str, dict[str, Any]] = {}
    active = run_active(c.f, tau=tau, routing=routing, top_k=top_k)
    out["cera"] = _summary(c, active, _choose(c, active, c.f))
    for t in taus if routing == "threshold" else ():
        a = threshold_active(c.f, float(t))
        out[f"cera@{t:g}"] = _summary(c, a, _choose(c, a, c.f))
    if "base" in baselines:
        out["base"] = _summary(c, None, None, base=True)
    if "single" in baselines:
        for i in range(n):
            a = np.zeros((q, n), bool)
            a[:, i] = True
            out[f"single:{i}"] = _summary(c, a, np.full(q, i))
    if "uniform_vote" in baselines:
        a = np.ones((q, n), bool)
        out["uniform_vote"] = _summary(c, a, _choose(c, a, np.ones((q, n))))
    if "random" in baselines:
        rng = np.random.default_rng(seed)
        a = np.zeros((q, n), bool)
        for row, k in enumerate(active.sum(axis=1)):
            a[row, rng.choice(n, size=int(k), replace=False)] = True
        out["random"] = _summary(c, a, _choose(c, a, c.f))
    if "top" in baselines:
        for k in range(1, min(3, n) + 1):
            a = np.asarray(select_top_k(c.f, k))
            out[f"top:{k}"] = _summary(c, a, _choose(c, a, c.f))
    if "oracle" in baselines:
        best = np.argmax(c.scores, axis=1)  # first best agent per query
        a = np.zeros((q, n), bool)
        a[np.arange(q), best] = True
        out["oracle"] = _summary(c, a, best)
    return out
