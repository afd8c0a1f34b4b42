"""Ablation routers (CERA-MoA Table 3): the estimators the familiarity heads are compared
against, behind the same interface (:class:`coevo_jax.router.heads.RouterHead`).

- :class:`RewardRegressionHead`: an MLP on ``h`` predicts every agent's mean reward
  ``rbar`` and is trained with MSE on the activated (q, i) pairs. Its routing score is the
  prediction clipped to ``[0, 1]`` so the cumulative-threshold rule (which needs
  non-negative scores of familiarity scale) applies unchanged.
- :class:`BestAgentClassifier`: an MLP on ``h`` gives logits over agents; the routing score
  is the softmax. Our reading of "reward-driven multi-class classification": the target of
  query q is the activated agent with the highest cross-agent advantage (ties to the lower
  index), and q contributes only when that advantage is positive (some activated agent did
  better than the others, or a solo agent earned a positive reward); otherwise the rewards
  say nothing about which agent is best.

The third ablation, final-layer features, changes only what :func:`~coevo_jax.router.
features.features` returns (``layers="final"``) and keeps the familiarity heads.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from coevo_jax.router.losses import router_advantages


class _MLP(nnx.Module):
    def __init__(self, in_dim: int, hidden: int, out: int, *, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(in_dim, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, out, rngs=rngs)

    def __call__(self, h):
        return self.l2(jax.nn.silu(self.l1(h.astype(jnp.float32))))


def regression_loss(pred: jax.Array, rbar: jax.Array, active: jax.Array) -> jax.Array:
    """Mean squared error over active pairs (``[B, N]`` each; mean over at least 1 pair)."""
    chex.assert_equal_shape([pred, rbar, active])
    act = active.astype(bool)
    err = jnp.where(act, (pred - jax.lax.stop_gradient(rbar.astype(jnp.float32))) ** 2, 0.0)
    return err.sum() / jnp.maximum(act.sum(), 1).astype(jnp.float32)


def best_agent_targets(rbar: jax.Array, active: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(target [B] int32, valid [B] bool)``: the activated agent with the largest advantage
    (ties to the lower index) and whether that advantage is positive."""
    adv = router_advantages(rbar, active)
    masked = jnp.where(active.astype(bool), adv, -jnp.inf)
    target = jnp.argmax(masked, axis=-1).astype(jnp.int32)
    return target, jnp.max(masked, axis=-1) > 0


def classification_loss(logits: jax.Array, rbar: jax.Array, active: jax.Array) -> jax.Array:
    """Softmax cross-entropy towards :func:`best_agent_targets`, mean over valid queries."""
    chex.assert_equal_shape([logits, rbar, active])
    target, valid = best_agent_targets(rbar, active)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), target)
    return jnp.where(valid, ce, 0.0).sum() / jnp.maximum(valid.sum(), 1).astype(jnp.float32)


class RewardRegressionHead(nnx.Module):
    """``Linear(in, hidden) -> SiLU -> Linear(hidden, N)`` predicting ``rbar`` per agent."""

    def __init__(self, n_agents: int, in_dim: int, hidden: int = 512, *, rngs: nnx.Rngs):
        self.n_agents, self.in_dim = n_agents, in_dim
        self.mlp = _MLP(in_dim, hidden, n_agents, rngs=rngs)

    def scores(self, h: jax.Array, cfg) -> tuple[jax.Array, dict[str, jax.Array]]:
        pred = self.mlp(h)
        return jnp.clip(pred, 0.0, 1.0), {"pred_reward": pred}

    def loss(self, h, rbar, active, cfg) -> tuple[jax.Array, dict[str, jax.Array]]:
        pred = self.mlp(h)
        loss = regression_loss(pred, rbar, active)
        return loss, {"loss": loss}


class BestAgentClassifier(nnx.Module):
    """``Linear(in, hidden) -> SiLU -> Linear(hidden, N)`` logits over agents."""

    def __init__(self, n_agents: int, in_dim: int, hidden: int = 512, *, rngs: nnx.Rngs):
        self.n_agents, self.in_dim = n_agents, in_dim
        self.mlp = _MLP(in_dim, hidden, n_agents, rngs=rngs)

    def scores(self, h: jax.Array, cfg) -> tuple[jax.Array, dict[str, jax.Array]]:
        logits = self.mlp(h)
        return jax.nn.softmax(logits, axis=-1), {"logits": logits}

    def loss(self, h, rbar, active, cfg) -> tuple[jax.Array, dict[str, jax.Array]]:
        logits = self.mlp(h)
        loss = classification_loss(logits, rbar, active)
        _, valid = best_agent_targets(rbar, active)
        return loss, {"loss": loss, "valid_fraction": valid.mean()}
