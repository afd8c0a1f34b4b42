"""Uncertainty for evaluation scores: bootstrap intervals, macro averages, paired tests.

Every function takes per-query scores as 1-D arrays (``float``, one entry per query, in
``[0, 1]`` for accuracies or ``[-1, 1]`` for paired differences) and returns plain Python
numbers. Randomness comes only from the ``seed`` argument, so a report is reproducible.

Intervals are percentile bootstrap intervals (``scipy.stats.bootstrap``): they stay inside the
range of the statistic (an accuracy interval never leaves ``[0, 1]``), which BCa and normal
intervals do not promise on the 0/1 scores that most verifiers give. A macro average resamples
within each dataset (stratified), so every bootstrap replicate keeps every dataset and its
size. Paired comparisons resample queries, not methods: the same query resampled for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
N_RESAMPLES = 2000


def _as_scores(x: Any, name: str = "x") -> np.ndarray:
    a = np.asarray(x, np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one score per query), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty: no queries to summarise")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds non-finite scores")
    return a


def _groups(groups: Sequence[Any], n: int) -> list[np.ndarray]:
    """Indices of each group, groups in sorted order of their labels."""
    labels = np.asarray([str(g) for g in groups])
    if labels.shape != (n,):
        raise ValueError(f"groups has {labels.size} labels for {n} scores")
    return [np.flatnonzero(labels == g) for g in np.unique(labels)]


def _as_pair(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Two methods' scores on the same queries, checked as in :func:`_as_scores`."""
    x, y = _as_scores(a, "a"), _as_scores(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired scores differ in length: {x.size} vs {y.size}")
    return x, y


def _percentile_ci(
    samples: tuple[np.ndarray, ...],
    statistic: Any,
    confidence: float,
    n_resamples: int,
    seed: int,
    **options: Any,
) -> tuple[float, float]:
    """``scipy.stats.bootstrap`` percentile interval of ``statistic`` over ``samples``
    (``options``: more keywords of it, such as ``paired``)."""
    res = scipy.stats.bootstrap(
        samples,
        statistic,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
        **options,
    )
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def bootstrap_ci(
    x: Any,
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x``.

    Args:
      x: ``[Q]`` float scores.
      confidence: two-sided coverage, in ``(0, 1)``.
      n_resamples: bootstrap replicates.
      seed: seed of the resampling.

    Returns:
      ``(lo, hi)`` with ``lo <= hi``, both inside ``[min(x), max(x)]``. A single score has no
      spread the bootstrap can see: its interval is ``(x[0], x[0])``.
    """
    a = _as_scores(x)
    if a.size == 1 or np.all(a == a[0]):
        return float(a[0]), float(a[0])
    return _percentile_ci((a,), np.mean, confidence, n_resamples, seed)


def query_bootstrap_ci(
    statistic: Any,
    *columns: Any,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of any ``statistic`` of per-query columns, resampling
    queries (rows) together: for a statistic that is not a mean of per-query scores, such as
    the routing NMI between domain and top-1 agent.

    Args:
      statistic: ``f(*columns) -> float`` over ``[Q]`` arrays.
      columns: ``[Q]`` arrays of the same length (labels may be ints or strings).
      confidence, n_resamples, seed: as in :func:`bootstrap_ci`.

    Returns:
      ``(lo, hi)``, ``lo <= hi``; ``(s, s)`` when every replicate gives the same value ``s``.
    """
    cols = [np.asarray(c) for c in columns]
    if not cols or cols[0].ndim != 1 or cols[0].size == 0:
        raise ValueError("query_bootstrap_ci needs non-empty 1-D columns, one entry per query")
    if any(c.shape != cols[0].shape for c in cols):
        raise ValueError(f"columns differ in length: {[c.size for c in cols]}")
    if cols[0].size == 1:
        value = float(statistic(*cols))
        return value, value
    # scipy resamples numbers only: labels travel as their integer codes.
    codes = [c if np.issubdtype(c.dtype, np.number) else np.unique(c, return_inverse=True)[1]
             for c in cols]  # fmt: skip
    lo, hi = _percentile_ci(
        tuple(codes), statistic, confidence, n_resamples, seed, paired=True, vectorized=False
    )
    return lo, hi


def macro_mean(x: Any, groups: Sequence[Any]) -> float:
    """Unweighted mean over groups (datasets) of each group's mean score.

    Args:
      x: ``[Q]`` float scores.
      groups: ``[Q]`` group label of each score (e.g. the record's source).
    """
    a = _as_scores(x)
    return float(np.mean([a[idx].mean() for idx in _groups(groups, a.size)]))


def macro_bootstrap_ci(
    x: Any,
    groups: Sequence[Any],
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`macro_mean`, resampling within each group.

    A group of one score, or of equal scores, has the same mean in every replicate, so it
    enters as a constant (scipy's bootstrap needs two observations per sample).

    Args:
      x: ``[Q]`` float scores.
      groups: ``[Q]`` group label of each score.
      confidence, n_resamples, seed: as in :func:`bootstrap_ci`.

    Returns:
      ``(lo, hi)``, ``lo <= hi``.
    """
    a = _as_scores(x)
    parts = [a[idx] for idx in _groups(groups, a.size)]
    varying = tuple(p for p in parts if p.size > 1 and np.any(p != p[0]))
    fixed = sum(float(p[0]) for p in parts if not (p.size > 1 and np.any(p != p[0])))
    if not varying:
        m = macro_mean(a, groups)
        return m, m
    g = len(parts)

    def statistic(*samples, axis=-1):
        return (fixed + sum(s.mean(axis=axis) for s in samples)) / g

    return _percentile_ci(varying, statistic, confidence, n_resamples, seed)


@dataclasses.dataclass(frozen=True)
class PairedTest:
    """A two-sided paired test of "method A scores the same as method B" on the same queries.

    Attributes:
      test: ``"mcnemar_exact"`` (both score vectors 0/1: exact binomial test on the discordant
        pairs) or ``"paired_permutation"`` (sign-flip permutation test of the mean difference).
      p_value: two-sided p-value, in ``[0, 1]``.
      a_only, b_only: queries only A / only B got right (McNemar), else ``None``.
    """

    test: str
    p_value: float
    a_only: int | None = None
    b_only: int | None = None


def mcnemar_exact(a: Any, b: Any) -> PairedTest:
    """Exact McNemar test of two 0/1 score vectors on the same queries.

    Under the null, each discordant query (one method right, the other wrong) is equally likely
    to favour either method, so ``a_only ~ Binomial(a_only + b_only, 1/2)``
    (``scipy.stats.binomtest``). No discordant query gives ``p = 1``.

    Args:
      a, b: ``[Q]`` scores, each 0 or 1.
    """
    x, y = _as_pair(a, b)
    for name, v in (("a", x), ("b", y)):
        if not np.all((v == 0) | (v == 1)):
            raise ValueError(f"mcnemar_exact: {name} must hold 0/1 scores")
    a_only = int(np.sum((x == 1) & (y == 0)))
    b_only = int(np.sum((x == 0) & (y == 1)))
    n = a_only + b_only
    p = 1.0 if n == 0 else float(scipy.stats.binomtest(a_only, n, 0.5).pvalue)
    return PairedTest("mcnemar_exact", min(1.0, p), a_only, b_only)


def paired_permutation(a: Any, b: Any, *, n_resamples: int = 9999, seed: int = 0) -> PairedTest:
    """Sign-flip permutation test of ``mean(a - b) = 0`` (``scipy.stats.permutation_test``).

    Each replicate swaps ``a[q]`` and ``b[q]`` for a random subset of queries; with at most
    ``n_resamples`` distinct swaps (``2**Q``) scipy enumerates them all and the test is exact.

    Args:
      a, b: ``[Q]`` float scores of two methods on the same queries.
      n_resamples: random replicates when the test is not enumerated.
      seed: seed of the replicates.
    """
    x, y = _as_pair(a, b)
    if np.all(x == y):
        return PairedTest("paired_permutation", 1.0)
    res = scipy.stats.permutation_test(
        (x, y),
        lambda u, v, axis=-1: np.mean(u - v, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return PairedTest("paired_permutation", min(1.0, float(res.pvalue)))


def paired_test(a: Any, b: Any, *, seed: int = 0) -> PairedTest:
    """:func:`mcnemar_exact` when both vectors are 0/1, else :func:`paired_permutation`."""
    x, y = _as_scores(a, "a"), _as_scores(b, "b")
    if np.all((x == 0) | (x == 1)) and np.all((y == 0) | (y == 1)):
        return mcnemar_exact(x, y)
    return paired_permutation(x, y, seed=seed)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (family-wise error control), in input order.

    The k-th smallest of m p-values is multiplied by ``m - k + 1`` (k from 1), then made
    non-decreasing in that order and capped at 1.
    """
    p = np.asarray(p_values, np.float64)
    if p.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {p.shape}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adjusted
    return [float(v) for v in out]


def _means_with_cis(
    a: np.ndarray, groups: Sequence[Any], kw: dict[str, Any]
) -> tuple[float, list[float], float, list[float]]:
    """``(mean, [lo, hi], macro mean, [lo, hi])`` of ``a``; ``kw`` as in :func:`bootstrap_ci`."""
    return (
        float(a.mean()),
        list(bootstrap_ci(a, **kw)),
        macro_mean(a, groups),
        list(macro_bootstrap_ci(a, groups, **kw)),
    )


def summarise(
    x: Any,
    groups: Sequence[Any],
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Query-weighted and macro means of ``x``, each with its bootstrap interval, and per group.

    Args:
      x: ``[Q]`` float scores.
      groups: ``[Q]`` group (dataset) label of each score.

    Returns:
      ``{"mean", "ci": [lo, hi], "macro", "macro_ci": [lo, hi], "by_group": {label: mean},
      "by_group_ci": {label: [lo, hi]}}``, labels sorted.
    """
    a = _as_scores(x)
    kw = dict(confidence=confidence, n_resamples=n_resamples, seed=seed)
    labels = [str(g) for g in groups]
    by, by_ci = {}, {}
    for idx in _groups(labels, a.size):
        key = labels[idx[0]]
        by[key] = float(a[idx].mean())
        by_ci[key] = list(bootstrap_ci(a[idx], **kw))
    mean, ci, macro, macro_ci = _means_with_cis(a, labels, kw)
    return {
        "mean": mean,
        "ci": ci,
        "macro": macro,
        "macro_ci": macro_ci,
        "by_group": by,
        "by_group_ci": by_ci,
    }


def compare_paired(
    a: Any,
    b: Any,
    groups: Sequence[Any],
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Method A against method B on the same queries: differences with intervals, and a test.

    The intervals bootstrap the per-query difference ``a - b`` (paired: one resample of
    queries serves both methods); the macro difference resamples within each group.
    With only a handful of discordant queries the percentile interval is too narrow (a
    resample that draws none of them has probability about ``exp(-k)`` for ``k`` of them), so
    it can exclude 0 while the exact test does not reject: the test is the one to read there.

    Args:
      a, b: ``[Q]`` float scores of the two methods.
      groups: ``[Q]`` group (dataset) label of each query.

    Returns:
      ``{"diff", "diff_ci": [lo, hi], "macro_diff", "macro_diff_ci": [lo, hi], "test",
      "p_value", "a_only", "b_only"}`` (``a_only``/``b_only`` are ``None`` unless McNemar).
    """
    x, y = _as_pair(a, b)
    kw = dict(confidence=confidence, n_resamples=n_resamples, seed=seed)
    diff, diff_ci, macro_diff, macro_diff_ci = _means_with_cis(x - y, groups, kw)
    t = paired_test(x, y, seed=seed)
    return {
        "diff": diff,
        "diff_ci": diff_ci,
        "macro_diff": macro_diff,
        "macro_diff_ci": macro_diff_ci,
        "test": t.test,
        "p_value": t.p_value,
        "a_only": t.a_only,
        "b_only": t.b_only,
    }
