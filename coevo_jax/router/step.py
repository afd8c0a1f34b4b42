"""Jitted router operations for one orchestration round (docs/design.md §2 steps 3, 4 and 8).

A round, in order::

    h = features(...)                                  # [B, in], frozen backbone
    decision = route(state, h, train=True)             # who generates for which query
    state = update_counters(state, decision.active)    # T += B, n_i += queries routed to i
    ... agents generate; rbar[q, i] = mean reward of i's G samples ...
    state, metrics = router_step(state, h, rbar, decision.active)
    state = record_entropy(state, mean_entropy, tokens)

Every function takes and returns a :class:`~coevo_jax.router.state.RouterState`; only
``router_step`` changes head weights, and only the ``nnx.Param`` ones.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from coevo_jax.router.routing import activate, routing_scores
from coevo_jax.router.state import RouterState, make_optimizer


@struct.dataclass
class RoutingDecision:
    """``active [B, N]`` bool, ``f [B, N]`` head scores, ``s [B, N]`` ranking scores."""

    active: jax.Array
    f: jax.Array
    s: jax.Array


@functools.partial(jax.jit, static_argnames=("train",))
def route(state: RouterState, h: jax.Array, *, train: bool = True) -> RoutingDecision:
    """Scores every agent for every query and activates agents.

    ``train=True`` adds the exploration bonuses (``cfg.c_ucb``, ``cfg.w_ent``) to the
    ranking; ``train=False`` ranks by ``f`` alone, as at inference. The cut-off is
    ``cfg.routing``: the cumulative-familiarity threshold ``cfg.tau`` or a fixed
    ``cfg.top_k``. Does not change the counters (see :func:`update_counters`).

    Args:
      state: router state.
      h: ``[B, in]`` raw features (the state's frozen whitening is applied here).

    Returns:
      :class:`RoutingDecision`.
    """
    cfg = state.cfg
    f, _ = state.head.scores(state.head_input(h), cfg)
    c = state.counters
    s = routing_scores(
        f,
        T=c.T,
        n=c.n,
        h_bar=c.h_bar,
        c_ucb=cfg.c_ucb if train else 0.0,
        w_ent=cfg.w_ent if train else 0.0,
    )
    active = activate(f, s, routing=cfg.routing, tau=cfg.tau, top_k=cfg.top_k)
    return RoutingDecision(active=active, f=f, s=s)


@jax.jit
def update_counters(
    state: RouterState, active: jax.Array, valid: jax.Array | None = None
) -> RouterState:
    """``T += number of routed queries``, ``n_i += queries activated for agent i``.

    Args:
      active: ``[B, N]`` bool from :func:`route`.
      valid: optional ``[B]`` bool; padding rows (False) are not counted.
    """
    chex.assert_rank(active, 2)
    act = active.astype(bool)
    if valid is not None:
        act = act & valid.astype(bool)[:, None]
        routed = valid.astype(jnp.int32).sum()
    else:
        routed = jnp.asarray(act.shape[0], jnp.int32)
    c = state.counters
    counters = c.replace(T=c.T + routed, n=c.n + act.astype(jnp.int32).sum(axis=0))
    return state.replace(counters=counters)


@jax.jit
def record_entropy(state: RouterState, mean_entropy: jax.Array, tokens: jax.Array) -> RouterState:
    """Folds this round's generation entropy into each agent's running mean.

    Args:
      mean_entropy: ``[N]`` mean per-token entropy of each agent's new completions (ignored
        where ``tokens == 0``).
      tokens: ``[N]`` number of tokens behind ``mean_entropy``.

    The update ``h_bar += (mean - h_bar) * tokens / (old_tokens + tokens)`` is the exact
    token-weighted mean over the whole history, without storing a growing sum.
    """
    c = state.counters
    chex.assert_shape([mean_entropy, tokens], c.h_bar.shape)
    tokens = tokens.astype(jnp.float32)
    total = c.entropy_tokens + tokens
    w = jnp.where(total > 0, tokens / jnp.maximum(total, 1.0), 0.0)
    h_bar = c.h_bar + w * (mean_entropy.astype(jnp.float32) - c.h_bar)
    return state.replace(counters=c.replace(h_bar=h_bar, entropy_tokens=total))


def router_loss(params, state: RouterState, h, rbar, active):
    """The head's loss as a function of its trainable ``params`` only."""
    head = nnx.merge(state.graphdef, params, state.frozen)
    return head.loss(state.head_input(h), rbar, active, state.cfg)


@jax.jit
def router_step(
    state: RouterState, h: jax.Array, rbar: jax.Array, active: jax.Array
) -> tuple[RouterState, dict[str, jax.Array]]:
    """One Adam step on the trainable head parameters (docs/design.md §2 step 8).

    Differentiates :func:`router_loss` w.r.t. ``state.params`` (the ``nnx.Param`` leaves)
    and nothing else: frozen targets are closed over as constants and the backbone is not
    an input (``h`` is data).

    Args:
      state: router state.
      h: ``[B, in]`` features of the routed queries.
      rbar: ``[B, N]`` mean reward of each activated agent's G samples (ignored elsewhere).
      active: ``[B, N]`` bool, the activation used for generation this round.

    Returns:
      ``(new_state, metrics)`` with the head's loss metrics plus ``grad_norm``.
    """
    chex.assert_rank([h, rbar, active], 2)
    chex.assert_equal_shape([rbar, active])
    chex.assert_equal_shape_prefix([h, rbar], 1)
    grads, metrics = jax.grad(router_loss, has_aux=True)(state.params, state, h, rbar, active)
    updates, opt_state = make_optimizer(state.cfg).update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(metrics, grad_norm=optax.tree.norm(grads))
    return state.replace(params=params, opt_state=opt_state, step=state.step + 1), metrics
