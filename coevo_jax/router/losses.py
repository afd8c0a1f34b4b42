"""Router training signals: cross-agent advantages and the push-pull margin loss.

Pure functions of ``[B, N]`` arrays (B routed queries, N agents). ``active[q, i]`` marks the
agents activated for query q this round; inactive pairs contribute nothing.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def router_advantages(rbar: jax.Array, active: jax.Array) -> jax.Array:
    """Cross-agent relative advantage ``A_{i,q} = rbar_{i,q} - mean_{j in S_q} rbar_{j,q}``.

    ``S_q`` is the set of agents active for q. A solo activation (``|S_q| = 1``) uses
    ``A = rbar``, since the mean over itself would always give 0 and teach nothing.

    Args:
      rbar: ``[B, N]`` float, mean reward of agent i's G samples on query q (values at
        inactive pairs are ignored).
      active: ``[B, N]`` bool.

    Returns:
      ``[B, N]`` float32 advantages, 0 at inactive pairs (and for rows with no active agent).
    """
    chex.assert_rank(rbar, 2)
    chex.assert_equal_shape([rbar, active])
    act = active.astype(bool)
    r = jnp.where(act, rbar.astype(jnp.float32), 0.0)
    count = act.sum(axis=-1, keepdims=True)
    mean = r.sum(axis=-1, keepdims=True) / jnp.maximum(count, 1)
    adv = jnp.where(count == 1, r, r - mean)
    return jnp.where(act, adv, 0.0)


def push_pull_loss(
    d: jax.Array,
    adv: jax.Array,
    active: jax.Array,
    *,
    margin: float | None = 1.0,
) -> jax.Array:
    """Push-pull margin loss on predictor-target distances.

    Per active pair: ``A * d`` where ``A >= 0`` (pull the predictor onto its anchor) and
    ``|A| * max(0, margin - d)`` where ``A < 0`` (push it away, but only until ``d = margin``).
    The result is the sum over active pairs divided by their number (at least 1).

    ``margin=None`` is the "no margin" ablation: ``A * d`` for every sign (unbounded push).

    Differentiated w.r.t. ``d`` only: ``adv`` is treated as a constant (stop-gradient).

    Args:
      d: ``[B, N]`` distances in ``[0, 2]``.
      adv: ``[B, N]`` advantages (see :func:`router_advantages`).
      active: ``[B, N]`` bool.
      margin: m, or None for the unbounded push.

    Returns:
      scalar float32 loss.
    """
    chex.assert_rank(d, 2)
    chex.assert_equal_shape([d, adv, active])
    act = active.astype(bool)
    a = jax.lax.stop_gradient(adv.astype(jnp.float32))
    d = d.astype(jnp.float32)
    if margin is None:
        per_pair = a * d
    else:
        per_pair = jnp.where(a >= 0, a * d, jnp.abs(a) * jnp.maximum(0.0, margin - d))
    total = jnp.where(act, per_pair, 0.0).sum()
    return total / jnp.maximum(act.sum(), 1).astype(jnp.float32)
