"""Group-relative advantages and DAPO dynamic sampling.

Rewards arrive as ``[Q, G]``: Q query groups, G sampled completions each. A NaN reward marks
an unscorable completion (every verifier failed); as in TRL 1.16 it is left out of its
group's statistics and gets advantage 0, never a silent reward of 0.

``refill_informative`` is host-side numpy (not jitted): the buffers it draws from are Python
objects owned by the training loop, and it only looks at a few numbers per group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import chex
import jax.numpy as jnp
import numpy as np


def _nan_std(x: jnp.ndarray, axis, ddof: int) -> jnp.ndarray:
    """Std over ``axis`` ignoring NaNs, NaN where fewer than ``ddof + 1`` values are finite."""
    count = jnp.sum(~jnp.isnan(x), axis=axis, keepdims=True)
    mean = jnp.nanmean(x, axis=axis, keepdims=True)
    sq = jnp.nansum((x - mean) ** 2, axis=axis, keepdims=True)
    var = jnp.where(count > ddof, sq / jnp.maximum(count - ddof, 1), jnp.nan)
    return jnp.sqrt(var)


def group_advantages(
    rewards: jnp.ndarray, *, eps: float = 1e-4, ddof: int = 1, scale: str = "group"
) -> jnp.ndarray:
    """Group-normalised advantages ``(R - mean_g R) / (std_g R + eps)``.

    Matches TRL 1.16's ``sum_then_normalize`` advantage code (single reward function).

    Args:
      rewards: ``[Q, G]`` float rewards; NaN = unscorable completion.
      eps: added to the std.
      ddof: delta degrees of freedom of the std; 1 (unbiased) is TRL's choice.
      scale: ``"group"`` divides by each group's std, ``"batch"`` by the std over all
        ``Q * G`` rewards (the mean stays per group), ``"none"`` only centres.

    Returns:
      ``[Q, G]`` float32 advantages. Unscorable completions, and every completion of a group
      whose std is undefined (fewer than ``ddof + 1`` finite rewards), get 0. Not meant to be
      differentiated (rewards are data).
    """
    chex.assert_rank(rewards, 2)
    r = jnp.asarray(rewards, jnp.float32)
    mean = jnp.nanmean(r, axis=1, keepdims=True)
    centred = r - mean
    if scale == "group":
        adv = centred / (_nan_std(r, 1, ddof) + eps)
    elif scale == "batch":
        adv = centred / (_nan_std(r, None, ddof) + eps)
    elif scale == "none":
        adv = centred
    else:
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    return jnp.nan_to_num(adv, nan=0.0)


def dynamic_sampling_mask(rewards: jnp.ndarray, *, atol: float = 0.0) -> jnp.ndarray:
    """DAPO dynamic sampling: which groups carry a learning signal.

    Args:
      rewards: ``[Q, G]`` rewards (NaN = unscorable, ignored).
      atol: groups whose finite rewards span at most ``atol`` count as all-equal.

    Returns:
      ``[Q]`` bool, False for groups whose finite rewards are all equal (or that have fewer
      than two finite rewards): their advantages are all 0, so they only dilute the batch.
    """
    chex.assert_rank(rewards, 2)
    r = jnp.asarray(rewards, jnp.float32)
    finite = ~jnp.isnan(r)
    hi = jnp.max(jnp.where(finite, r, -jnp.inf), axis=1)
    lo = jnp.min(jnp.where(finite, r, jnp.inf), axis=1)
    return (jnp.sum(finite, axis=1) >= 2) & (hi - lo > atol)


@dataclasses.dataclass(frozen=True)
class RefillResult:
    """Outcome of :func:`refill_informative`.

    Attributes:
      kept: positions (into the candidate order) of the groups selected, in that order.
      dropped: positions of the groups examined and rejected as signal-free.
      examined: how many candidates were looked at (``len(kept) + len(dropped)``).
      kept_fraction: ``len(kept) / examined`` (1.0 when nothing was examined); the DAPO
        metric to log.
      short: True when the candidates ran out before ``target`` informative groups.
    """

    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    examined: int
    kept_fraction: float
    short: bool


def refill_informative(
    rewards: Iterable[Sequence[float]] | np.ndarray, target: int, *, atol: float = 0.0
) -> RefillResult:
    """Picks the first ``target`` informative groups from candidates in priority order.

    The training loop lists candidate groups most-wanted first (the LIFO buffer's most recent
    first). Groups whose rewards are all equal are skipped (DAPO: they carry no gradient),
    and later candidates refill their places, until ``target`` are found or the candidates
    run out.

    Args:
      rewards: per candidate group, its G rewards (groups may have different G); read
        lazily, so a generator is only consumed as far as needed.
      target: the number of informative groups wanted.
      atol: tolerance of the all-equal test (see :func:`dynamic_sampling_mask`).

    Returns:
      A :class:`RefillResult`. Candidates after the last one examined are untouched, so the
      caller can leave them in its buffer.
    """
    if target < 0:
        raise ValueError(f"target must be >= 0, got {target}")
    kept: list[int] = []
    dropped: list[int] = []
    for i, group in enumerate(rewards):
        if len(kept) >= target:
            break
        g = np.asarray(group, np.float64)
        g = g[~np.isnan(g)]
        if g.size >= 2 and float(g.max() - g.min()) > atol:
            kept.append(i)
        else:
            dropped.append(i)
    examined = len(kept) + len(dropped)
    return RefillResult(
        kept=tuple(kept),
        dropped=tuple(dropped),
        examined=examined,
        kept_fraction=(len(kept) / examined) if examined else 1.0,
        short=len(kept) < target,
    )


def refill_from_lifo(
    buffer: list[Any],
    target: int,
    rewards_of: Callable[[Any], Sequence[float]],
    *,
    atol: float = 0.0,
) -> tuple[list[Any], RefillResult]:
    """Pops informative groups from the top of a LIFO ``buffer`` (a list, top = last item).

    Examined signal-free groups are removed from the buffer and discarded; informative ones
    are removed and returned; the rest of the buffer stays as it was. When the buffer holds
    fewer than ``target`` informative groups, all of them are returned (``result.short``).

    Args:
      buffer: list of group records, mutated in place.
      target: number of groups wanted (the paper's |Q_i| = 16).
      rewards_of: maps a group record to its G rewards.
      atol: tolerance of the all-equal test.

    Returns:
      ``(groups, result)``: the popped groups, most recent first, and the refill report.
    """
    candidates = buffer[::-1]
    result = refill_informative((rewards_of(g) for g in candidates), target, atol=atol)
    groups = [candidates[i] for i in result.kept]
    del buffer[len(buffer) - result.examined :]
    return groups, result
