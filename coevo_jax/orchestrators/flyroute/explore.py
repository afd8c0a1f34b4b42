"""BM25-gated exploration (the FlyRoute paper's Eqs. 2-5, docs/design.md §8).

- Profile uncertainty ``U(a) = exp(-alpha * |E_a|)`` with ``|E_a|`` the number of
  quality-gated successes (the FlyRoute paper: "the number of quality-gated successes");
  registration seeds do not count. Counting them would start every agent at ``U <= exp(-2.5)``, so
  ``V+ <= 0.041 < gamma = 0.06`` and the gamma test could never pass.
- Relevance ``R(q, a)``: normalised BM25 (see :mod:`.retrieval`).
- Base value ``V = U * R``; redundancy-aware score ``V+ = V * (1 - beta * R)`` (our reading
  of the redundancy weight: a near-duplicate of what the agent already stores, R near 1, adds
  little evidence).
- Selection among agents outside the exploit set: up to ``n_explore`` with ``V+ >= gamma``,
  best first; when none qualifies, the top ``n_explore`` by ``V+`` among those with
  ``V+ > explore_floor`` (our reading: relevance is a gate, so an agent whose relevance is 0
  is never explored, even in the fallback).

Numbers are small per query (one per agent), so these are plain numpy functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from coevo_jax.orchestrators.flyroute.config import FlyRouteConfig
from coevo_jax.orchestrators.flyroute.profiles import ProfileStore
from coevo_jax.orchestrators.flyroute.retrieval import QueryScores


def uncertainty(n_gated: np.ndarray | int, alpha: float) -> np.ndarray:
    """``U = exp(-alpha * |E|)``; ``n_gated`` (gated successes) any shape, float64 out."""
    return np.exp(-alpha * np.asarray(n_gated, np.float64))


def explore_value(u: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``V = U * R`` elementwise (broadcasting)."""
    return np.asarray(u, np.float64) * np.asarray(r, np.float64)


def redundancy_adjusted(v: np.ndarray, r: np.ndarray, beta: float) -> np.ndarray:
    """``V+ = V * (1 - beta * R)`` elementwise."""
    return np.asarray(v, np.float64) * (1.0 - beta * np.asarray(r, np.float64))


def select_explore(
    vplus: Mapping[str, float],
    exclude: Collection[str],
    *,
    gamma: float,
    n_explore: int,
    floor: float = 0.0,
) -> tuple[list[str], bool]:
    """Picks exploration targets from ``V+`` scores.

    Args:
      vplus: agent -> ``V+`` (mapping order breaks ties: earlier wins).
      exclude: agents already chosen by exploitation.
      gamma, n_explore, floor: see :class:`FlyRouteConfig`.

    Returns:
      (selected agents best first, whether the fallback was used).
    """
    cands = [(a, v) for a, v in vplus.items() if a not in exclude]
    order = sorted(range(len(cands)), key=lambda i: (-cands[i][1], i))
    ranked = [cands[i] for i in order]
    above = [a for a, v in ranked if v >= gamma and v > floor]
    if above:
        return above[:n_explore], False
    return [a for a, v in ranked if v > floor][:n_explore], True


@dataclasses.dataclass(frozen=True)
class ExploreResult:
    """Per-agent terms of the exploration score and the chosen agents."""

    selected: list[str]
    fallback: bool
    u: dict[str, float]
    r: dict[str, float]
    v: dict[str, float]
    vplus: dict[str, float]


def explore(
    store: ProfileStore,
    scores: QueryScores,
    exploit: Sequence[str],
    config: FlyRouteConfig,
) -> ExploreResult:
    """Computes U, R, V, V+ for every agent and selects exploration targets outside ``exploit``."""
    names = store.names
    rel = scores.relevance
    u = uncertainty([store[a].n_gated for a in names], config.alpha)
    r = np.array([rel.get(a, 0.0) for a in names], np.float64)
    v = explore_value(u, r)
    vp = redundancy_adjusted(v, r, config.beta)
    vplus = dict(zip(names, vp.tolist(), strict=True))
    selected, fallback = select_explore(
        vplus,
        set(exploit),
        gamma=config.gamma,
        n_explore=config.n_explore,
        floor=config.explore_floor,
    )
    return ExploreResult(
        selected,
        fallback,
        dict(zip(names, u.tolist(), strict=True)),
        dict(zip(names, r.tolist(), strict=True)),
        dict(zip(names, v.tolist(), strict=True)),
        vplus,
    )
