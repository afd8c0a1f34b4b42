"""Routing rules: exploration-augmented scores, cumulative-threshold and top-k selection.

Pure functions of arrays (jit/vmap-able). Shapes: ``B`` queries, ``N`` agents.

Ordering convention shared by every selector: agents are ranked by score descending, and
equal scores are broken by the lower agent index first (a stable sort of ``-s``), so the
selection is a deterministic function of the arrays.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def routing_scores(
    f: jax.Array,
    *,
    T: jax.Array | int,
    n: jax.Array,
    h_bar: jax.Array,
    c_ucb: float,
    w_ent: float,
) -> jax.Array:
    """Training-time score ``s_i = f_i + c_ucb * log(T) / (n_i + 1) + w_ent * Hbar_i``.

    Args:
      f: ``[B, N]`` familiarity.
      T: scalar, number of queries routed so far (before this batch). ``T < 1`` is treated
        as 1, so the UCB bonus is 0 before anything was routed instead of ``log(0)``.
      n: ``[N]`` number of queries allocated to each agent so far.
      h_bar: ``[N]`` each agent's historical mean per-token generation entropy.
      c_ucb, w_ent: bonus weights; both 0 at inference, where ``s == f``.

    Returns:
      ``[B, N]`` float32 scores (the bonuses are per agent, broadcast over queries).
    """
    chex.assert_rank(f, 2)
    chex.assert_shape([n, h_bar], (f.shape[1],))
    t = jnp.maximum(jnp.asarray(T, jnp.float32), 1.0)
    bonus = c_ucb * jnp.log(t) / (n.astype(jnp.float32) + 1.0) + w_ent * h_bar.astype(jnp.float32)
    return f.astype(jnp.float32) + bonus[None, :]


def _rank_order(s: jax.Array) -> jax.Array:
    """``[B, N]`` agent indices sorted by s descending, ties by lower index."""
    return jnp.argsort(-s, axis=-1, stable=True)


def _unsort(x_sorted: jax.Array, order: jax.Array) -> jax.Array:
    """Scatters values given in rank order back to agent positions."""
    inverse = jnp.argsort(order, axis=-1)
    return jnp.take_along_axis(x_sorted, inverse, axis=-1)


def select_agents(f: jax.Array, s: jax.Array, *, tau: float) -> jax.Array:
    """Cumulative-threshold activation.

    Agents are ranked by ``s`` (descending, ties to the lower index). The activated set is
    the smallest prefix of that ranking whose cumulative *familiarity* ``f`` (not ``s``)
    reaches ``tau`` (``>= tau``); if all ``f`` together stay below ``tau`` every agent is
    activated. Equivalently, ranked agent j is activated iff the f-sum of the agents ranked
    before it is ``< tau``.

    Args:
      f: ``[B, N]`` non-negative familiarity.
      s: ``[B, N]`` ranking scores (``s = f`` at inference).
      tau: threshold.

    Returns:
      ``[B, N]`` bool, at least one True per row.
    """
    chex.assert_rank(f, 2)
    chex.assert_equal_shape([f, s])
    order = _rank_order(s)
    f_ranked = jnp.take_along_axis(f.astype(jnp.float32), order, axis=-1)
    before = jnp.cumsum(f_ranked, axis=-1)
    # Exclusive prefix sum by shifting (not cumsum - f) so it equals the inclusive sum of
    # the previous position bit for bit.
    before = jnp.concatenate([jnp.zeros_like(before[:, :1]), before[:, :-1]], axis=-1)
    return _unsort(before < tau, order)


def select_top_k(s: jax.Array, k: int) -> jax.Array:
    """Fixed top-k activation (ablation): the k highest ``s``, ties to the lower index.

    Args:
      s: ``[B, N]`` scores.
      k: static int in ``[1, N]``.

    Returns:
      ``[B, N]`` bool with exactly k True per row.
    """
    chex.assert_rank(s, 2)
    if not 1 <= k <= s.shape[1]:
        raise ValueError(f"k must be in [1, {s.shape[1]}], got {k}")
    order = _rank_order(s)
    ranked = jnp.broadcast_to(jnp.arange(s.shape[1]) < k, s.shape)
    return _unsort(ranked, order)


def activate(
    f: jax.Array,
    s: jax.Array | None = None,
    *,
    routing: str = "threshold",
    tau: float = 0.7,
    top_k: int = 1,
    excluded: jax.Array | None = None,
) -> jax.Array:
    """The one activation rule of training, the probe and evaluation.

    ``routing="threshold"``: :func:`select_agents` at ``tau``; ``"top_k"``: :func:`select_top_k`
    with ``top_k`` (the fixed top-k ablation). Agents in ``excluded`` (out of their policy-step
    budget) rank last with no familiarity, so the others meet the threshold or fill the top-k,
    and never serve.

    Args:
      f: ``[B, N]`` familiarity.
      s: ``[B, N]`` ranking scores (default ``f``: inference, no exploration bonus).
      routing, tau, top_k: the rule and its parameter (``RouterConfig`` or evaluation's).
      excluded: ``[N]`` bool, or None.

    Returns:
      ``[B, N]`` bool.
    """
    if routing not in ("threshold", "top_k"):
        raise ValueError(f"routing must be 'threshold' or 'top_k', got {routing!r}")
    f = jnp.asarray(f, jnp.float32)
    s = f if s is None else jnp.asarray(s, jnp.float32)
    if excluded is not None:
        excluded = jnp.asarray(excluded, bool)
        f = jnp.where(excluded[None], 0.0, f)
        s = jnp.where(excluded[None], -jnp.inf, s)
        top_k = min(top_k, int((~excluded).sum()))
    if routing == "top_k":
        active = select_top_k(s, top_k)
    else:
        active = select_agents(f, s, tau=tau)
    return active if excluded is None else active & ~excluded[None]
