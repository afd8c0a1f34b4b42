"""Team composition: anchor, complement and scout (the EvoChamber paper, eqs. 3-5).

All functions are pure reads of a :class:`ChamberState`. Competence vectors span the niches
seen so far plus the current one (a niche not yet seen reads as ``q_init`` for everyone), in
arrival order. Ties in any argmax are broken uniformly at random by a generator seeded from
``(cfg.seed, state.step, role)``, so a replayed run picks the same team without carrying RNG
state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coevo_jax.orchestrators.evochamber.config import EvoChamberConfig
from coevo_jax.orchestrators.evochamber.state import ChamberState, synergy

# Two scores closer than this are a tie (EWMA arithmetic can differ in the last ulp).
TIE_EPS = 1e-12
_ROLE_SALT = {"anchor": 0, "complement": 1, "scout": 2, "random": 3}


def niche_axis(state: ChamberState, niche: str | None = None) -> tuple[str, ...]:
    """The niches a competence vector spans: those seen, plus ``niche`` if new."""
    if niche is None or niche in state.niches:
        return tuple(state.niches)
    return tuple(state.niches) + (niche,)


def competence_matrix(
    state: ChamberState, names: Sequence[str], niches: Sequence[str], cfg: EvoChamberConfig
) -> np.ndarray:
    """[P, K] float64 matrix of q_i(z) for ``names`` x ``niches``."""
    return np.array(
        [[state.agents[a].competence(z, cfg.q_init) for z in niches] for a in names],
        dtype=np.float64,
    ).reshape(len(names), len(niches))


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """[P, P] cosine similarity of the rows of ``x`` [P, K]; a zero row has cosine 0."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)
    return unit @ unit.T


def style_overlap(
    state: ChamberState, cfg: EvoChamberConfig, niche: str | None = None
) -> tuple[list[str], np.ndarray]:
    """omega_ij = cos(q_i, q_j) over the niche axis: (names, [P, P] matrix)."""
    names = list(state.agents)
    return names, cosine_matrix(competence_matrix(state, names, niche_axis(state, niche), cfg))


def seeded_argmax(
    scores: Sequence[float], candidates: Sequence[str], rng: np.random.Generator
) -> str:
    """The candidate with the highest score; ties (within TIE_EPS) broken uniformly by ``rng``."""
    s = np.asarray(scores, dtype=np.float64)
    best = np.flatnonzero(s >= s.max() - TIE_EPS)
    return candidates[int(best[0] if len(best) == 1 else rng.choice(best))]


def role_rng(cfg: EvoChamberConfig, step: int, role: str) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, step, _ROLE_SALT[role]])


def anchor_scores(state: ChamberState, niche: str, cfg: EvoChamberConfig) -> dict[str, float]:
    """Eq. 3's objective: q_i(z)."""
    return {a: state.agents[a].competence(niche, cfg.q_init) for a in state.agents}


def complement_scores(
    state: ChamberState, niche: str, anchor: str, cfg: EvoChamberConfig
) -> dict[str, float]:
    """Eq. 4's objective over P minus the anchor:
    lambda_q q_i(z) + lambda_sigma sigma_{i,a}(z) + lambda_omega (1 - omega_{i,a})."""
    names, om = style_overlap(state, cfg, niche)
    ia = names.index(anchor)
    return {
        a: cfg.lambda_q * state.agents[a].competence(niche, cfg.q_init)
        + cfg.lambda_sigma * synergy(state, a, anchor, niche, cfg)
        + cfg.lambda_omega * (1.0 - om[i, ia])
        for i, a in enumerate(names)
        if a != anchor
    }


def scout_scores(
    state: ChamberState, niche: str, anchor: str, complement: str, cfg: EvoChamberConfig
) -> dict[str, float]:
    """Eq. 5's objective over P minus {anchor, complement}:
    lambda_u / (1 + n_k(z)) + lambda_d (1 - mean(omega_{k,a}, omega_{k,c}))."""
    names, om = style_overlap(state, cfg, niche)
    ia, ic = names.index(anchor), names.index(complement)
    return {
        a: cfg.lambda_u / (1.0 + state.agents[a].exposure(niche))
        + cfg.lambda_d * (1.0 - 0.5 * (om[i, ia] + om[i, ic]))
        for i, a in enumerate(names)
        if a not in (anchor, complement)
    }


def random_team(state: ChamberState, cfg: EvoChamberConfig) -> tuple[str, str, str]:
    """Three distinct agents drawn uniformly (seeded by ``(cfg.seed, state.step)``), in draw
    order; the selector ablation (the first one leads)."""
    names = list(state.agents)
    pick = role_rng(cfg, state.step, "random").choice(len(names), size=3, replace=False)
    return tuple(names[int(i)] for i in pick)  # type: ignore[return-value]


def select_team(state: ChamberState, niche: str, cfg: EvoChamberConfig) -> tuple[str, str, str]:
    """(anchor, complement, scout) for a task of ``niche`` (eqs. 3, 4, 5 in that order), or a
    random team when ``cfg.team_selector == "random"``."""
    if len(state.agents) < 3:
        raise ValueError(f"the pool has {len(state.agents)} agents; a team needs 3")
    if cfg.team_selector == "random":
        return random_team(state, cfg)
    s = anchor_scores(state, niche, cfg)
    anchor = seeded_argmax(list(s.values()), list(s), role_rng(cfg, state.step, "anchor"))
    s = complement_scores(state, niche, anchor, cfg)
    comp = seeded_argmax(list(s.values()), list(s), role_rng(cfg, state.step, "complement"))
    s = scout_scores(state, niche, anchor, comp, cfg)
    scout = seeded_argmax(list(s.values()), list(s), role_rng(cfg, state.step, "scout"))
    return anchor, comp, scout
